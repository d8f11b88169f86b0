"""Kafka client settings as librdkafka (confluent-kafka) wants them.

MM2 files carry Java client settings. The security ones have librdkafka equivalents and are
translated; a few Java-only tuning keys are dropped (librdkafka would refuse to start on them);
everything else is passed through unchanged, so librdkafka itself reports what it does not know.

The other way, :func:`java_settings` gives the Spark Kafka source (a Java consumer) the security
settings of a cluster written with librdkafka keys (``sasl.username``, ``ssl.ca.location``, ...).
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
    algorithm = out.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = algorithm.lower() or "none"
    dropped = sorted(key for key in out if key in _JAVA_ONLY)
    for key in dropped:
        del out[key]
    if dropped:
        log.debug("dropped Java-only client settings keys=%s", ",".join(dropped))
    return out


_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# librdkafka keys with no Java meaning: dropped so the Java client does not warn about each one.
_LIBRDKAFKA_ONLY = frozenset({
    "sasl.username", "sasl.password", "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location",
    "ssl.key.location", "ssl.certificate.pem", "ssl.key.pem", "enable.ssl.certificate.verification",
    "sasl.mechanisms", "ssl.ca.certificate.stores", "ssl.crl.location", "ssl.engine.location",
})


def java_settings(settings: dict[str, str]) -> dict[str, str]:
    """Translate resolved librdkafka security settings to Java client ones; Java keys win and pass through.

    ``sasl.username``/``sasl.password`` become a ``sasl.jaas.config`` for PLAIN or SCRAM (values
    escaped, so a password holding quotes or backslashes keeps its meaning), ``ssl.ca.location`` and
    ``ssl.ca.pem`` a PEM truststore, a PEM client key and certificate a PEM keystore. Raises
    ConfigError for what a Java client cannot be given (e.g. key and certificate in two files).
    """
    out = {k: v for k, v in settings.items() if k not in _LIBRDKAFKA_ONLY}
    mechanism = settings.get("sasl.mechanism") or settings.get("sasl.mechanisms")
    if mechanism:
        out["sasl.mechanism"] = mechanism
    if "sasl.username" in settings and "sasl.jaas.config" not in settings:
        out["sasl.jaas.config"] = _jaas_line(mechanism or "GSSAPI", settings["sasl.username"],
                                             settings.get("sasl.password", ""))
    _java_truststore(settings, out)
    _java_keystore(settings, out)
    algorithm = settings.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = (
            "" if algorithm.lower() == "none" else algorithm.lower())
    if settings.get("enable.ssl.certificate.verification", "true").lower() == "false":
        log.warning("enable.ssl.certificate.verification=false has no Java equivalent; "
                    "the Spark Kafka source verifies the brokers' certificates")
    return out


def _jaas_line(mechanism: str, username: str, password: str) -> str:
    module = _LOGIN_MODULES.get(mechanism.upper())
    if module is None:
        raise ConfigError(
            f"sasl.mechanism {mechanism}: sasl.username/sasl.password work with PLAIN and SCRAM only; "
            "set sasl.jaas.config for other mechanisms"
        )

    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return f"{module} required username={quoted(username)} password={quoted(password)};"


def _java_truststore(settings: dict[str, str], out: dict[str, str]) -> None:
    if "ssl.truststore.location" in settings or "ssl.truststore.certificates" in settings:
        return
    if "ssl.ca.location" in settings:
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": settings["ssl.ca.location"]})
    elif "ssl.ca.pem" in settings:
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": settings["ssl.ca.pem"]})


def _java_keystore(settings: dict[str, str], out: dict[str, str]) -> None:
    if "ssl.keystore.location" in settings or "ssl.keystore.key" in settings:
        return
    if "ssl.certificate.pem" in settings and "ssl.key.pem" in settings:
        out.update({"ssl.keystore.type": "PEM", "ssl.keystore.key": settings["ssl.key.pem"],
                    "ssl.keystore.certificate.chain": settings["ssl.certificate.pem"]})
        return
    certificate, key = settings.get("ssl.certificate.location"), settings.get("ssl.key.location")
    if certificate is None and key is None:
        return
    if certificate != key:
        raise ConfigError(
            "ssl.certificate.location/ssl.key.location: a Java client reads its key and certificate from one "
            "PEM file; put both in one file and name it in both settings, or set ssl.keystore.* instead"
        )
    out.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": key or ""})


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


def _translate_truststore(out: dict[str, str]) -> None:
    certificates = out.pop("ssl.truststore.certificates", None)
    if certificates is not None:
        out.setdefault("ssl.ca.pem", certificates)
    location = out.pop("ssl.truststore.location", None)
    kind = out.pop("ssl.truststore.type", "JKS" if location else "").upper()
    out.pop("ssl.truststore.password", None)  # PEM CA files carry no password
    if location is None:
        return
    if kind != "PEM" and not location.lower().endswith((".pem", ".crt")):
        raise ConfigError(
            f"ssl.truststore.location: librdkafka cannot read a {kind} truststore; "
            "convert it to PEM and set ssl.ca.location (or ssl.truststore.type=PEM)"
        )
    out.setdefault("ssl.ca.location", location)


def _translate_keystore(out: dict[str, str]) -> None:
    chain = out.pop("ssl.keystore.certificate.chain", None)
    key = out.pop("ssl.keystore.key", None)
    if chain is not None:
        out.setdefault("ssl.certificate.pem", chain)
    if key is not None:
        out.setdefault("ssl.key.pem", key)
    kind = out.pop("ssl.keystore.type", "").upper()
    location = out.get("ssl.keystore.location")
    if location is None or kind in ("", "PKCS12"):
        return
    if kind == "PEM":
        del out["ssl.keystore.location"]
        out.pop("ssl.keystore.password", None)
        out.setdefault("ssl.certificate.location", location)
        out.setdefault("ssl.key.location", location)
        return
    raise ConfigError(
        f"ssl.keystore.location: librdkafka cannot read a {kind} keystore; use PKCS12 or PEM"
    )
