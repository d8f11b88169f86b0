"""The configuration's durable home: a compacted, replicated Kafka topic beside Redis.

Redis is the fast path and the change feed, and operators treat it as replaceable: a restart
without persistence, a failover to a replica that was behind, a flushed instance, a new endpoint.
So every stored version is also kept in a Kafka topic, one record per version (keyed by it,
compacted), as Kafka Connect keeps its connector configurations. A :class:`ConfigKeeper` in every
service process brings the two together every few seconds, the higher version winning
(:func:`plan_sync`):

* Redis holds no configuration (it lost its data): the topic's newest version goes back into Redis
  under its own number; watchers deliver it, and services that restarted meanwhile pick it up.
* Redis is ahead (an apply the topic has not seen yet): that version is written to the topic.
* Redis is behind, at a version the topic holds byte for byte (a failover to a replica that was
  behind): the topic's newest goes back into Redis.
* Redis is behind, at a version the topic does not hold so (applied into an emptied
  Redis by a `config apply` that was not told where the topic is): it is stored as the version after
  the topic's newest, in both. The newest apply wins and no version number goes backwards.

Where it lives is a process setting, as for Connect's ``config.storage.topic``: bootstrap servers
(``STRAIT_CONFIG_KAFKA``), an optional client properties file (``STRAIT_CONFIG_KAFKA_PROPERTIES``),
the topic (``STRAIT_CONFIG_TOPIC``). The records hold what Redis holds: secret references only.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from strait.config.model import ClusterConfig
from strait.config.properties import read_properties_file
from strait.config.secrets import setting_value
from strait.coord.documents import DEFAULT_KEEP, Document, VersionedDocuments
from strait.coord.redis_client import CoordinationError
from strait.errors import StraitError
from strait.kafka.admin import KafkaRetriableError, admin_client, create_topics, internal_topic
from strait.metrics import CONFIG_DURABLE
from strait.retry import retry_transient

log = logging.getLogger(__name__)
librdkafka_log = logging.getLogger("strait.librdkafka")

DEFAULT_TOPIC = "__strait_config"  # "__": left out by every flow's default topic excludes
FORMAT = 1
KEEP_SECONDS = 2.0  # how often a keeper compares Redis with the topic
TIMEOUT = 10.0  # a request to the topic's cluster; the keeper tries again at its next pass
STOP_WAIT_SECONDS = 1.0


class DurableConfigError(StraitError):
    """The durable configuration topic could not be read or written; the message names cluster and topic."""


@dataclass(frozen=True)
class DurableLocation:
    """Where the durable copy of the configuration lives: a cluster and a topic on it."""

    bootstrap: str
    topic: str = DEFAULT_TOPIC
    properties: Path | None = None  # Java or librdkafka client settings (security), ${env:...} allowed

    def client_config(self) -> dict[str, str]:
        """librdkafka settings for the topic's cluster, read and resolved as a configured cluster's are."""
        entries = read_properties_file(self.properties) if self.properties is not None else []
        client = {p.key: setting_value(p.key, p.value) for p in entries if p.key != "bootstrap.servers"}
        return ClusterConfig(self.describe(), self.bootstrap, client=client).librdkafka_config()

    def describe(self) -> str:
        """``topic T on cluster B`` for messages."""
        return f"topic {self.topic} on {self.bootstrap}"


@dataclass(frozen=True)
class SyncAction:
    """What a keeper pass writes: a version to the topic, a version into Redis (either may be None)."""

    to_topic: Document | None = None
    to_redis: Document | None = None


def plan_sync(in_redis: Document | None, in_topic: Mapping[int, bytes], name: str = "config") -> SyncAction:
    """What brings Redis and the topic together; see the module's rules."""
    newest = max(in_topic, default=0)
    if in_redis is None:
        return SyncAction(to_redis=Document(name, newest, in_topic[newest])) if newest else SyncAction()
    if in_redis.version > newest:
        return SyncAction(to_topic=in_redis)
    if in_redis.version == newest and same_content(in_topic[newest], in_redis.body):
        return SyncAction()
    if in_redis.version < newest and in_topic.get(in_redis.version) == in_redis.body:  # a replica left behind
        return SyncAction(to_redis=Document(name, newest, in_topic[newest]))
    renumbered = Document(name, newest + 1, in_redis.body)
    return SyncAction(to_topic=renumbered, to_redis=renumbered)


