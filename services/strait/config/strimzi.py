"""Strimzi's ``KafkaMirrorMaker2`` resource (``kafka.strimzi.io/v1beta2``) as strait configuration.

The resource is turned into the MM2 properties MM2 itself would run with, then read by
:mod:`strait.config.mm2_properties`, so its keys mean exactly what they mean in an MM2 file:

* ``spec.clusters[]``: ``alias``, ``bootstrapServers``, ``tls.trustedCertificates``,
  ``authentication`` (``tls``, ``scram-sha-256``, ``scram-sha-512``, ``plain``) and ``config``
  (``<alias>.<key>``; Connect worker settings such as ``config.storage.*`` are ignored with a warning);
* ``spec.mirrors[]``: ``sourceCluster``/``targetCluster``, ``topicsPattern``,
  ``topicsExcludePattern``, ``groupsPattern``, ``groupsExcludePattern`` and each connector's
  ``config`` (``<source>-><target>.<key>``). A connector left out turns its part off: no
  ``checkpointConnector`` means no checkpoints, no ``heartbeatConnector`` no heartbeats.

Kubernetes secrets become file references under ``secrets_dir`` laid out as Kubernetes mounts them,
``<secrets_dir>/<secretName>/<key>``: a password ``${file:<dir>/<secret>/<key>}``, a CA certificate
or a client certificate and key the file path itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from strait.config.mm2_properties import Mm2File, parse_mm2_properties
from strait.config.properties import escaped_line, scalar_text
from strait.config.yaml_loader import parse_yaml
from strait.errors import ConfigError

API_VERSIONS = ("kafka.strimzi.io/v1beta2", "kafka.strimzi.io/v1")
_SCRAM = {"scram-sha-256": "SCRAM-SHA-256", "scram-sha-512": "SCRAM-SHA-512"}
_LOGIN = {"scram-sha-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
          "scram-sha-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
          "plain": "org.apache.kafka.common.security.plain.PlainLoginModule"}
_CONNECTORS = {"sourceConnector": None, "checkpointConnector": "emit.checkpoints.enabled",
               "heartbeatConnector": "emit.heartbeats.enabled"}


def load_strimzi(path: str | Path, secrets_dir: str | Path) -> Mm2File:
    """Read a KafkaMirrorMaker2 resource file; raises ConfigError naming the file and the field."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return strimzi_config(parse_yaml(text, str(path)), str(path), Path(secrets_dir))


def strimzi_config(resource: Any, origin: str, secrets_dir: Path) -> Mm2File:
    """The configuration a parsed resource describes (see the module docstring)."""
    spec = _spec(resource, origin)
    lines: list[str] = []
    clusters = _list(spec, "clusters", origin)
    aliases = [_text(c, "alias", f"{origin}: spec.clusters[{i}]") for i, c in enumerate(clusters)]
    lines.append(f"clusters = {', '.join(aliases)}")
    for index, (alias, cluster) in enumerate(zip(aliases, clusters, strict=True)):
        lines += _cluster_lines(alias, cluster, f"{origin}: spec.clusters[{index}]", secrets_dir)
    for index, mirror in enumerate(_list(spec, "mirrors", origin)):
        lines += _mirror_lines(mirror, f"{origin}: spec.mirrors[{index}]")
    return parse_mm2_properties("\n".join(escaped_line(line) for line in lines) + "\n", f"{origin} (as MM2 properties)")


def _spec(resource: Any, origin: str) -> Mapping[str, Any]:
    if not isinstance(resource, Mapping) or resource.get("kind") != "KafkaMirrorMaker2":
        raise ConfigError(f"{origin}: not a KafkaMirrorMaker2 resource (kind: {_kind(resource)})")
    if resource.get("apiVersion") not in API_VERSIONS:
        raise ConfigError(f"{origin}: apiVersion {resource.get('apiVersion')!r} is not one of {', '.join(API_VERSIONS)}")
    spec = resource.get("spec")
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{origin}: spec: missing or not a mapping")
    return spec


def _kind(resource: Any) -> str:
    return str(resource.get("kind")) if isinstance(resource, Mapping) else type(resource).__name__


def _list(parent: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    value = parent.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, Mapping) for v in value):
        raise ConfigError(f"{where}: spec.{key}: expected a non-empty list of mappings")
    return value


