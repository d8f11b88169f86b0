"""Security on real clusters: SASL_SSL (SCRAM-SHA-512) and TLS with lab certificates, a Redis with a
password, secrets given by ``${env:...}`` and ``${file:...}`` references, and least privilege.

Clusters A and B run StandardAuthorizer and strait reaches them only through their SASL_SSL listener,
with Java-style settings as MM2 users write them (so the Spark Kafka source and librdkafka both use
them). Each component runs as its own SCRAM user holding exactly the ACLs of ``MINIMAL_ACLS`` (the
README's table). Flow A->B copies in exactly-once mode, so its replicator's grants include the
TransactionalId ones (a superset of an at-least-once flow's: the same reads and writes, in
transactions). One deployment is shared by the tests of this module: every component does its job
without one authorizer denial and uses every ACL it was given; ACL sync never gives WRITE on a
remote topic; a TLS-only (SSL, no SASL) flow replicates in the same replicator; and no secret appears
in any log, CLI output, /metrics page, Spark checkpoint file or Redis entry.
"""

from __future__ import annotations

import logging
import re
import secrets
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from strait.translation import TRANSLATION_GROUP, TailProbe
from strait_lab.clients import Record, create_topic, produce
from strait_lab.kafka import KafkaCluster, KafkaClusterSpec
from strait_lab.redis import RedisServer
from strait_lab.services import StraitProcess
from tests.integration.test_configsync_support import alter, overrides
from tests.support.cli import strait
from tests.support.config import write_config
from tests.support.kafka import (
    commit_offsets,
    committed_records,
    count,
    group_offsets,
    offsets_end,
    records_by_partition,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

OP, TOPIC, GROUP, CLUSTER = AclOperation, ResourceType.TOPIC, ResourceType.GROUP, ResourceType.BROKER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ALLOW = AclPermissionType.ALLOW
COMPONENTS = ("replicator", "configsync", "heartbeat", "checkpoint")
RECORDS = 200
COMMITTED = {0: 60, 1: 40}  # the source group's offsets on the two partitions


@dataclass(frozen=True)
class Grant:
    """ALLOW ACLs of a component on ``cluster`` ("source"/"target"): ``operations`` on one resource.

    ``name`` may hold ``{topics}`` (the flow's topic prefix), ``{groups}`` (its group prefix) and
    ``{source}`` (the source alias). ``only_when`` names the situation that needs a grant the test
    does not provoke (it is then not required to be used).
    """

    cluster: str
    resource: ResourceType
    name: str
    pattern: ResourcePatternType
    operations: tuple[AclOperation, ...]
    only_when: str | None = None


SYNCS = "mm2-offset-syncs.{source}.internal"  # on the target: offset-syncs.topic.location=target
FIRST = "it creates the topic before the other component that may"  # who wins is a race
NEW_REMOTE = "it creates a remote topic (it copies the source topic's configs)"
GROWTH = "source partitions grow"
NOT_COMPACTED = "an internal topic was created without cleanup.policy=compact"
AHEAD_OF_COPY = "a checkpoint pass finds a group committed past the last copied record"  # a race with the copy

# Minimal ACLs of each component for one flow source->target with offset syncs on the target
# (offset-syncs.topic.location=target), found by running with the authorizer's audit log: each
# component does its job with exactly these, is denied nothing, and uses every one of them (those
# with ``only_when`` when that happens).
MINIMAL_ACLS: dict[str, tuple[Grant, ...]] = {
    "replicator": (
        Grant("source", TOPIC, "{topics}", PREFIXED, (OP.READ, OP.DESCRIBE)),
        Grant("source", TOPIC, "heartbeats", LITERAL, (OP.READ, OP.DESCRIBE)),
        Grant("source", TOPIC, "{topics}", PREFIXED, (OP.DESCRIBE_CONFIGS,), NEW_REMOTE),
        Grant("source", TOPIC, "heartbeats", LITERAL, (OP.DESCRIBE_CONFIGS,), NEW_REMOTE),
        # librdkafka looks up the coordinator of a consumer's group.id even when it only assigns
        Grant("source", GROUP, "strait-replicator", LITERAL, (OP.DESCRIBE,)),
        Grant("target", TOPIC, "{source}.", PREFIXED, (OP.WRITE, OP.DESCRIBE)),
        Grant("target", TOPIC, "{source}.", PREFIXED, (OP.CREATE,), FIRST),
        Grant("target", TOPIC, "{source}.", PREFIXED, (OP.ALTER,), GROWTH),
        Grant("target", TOPIC, "mm2-offset-syncs.{source}.internal", LITERAL, (OP.WRITE, OP.DESCRIBE)),
        Grant("target", TOPIC, "mm2-offset-syncs.{source}.internal", LITERAL, (OP.CREATE,), FIRST),
        # its progress beside the copies: written by the tasks, read when a query starts
        Grant("target", TOPIC, "strait-offsets.{source}.internal", LITERAL,
              (OP.READ, OP.WRITE, OP.DESCRIBE, OP.CREATE)),
        Grant("target", GROUP, "strait-progress", LITERAL, (OP.DESCRIBE,)),
        # exactly-once mode only: each copier's transactions, and fencing the copier before it
        Grant("target", TRANSACTIONAL_ID, "strait-", PREFIXED, (OP.WRITE, OP.DESCRIBE)),
    ),
    "configsync": (
        Grant("source", TOPIC, "{topics}", PREFIXED, (OP.DESCRIBE, OP.DESCRIBE_CONFIGS)),
        Grant("source", TOPIC, "heartbeats", LITERAL, (OP.DESCRIBE, OP.DESCRIBE_CONFIGS)),
        Grant("source", TOPIC, "heartbeats", LITERAL, (OP.CREATE,), FIRST),
        Grant("source", TOPIC, "heartbeats", LITERAL, (OP.ALTER_CONFIGS,), NOT_COMPACTED),
        Grant("source", CLUSTER, "kafka-cluster", LITERAL, (OP.DESCRIBE,)),
        Grant("target", TOPIC, "{source}.", PREFIXED, (OP.DESCRIBE, OP.DESCRIBE_CONFIGS, OP.ALTER_CONFIGS)),
        Grant("target", TOPIC, "{source}.", PREFIXED, (OP.CREATE,), FIRST),
        Grant("target", TOPIC, "{source}.", PREFIXED, (OP.ALTER,), GROWTH),
        Grant("target", TOPIC, "heartbeats", LITERAL, (OP.DESCRIBE, OP.DESCRIBE_CONFIGS)),
        # the heartbeat service writes the target's heartbeats too, and may create the topic first
        Grant("target", TOPIC, "heartbeats", LITERAL, (OP.CREATE,), FIRST),
        Grant("target", TOPIC, "heartbeats", LITERAL, (OP.ALTER_CONFIGS,), NOT_COMPACTED),
        Grant("target", TOPIC, SYNCS, LITERAL, (OP.DESCRIBE, OP.DESCRIBE_CONFIGS)),
        Grant("target", TOPIC, SYNCS, LITERAL, (OP.CREATE,), FIRST),
        Grant("target", TOPIC, SYNCS, LITERAL, (OP.ALTER_CONFIGS,), NOT_COMPACTED),
        Grant("target", CLUSTER, "kafka-cluster", LITERAL, (OP.DESCRIBE, OP.ALTER)),
    ),
    "heartbeat": (
        Grant("source", TOPIC, "heartbeats", LITERAL, (OP.WRITE, OP.DESCRIBE)),
        Grant("source", TOPIC, "heartbeats", LITERAL, (OP.CREATE,), FIRST),
        Grant("target", TOPIC, "heartbeats", LITERAL, (OP.WRITE, OP.DESCRIBE)),  # as MM2's heartbeat connector
        Grant("target", TOPIC, "heartbeats", LITERAL, (OP.CREATE,), FIRST),
        Grant("target", TOPIC, "{source}.heartbeats", LITERAL, (OP.READ, OP.DESCRIBE)),
        # librdkafka looks up the coordinator of a consumer's group.id even when it only assigns
        Grant("target", GROUP, "strait-heartbeat-watch", LITERAL, (OP.DESCRIBE,)),
        # the source watch: the source's end offsets, and where the copies end from the offset syncs
        Grant("source", TOPIC, "{topics}", PREFIXED, (OP.DESCRIBE,)),
        Grant("target", TOPIC, "mm2-offset-syncs.{source}.internal", LITERAL, (OP.READ, OP.DESCRIBE)),
        Grant("target", GROUP, "strait-translation", LITERAL, (OP.DESCRIBE,)),
    ),
    "checkpoint": (
        Grant("source", GROUP, "{groups}", PREFIXED, (OP.DESCRIBE,)),
        Grant("source", TOPIC, "{topics}", PREFIXED, (OP.DESCRIBE,)),
        # the tail probe reads the source between the last copied record and a group's commit ahead of it
        Grant("source", TOPIC, "{topics}", PREFIXED, (OP.READ,), AHEAD_OF_COPY),
        Grant("source", GROUP, "strait-translation", LITERAL, (OP.DESCRIBE,)),
        Grant("target", TOPIC, "mm2-offset-syncs.{source}.internal", LITERAL, (OP.READ, OP.DESCRIBE)),
        Grant("target", TOPIC, "{source}.checkpoints.internal", LITERAL, (OP.WRITE, OP.DESCRIBE)),
        # at start, to go on from the checkpoints it emitted before (the test restarts it)
        Grant("target", TOPIC, "{source}.checkpoints.internal", LITERAL, (OP.READ,)),
        Grant("target", TOPIC, "{source}.checkpoints.internal", LITERAL, (OP.CREATE,), FIRST),
        Grant("target", GROUP, "strait-translation", LITERAL, (OP.DESCRIBE,)),
        Grant("target", GROUP, "strait-checkpoint-load", LITERAL, (OP.DESCRIBE,)),
        # sync_group_offsets only: commit translated offsets of idle target groups
        Grant("target", TOPIC, "{source}.{topics}", PREFIXED, (OP.READ, OP.DESCRIBE)),
        Grant("target", GROUP, "{groups}", PREFIXED, (OP.READ, OP.DESCRIBE)),
    ),
}


def user(component: str) -> str:
    """The SCRAM user a component runs as."""
    return f"strait-{component}"


@dataclass(frozen=True)
class SecureLab:
    """Two secured clusters, a password-protected Redis and every secret the tests must not find."""

    source: KafkaCluster
    target: KafkaCluster
    redis: RedisServer
    passwords: dict[tuple[str, str], str]  # (cluster alias, user) -> password
    secret_dir: Path
    env: dict[str, str]


@dataclass(frozen=True)
class Deployment:
    """Every component running as its own user on the secure lab, and what the tests look for."""

    lab: SecureLab
    processes: dict[str, StraitProcess]
    topics: str
    groups: str
    orders: str
    tls_topic: str
    configs: dict[str, Path]
    folder: Path  # configs and the replicator's state
    log_dir: Path
    applied: str

    @property
    def state_dir(self) -> Path:
        """The replicator's Spark checkpoints."""
        return self.folder / "state"

    def process(self, component: str, name: str) -> StraitProcess:
        """A (not yet started) `strait run COMPONENT` as its user, with the secrets' environment."""
        args = ["--config", str(self.configs[component])]
        args += ["--state-dir", str(self.state_dir)] if component == "replicator" else ["--lease-ttl", "3"]
        return StraitProcess(component, args, self.log_dir, env=self.lab.env, name=name)

    def remote(self, topic: str) -> str:
        """The remote name of a source topic of flow A->B."""
        return f"A.{topic}"


def _password() -> str:
    return f"pw-{secrets.token_hex(12)}"


def _env_name(component: str) -> str:
    return f"STRAIT_TEST_A_{component.upper()}_PASSWORD"


@pytest.fixture(scope="module")
def secure_lab(lab_root: Path, redis_server_factory: Callable[..., RedisServer],
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureLab]:
    """Clusters A and B (authorizer with audit log, SCRAM over SASL_SSL, TLS) and a Redis with a password."""
    users = ["admin", *(user(c) for c in COMPONENTS)]
    passwords = {(alias, name): _password() for alias in ("A", "B") for name in users}
    clusters = [KafkaCluster(KafkaClusterSpec(alias, tls=True, sasl=True, authorizer=True, audit_log=True,
                                              scram_users={name: passwords[(alias, name)] for name in users}),
                             lab_root / f"kafka-secure-{alias}-{uuid.uuid4().hex[:6]}")
                for alias in ("A", "B")]
    try:
        for cluster in clusters:  # both JVMs boot at once: half the wait on a loaded machine
            cluster.launch()
        for cluster in clusters:
            cluster.wait_ready(180)
        server = redis_server_factory(password=_password())
        secret_dir = tmp_path_factory.mktemp("secrets")
        env = {"STRAIT_TEST_REDIS_PASSWORD": server.password or ""}
        for component in COMPONENTS:  # A's passwords come from the environment, B's from files
            env[_env_name(component)] = passwords[("A", user(component))]
            path = secret_dir / f"{component}.password"
            path.write_text(passwords[("B", user(component))] + "\n")
            path.chmod(0o600)
        yield SecureLab(clusters[0], clusters[1], server, passwords, secret_dir, env)
    finally:
        with ThreadPoolExecutor(max_workers=len(clusters)) as pool:
            list(pool.map(lambda cluster: cluster.stop(), clusters))


def _bindings(component: str, side: str, topics: str, groups: str) -> list[AclBinding]:
    """The component's MINIMAL_ACLS on one side of the flow, for its user."""
    return [AclBinding(g.resource, g.name.format(topics=topics, groups=groups, source="A"), g.pattern,
                       f"User:{user(component)}", "*", op, ALLOW)
            for g in MINIMAL_ACLS[component] if g.cluster == side for op in g.operations]


def _add_acls(cluster: KafkaCluster, bindings: list[AclBinding]) -> None:
    admin = cluster.admin()  # kept alive while its futures run
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)


