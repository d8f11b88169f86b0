"""Kafka client settings as librdkafka (confluent-kafka) wants them.

MM2 files carry Java client settings. The security ones have librdkafka equivalents and are
translated (JKS and PKCS#12 stores are read into PEM text in memory, :mod:`strait.config.keystores`);
a few Java-only tuning keys are dropped (librdkafka would refuse to start on them);
everything else is passed through unchanged, so librdkafka itself reports what it does not know.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from strait.errors import ConfigError

log = logging.getLogger(__name__)

_JAAS_OPTION = re.compile(r'([A-Za-z_][\w.-]*)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;"]+)')
_USER_PASSWORD_MODULES = ("PlainLoginModule", "ScramLoginModule")
_JAVA_ONLY = frozenset({
    "ssl.protocol", "ssl.enabled.protocols", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation", "ssl.provider", "ssl.engine.factory.class", "security.providers",
    "buffer.memory", "max.poll.records", "default.api.timeout.ms", "key.serializer", "value.serializer",
    "key.deserializer", "value.deserializer", "interceptor.classes", "partitioner.class",
})


def librdkafka_settings(settings: dict[str, str], jaas: str | None = None,
                        resolve: Callable[[str], str] = str) -> dict[str, str]:
    """Translate resolved Java-style client settings to librdkafka ones (librdkafka keys pass through).

    ``jaas`` is the unresolved ``sasl.jaas.config``: its options are resolved one by one with
    ``resolve`` after parsing, so a password holding quotes or backslashes cannot break the syntax.
    """
    out = dict(settings)
    if jaas is not None:
        for key, value in jaas_credentials(jaas, resolve).items():
            out.setdefault(key, value)
    _translate_truststore(out)
    _translate_keystore(out)
    _translate_delivery_timeout(out)
    algorithm = out.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = algorithm.lower() or "none"
    dropped = sorted(key for key in out if key in _JAVA_ONLY)
    for key in dropped:
        del out[key]
    if dropped:
        log.debug("dropped Java-only client settings keys=%s", ",".join(dropped))
    return out


def jaas_options(jaas: str) -> tuple[str, dict[str, str]]:
    """The login module class and options of a one-entry ``sasl.jaas.config`` value."""
    module = jaas.strip().split(None, 1)[0] if jaas.strip() else ""
    options = {}
    for name, raw in _JAAS_OPTION.findall(jaas):
        options[name] = re.sub(r"\\(.)", r"\1", raw[1:-1]) if raw.startswith('"') else raw
    return module, options


def jaas_credentials(jaas: str, resolve: Callable[[str], str] = str) -> dict[str, str]:
    """``sasl.username``/``sasl.password`` from a PLAIN or SCRAM ``sasl.jaas.config``."""
    module, options = jaas_options(jaas)
    if module.rsplit(".", 1)[-1] not in _USER_PASSWORD_MODULES:
        raise ConfigError(
            f"sasl.jaas.config: login module {module or '(none)'} has no librdkafka equivalent; "
            "set the librdkafka sasl.* settings instead"
        )
    if "username" not in options or "password" not in options:
        raise ConfigError('sasl.jaas.config: needs username="..." and password="..."')
    return {"sasl.username": resolve(options["username"]), "sasl.password": resolve(options["password"])}


def _translate_delivery_timeout(out: dict[str, str]) -> None:
    """Java's ``delivery.timeout.ms`` under librdkafka's name for the same setting, ``message.timeout.ms``:
    strait reads a copier's delivery timeout by that one name for its hand-off's fence, so the two names
    must not hold two values."""
    java = out.pop("delivery.timeout.ms", None)
    if java is None:
        return
    given = out.setdefault("message.timeout.ms", java)
    if str(given).strip() != str(java).strip():
        raise ConfigError(f"delivery.timeout.ms={java} and message.timeout.ms={given} name one setting (librdkafka "
                          f"takes both): keep one of them")


def _translate_truststore(out: dict[str, str]) -> None:
    certificates = out.pop("ssl.truststore.certificates", None)
    if certificates is not None:
        out.setdefault("ssl.ca.pem", certificates)
    location = out.pop("ssl.truststore.location", None)
    kind = out.pop("ssl.truststore.type", "JKS" if location else "").upper()
    password = out.pop("ssl.truststore.password", None)
    if location is None:
        return
    if kind == "PEM" or location.lower().endswith((".pem", ".crt")):
        out.setdefault("ssl.ca.location", location)
        return
    from strait.config.keystores import read_truststore  # cryptography: only for a Java store

    out.setdefault("ssl.ca.pem", read_truststore(location, kind, password))


def _translate_keystore(out: dict[str, str]) -> None:
    chain = out.pop("ssl.keystore.certificate.chain", None)
    key = out.pop("ssl.keystore.key", None)
    if chain is not None:
        out.setdefault("ssl.certificate.pem", chain)
    if key is not None:
        out.setdefault("ssl.key.pem", key)
    kind = out.pop("ssl.keystore.type", "").upper()
    location = out.get("ssl.keystore.location")
    if location is None:
        return
    del out["ssl.keystore.location"]
    if kind == "PEM":
        out.pop("ssl.keystore.password", None)
        out.setdefault("ssl.certificate.location", location)
        out.setdefault("ssl.key.location", location)
        return
    from strait.config.keystores import read_keystore

    # Java's ssl.key.password is the key's password inside the store; librdkafka's would decrypt a PEM key
    store = read_keystore(location, kind or "JKS", out.pop("ssl.keystore.password", None),
                          out.pop("ssl.key.password", None))
    out.setdefault("ssl.key.pem", store.key)
    out.setdefault("ssl.certificate.pem", store.chain)