def _text(parent: Mapping[str, Any], key: str, where: str) -> str:
    value = parent.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}.{key}: missing or not a string")
    return value


def _cluster_lines(alias: str, cluster: Mapping[str, Any], where: str, secrets_dir: Path) -> list[str]:
    lines = [f"{alias}.bootstrap.servers = {_text(cluster, 'bootstrapServers', where)}"]
    settings: dict[str, str] = {}
    tls = cluster.get("tls")
    if tls is not None:
        settings["security.protocol"] = "SSL"
        certificates = tls.get("trustedCertificates") or [] if isinstance(tls, Mapping) else None
        if certificates is None or len(certificates) > 1:
            raise ConfigError(f"{where}.tls.trustedCertificates: expected one CA certificate "
                              "(librdkafka reads one CA file; put the chain in one secret entry)")
        for certificate in certificates:
            settings["ssl.truststore.type"] = "PEM"
            settings["ssl.truststore.location"] = _secret_file(certificate, "certificate", where, secrets_dir)
    settings |= _authentication(cluster.get("authentication"), f"{where}.authentication", secrets_dir,
                                tls is not None)
    config = cluster.get("config") or {}
    if not isinstance(config, Mapping):
        raise ConfigError(f"{where}.config: expected a mapping")
    settings |= {str(k): scalar_text(v) for k, v in config.items()}
    return lines + [f"{alias}.{key} = {value}" for key, value in settings.items()]


def _authentication(auth: Any, where: str, secrets_dir: Path, tls: bool) -> dict[str, str]:
    if auth is None:
        return {}
    kind = auth.get("type") if isinstance(auth, Mapping) else None
    if kind == "tls":
        pair = auth.get("certificateAndKey")
        if not isinstance(pair, Mapping):
            raise ConfigError(f"{where}.certificateAndKey: missing")
        return {"security.protocol": "SSL", "ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": f"${{file:{_secret_file(pair, 'certificate', where, secrets_dir)}}}",
                "ssl.keystore.key": f"${{file:{_secret_file(pair, 'key', where, secrets_dir)}}}"}
    if kind in _LOGIN:
        username = _text(auth, "username", where)
        secret = auth.get("passwordSecret")
        if not isinstance(secret, Mapping):
            raise ConfigError(f"{where}.passwordSecret: missing")
        password = f"${{file:{_secret_file(secret, 'password', where, secrets_dir)}}}"
        return {"security.protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT",
                "sasl.mechanism": _SCRAM.get(kind, "PLAIN"),
                "sasl.jaas.config": f'{_LOGIN[kind]} required username="{username}" password="{password}";'}
    raise ConfigError(f"{where}.type: {kind!r} is not supported; use tls, scram-sha-256, scram-sha-512 or plain "
                      "(for OAuth, write the sasl.oauthbearer settings in the cluster's config)")


def _secret_file(reference: Any, key_field: str, where: str, secrets_dir: Path) -> str:
    if not isinstance(reference, Mapping):
        raise ConfigError(f"{where}: expected a secretName and a {key_field}")
    name = _text(reference, "secretName", where)
    key = _text(reference, key_field, where)
    return str(secrets_dir / name / key)


def _mirror_lines(mirror: Mapping[str, Any], where: str) -> list[str]:
    flow = f"{_text(mirror, 'sourceCluster', where)}->{_text(mirror, 'targetCluster', where)}"
    lines = [f"{flow}.enabled = true"]
    for field, key in (("topicsPattern", "topics"), ("topicsExcludePattern", "topics.exclude"),
                       ("groupsPattern", "groups"), ("groupsExcludePattern", "groups.exclude")):
        if mirror.get(field) is not None:
            lines.append(f"{flow}.{key} = {scalar_text(mirror[field])}")
    for connector, switch in _CONNECTORS.items():
        block = mirror.get(connector)
        if block is None:
            if switch is not None:
                lines.append(f"{flow}.{switch} = false")
            continue
        config = block.get("config") or {} if isinstance(block, Mapping) else None
        if not isinstance(config, Mapping):
            raise ConfigError(f"{where}.{connector}.config: expected a mapping")
        lines += [f"{flow}.{key} = {scalar_text(value)}" for key, value in config.items()]
    return lines

