"""Secret references, inline secrets, masking, resolution at use time, librdkafka translation."""

from __future__ import annotations

from pathlib import Path

import pytest

from strait.config import ClusterConfig, Secret, SecretRef, StraitConfig, is_secret_key, mask_url
from strait.config.secrets import MASK, Reference, setting_value
from strait.errors import ConfigError

SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="repl" password="{}";'


@pytest.mark.parametrize("key", [
    "sasl.password", "sasl.jaas.config", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password",
    "sasl.oauthbearer.client.secret", "basic.auth.user.info", "my.custom.password.file", "CLIENT_SECRET",
])
def test_secret_bearing_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["sasl.username", "sasl.mechanism", "security.protocol", "ssl.truststore.location"])
def test_ordinary_keys(key: str) -> None:
    assert not is_secret_key(key)


@pytest.mark.parametrize(("text", "reference"), [
    ("${PW}", Reference("env", "PW")),
    ("${env:PW_2}", Reference("env", "PW_2")),
    ("${file:/run/secrets/pw}", Reference("file", "/run/secrets/pw")),
    ("${file:/etc/kafka/secrets.properties:sasl.password}",
     Reference("file", "/etc/kafka/secrets.properties", "sasl.password")),
])
def test_reference_forms(text: str, reference: Reference) -> None:
    assert SecretRef(text).references == (reference,)