def _delete_acls(cluster: KafkaCluster, bindings: list[AclBinding]) -> None:
    admin = cluster.admin()
    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in bindings]
    for future in admin.delete_acls(filters).values():
        future.result(timeout=30)


def _acls(cluster: KafkaCluster, principal: str | None = None) -> list[AclBinding]:
    admin = cluster.admin()
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    return list(admin.describe_acls(every).result(timeout=30))


def _cluster_entry(lab: SecureLab, cluster: KafkaCluster, component: str) -> dict[str, Any]:
    """The cluster as an MM2 user writes it: Java settings, SASL_SSL, password by reference."""
    if cluster is lab.source:
        reference = f"${{env:{_env_name(component)}}}"
    else:
        reference = f"${{file:{lab.secret_dir / f'{component}.password'}}}"
    settings = cluster.java_client_config(user(component), reference, tls=True)
    return {"bootstrap_servers": settings.pop("bootstrap.servers"), "client": settings}


def _tls_only_entry(cluster: KafkaCluster) -> dict[str, Any]:
    """The cluster over SSL, written with librdkafka keys (the Spark source gets them translated)."""
    settings = cluster.client_config(tls=True)
    return {"bootstrap_servers": settings.pop("bootstrap.servers"), "client": settings}


def _flow(source: str, target: str, topics: str, groups: str, exactly_once: bool = False) -> dict[str, Any]:
    schedule = {"enabled": True, "interval_seconds": 2}
    return {
        "source": source, "target": target, "exactly_once": exactly_once,
        "topics": {"include": [f"{topics}.*"]}, "groups": {"include": [f"{groups}.*"]},
        "replication_factor": 1, "offset_syncs_topic_location": "target",
        "refresh_topics": {"enabled": True, "interval_seconds": 3}, "refresh_groups": schedule,
        "sync_topic_configs": schedule, "sync_topic_acls": schedule,
        "emit_checkpoints": {"enabled": True, "interval_seconds": 1},
        "sync_group_offsets": {"enabled": True, "interval_seconds": 1},
    }


