"""Java key stores (JKS and PKCS#12) read into the PEM text librdkafka takes in memory.

MM2 users' files point Java clients at ``ssl.truststore.location`` and ``ssl.keystore.location``,
often JKS (keytool's default before Java 9) or PKCS#12. librdkafka reads neither truststore kind,
so each store is read here, at use time, and handed over as ``ssl.ca.pem`` / ``ssl.certificate.pem``
/ ``ssl.key.pem``: nothing is written to disk, and Spark executors on other hosts get the PEM text
with the rest of their client settings instead of needing the file.

JKS is Sun's format: a list of trusted-certificate and private-key entries and a SHA-1 digest
keyed with the store password; a private key is protected with Sun's SHA-1 keystream
("KeyProtector"). Both are checked, so a wrong password is reported as such. PKCS#12 is read with
``cryptography``.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12

from strait.errors import ConfigError

JKS_MAGIC = 0xFEEDFEED
JCEKS_MAGIC = 0xCECECECE
_JKS_PRIVATE_KEY, _JKS_TRUSTED_CERT = 1, 2
_JKS_DIGEST_WHITENER = b"Mighty Aphrodite"  # Sun's constant in the store digest
_SUN_KEY_PROTECTOR_OID = bytes.fromhex("2b060104012a02110101")  # 1.3.6.1.4.1.42.2.17.1.1
_SHA1 = 20
STORE_KINDS = ("JKS", "PKCS12", "JCEKS")  # JCEKS: recognised, to be refused with the keytool conversion


@dataclass(frozen=True)
class Keystore:
    """A keystore's private key and its certificate chain (leaf first), as PEM text."""

    key: str
    chain: str


class KeyStoreError(ConfigError):
    """A key store cannot be read: missing, of another format, or the password is wrong."""


@dataclass(frozen=True)
class _JksEntries:
    trusted: tuple[bytes, ...]  # DER certificates of the trusted-certificate entries
    keys: tuple[tuple[bytes, tuple[bytes, ...]], ...]  # (protected key, DER chain) of the private-key entries


def read_truststore(path: str, kind: str, password: str | None, key: str = "ssl.truststore.location") -> str:
    """The certificates a Java client trusts in the JKS or PKCS#12 store at ``path``, as PEM text.

    As Java's trust managers do, that is every trusted-certificate entry and the first certificate
    of every private-key entry (no private key is decrypted). ``kind`` is the setting's store type;
    the file's content decides how it is read, as Java does since 9. ``password`` None (not set)
    skips a JKS file's integrity check, as Java does; an empty string is a password.
    """
    data = _read(path, kind, key)
    if _is_jks(data):
        entries = _jks_entries(data, path, password, key)
        certificates = [*entries.trusted, *(chain[0] for _protected, chain in entries.keys if chain)]
        pems = [_pem_cert(_der_cert(der, path, key)) for der in certificates]
    else:
        store = _load_pkcs12(data, path, password, key)
        pems = [_pem_cert(c) for c in ([store.cert.certificate] if store.cert else [])] + \
            [_pem_cert(c.certificate) for c in store.additional_certs]
    if not pems:
        raise KeyStoreError(f"{key}: {path} holds no certificate to trust")
    return "".join(pems)


def read_keystore(path: str, kind: str, password: str | None, key_password: str | None = None,
                  key: str = "ssl.keystore.location") -> Keystore:
    """The private key and its chain in the JKS or PKCS#12 store at ``path``.

    ``key_password`` (Java's ``ssl.key.password``) is the JKS key's own password; when it is not set
    the store password is used, as Java does. A store holding several keys gives its first.
    """
    data = _read(path, kind, key)
    if _is_jks(data):
        entries = _jks_entries(data, path, password, key)
        if not entries.keys:
            raise KeyStoreError(f"{key}: {path} holds no private key")
        secret = key_password if key_password is not None else password
        if secret is None:
            raise KeyStoreError(f"{key}: {path} holds a private key; set ssl.keystore.password (or ssl.key.password)")
        protected, chain = entries.keys[0]
        return Keystore(_recover_jks_key(protected, secret, path, key),
                        "".join(_pem_cert(_der_cert(der, path, key)) for der in chain))
    store = _load_pkcs12(data, path, password, key)
    if store.key is None or store.cert is None:
        raise KeyStoreError(f"{key}: {path} holds no private key")
    chain = _chain(store.cert.certificate, [c.certificate for c in store.additional_certs])
    return Keystore(_pem_key(store.key, path, key), "".join(_pem_cert(c) for c in chain))


def _read(path: str, kind: str, key: str) -> bytes:
    if kind.upper() not in STORE_KINDS:
        raise KeyStoreError(f"{key}: store type {kind} is not supported; use JKS, PKCS12 or PEM")
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise KeyStoreError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None


def _is_jks(data: bytes) -> bool:
    return data[:4] in (struct.pack(">I", JKS_MAGIC), struct.pack(">I", JCEKS_MAGIC))


def _load_pkcs12(data: bytes, path: str, password: str | None, key: str) -> pkcs12.PKCS12KeyAndCertificates:
    try:
        return pkcs12.load_pkcs12(data, None if password is None else password.encode())
    except (ValueError, UnsupportedAlgorithm):
        raise KeyStoreError(f"{key}: {path} is neither a JKS nor a PKCS12 store, or its password is wrong "
                            f"(check the matching .password setting)") from None


def _chain(leaf: x509.Certificate, others: list[x509.Certificate]) -> list[x509.Certificate]:
    """``leaf`` and its issuers among ``others``, in order (a store may hold unrelated certificates)."""
    chain, left = [leaf], list(others)
    while True:
        issuer = next((c for c in left if c.subject == chain[-1].issuer and c != chain[-1]), None)
        if issuer is None or chain[-1].issuer == chain[-1].subject:
            return chain
        chain.append(issuer)
        left.remove(issuer)


