"""MirrorMaker 1 deployments as strait flows: ``kafka-mirror-maker.sh``'s own files and flags.

MM1 is a consumer bolted to a producer: ``--consumer.config`` names the source cluster (with its
security settings), ``--producer.config`` the target, ``--whitelist``/``--include`` the topics. The
flow this makes keeps MM1's behaviour: topic names unchanged (identity), no heartbeats, checkpoints
or offset syncs unless asked, no topic config or ACL sync, remote topics with the target broker's
default replication factor. Producer settings that shape the copy (acks, compression, batching) go
to the target's producer; consumer tuning that librdkafka shares goes to the source's consumer;
everything else MM1 needed (group.id, deserializers, ...) is reported as not used. Secrets stay in
the MM1 files: each becomes a ``${file:/path/to/file:key}`` reference, so ``config apply`` can store
the flow.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from strait.config.model import ClusterConfig, FlowConfig, Schedule, Selection, StraitConfig
from strait.config.properties import Property, read_properties_file
from strait.config.secrets import SecretRef, SettingValue, is_secret_key, setting_value
from strait.config.validate import Problems, check_flows, regex_problem
from strait.errors import ConfigError
from strait.filters import TOPICS_EXCLUDE_DEFAULT

log = logging.getLogger(__name__)

_SECURITY = re.compile(r"(security\.protocol|sasl\..+|ssl\..+|client\.dns\.lookup)")
_PRODUCER_KEYS = frozenset({
    "acks", "compression.type", "compression.level", "batch.size", "linger.ms", "enable.idempotence",
    "max.in.flight.requests.per.connection", "retries", "retry.backoff.ms", "delivery.timeout.ms",
    "request.timeout.ms", "message.max.bytes", "client.id", "client.rack",
})
_CONSUMER_KEYS = frozenset({
    "fetch.min.bytes", "fetch.max.bytes", "max.partition.fetch.bytes", "fetch.wait.max.ms",
    "request.timeout.ms", "client.id", "client.rack", "isolation.level",
})


@dataclass(frozen=True)
class Mm1Setup:
    """What one ``kafka-mirror-maker.sh`` command line names."""

    consumer_config: Path
    producer_config: Path
    whitelist: str
    num_streams: int = 1
    source_alias: str = "source"
    target_alias: str = "target"
    checkpoints: bool = False  # also write offset syncs and checkpoints (MM1 had neither)
    heartbeats: bool = False


@dataclass(frozen=True)
class Mm1Flow:
    """The configuration made of an MM1 setup, and the MM1 settings it does not use (``file: key``)."""

    config: StraitConfig
    unused: tuple[str, ...]


def from_mm1(setup: Mm1Setup) -> Mm1Flow:
    """Turn an MM1 setup into a one-flow configuration; raises ConfigError naming file, line and key."""
    problems = Problems("kafka-mirror-maker.sh")
    unused: list[str] = []
    source = _cluster(setup.source_alias, setup.consumer_config, "consumer", _CONSUMER_KEYS, problems, unused)
    target = _cluster(setup.target_alias, setup.producer_config, "producer", _PRODUCER_KEYS, problems, unused)
    include = _whitelist(setup.whitelist, problems)
    if setup.num_streams < 1:
        problems.add("--num.streams", f"expected at least 1, got {setup.num_streams}")
    problems.raise_if_any()
    assert source is not None and target is not None
    flow = _flow(setup, include)
    config = StraitConfig(clusters={source.alias: source, target.alias: target}, flows=(flow,))
    check_flows(config, problems, lambda _, f: f"flow {f.name}")
    problems.raise_if_any()
    if setup.num_streams > 1:
        log.info("num.streams=%d is not needed: strait copies every partition in a task of its own", setup.num_streams)
    return Mm1Flow(config, tuple(unused))


def _flow(setup: Mm1Setup, include: tuple[str, ...]) -> FlowConfig:
    off = Schedule(False, 30.0)
    groups_on = setup.checkpoints
    return FlowConfig(
        source=setup.source_alias, target=setup.target_alias,
        topics=Selection(include, TOPICS_EXCLUDE_DEFAULT),
        replication_policy="identity",
        replication_factor=-1,  # MM1's topics were auto-created with the broker's defaults
        sync_topic_configs=off, sync_topic_acls=off,
        refresh_groups=Schedule(groups_on, 30.0),
        emit_heartbeats=Schedule(setup.heartbeats, 1.0),
        emit_checkpoints=Schedule(groups_on, 5.0),
        emit_offset_syncs=groups_on,
        heartbeats_replication_enabled=setup.heartbeats,
    )


def _whitelist(text: str, problems: Problems) -> tuple[str, ...]:
    """MM1's include list: one Java regex where ``,`` also separates alternatives, spaces and quotes dropped."""
    cleaned = text.strip().replace(" ", "").replace('"', "")
    patterns = tuple(p for p in cleaned.split(",") if p)
    if not patterns:
        problems.add("--whitelist", "is empty; name the topics to mirror, e.g. --whitelist 'orders.*'")
    for pattern in patterns:
        problem = regex_problem(pattern)
        if problem:
            problems.add("--whitelist", problem)
    return patterns


def _cluster(alias: str, path: Path, role: str, tuning: frozenset[str], problems: Problems,
             unused: list[str]) -> ClusterConfig | None:
    try:
        entries = read_properties_file(path)
    except ConfigError as exc:
        problems.add(f"--{role}.config", str(exc))
        return None
    client: dict[str, SettingValue] = {}
    own: dict[str, SettingValue] = {}
    servers = None
    for entry in entries:
        if entry.key == "bootstrap.servers":
            servers = entry.value
        elif _SECURITY.fullmatch(entry.key):
            client[entry.key] = _value(path, entry, problems)
        elif entry.key in tuning:
            own[entry.key] = _value(path, entry, problems)
        else:
            unused.append(f"{path}: {entry.key}")
    if not servers:
        problems.add(f"{path}", f"bootstrap.servers is missing; the {role} file must name its cluster")
        return None
    return ClusterConfig(alias=alias, bootstrap_servers=servers, client=client, **{role: own})


def _value(path: Path, entry: Property, problems: Problems) -> SettingValue:
    """The setting; an inline secret becomes a reference to its key in the MM1 file itself."""
    if is_secret_key(entry.key) and "${" not in entry.value:
        return SecretRef(f"${{file:{path.resolve()}:{entry.key}}}")
    try:
        return setting_value(entry.key, entry.value)
    except ConfigError as exc:
        problems.add(f"{path}:{entry.line}: {entry.key}", str(exc))
        return entry.value
