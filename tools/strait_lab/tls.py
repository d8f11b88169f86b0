"""Test certificates for the lab's TLS listeners: a CA and a server certificate, as PEM files.

Made fresh at every cluster start with the ``cryptography`` package, valid for ``127.0.0.1`` and
``localhost`` so that clients keep hostname verification on (Java's ``https`` algorithm and
librdkafka's default) against the loopback brokers.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

log = logging.getLogger(__name__)

VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class TlsFiles:
    """Where the lab's PEM files are.

    Args:
        ca: the CA certificate (a client's truststore / ``ssl.ca.location``).
        keystore: the server's unencrypted PKCS#8 private key followed by its certificate chain
            (a Kafka ``ssl.keystore.type=PEM`` keystore file).
    """

    ca: Path
    keystore: Path


_CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
    key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
    decipher_only=False,
)


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "strait lab"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_tls_files(folder: Path, common_name: str) -> TlsFiles:
    """Create a CA and a server certificate it signs (SAN 127.0.0.1 and localhost) under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    ca_key, server_key = _key(), _key()
    ca_name = _name(f"{common_name} lab CA")
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_CA_KEY_USAGE, critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server_cert = (
        x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca_name)
        .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles(folder / "ca.pem", folder / "server-keystore.pem")
    files.ca.write_bytes(_pem(ca_cert))
    key_pem = server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())
    files.keystore.write_bytes(key_pem + _pem(server_cert) + _pem(ca_cert))
    files.keystore.chmod(0o600)
    log.info("lab certificates made cn=%s ca=%s", common_name, files.ca)
    return files
