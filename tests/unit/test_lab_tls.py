"""The lab's TLS: certificates it makes and the client settings of a TLS cluster (no broker started)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.oid import ExtendedKeyUsageOID

from strait_lab.errors import LabError
from strait_lab.kafka import KafkaCluster, KafkaClusterSpec
from strait_lab.tls import make_tls_files


@pytest.mark.parametrize(("which", "usage"), [("keystore", ExtendedKeyUsageOID.SERVER_AUTH),
                                               ("client", ExtendedKeyUsageOID.CLIENT_AUTH)])
def test_ca_signs_loopback_server_and_client_certificates(tmp_path: Path, which: str,
                                                          usage: x509.ObjectIdentifier) -> None:
    files = make_tls_files(tmp_path / "tls", "kafka-A")
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    pem = getattr(files, which).read_bytes()
    key = load_pem_private_key(pem, password=None)
    server, chained_ca = x509.load_pem_x509_certificates(pem[pem.index(b"-----BEGIN CERTIFICATE-----"):])
    server.verify_directly_issued_by(ca)
    assert chained_ca == ca
    assert server.public_key() == key.public_key()
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.IPv4Address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert usage in server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----"), "unencrypted PKCS#8, as Kafka's PEM keystore reads"
    assert getattr(files, which).stat().st_mode & 0o077 == 0


def test_client_settings_of_every_listener(tmp_path: Path) -> None:
    cluster = KafkaCluster(KafkaClusterSpec("A", tls=True, sasl=True, scram_users={"u": "pw"}), tmp_path)
    assert cluster.client_config() == {"bootstrap.servers": cluster.bootstrap_servers}
    assert cluster.client_config("u")["security.protocol"] == "SASL_PLAINTEXT"
    assert cluster.client_config(tls=True) == {
        "bootstrap.servers": cluster.ssl_bootstrap_servers, "security.protocol": "SSL",
        "ssl.ca.location": str(cluster.ca_path)}
    assert cluster.client_config("u", tls=True) == {
        "bootstrap.servers": cluster.sasl_ssl_bootstrap_servers, "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "pw",
        "ssl.ca.location": str(cluster.ca_path)}
    java = cluster.java_client_config("u", "${env:PW}", tls=True)
    assert java == {
        "bootstrap.servers": cluster.sasl_ssl_bootstrap_servers, "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="u" password="${env:PW}";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(cluster.ca_path)}
    assert len({cluster.bootstrap_servers, cluster.sasl_bootstrap_servers, cluster.ssl_bootstrap_servers,
                cluster.sasl_ssl_bootstrap_servers}) == 4


def test_a_cluster_without_tls_keeps_its_settings_and_refuses_tls(tmp_path: Path) -> None:
    cluster = KafkaCluster(KafkaClusterSpec("A", sasl=True, scram_users={"u": "pw"}), tmp_path)
    assert cluster.ssl_bootstrap_servers is None and cluster.sasl_ssl_bootstrap_servers is None
    assert cluster.client_config("u") == {
        "bootstrap.servers": cluster.sasl_bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "pw"}
    with pytest.raises(LabError, match="start it with tls=True"):
        cluster.client_config("u", tls=True)
    with pytest.raises(LabError, match="start it with sasl=True"):
        KafkaCluster(KafkaClusterSpec("B", tls=True), tmp_path).client_config("u", tls=True)