@pytest.mark.parametrize(("text", "problem"), [
    ("${env:1BAD}", "not a valid environment variable"),
    ("${file:relative/path}", "absolute path"),
    ("${vault:secret/kafka:pw}", "unknown reference provider 'vault'"),
])
def test_bad_references(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        SecretRef(text)


def test_setting_value_classifies() -> None:
    assert setting_value("sasl.password", "${env:PW}") == SecretRef("${env:PW}")
    assert setting_value("sasl.password", "inline") == Secret("inline")
    assert setting_value("sasl.username", "alice") == "alice"
    assert setting_value("bootstrap.servers", "${env:SERVERS}") == SecretRef("${env:SERVERS}")


def test_inline_secret_never_prints() -> None:
    secret = Secret("hunter2")
    assert "hunter2" not in repr(secret) and "hunter2" not in str(secret) and "hunter2" not in f"{secret}"
    assert secret.value == "hunter2"


def _cluster(**client: object) -> ClusterConfig:
    return ClusterConfig("A", "a:9092", client=client)  # type: ignore[arg-type]


def test_model_repr_masks_inline_secrets_and_redis_password() -> None:
    config = StraitConfig(
        clusters={"A": _cluster(**{"sasl.password": Secret("hunter2"), "sasl.jaas.config": Secret(SCRAM_JAAS.format("pw2"))})},
        redis_url="redis://user:redispw@host:6379/0",
    )
    for text in (repr(config), str(config), repr(config.clusters["A"])):
        assert "hunter2" not in text and "pw2" not in text and "redispw" not in text
    assert "redis://user:******@host:6379/0" in repr(config)


def test_resolution_happens_at_use_time_from_env_and_files(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("from-file\n")
    (tmp_path / "secrets.properties").write_text("# comment\nscram.password = from-props\n")
    cluster = ClusterConfig("A", "a:9092", client={
        "sasl.password": SecretRef("${env:STRAIT_T_PW}"),
        "ssl.key.password": SecretRef(f"${{file:{tmp_path}/pw}}"),
        "ssl.keystore.password": SecretRef(f"${{file:{tmp_path}/secrets.properties:scram.password}}"),
    }, consumer={"sasl.password": SecretRef("${STRAIT_T_CONSUMER_PW}")})
    env = {"STRAIT_T_PW": "from-env", "STRAIT_T_CONSUMER_PW": "consumer-env"}
    assert cluster.settings(environ=env) == {
        "bootstrap.servers": "a:9092", "sasl.password": "from-env", "ssl.key.password": "from-file",
        "ssl.keystore.password": "from-props",
    }
    assert cluster.settings("consumer", environ=env)["sasl.password"] == "consumer-env"
    assert cluster.settings("producer", environ=env)["sasl.password"] == "from-env"
    assert cluster.client["sasl.password"] == SecretRef("${env:STRAIT_T_PW}")  # nothing cached


def test_missing_env_var_names_cluster_key_and_reference() -> None:
    cluster = _cluster(**{"sasl.password": SecretRef("${env:STRAIT_T_UNSET}")})
    with pytest.raises(ConfigError, match=r"cluster A: sasl\.password: \$\{env:STRAIT_T_UNSET\}: .*not set"):
        cluster.settings(environ={})


def test_missing_file_and_missing_key_name_the_reference(tmp_path: Path) -> None:
    (tmp_path / "s.properties").write_text("other=1\n")
    missing_file = _cluster(**{"ssl.key.password": SecretRef(f"${{file:{tmp_path}/nope}}")})
    with pytest.raises(ConfigError, match=r"cluster A: ssl\.key\.password: \$\{file:.*/nope\}: file .* does not exist"):
        missing_file.settings(environ={})
    missing_key = _cluster(**{"sasl.password": SecretRef(f"${{file:{tmp_path}/s.properties:pw}}")})
    with pytest.raises(ConfigError, match=r"cluster A: sasl\.password: .*key 'pw' is not in"):
        missing_key.settings(environ={})


def test_librdkafka_config_translates_scram_jaas_with_a_reference() -> None:
    cluster = _cluster(**{
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": SecretRef(SCRAM_JAAS.format("${env:STRAIT_T_SCRAM}")),
        "ssl.truststore.location": "/etc/ca.pem", "ssl.truststore.type": "PEM",
        "ssl.endpoint.identification.algorithm": "",
    })
    config = cluster.librdkafka_config("admin", environ={"STRAIT_T_SCRAM": 'p"w'})
    assert config == {
        "bootstrap.servers": "a:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "repl", "sasl.password": 'p"w', "ssl.ca.location": "/etc/ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
    }


def test_librdkafka_config_passes_librdkafka_keys_and_drops_java_only_ones() -> None:
    cluster = ClusterConfig("A", "a:9092", client={"sasl.username": "u", "sasl.password": Secret("p")},
                            consumer={"max.poll.records": "10", "fetch.min.bytes": "1"})
    assert cluster.librdkafka_config("consumer") == {
        "bootstrap.servers": "a:9092", "sasl.username": "u", "sasl.password": "p", "fetch.min.bytes": "1",
    }


@pytest.mark.parametrize(("client", "problem"), [
    ({"sasl.jaas.config": "com.example.KerberosModule required;"}, "has no librdkafka equivalent"),
    ({"ssl.truststore.location": "/nonexistent/truststore.jks"},
     r"ssl\.truststore\.location: cannot read /nonexistent/truststore\.jks: No such file"),
    ({"ssl.keystore.location": "/nonexistent/k.jks", "ssl.keystore.type": "JKS"},
     r"ssl\.keystore\.location: cannot read /nonexistent/k\.jks"),
])
def test_untranslatable_java_settings_name_the_cluster(client: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError, match=f"cluster A: .*{problem}"):
        ClusterConfig("A", "a:9092", client=client).librdkafka_config()


@pytest.mark.parametrize(("url", "masked"), [
    ("redis://:pw@h:1/0", "redis://:******@h:1/0"),
    ("redis://user:pw@h:1/0", "redis://user:******@h:1/0"),
    ("redis://h:1/0", "redis://h:1/0"),
    ("redis://:${env:PW}@h:1/0", "redis://:${env:PW}@h:1/0"),
])
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked
    assert MASK in masked or "pw" not in url.split("@")[0] or "${" in url


def test_missing_reference_inside_jaas_names_the_key() -> None:
    cluster = _cluster(**{"sasl.jaas.config": SecretRef(SCRAM_JAAS.format("${env:STRAIT_T_UNSET}"))})
    with pytest.raises(ConfigError, match=r"cluster A: sasl\.jaas\.config: \$\{env:STRAIT_T_UNSET\}"):
        cluster.librdkafka_config(environ={})
    with pytest.raises(ConfigError, match=r"cluster A: sasl\.jaas\.config: \$\{env:STRAIT_T_UNSET\}"):
        cluster.settings(environ={})