def _jks_entries(data: bytes, path: str, password: str | None, key: str) -> _JksEntries:
    reader = _Reader(data, path, key)
    magic, version, count = reader.u32(), reader.u32(), reader.u32()
    if magic == JCEKS_MAGIC:
        raise KeyStoreError(f"{key}: {path} is a JCEKS store; convert it with keytool -importkeystore "
                            f"-deststoretype PKCS12")
    if version not in (1, 2):
        raise KeyStoreError(f"{key}: {path} is not a JKS store")
    trusted: list[bytes] = []
    keys: list[tuple[bytes, tuple[bytes, ...]]] = []
    for _ in range(count):
        tag = reader.u32()
        reader.utf()  # alias
        reader.take(8)  # creation date
        if tag == _JKS_TRUSTED_CERT:
            trusted.append(reader.cert(version))
        elif tag == _JKS_PRIVATE_KEY:
            protected = reader.take(reader.u32())
            keys.append((protected, tuple(reader.cert(version) for _ in range(reader.u32()))))
        else:
            raise KeyStoreError(f"{key}: {path} holds an entry of unknown kind {tag}; is it a JKS store?")
    if password is not None:
        _check_jks_digest(data[:reader.at], reader.take(_SHA1), password, path, key)
    return _JksEntries(tuple(trusted), tuple(keys))


def _check_jks_digest(body: bytes, digest: bytes, password: str, path: str, key: str) -> None:
    if hashlib.sha1(_password_bytes(password) + _JKS_DIGEST_WHITENER + body).digest() != digest:
        raise KeyStoreError(f"{key}: the password of {path} is wrong (its integrity check fails)")


def _recover_jks_key(protected: bytes, password: str, path: str, key: str) -> str:
    """The PEM of a private key protected by Sun's KeyProtector (salt, SHA-1 keystream, check digest)."""
    algorithm, encrypted = _encrypted_private_key_info(protected, path, key)
    if algorithm != _SUN_KEY_PROTECTOR_OID:
        raise KeyStoreError(f"{key}: the private key in {path} is protected in a way only Java reads; "
                            f"convert the store with keytool -importkeystore -deststoretype PKCS12")
    salt, body, check = encrypted[:_SHA1], encrypted[_SHA1:-_SHA1], encrypted[-_SHA1:]
    secret = _password_bytes(password)
    stream, block = bytearray(), salt
    while len(stream) < len(body):
        block = hashlib.sha1(secret + block).digest()
        stream += block
    plain = bytes(a ^ b for a, b in zip(body, stream, strict=False))
    if hashlib.sha1(secret + plain).digest() != check:
        raise KeyStoreError(f"{key}: the key password of {path} is wrong (set ssl.key.password if it "
                            f"differs from the store's)")
    try:
        private = serialization.load_der_private_key(plain, None)
    except (ValueError, UnsupportedAlgorithm):
        raise KeyStoreError(f"{key}: the private key in {path} cannot be read (an algorithm this host's "
                            f"OpenSSL lacks?)") from None
    return _pem_key(private, path, key)


def _encrypted_private_key_info(der: bytes, path: str, key: str) -> tuple[bytes, bytes]:
    """(algorithm OID, encrypted data) of a DER EncryptedPrivateKeyInfo."""
    try:
        outer, _ = _element(der, 0, 0x30)
        algorithm, after = _element(der, outer, 0x30)
        oid_start, oid_end = _element(der, algorithm, 0x06)
        data_start, data_end = _element(der, after, 0x04)
    except (IndexError, ValueError):
        raise KeyStoreError(f"{key}: the private key entry of {path} is damaged") from None
    return der[oid_start:oid_end], der[data_start:data_end]


def _element(der: bytes, at: int, tag: int) -> tuple[int, int]:
    """Where the value of the DER element at ``at`` starts and ends; ValueError when its tag is another."""
    if der[at] != tag:
        raise ValueError(f"DER tag {der[at]:#x} where {tag:#x} was expected")
    length, start = der[at + 1], at + 2
    if length & 0x80:
        size = length & 0x7F
        length, start = int.from_bytes(der[start:start + size], "big"), start + size
    if start + length > len(der):
        raise ValueError("DER element longer than its data")
    return start, start + length


def _password_bytes(password: str) -> bytes:
    return password.encode("utf-16-be")  # Java's chars, two bytes each


def _der_cert(der: bytes, path: str, key: str) -> x509.Certificate:
    try:
        return x509.load_der_x509_certificate(der)
    except ValueError:
        raise KeyStoreError(f"{key}: a certificate in {path} cannot be read") from None


def _pem_cert(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def _pem_key(private: PrivateKeyTypes, path: str, key: str) -> str:
    try:
        return private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()).decode("ascii")
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise KeyStoreError(f"{key}: the private key in {path} cannot be handed to librdkafka as PEM") from None


class _Reader:
    """Java DataInputStream reads over a JKS file."""

    def __init__(self, data: bytes, path: str, key: str) -> None:
        self.data, self.at, self.path, self.key = data, 0, path, key

    def take(self, size: int) -> bytes:
        if size < 0 or self.at + size > len(self.data):
            raise KeyStoreError(f"{self.key}: {self.path} ends early; is it a JKS store?")
        chunk, self.at = self.data[self.at:self.at + size], self.at + size
        return chunk

    def u32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0]) & 0xFFFFFFFF

    def utf(self) -> str:
        return self.take(struct.unpack(">H", self.take(2))[0]).decode("utf-8", errors="replace")

    def cert(self, version: int) -> bytes:
        if version == 2:
            self.utf()  # the certificate type, X.509
        return self.take(self.u32())