def _config(lab: SecureLab, component: str, topics: str, groups: str, tls_topics: str) -> dict[str, Any]:
    config = {
        "redis_url": f"redis://:${{env:STRAIT_TEST_REDIS_PASSWORD}}@127.0.0.1:{lab.redis.port}/0",
        "clusters": {"A": _cluster_entry(lab, lab.source, component),
                     "B": _cluster_entry(lab, lab.target, component)},
        "flows": [_flow("A", "B", topics, groups, exactly_once=True)],
    }
    if component == "replicator":  # TLS-only smoke: the same clusters as C and D over SSL, no SASL
        config["clusters"].update({"C": _tls_only_entry(lab.source), "D": _tls_only_entry(lab.target)})
        config["flows"].append(_flow("C", "D", tls_topics, "none-"))
    return config


def _cli(lab: SecureLab, *args: str) -> str:
    """Run a `strait` command against the lab's Redis; its stdout and stderr together."""
    return _clis(lab, [list(args)])[0]


def _clis(lab: SecureLab, commands: list[list[str]]) -> list[str]:
    """Run `strait` commands side by side (each costs an interpreter start); their outputs in order."""
    env = {**lab.env, "STRAIT_REDIS_URL": lab.redis.url}
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        done = list(pool.map(lambda args: strait(*args, env=env), commands))
    for args, result in zip(commands, done, strict=True):
        assert result.returncode == 0, f"strait {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return [result.stdout + result.stderr for result in done]


