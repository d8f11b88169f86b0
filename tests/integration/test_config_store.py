"""The configuration in a real Redis: versions, refusal of inline secrets, watching, real clients."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from strait.config import SecretRef, StraitConfig, load_config, load_yaml
from strait.config.store import (
    CONFIG_DOCUMENT,
    ConfigStoreError,
    apply_config,
    load_stored_config,
    read_stored_config,
    watch_config,
)
from strait.coord.documents import DocumentChangedError, VersionedDocuments
from strait.errors import ConfigError
from strait_lab.kafka import KafkaCluster

DATA = Path(__file__).parents[1] / "data" / "config"


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url)
    yield connection
    connection.close()


def redis_contents(client: redis.Redis) -> list[bytes]:
    """Every key and every value in the Redis, whatever its type."""
    found: list[bytes] = []
    for key in client.scan_iter(count=1000):
        found.append(key)
        kind = client.type(key).decode()
        if kind == "string":
            found.append(client.get(key) or b"")
        elif kind == "hash":
            for field, value in client.hgetall(key).items():
                found += [field, value]
        elif kind == "list":
            found += client.lrange(key, 0, -1)
        elif kind in ("set",):
            found += list(client.smembers(key))
        elif kind == "zset":
            found += [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            for _, fields in client.xrange(key):
                for field, value in fields.items():
                    found += [field, value]
    return found


def test_apply_and_load_round_trip_with_versions(client: redis.Redis) -> None:
    full = load_yaml(DATA / "full.yaml")
    sample = load_config(DATA / "mm2-sample.properties")
    assert apply_config(client, full, "full.yaml") == 1
    assert apply_config(client, full, "full.yaml") == 1  # unchanged: no new version, no notification
    assert apply_config(client, sample, "mm2-sample.properties") == 2
    assert load_stored_config(client) == (2, sample)
    assert load_stored_config(client, 1) == (1, full)
    stored = read_stored_config(client)
    assert stored.source == "mm2-sample.properties" and stored.applied_at.endswith("Z")


def test_a_change_made_from_an_older_version_is_refused_and_nothing_stored(client: redis.Redis) -> None:
    full = load_yaml(DATA / "full.yaml")
    sample = load_config(DATA / "mm2-sample.properties")
    assert apply_config(client, full, "full.yaml") == 1
    assert apply_config(client, sample, "a change from 1", changed_from=1) == 2
    with pytest.raises(ConfigStoreError, match=r"a second change from 1: the stored configuration changed while "
                                               r"this ran \(version 2, this change was made from 1\)"):
        apply_config(client, full, "a second change from 1", changed_from=1)
    assert load_stored_config(client) == (2, sample)
    documents = VersionedDocuments(client)  # the store itself is conditional too (a change landing in between)
    with pytest.raises(DocumentChangedError, match=r"document config is at version 2, not 1"):
        documents.put(CONFIG_DOCUMENT, b"{}", expected=1)
    assert documents.get(CONFIG_DOCUMENT).version == 2  # type: ignore[union-attr]


def test_stored_json_holds_references_not_values(client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIMARY_SCRAM_PASSWORD", "Env-Scram-Value-1")
    monkeypatch.setenv("STRAIT_TEST_REDIS_PASSWORD", "Env-Redis-Value-2")
    apply_config(client, load_yaml(DATA / "full.yaml"), "full.yaml")
    document = VersionedDocuments(client).get(CONFIG_DOCUMENT)
    assert document is not None
    body = json.loads(document.body)
    assert "${env:PRIMARY_SCRAM_PASSWORD}" in body["config"]["clusters"]["primary"]["client"]["sasl.jaas.config"]
    everything = b"\n".join(redis_contents(client))
    assert b"Env-Scram-Value-1" not in everything and b"Env-Redis-Value-2" not in everything


def test_inline_secret_is_refused_and_nothing_is_stored(client: redis.Redis) -> None:
    config = load_config(DATA / "mm2-scram-inline.properties")
    with pytest.raises(ConfigError) as caught:
        apply_config(client, config, "mm2-scram-inline.properties")
    message = str(caught.value)
    assert message.startswith("mm2-scram-inline.properties: refusing to store inline secrets")
    for key in ("A.sasl.jaas.config", "B.sasl.password", "B.producer.ssl.key.password"):
        assert key in message
    assert "${env:VAR}" in message and "Inline-" not in message
    assert redis_contents(client) == []


def test_inline_redis_password_is_refused(client: redis.Redis) -> None:
    config = StraitConfig(clusters={}, redis_url="redis://:Inline-Redis-Pw@h:6379/0")
    with pytest.raises(ConfigError, match=r"strait\.yaml: refusing to store inline secrets in Redis \(redis_url\)"):
        apply_config(client, config, "strait.yaml")
    assert redis_contents(client) == []


def test_nothing_stored_yet(client: redis.Redis) -> None:
    with pytest.raises(ConfigStoreError, match="no configuration is stored yet"):
        load_stored_config(client)
    apply_config(client, load_yaml(DATA / "scram-env.yaml"), "scram-env.yaml")
    with pytest.raises(ConfigStoreError, match="there is no configuration version 7"):
        load_stored_config(client, 7)


def test_watchers_see_each_new_version_without_restarting(client: redis.Redis, redis_url: str) -> None:
    received: list[StraitConfig] = []
    arrived = threading.Event()

    def on_change(config: StraitConfig) -> None:
        received.append(config)
        arrived.set()

    watcher = watch_config(redis.Redis.from_url(redis_url), on_change, poll_interval=0.2)
    try:
        first = load_yaml(DATA / "scram-env.yaml")
        apply_config(client, first, "scram-env.yaml")
        assert arrived.wait(10), "no notification for version 1"
        arrived.clear()
        VersionedDocuments(client).put(CONFIG_DOCUMENT, b"not json")  # a broken writer: skipped, logged
        second = load_config(DATA / "mm2-sample.properties")
        apply_config(client, second, "mm2-sample.properties")
        assert arrived.wait(10), "no notification for version 3"
    finally:
        watcher.stop()
    assert received[0] == first and received[-1] == second
    assert all(isinstance(config, StraitConfig) for config in received)


def test_a_stored_config_connects_to_a_real_scram_cluster(
    client: redis.Redis, kafka_cluster_for_test: Callable[..., KafkaCluster], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """MM2-style JAAS settings with references, stored, loaded elsewhere, resolved, and used by librdkafka."""
    cluster = kafka_cluster_for_test("S", sasl=True, scram_users={"admin": "admin-secret", "repl": "Repl-Pw-9"})
    (tmp_path / "secrets.properties").write_text("repl.password = Repl-Pw-9\n")
    mm2 = tmp_path / "mm2.properties"
    mm2.write_text(
        "clusters = S, T\n"
        f"S.bootstrap.servers = {cluster.sasl_bootstrap_servers}\n"
        "S.security.protocol = SASL_PLAINTEXT\nS.sasl.mechanism = SCRAM-SHA-512\n"
        "S.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'   username="repl" password="${{file:{tmp_path}/secrets.properties:repl.password}}";\n'
        f"T.bootstrap.servers = {cluster.bootstrap_servers}\n"
        "S->T.enabled = true\n"
    )
    apply_config(client, load_config(mm2), str(mm2))
    _, stored = load_stored_config(client)
    assert isinstance(stored.clusters["S"].client["sasl.jaas.config"], SecretRef)
    admin = AdminClient(stored.clusters["S"].librdkafka_config("admin"))
    metadata = admin.list_topics(timeout=30)
    assert metadata.brokers
    wrong = stored.clusters["S"].librdkafka_config("admin") | {"sasl.password": "wrong"}
    with pytest.raises(KafkaException):
        AdminClient(wrong).list_topics(timeout=10)