def same_content(first: bytes, second: bytes) -> bool:
    """Two stored bodies hold the same configuration (who applied it and when aside)."""
    try:
        return bool(json.loads(first).get("config") == json.loads(second).get("config"))
    except (ValueError, AttributeError):
        return first == second


class DurableConfigTopic:
    """The configuration's versions in the durable topic, read by tailing it (one record per version)."""

    def __init__(self, location: DurableLocation, namespace: str = "strait", name: str = "config",
                 keep: int = DEFAULT_KEEP) -> None:
        self.location = location
        self.namespace = namespace  # deployments sharing a cluster (and a topic) never read each other's records
        self.name = name
        self.keep = keep
        self.versions: dict[int, bytes] = {}
        self._config = location.client_config()
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._partition = TopicPartition(location.topic, 0)
        self._position = 0
        self._ensured = False
        self._lock = threading.Lock()

    def refresh(self, create: bool = True) -> dict[int, bytes]:
        """Read what was written since the last look; every version the topic holds (newest last).

        ``create``: create the topic when it does not exist (a reader that only looks passes False).
        """
        with self._lock:
            if create:
                self._ensure_topic()
            consumer = self._reader()
            deadline = time.monotonic() + TIMEOUT
            try:  # a topic just created is unknown, then leaderless, for a moment: that passes
                high = retry_transient(lambda: self._end_offset(consumer), f"reading the end of {self.location.describe()}",
                                       lambda: time.monotonic() > deadline)
            except KafkaException as exc:
                raise self._error("read", exc) from None
            if high is None:
                raise self._error("read", f"the topic was unknown or had no leader for {TIMEOUT:.0f}s "
                                          "(does it exist?)")
            if high < self._position:  # the topic was re-created or truncated: read it anew
                log.warning("durable configuration %s went back to offset %d: reading it again",
                            self.location.describe(), high)
                self.versions.clear()
                self._position = 0
                consumer.assign([TopicPartition(self.location.topic, 0, 0)])
            deadline = time.monotonic() + TIMEOUT
            while self._position < high:
                if time.monotonic() > deadline:
                    raise self._error("read", f"offset {high} not reached in {TIMEOUT:.0f}s")
                failures = [error for error in map(self._take, consumer.consume(500, 0.5)) if error]
                if failures:  # the records of the batch are taken; librdkafka retries the rest by itself
                    log.info("durable configuration %s read goes on after: %s", self.location.describe(), failures[0])
            return dict(sorted(self.versions.items()))

    def _end_offset(self, consumer: Consumer) -> int:
        try:
            return int(consumer.get_watermark_offsets(self._partition, timeout=TIMEOUT)[1])
        except KafkaException as exc:
            if exc.args[0].code() in (KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART):
                raise KafkaRetriableError(f"{self.location.describe()}: not known to the cluster (yet)") from None
            raise

    def write(self, version: int, body: bytes) -> None:
        """Write ``version`` and wait until the cluster holds it (all in-sync replicas)."""
        with self._lock:
            self._ensure_topic()
            producer = self._writer()
            errors: list[KafkaError] = []
            value = json.dumps({"format": FORMAT, "version": version, "body": body.decode()}).encode()
            producer.produce(self.location.topic, value=value, key=self._key(version), partition=0,
                             on_delivery=lambda err, _msg: errors.append(err) if err else None)
            if version > self.keep:  # compaction then drops the versions Redis no longer keeps either
                producer.produce(self.location.topic, value=None, key=self._key(version - self.keep), partition=0)
            left = producer.flush(TIMEOUT)
            if errors or left:
                raise self._error("write", errors[0].str() if errors else f"not acknowledged in {TIMEOUT:.0f}s")
            self.versions[version] = body
        log.info("configuration kept durably version=%d %s", version, self.location.describe())

    def close(self) -> None:
        """Close the clients."""
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
            if self._producer is not None:
                self._producer.flush(1)
            self._consumer = self._producer = None

    def _take(self, message: object) -> str | None:
        """Note one record of the topic; an error event's text (an end of partition is none)."""
        error = message.error()  # type: ignore[attr-defined]
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:  # the end: nothing left below this offset
                self._position = max(self._position, message.offset())  # type: ignore[attr-defined]
                return None
            if error.fatal():
                raise self._error("read", error.str())
            return str(error.str())
        self._position = message.offset() + 1  # type: ignore[attr-defined]
        key = (message.key() or b"").decode(errors="replace")  # type: ignore[attr-defined]
        value = message.value()  # type: ignore[attr-defined]
        prefix = f"{self.namespace}:{self.name}:"
        if not key.startswith(prefix) or not key[len(prefix):].isdigit():
            return None
        version = int(key[len(prefix):])
        if value is None:
            self.versions.pop(version, None)
            return None
        try:
            record = json.loads(value)
            if record.get("format") != FORMAT or int(record["version"]) != version:
                raise ValueError(f"format {record.get('format')!r}, version {record.get('version')!r}")
            self.versions[version] = str(record["body"]).encode()
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.error("configuration version=%d in %s skipped: not a strait record (%s)", version,
                      self.location.describe(), exc)
        return None

    def _key(self, version: int) -> bytes:
        return f"{self.namespace}:{self.name}:{version:012d}".encode()

    def _ensure_topic(self) -> None:
        """Create the topic when it is missing: compacted, on up to 3 brokers, 2 in sync when it can.

        A topic that exists (created by a platform team, say) is used as it is, so strait's principal
        needs CREATE only when nobody created it; its cleanup policy must be ``compact`` alone, as
        Connect requires of its config topic: with ``delete`` the versions would expire with the
        retention.
        """
        if self._ensured:
            return
        try:
            admin = admin_client(self._config)
            metadata = admin.list_topics(timeout=TIMEOUT)
            topic = metadata.topics.get(self.location.topic)
            if topic is None or topic.error is not None:
                replicas = min(3, len(metadata.brokers))
                spec = internal_topic(self.location.topic, replicas)
                spec = replace(spec, config={**spec.config, "min.insync.replicas": str(max(1, replicas - 1))})
                create_topics(admin, self.location.bootstrap, [spec], timeout=TIMEOUT)
                self._ensured = True
                return
        except Exception as exc:  # noqa: BLE001 - any failure is reported with the topic it concerns
            raise self._error("create", exc) from None
        try:
            policy = self._cleanup_policy(admin)
        except Exception as exc:  # noqa: BLE001 - any failure is reported with the topic it concerns
            raise self._error("describe", exc) from None
        if policy is not None and {p.strip() for p in policy.split(",")} != {"compact"}:
            raise DurableConfigError(
                f"the durable configuration {self.location.describe()} has cleanup.policy={policy}: its versions "
                f"would expire with the topic's retention; set cleanup.policy=compact on it (kafka-configs.sh "
                f"--alter --entity-type topics --entity-name {self.location.topic} --add-config "
                f"cleanup.policy=compact), or name a new topic with STRAIT_CONFIG_TOPIC")
        self._ensured = True

    def _cleanup_policy(self, admin: AdminClient) -> str | None:
        """The existing topic's cleanup.policy, or None when this principal may not describe its configs."""
        resource = ConfigResource(ResourceType.TOPIC, self.location.topic)
        try:
            entries = admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(timeout=TIMEOUT)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                log.warning("cleanup.policy of the durable configuration %s not checked: this principal may not "
                            "describe its configs", self.location.describe())
                return None
            raise
        entry = entries.get("cleanup.policy")
        return entry.value if entry is not None else None

    def _reader(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer({**self._config, "group.id": f"{self.location.topic}-reader",
                                       "enable.auto.commit": "false", "enable.partition.eof": "true", "auto.offset.reset": "earliest",
                                       "logger": librdkafka_log})
            self._consumer.assign([TopicPartition(self.location.topic, 0, 0)])
        return self._consumer

    def _writer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer({**self._config, "acks": "all", "enable.idempotence": "true",
                                       "logger": librdkafka_log})
        return self._producer

    def _error(self, doing: str, cause: object) -> DurableConfigError:
        return DurableConfigError(f"cannot {doing} the durable configuration {self.location.describe()}: {cause}; "
                                  f"check that the cluster answers and this principal may {doing} the topic")


class ConfigKeeper:
    """Keeps Redis's configuration and the durable topic together, in a background thread of a service.

    Args:
        client: the coordination Redis.
        topic: the durable topic.
        service: for the log and the ``strait_config_durable`` gauge.
    """

    def __init__(self, client: redis.Redis, topic: DurableConfigTopic, namespace: str = "strait",
                 service: str = "strait", interval: float = KEEP_SECONDS) -> None:
        self.documents = VersionedDocuments(client, namespace)
        self.topic = topic
        self.service = service
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="config-keeper", daemon=True)
        self._trouble: str | None = None

    def sync_once(self) -> SyncAction:
        """One pass: compare, then write what :func:`plan_sync` says; what was written."""
        in_topic = self.topic.refresh()
        in_redis = self.documents.get(self.topic.name)
        action = plan_sync(in_redis, in_topic, self.topic.name)
        if action.to_topic is not None:
            self.topic.write(action.to_topic.version, action.to_topic.body)
        if action.to_redis is not None:
            held = in_redis.version if in_redis is not None else None
            restored = self.documents.restore(self.topic.name, action.to_redis.version, action.to_redis.body,
                                              expected=held)
            if restored:
                log.warning("service=%s configuration version=%d restored into Redis from %s (Redis held %s)",
                            self.service, action.to_redis.version, self.topic.location.describe(),
                            "nothing" if held is None else f"version {held}")
            else:  # changed since it was read (an apply): the next pass looks again
                raise DurableConfigError(f"Redis changed while configuration version {action.to_redis.version} "
                                         f"was being restored from {self.topic.location.describe()}; looking again")
        return action

    def start(self) -> ConfigKeeper:
        """Run :meth:`sync_once` now and every ``interval`` seconds; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the thread and close the topic's clients; a pass still waiting on a cluster that does not
        answer is left to the process exit (the stop must fit in the process's stop grace)."""
        self._stop.set()
        self._thread.join(timeout=STOP_WAIT_SECONDS)
        if not self._thread.is_alive():
            self.topic.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync_once()
                CONFIG_DURABLE.labels(self.service).set(1)
                if self._trouble is not None:
                    log.info("service=%s durable configuration in step again: %s", self.service,
                             self.topic.location.describe())
                self._trouble = None
            except (DurableConfigError, CoordinationError) as exc:
                CONFIG_DURABLE.labels(self.service).set(0)
                if str(exc) != self._trouble:
                    log.warning("service=%s durable configuration not in step, retrying every %.0fs: %s",
                                self.service, self.interval, exc)
                self._trouble = str(exc)
            except Exception:  # the keeper must outlive anything; it logs and retries
                CONFIG_DURABLE.labels(self.service).set(0)
                log.exception("service=%s durable configuration pass failed", self.service)
            self._stop.wait(self.interval)