@pytest.fixture(scope="module")
def deployment(secure_lab: SecureLab, lab_root: Path,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """Topics, a source group, application ACLs; every component started as its own user."""
    lab, source = secure_lab, secure_lab.source
    topics, groups = f"sec-{secrets.token_hex(3)}-", f"secgrp-{secrets.token_hex(3)}-"
    tls_topics = f"tlsonly-{secrets.token_hex(3)}-"
    orders, tls_topic = f"{topics}orders", f"{tls_topics}events"
    create_topic(source.admin(), orders, partitions=2, config={"retention.ms": "3600000"})
    create_topic(source.admin(), tls_topic)
    produce(source.client_config(), orders, [Record(f"k{i}".encode(), f"v{i}".encode(), partition=i % 2)
                                             for i in range(RECORDS)])
    produce(source.client_config(), tls_topic, [Record(None, f"e{i}".encode()) for i in range(RECORDS)])
    commit_offsets(source, f"{groups}app", [TopicPartition(orders, p, o) for p, o in COMMITTED.items()])
    _add_acls(source, [  # application ACLs for configsync to copy: READ is copied, WRITE never
        AclBinding(TOPIC, orders, LITERAL, "User:reader", "*", OP.READ, ALLOW),
        AclBinding(TOPIC, orders, LITERAL, "User:writer", "*", OP.WRITE, ALLOW),
        AclBinding(TOPIC, orders, LITERAL, "User:owner", "*", OP.ALL, ALLOW),
        AclBinding(TOPIC, topics, PREFIXED, "User:team", "*", OP.WRITE, ALLOW),
    ])
    folder = tmp_path_factory.mktemp("deployment")
    configs = {}
    for component in COMPONENTS:
        _add_acls(source, _bindings(component, "source", topics, groups))
        _add_acls(lab.target, _bindings(component, "target", topics, groups))
        configs[component] = write_config(folder / f"{component}.yaml",
                                          _config(lab, component, topics, groups, tls_topics))
    applied = _cli(lab, "config", "apply", str(configs["configsync"]))

    d = Deployment(lab, {}, topics, groups, orders, tls_topic, configs, folder, lab_root / "security",
                   applied)
    try:
        for component in ("replicator", "configsync", "heartbeat", "checkpoint"):  # Spark first: slowest
            d.processes[component] = d.process(component, f"{component}-security")
            d.processes[component].process.start()
        for process in d.processes.values():  # started together, then each waited for
            process.process.wait_until(lambda p=process: bool(p.scrape_text()), 180, "/metrics")
        yield d
    finally:
        with ThreadPoolExecutor(max_workers=len(COMPONENTS)) as pool:  # graceful stops overlap
            list(pool.map(lambda process: process.stop(), list(d.processes.values())))


_AUDIT = re.compile(r"Principal = User:(strait-\w+) is (Allowed|Denied) operation = (\w+) from host = \S+ "
                    r"on resource = (\w+):LITERAL:(\S+) for request")
_RESOURCE = {"Topic": TOPIC, "Group": GROUP, "Cluster": CLUSTER, "TransactionalId": TRANSACTIONAL_ID}


def _audit(cluster: KafkaCluster) -> list[tuple[str, str, str, str, str]]:
    """The authorizer's decisions on strait's users: (user, verdict, operation, resource type, name)."""
    return [m.groups() for path in cluster.log_paths()  # type: ignore[misc]
            for m in _AUDIT.finditer(path.read_text(errors="replace"))]


def _used(grant: Grant, component: str, decisions: list[tuple[str, str, str, str, str]],
          operation: AclOperation, name: str) -> bool:
    for who, verdict, op, kind, resource in decisions:
        if who != user(component) or verdict != "Allowed" or op != operation.name:
            continue
        if _RESOURCE.get(kind) != grant.resource:
            continue
        if resource == name or (grant.pattern == PREFIXED and resource.startswith(name)):
            return True
    return False


def _restart(d: Deployment, component: str) -> None:
    d.processes[component].stop()
    d.processes[component] = d.process(component, f"{component}-restarted")
    d.processes[component].start(timeout=180)


def _replicated(d: Deployment) -> None:
    """Every record of the orders topic copied (read_committed: the copy's offsets hold commit markers)."""
    wait_for(lambda: committed_records(d.lab.target, d.remote(d.orders)) == RECORDS, 300,
             f"{RECORDS} records on {d.remote(d.orders)}")


def _translated(d: Deployment) -> dict[int, int]:
    """COMMITTED as the remote topic's offsets: each partition's offset of the copy of the record the
    source group is at (commit markers shift an exactly-once copy's offsets)."""
    copies = records_by_partition(d.lab.target, d.remote(d.orders))
    return {p: copies[p][offset].offset or 0 for p, offset in COMMITTED.items()}


def test_every_component_does_its_job_as_its_least_privileged_user(deployment: Deployment,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    d, source, target = deployment, deployment.lab.source, deployment.lab.target
    remote = d.remote(d.orders)
    _replicated(d)
    wait_for(lambda: count(target, "mm2-offset-syncs.A.internal") > 0, 60, "offset syncs on the target")
    translated = _translated(d)
    wait_for(lambda: group_offsets(target, f"{d.groups}app", remote, 2) == translated, 90,
             "the group's offsets checkpointed and synced to the target")
    assert count(target, "A.checkpoints.internal") > 0
    heartbeat = d.processes["heartbeat"]
    # (the age counts from the service's start until a first heartbeat is seen on B: not proof alone)
    wait_for(lambda: count(target, "A.heartbeats") > 0, 90, "heartbeats emitted on A and replicated to B")
    wait_for(lambda: (heartbeat.sample("strait_heartbeat_age_seconds", flow="A->B") or 1e9) < 30, 90,
             "heartbeats watched on B")
    alter(source, d.orders, {"retention.ms": "7200000"})
    wait_for(lambda: overrides(target, remote).get("retention.ms") == "7200000", 60,
             "configsync copying a topic config change")

    _restart(d, "checkpoint")  # a restarted checkpoint service reloads its checkpoints: READ on that topic
    wait_for(lambda: any(x[0] == user("checkpoint") and x[1:3] == ("Allowed", "READ") and
                         x[4] == "A.checkpoints.internal" for x in _audit(target)), 90,
             "the restarted checkpoint service reading its checkpoints")

    decisions = _audit(source) + _audit(target)
    assert [x for x in decisions if x[1] == "Denied"] == [], "a component was denied something"
    for component, process in d.processes.items():
        assert not process.sample("strait_errors_total", kind="permission"), f"{component}: permission error"
    unused = [(component, g.cluster, op.name, g.name) for component, grants in MINIMAL_ACLS.items()
              for g in grants if g.only_when is None for op in g.operations
              if not _used(g, component, _audit(source if g.cluster == "source" else target), op,
                           g.name.format(topics=d.topics, groups=d.groups, source="A"))]
    assert unused == [], "ACLs granted but never used: not minimal"
    replicator_on_source = {b.operation for b in _acls(source, f"User:{user('replicator')}")}
    assert replicator_on_source == {OP.READ, OP.DESCRIBE, OP.DESCRIBE_CONFIGS}, "no write right on the source"

    # (after the audit's check, which this denial would fail) the tail probe as the checkpoint's user once its
    # READ on the source topics is taken away (it keeps DESCRIBE on its probe's group): not shown empty, and a
    # warning that names the topic and the grant
    reads = [b for b in _bindings("checkpoint", "source", d.topics, d.groups)
             if b.restype == TOPIC and b.operation == OP.READ]
    _delete_acls(source, reads)

    def denied() -> bool:
        probe = TailProbe(source.client_config(user("checkpoint"), tls=True))
        try:
            assert not probe.empty_between(d.orders, 0, 0, 1)
        finally:
            probe.close()
        return f"grant READ on topic {d.orders}" in caplog.text

    try:
        with caplog.at_level(logging.WARNING, logger="strait.translation"):
            wait_for(denied, 60, "the probe denied READ, with a warning naming the topic and the grant")
    finally:
        _add_acls(source, reads)

    # with READ but without DESCRIBE on its group, the probe's coordinator lookup is refused: it still reads by
    # assignment and answers (here: nothing at the partition's end), with a warning naming the group's grant
    lookup = [b for b in _bindings("checkpoint", "source", d.topics, d.groups)
              if b.restype == GROUP and b.name == TRANSLATION_GROUP]
    _delete_acls(source, lookup)
    end = offsets_end(source, d.orders, 0)

    def answered() -> bool:  # the refusal and the answer in the same call
        caplog.clear()
        probe = TailProbe(source.client_config(user("checkpoint"), tls=True))
        try:
            empty = probe.empty_between(d.orders, 0, end, end)
        finally:
            probe.close()
        return empty and f"grant DESCRIBE on group {TRANSLATION_GROUP}" in caplog.text

    try:
        with caplog.at_level(logging.WARNING, logger="strait.translation"):
            wait_for(answered, 60,
                     "the probe refused its group's coordinator answering, with a warning naming the grant")
    finally:
        _add_acls(source, lookup)


def test_acl_sync_never_grants_write_on_remote_topics(deployment: Deployment) -> None:
    d, target = deployment, deployment.lab.target
    remote, remote_prefix = d.remote(d.orders), d.remote(d.topics)

    def synced() -> set[tuple[str, str, AclOperation]]:
        return {(b.name, b.principal, b.operation) for b in _acls(target)
                if b.name in (remote, remote_prefix) and not b.principal.startswith("User:strait-")}

    wait_for(lambda: ("User:reader", OP.READ) in {(p, o) for _n, p, o in synced()}, 90, "READ ACL synced")
    # User:owner's ALL becomes READ; User:writer's and User:team's WRITE are not copied at all
    assert synced() == {(remote, "User:reader", OP.READ), (remote, "User:owner", OP.READ)}
    assert all(b.operation not in (OP.WRITE, OP.ALL) for b in _acls(target)
               if b.name.startswith("A.") and not b.principal.startswith("User:strait-"))


def test_tls_only_flow_replicates(deployment: Deployment) -> None:
    d, target = deployment, deployment.lab.target
    remote = f"C.{d.tls_topic}"
    wait_for(lambda: count(target, remote) == RECORDS, 300, f"{RECORDS} records on {remote}")
    wait_for(lambda: count(target, "mm2-offset-syncs.C.internal") > 0, 60, "offset syncs of the TLS flow")


def _redis_dump(client: redis.Redis) -> bytes:
    """Every key and value of the Redis, whatever its type, as one blob to search."""
    parts: list[bytes] = []
    for key in client.scan_iter(count=500):
        parts.append(key)
        kind = client.type(key).decode()
        if kind == "string":
            parts.append(client.get(key) or b"")
        elif kind == "hash":
            parts.extend(k + b"=" + v for k, v in client.hgetall(key).items())
        elif kind == "stream":
            parts.extend(repr(entry).encode() for entry in client.xrange(key))
        elif kind == "list":
            parts.extend(client.lrange(key, 0, -1))
        elif kind == "set":
            parts.extend(client.smembers(key))
        elif kind == "zset":
            parts.extend(member for member, _score in client.zrange(key, 0, -1, withscores=True))
        else:
            parts.append(f"<unsearched type {kind}>".encode())
    return b"\n".join(parts)


def test_no_secret_in_logs_cli_output_metrics_checkpoints_or_redis(deployment: Deployment) -> None:
    d, lab = deployment, deployment.lab
    _replicated(d)  # every component has used its secrets by now
    wait_for(lambda: (d.processes["configsync"].sample("strait_topics_in_sync", flow="A->B") or 0) >= 1, 60,
             "a drift report for `strait status`")
    commands = [["config", "show"], ["config", "show", "--json"], ["status"], ["status", "--json"]]
    outputs = {"config apply": d.applied,
               **{" ".join(args): out for args, out in zip(commands, _clis(lab, commands), strict=True)}}
    assert "${env:STRAIT_TEST_A_CONFIGSYNC_PASSWORD}" in outputs["config show"], "references shown as written"
    assert "A->B" in outputs["status"]
    texts = {name: text.encode() for name, text in outputs.items()}
    texts.update({f"{c} /metrics": p.scrape_text().encode() for c, p in d.processes.items()})
    texts.update({f"{c} log": p.log_text().encode() for c, p in d.processes.items()})
    texts["redis"] = _redis_dump(lab.redis.client())
    texts.update({str(path): path.read_bytes() for path in d.state_dir.rglob("*") if path.is_file()})
    assert len(texts) > 10 and any(b"flow" in text for text in texts.values())
    leaks = [f"{name} holds the password of {who}" for name, text in texts.items()
             for who, secret in [*((f"{a}/{u}", p) for (a, u), p in lab.passwords.items()),
                                 ("redis", lab.redis.password or "")]
             if secret and secret.encode() in text]
    assert leaks == []


def _properties_file(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    path.chmod(0o600)
    return path


def test_mm1_sasl_ssl_setup_replicates_through_from_mm1_apply(secure_lab: SecureLab, lab_root: Path,
                                                               tmp_path: Path) -> None:
    """An MM1 deployment's own consumer and producer files (SASL_SSL with SCRAM, passwords inline as MM1
    users keep them) become a stored flow with `config from-mm1 --apply`; a replicator following Redis
    copies the whitelisted topic with identity names, and no password reaches the output or Redis."""
    lab = secure_lab
    topic = f"mm1-{secrets.token_hex(3)}-orders"
    create_topic(lab.source.admin(), topic, partitions=2)
    produce(lab.source.client_config(), topic, [Record(f"k{i % 7}".encode(), f"v{i}".encode(), partition=i % 2)
                                                for i in range(RECORDS)])
    consumer = _properties_file(tmp_path / "consumer.properties", {
        **lab.source.java_client_config("admin", tls=True), "group.id": "mm1-mirror",
        "auto.offset.reset": "earliest", "key.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer"})
    producer = _properties_file(tmp_path / "producer.properties", {
        **lab.target.java_client_config("admin", tls=True), "acks": "1", "compression.type": "lz4",
        "linger.ms": "20", "batch.size": "65536", "buffer.memory": "33554432"})

    output = _cli(lab, "config", "from-mm1", "--consumer.config", str(consumer), "--producer.config", str(producer),
                  "--whitelist", f"{topic},nothing-else", "--num.streams", "2", "--apply")
    assert "${file:" in output and "configuration stored as version" in output, output
    passwords = [lab.passwords[(alias, "admin")] for alias in ("A", "B")]
    assert not any(p in output for p in passwords), "a password from the MM1 files was printed"
    shown = _cli(lab, "config", "show", "--json")
    assert '"acks": "1"' in shown and '"compression.type": "lz4"' in shown
    assert not any(p in shown for p in passwords), "a password from the MM1 files was stored"

    process = StraitProcess("replicator", ["--state-dir", str(tmp_path / "state")], lab_root / "mm1",
                            env={**lab.env, "STRAIT_REDIS_URL": lab.redis.url}, name="replicator-mm1")
    try:
        process.start(timeout=180)
        wait_for(lambda: count(lab.target, topic) == RECORDS, 180, f"{RECORDS} records of {topic} on B")
    finally:
        process.stop()
    copied, original = records_by_partition(lab.target, topic), records_by_partition(lab.source, topic)
    assert {p: [(r.key, r.value) for r in rs] for p, rs in copied.items()} == \
        {p: [(r.key, r.value) for r in rs] for p, rs in original.items()}
    assert "mm2-offset-syncs.target.internal" not in lab.source.admin().list_topics(timeout=30).topics
