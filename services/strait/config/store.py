"""The configuration in Redis: a versioned JSON document every process reads and watches.

``strait config apply`` stores a new version; services load the latest at start and react to new
versions through :func:`watch_config` without restarting. Secrets are stored only as ``${...}``
references: a configuration with an inline secret is refused before anything is written.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
import redis

from strait.config.document import config_from_dict, config_to_dict
from strait.config.durable import ConfigKeeper, DurableConfigError, DurableConfigTopic, DurableLocation, same_content
from strait.config.model import StraitConfig
from strait.config.validate import describe_inline_secrets, inline_secrets
from strait.coord.documents import DEFAULT_KEEP, Document, DocumentChangedError, VersionedDocuments, Watcher
from strait.coord.redis_client import redis_errors
from strait.errors import ConfigError, StraitError

log = logging.getLogger(__name__)

CONFIG_DOCUMENT = "config"
FORMAT = 1


class ConfigStoreError(StraitError):
    """Redis holds no configuration (or not the version asked for)."""


@dataclass(frozen=True)
class StoredConfig:
    """One stored version of the configuration and where it came from."""

    version: int
    config: StraitConfig
    source: str
    applied_at: str


def check_storable(config: StraitConfig, source_name: str) -> None:
    """Raise ConfigError naming every inline secret: only references may be stored."""
    found = inline_secrets(config)
    if not found:
        return
    keys = describe_inline_secrets(found, source_name)
    raise ConfigError(
        f"{source_name}: refusing to store inline secrets in Redis ({keys}); put each secret in an "
        "environment variable or a file and write ${env:VAR} or ${file:/path:key} instead "
        "(`strait config apply --dry-run` validates the file as it is)"
    )


def encode_config(config: StraitConfig, source_name: str) -> bytes:
    """The stored JSON body of a configuration (references only; refuses inline secrets)."""
    check_storable(config, source_name)
    body = {
        "format": FORMAT,
        "source": source_name,
        "applied_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": config_to_dict(config, secrets="references"),
    }
    return json.dumps(body, sort_keys=True).encode()


def decode_config(document: Document) -> StoredConfig:
    """A stored document back into a configuration; raises ConfigError when it is unusable."""
    origin = f"stored configuration version {document.version}"
    try:
        body = json.loads(document.body)
    except ValueError as exc:
        raise ConfigError(f"{origin}: not JSON: {exc}") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        found = body.get("format") if isinstance(body, dict) else None
        raise ConfigError(f"{origin}: format {found!r} is not {FORMAT}; "
                          "is this strait older than the one that stored it?")
    config = config_from_dict(body.get("config"), origin)
    source, applied_at = str(body.get("source", "")), str(body.get("applied_at", ""))
    return StoredConfig(document.version, config, source, applied_at)


def apply_config(client: redis.Redis, config: StraitConfig, source_name: str,
                 namespace: str = "strait", durable: DurableLocation | None = None,
                 changed_from: int | None = None) -> int:
    """Store ``config`` as a new version and return it; an unchanged configuration keeps its version.

    With ``durable`` (the settings' durable topic) the new version is numbered above every version
    the topic holds, and is written there too before this returns (:mod:`strait.config.durable`).
    With ``changed_from`` (the version ``config`` was derived from) it is stored only while that is
    still the latest version.

    Raises:
        ConfigStoreError: ``changed_from`` is no longer the latest version; nothing was stored.
        DurableConfigError: the topic could not be read (nothing stored) or written (stored in Redis,
            and the services' keepers copy it to the topic once it answers).
    """
    body = encode_config(config, source_name)
    documents = VersionedDocuments(client, namespace)
    topic = DurableConfigTopic(durable, namespace) if durable is not None else None
    try:
        floor = _durable_floor(topic) if topic is not None else 0
        with redis_errors(client, "store the configuration"):
            latest = documents.get(CONFIG_DOCUMENT)
            if changed_from is not None and (latest.version if latest else 0) != changed_from:
                raise ConfigStoreError(
                    f"{source_name}: the stored configuration changed while this ran (version "
                    f"{latest.version if latest else 'none'}, this change was made from {changed_from}); "
                    "nothing was stored: run the command again")
            if latest is not None and latest.version >= floor and same_content(latest.body, body):
                log.info("configuration unchanged version=%d source=%s", latest.version, source_name)
                version = latest.version
            else:
                try:
                    version = documents.put(CONFIG_DOCUMENT, body, floor=floor, expected=changed_from)
                except DocumentChangedError as exc:
                    raise ConfigStoreError(f"{source_name}: {exc}: run the command again") from None
                log.info("configuration stored version=%d source=%s clusters=%d flows=%d",
                         version, source_name, len(config.clusters), len(config.flows))
        if topic is not None:
            _keep_durably(client, topic, namespace, version)
    finally:
        if topic is not None:
            topic.close()
    return version


def _durable_floor(topic: DurableConfigTopic) -> int:
    try:
        return max(topic.refresh(), default=0)
    except DurableConfigError as exc:
        raise DurableConfigError(f"{exc}; nothing was stored (to store it in Redis alone, run without "
                                 f"STRAIT_CONFIG_KAFKA: the services copy it to the topic once it answers)") from None


def _keep_durably(client: redis.Redis, topic: DurableConfigTopic, namespace: str, version: int) -> None:
    try:
        ConfigKeeper(client, topic, namespace, "cli").sync_once()
    except DurableConfigError as exc:
        raise DurableConfigError(f"configuration version {version} is stored in Redis and in use, but not yet "
                                 f"durable: {exc} (the services copy it to the topic once it answers)") from None


def latest_version(client: redis.Redis, namespace: str = "strait") -> int | None:
    """The latest stored version, or None when nothing is stored."""
    with redis_errors(client, "read the configuration"):
        document = VersionedDocuments(client, namespace).get(CONFIG_DOCUMENT)
    return None if document is None else document.version


def read_stored_config(client: redis.Redis, version: int | None = None,
                       namespace: str = "strait") -> StoredConfig:
    """The latest (or the given) stored version; raises ConfigStoreError when there is none."""
    with redis_errors(client, "read the configuration"):
        document = VersionedDocuments(client, namespace).get(CONFIG_DOCUMENT, version)
    if document is None:
        if version is None:
            raise ConfigStoreError(
                "no configuration is stored yet; store one with `strait config apply FILE`")
        raise ConfigStoreError(f"there is no configuration version {version} (only the latest "
                               f"{DEFAULT_KEEP} versions are kept)")
    return decode_config(document)


def read_durable_config(location: DurableLocation, namespace: str = "strait") -> StoredConfig:
    """The newest version in the durable topic; ConfigStoreError when it holds none."""
    topic = DurableConfigTopic(location, namespace)
    try:
        versions = topic.refresh(create=False)
    finally:
        topic.close()
    if not versions:
        raise ConfigStoreError(f"no configuration is stored yet, neither in Redis nor in {location.describe()}; "
                               "store one with `strait config apply FILE`")
    newest = max(versions)
    return decode_config(Document(CONFIG_DOCUMENT, newest, versions[newest]))


def load_stored_config(client: redis.Redis, version: int | None = None,
                       namespace: str = "strait") -> tuple[int, StraitConfig]:
    """``(version, config)`` of the latest (or the given) stored version."""
    stored = read_stored_config(client, version, namespace)
    return stored.version, stored.config


def watch_config(client: redis.Redis, on_change: Callable[[StraitConfig], None], poll_interval: float = 5.0,
                 namespace: str = "strait", *, after_version: int | None = None) -> Watcher:
    """Call ``on_change`` with each new configuration version, from a background thread.

    The current version (if any) comes first unless ``after_version`` says what the caller
    already has. Returns the watcher (``stop()`` ends it). A version that cannot be decoded is
    logged and skipped, so a process keeps running on the last good configuration.
    """

    def changed(document: Document) -> None:
        try:
            stored = decode_config(document)
        except ConfigError as exc:
            log.error("ignoring unusable configuration version=%d error=%s", document.version, exc)
            return
        log.info("configuration changed version=%d source=%s", stored.version, stored.source)
        on_change(stored.config)

    return VersionedDocuments(client, namespace).watch(CONFIG_DOCUMENT, changed, poll_interval=poll_interval,
                                                       after_version=after_version)


