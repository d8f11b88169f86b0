"""Secrets in configuration: references, inline values, masking and resolution.

A value that contains ``${VAR}``, ``${env:VAR}``, ``${file:/path}`` or ``${file:/path:key}`` is a
:class:`SecretRef`: it is stored and shown as written, and resolved only when a client is built.
An inline value under a secret-bearing key is a :class:`Secret`: usable (so an MM2 file can be
validated as it is) but masked everywhere it could be printed, and refused by ``config apply``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from strait.errors import ConfigError

MASK = "******"

_SECRET_KEYS = frozenset({
    "sasl.password",
    "sasl.jaas.config",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.truststore.password",
    "sasl.oauthbearer.client.secret",
    "basic.auth.user.info",
    "ssl.key.pem",
    "ssl.keystore.key",
    "sasl.oauthbearer.config",
})
_SECRET_WORDS = ("password", "secret")
_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_secret_key(key: str) -> bool:
    """Whether a setting's value must never be shown (by its name, e.g. ``sasl.password``)."""
    lowered = key.lower()
    return lowered in _SECRET_KEYS or any(word in lowered for word in _SECRET_WORDS)


@dataclass(frozen=True)
class Reference:
    """One ``${...}`` reference: an environment variable, a whole file, or a key in a properties file."""

    provider: str
    target: str
    key: str | None = None

    @classmethod
    def parse(cls, inner: str) -> Reference:
        """Parse the text between ``${`` and ``}``; raises ConfigError for an unknown form."""
        provider, sep, rest = inner.partition(":")
        if not sep:
            provider, rest = "env", inner
        if provider == "env":
            if not _ENV_NAME.fullmatch(rest):
                raise ConfigError(f"${{{inner}}} is not a valid environment variable reference")
            return cls("env", rest)
        if provider == "file":
            if not rest.startswith("/"):
                raise ConfigError(f"${{{inner}}}: a file reference needs an absolute path (${{file:/path}})")
            path, sep, key = rest.rpartition(":")
            return cls("file", path, key) if sep and path else cls("file", rest)
        raise ConfigError(f"${{{inner}}}: unknown reference provider {provider!r}; use env or file")

    def __str__(self) -> str:
        if self.provider == "env":
            return f"${{env:{self.target}}}"
        suffix = f":{self.key}" if self.key is not None else ""
        return f"${{file:{self.target}{suffix}}}"

    def resolve(self, environ: Mapping[str, str]) -> str:
        """The referenced value; raises ConfigError naming the reference when it is missing."""
        if self.provider == "env":
            if self.target not in environ:
                raise ConfigError(f"{self}: environment variable {self.target} is not set")
            return environ[self.target]
        return _read_file_reference(self)


def _read_file_reference(reference: Reference) -> str:
    from strait.config.properties import read_properties_file

    path = Path(reference.target)
    if not path.is_file():
        raise ConfigError(f"{reference}: file {path} does not exist")
    if reference.key is None:
        try:
            return path.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(f"{reference}: cannot read {path}: {exc.strerror or exc}") from exc
    try:
        entries = {entry.key: entry.value for entry in read_properties_file(path)}
    except ConfigError as exc:
        raise ConfigError(f"{reference}: {exc}") from None
    if reference.key not in entries:
        raise ConfigError(f"{reference}: key {reference.key!r} is not in {path}")
    return entries[reference.key]


@dataclass(frozen=True)
class SecretRef:
    """A value holding one or more ``${...}`` references, kept as written until it is used.

    The text may mix literal parts and references, e.g. a JAAS line with ``password="${env:PW}"``.
    Showing it is safe: it names where the secret lives, not the secret.
    """

    text: str
    references: tuple[Reference, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        found = tuple(Reference.parse(match.group(1)) for match in _REFERENCE.finditer(self.text))
        if not found:
            raise ConfigError(f"{self.text!r} contains no ${{...}} reference")
        object.__setattr__(self, "references", found)

    def __str__(self) -> str:
        return self.text

    def resolve(self, environ: Mapping[str, str] | None = None) -> str:
        """The text with every reference replaced by its value (env defaults to ``os.environ``)."""
        source = os.environ if environ is None else environ
        return _REFERENCE.sub(lambda match: Reference.parse(match.group(1)).resolve(source), self.text)


@dataclass(frozen=True)
class Secret:
    """An inline secret value: usable, but masked in str/repr so it cannot leak by printing."""

    value: str = field(repr=False)

    def __str__(self) -> str:
        return MASK

    def __repr__(self) -> str:
        return f"Secret({MASK})"


SettingValue = str | SecretRef | Secret


def has_reference(text: str) -> bool:
    """Whether a string contains a ``${...}`` reference."""
    return _REFERENCE.search(text) is not None


def setting_value(key: str, text: str) -> SettingValue:
    """Classify a raw string from a file: reference, inline secret (by key name) or plain value."""
    if has_reference(text):
        return SecretRef(text)
    if is_secret_key(key) and text:
        return Secret(text)
    return text


def resolve_value(value: SettingValue, environ: Mapping[str, str] | None = None) -> str:
    """The plain string a client gets for a setting."""
    if isinstance(value, SecretRef):
        return value.resolve(environ)
    if isinstance(value, Secret):
        return value.value
    return value


def mask_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """Resolved client settings fit for a log line: secret-bearing values masked."""
    return {key: MASK if is_secret_key(key) else value for key, value in settings.items()}


def url_password(url: str) -> str | None:
    """The password part of a URL such as ``redis://user:pw@host:6379/0``, if any."""
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def mask_url(url: str) -> str:
    """The URL with its password (if any) replaced by the mask; references are kept as written."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.password is None or has_reference(parts.password):
        return url
    userinfo = f"{parts.username or ''}:{MASK}"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{host}"))


def mask_text(text: str, secrets: list[str]) -> str:
    """``text`` with every occurrence of the given secret values masked (for error messages)."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
