"""Java key stores as keytool writes them (JKS, PKCS#12, JCEKS), read into the PEM text librdkafka takes.

keytool (a JVM) writes the stores, so this runs with the integration tests; no cluster is started.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from strait.config.keystores import KeyStoreError, read_keystore, read_truststore
from strait.config.model import ClusterConfig, StraitConfig
from strait.config.secrets import SecretRef
from strait.config.validate import check_key_stores
from strait_lab.tls import JavaStores, TlsFiles, make_java_stores, make_tls_files

STORE_PASSWORD = "store-pw-1"
KEY_PASSWORD = "key-pw-22"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[TlsFiles, JavaStores]:
    folder = tmp_path_factory.mktemp("stores")
    files = make_tls_files(folder / "pem", "kafka-S")
    return files, make_java_stores(files.ca, files.client, folder / "java", STORE_PASSWORD, KEY_PASSWORD)


def _certificates(pem: str | bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem.encode() if isinstance(pem, str) else pem)


def _client_key_and_chain(files: TlsFiles) -> tuple[bytes, list[x509.Certificate]]:
    pem = files.client.read_bytes()
    key = serialization.load_pem_private_key(pem, None)
    public = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return public, _certificates(pem[pem.index(b"-----BEGIN CERTIFICATE-----"):])


def _public(pem: str) -> bytes:
    key = serialization.load_pem_private_key(pem.encode(), None)
    return key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


@pytest.mark.parametrize("which", ["truststore_jks", "truststore_p12"])
def test_a_truststore_yields_the_ca_it_holds(tls: tuple[TlsFiles, JavaStores], which: str) -> None:
    files, stores = tls
    trusted = read_truststore(str(getattr(stores, which)), "JKS" if which.endswith("jks") else "PKCS12", STORE_PASSWORD)
    assert _certificates(trusted) == _certificates(files.ca.read_bytes())


def test_a_jks_truststore_is_read_without_a_password_as_java_does(tls: tuple[TlsFiles, JavaStores]) -> None:
    files, stores = tls
    assert _certificates(read_truststore(str(stores.truststore_jks), "JKS", None)) == \
        _certificates(files.ca.read_bytes())


@pytest.mark.parametrize("which", ["keystore_jks", "keystore_p12"])
def test_a_keystore_used_as_truststore_trusts_its_certificates_and_decrypts_nothing(
        tls: tuple[TlsFiles, JavaStores], which: str) -> None:
    """One client.jks as both stores is common: Java trusts each key entry's certificate, and the key's
    own password is not needed to read it as a truststore."""
    files, stores = tls
    trusted = _certificates(read_truststore(str(getattr(stores, which)), "JKS", STORE_PASSWORD))
    _public, chain = _client_key_and_chain(files)
    assert chain[0] in trusted


@pytest.mark.parametrize(("which", "key_password"), [("keystore_jks", KEY_PASSWORD), ("keystore_p12", None),
                                                     ("keystore_jks_one_password", None)])
def test_a_keystore_yields_its_key_and_chain_leaf_first(tls: tuple[TlsFiles, JavaStores], which: str,
                                                        key_password: str | None) -> None:
    files, stores = tls
    store = read_keystore(str(getattr(stores, which)), "PKCS12", STORE_PASSWORD, key_password)
    public, chain = _client_key_and_chain(files)
    assert _public(store.key) == public
    assert _certificates(store.chain) == chain


@pytest.mark.parametrize(("which", "password", "key_password", "problem"), [
    ("truststore_jks", "wrong-pw", None, r"the password of .*truststore\.jks is wrong"),
    ("truststore_p12", "wrong-pw", None, r".*truststore\.p12 is neither a JKS nor a PKCS12 store, or its password"),
    ("keystore_jks", STORE_PASSWORD, "wrong-pw", r"the key password of .*keystore\.jks is wrong"),
    ("keystore_jks", STORE_PASSWORD, None, r"the key password of .*keystore\.jks is wrong .*ssl\.key\.password"),
    ("jceks", STORE_PASSWORD, None, r".*keystore\.jceks is a JCEKS store; convert it with keytool"),
    ("truststore_jks", STORE_PASSWORD, None, r".*truststore\.jks holds no private key"),
])
def test_a_store_that_cannot_be_read_is_refused_with_what_to_do(
        tls: tuple[TlsFiles, JavaStores], which: str, password: str, key_password: str | None, problem: str) -> None:
    with pytest.raises(KeyStoreError, match=f"^ssl.keystore.location: {problem}"):
        read_keystore(str(getattr(tls[1], which)), "JCEKS", password, key_password)


def test_a_missing_or_foreign_file_is_refused(tls: tuple[TlsFiles, JavaStores], tmp_path: Path) -> None:
    with pytest.raises(KeyStoreError, match=r"^ssl.truststore.location: cannot read .*nothing\.jks: No such file"):
        read_truststore(str(tmp_path / "nothing.jks"), "JKS", "pw")
    with pytest.raises(KeyStoreError, match=r"ca\.pem is neither a JKS nor a PKCS12 store"):
        read_truststore(str(tls[0].ca), "JKS", "pw")
    with pytest.raises(KeyStoreError, match=r"store type BCFKS is not supported"):
        read_truststore(str(tls[1].truststore_jks), "BCFKS", "pw")


def _cluster(stores: JavaStores, **client: object) -> ClusterConfig:
    return ClusterConfig("S", "s:9093", client={
        "security.protocol": "SSL",
        "ssl.truststore.location": str(stores.truststore_jks), "ssl.truststore.password": SecretRef("${env:TS_PW}"),
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(stores.keystore_p12),
        "ssl.keystore.password": SecretRef("${env:KS_PW}"), "ssl.key.password": SecretRef("${env:KS_PW}"),
        **client})  # type: ignore[arg-type]


def test_java_ssl_settings_reach_librdkafka_as_pem_text_and_no_store_setting_is_left(
        tls: tuple[TlsFiles, JavaStores]) -> None:
    files, stores = tls
    config = _cluster(stores).librdkafka_config("consumer", environ={"TS_PW": STORE_PASSWORD, "KS_PW": STORE_PASSWORD})
    assert set(config) == {"bootstrap.servers", "security.protocol", "ssl.ca.pem", "ssl.key.pem", "ssl.certificate.pem"}
    assert _certificates(config["ssl.ca.pem"]) == _certificates(files.ca.read_bytes())
    public, chain = _client_key_and_chain(files)
    assert _public(config["ssl.key.pem"]) == public and _certificates(config["ssl.certificate.pem"]) == chain


def test_a_jks_keystore_with_its_own_key_password(tls: tuple[TlsFiles, JavaStores]) -> None:
    files, stores = tls
    cluster = _cluster(stores, **{"ssl.keystore.type": "JKS", "ssl.keystore.location": str(stores.keystore_jks),
                                  "ssl.key.password": SecretRef("${env:KEY_PW}")})
    config = cluster.librdkafka_config(environ={"TS_PW": STORE_PASSWORD, "KS_PW": STORE_PASSWORD, "KEY_PW": KEY_PASSWORD})
    public, chain = _client_key_and_chain(files)
    assert _public(config["ssl.key.pem"]) == public and _certificates(config["ssl.certificate.pem"]) == chain
    assert "ssl.key.password" not in config, "Java's key password must not reach librdkafka's PEM key setting"


def test_config_apply_refuses_a_wrong_store_password_naming_cluster_and_key(
        tls: tuple[TlsFiles, JavaStores], monkeypatch: pytest.MonkeyPatch) -> None:
    config = StraitConfig(clusters={"S": _cluster(tls[1])})
    monkeypatch.setenv("TS_PW", STORE_PASSWORD)
    monkeypatch.setenv("KS_PW", "not-the-password")
    with pytest.raises(KeyStoreError, match=r"^cluster S: ssl\.keystore\.location: .*keystore\.p12 is neither"):
        check_key_stores(config)
    monkeypatch.setenv("KS_PW", STORE_PASSWORD)
    assert check_key_stores(config) == []
    monkeypatch.delenv("TS_PW")
    assert check_key_stores(config) == [
        "key stores not checked here: cluster S: ssl.truststore.password: ${env:TS_PW}: "
        "environment variable TS_PW is not set"]


def test_a_pkcs12_keystore_chain_leaves_out_an_unrelated_trusted_certificate(
        tls: tuple[TlsFiles, JavaStores], tmp_path: Path) -> None:
    files, _stores = tls
    other = make_tls_files(tmp_path / "other", "kafka-other")  # another CA, trusted but not in the chain
    pem = files.client.read_bytes()
    key = serialization.load_pem_private_key(pem, None)
    leaf, issuer = _certificates(pem[pem.index(b"-----BEGIN CERTIFICATE-----"):])
    unrelated = _certificates(other.ca.read_bytes())[0]
    path = tmp_path / "mixed.p12"
    path.write_bytes(pkcs12.serialize_key_and_certificates(
        b"client", key, leaf, [unrelated, issuer], serialization.BestAvailableEncryption(b"pw-123")))  # type: ignore[arg-type]
    assert _certificates(read_keystore(str(path), "PKCS12", "pw-123").chain) == [leaf, issuer]
    assert set(_certificates(read_truststore(str(path), "PKCS12", "pw-123"))) == {leaf, issuer, unrelated}
