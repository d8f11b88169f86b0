"""Test certificates for the lab's TLS listeners: a CA and a server certificate, as PEM files.

Made fresh at every cluster start with the ``cryptography`` package, valid for ``127.0.0.1`` and
``localhost`` so that clients keep hostname verification on (Java's ``https`` algorithm and
librdkafka's default) against the loopback brokers.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from strait_lab.errors import LabError

log = logging.getLogger(__name__)

VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class TlsFiles:
    """Where the lab's PEM files are.

    Args:
        ca: the CA certificate (a client's truststore / ``ssl.ca.location``).
        keystore: the server's unencrypted PKCS#8 private key followed by its certificate chain
            (a Kafka ``ssl.keystore.type=PEM`` keystore file).
        client: a client's key and certificate chain in the same layout, for listeners that require
            client certificates (``ssl.client.auth=required``).
    """

    ca: Path
    keystore: Path
    client: Path


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
    """Create a CA, and a server and a client certificate it signs (SAN 127.0.0.1 and localhost), under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    ca_key = _key()
    ca_name = _name(f"{common_name} lab CA")
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_CA_KEY_USAGE, critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server_key, server_cert = _leaf(ca_key, ca_name, common_name, now, x509.oid.ExtendedKeyUsageOID.SERVER_AUTH)
    client_key, client_cert = _leaf(ca_key, ca_name, f"{common_name} client", now,
                                    x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH)
    files = TlsFiles(folder / "ca.pem", folder / "server-keystore.pem", folder / "client-keystore.pem")
    files.ca.write_bytes(_pem(ca_cert))
    for path, key, cert in ((files.keystore, server_key, server_cert), (files.client, client_key, client_cert)):
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()) + _pem(cert) + _pem(ca_cert))
        path.chmod(0o600)
    log.info("lab certificates made cn=%s ca=%s", common_name, files.ca)
    return files


def _leaf(ca_key: rsa.RSAPrivateKey, ca_name: x509.Name, common_name: str, now: datetime.datetime,
          usage: x509.ObjectIdentifier) -> tuple[rsa.RSAPrivateKey, x509.Certificate]:
    """A key and a certificate the CA signs for ``usage``, valid for 127.0.0.1 and localhost."""
    key = _key()
    cert = (
        x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca_name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


@dataclass(frozen=True)
class JavaStores:
    """The lab's CA and client certificate in the key stores Java clients take, written by keytool."""

    truststore_jks: Path
    truststore_p12: Path
    keystore_jks: Path  # its key under a password of its own
    keystore_p12: Path
    keystore_jks_one_password: Path  # its key under the store password, as most JKS keystores are
    jceks: Path  # a JCEKS keystore, which strait refuses with a conversion hint


def make_java_stores(ca: Path, client: Path, folder: Path, password: str, key_password: str) -> JavaStores:
    """Key stores as a Java user makes them with keytool: JKS and PKCS#12 truststores holding the CA
    (PEM file ``ca``), and keystores holding the client key and chain of the PEM file ``client`` (the
    JKS store's key under ``key_password``)."""
    folder.mkdir(parents=True, exist_ok=True)
    pem = client.read_bytes()
    key = serialization.load_pem_private_key(pem, None)
    leaf, issuer = x509.load_pem_x509_certificates(pem[pem.index(b"-----BEGIN CERTIFICATE-----"):])
    source = folder / "client-source.p12"
    source.write_bytes(pkcs12.serialize_key_and_certificates(
        b"client", key, leaf, [issuer], serialization.BestAvailableEncryption(password.encode())))  # type: ignore[arg-type]
    stores = JavaStores(folder / "truststore.jks", folder / "truststore.p12", folder / "keystore.jks",
                        folder / "keystore.p12", folder / "keystore-one-password.jks", folder / "keystore.jceks")
    for path, kind in ((stores.truststore_jks, "JKS"), (stores.truststore_p12, "PKCS12")):
        _keytool("-importcert", "-noprompt", "-alias", "lab-ca", "-file", str(ca), "-storetype", kind,
                 "-keystore", str(path), "-storepass", password)
    for path, kind, key_pass in ((stores.keystore_jks, "JKS", key_password), (stores.keystore_p12, "PKCS12", password),
                                 (stores.keystore_jks_one_password, "JKS", password), (stores.jceks, "JCEKS", password)):
        _keytool("-importkeystore", "-noprompt", "-srckeystore", str(source), "-srcstoretype", "PKCS12",
                 "-srcstorepass", password, "-srcalias", "client", "-destkeystore", str(path),
                 "-deststoretype", kind, "-deststorepass", password, "-destkeypass", key_pass)
    for path in (source, *vars(stores).values()):
        path.chmod(0o600)
    return stores


def _keytool(*args: str) -> None:
    keytool = shutil.which("keytool")
    if keytool is None:
        raise LabError("keytool not found: install a Java runtime (make deps does)")
    done = subprocess.run([keytool, *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise LabError(f"keytool {args[0]} failed: {done.stdout}{done.stderr}")
