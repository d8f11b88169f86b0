"""One flow as its data path sees it: :class:`FlowSpec`, built once per plan from the configuration
and the topics found on the source.

The copy loop, the resume evidence (:func:`strait.progress.gather_evidence`), the progress log and
the epoch planner all read this one object: the clusters' client settings, the topics' names and
where the flow's internal records live are computed here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from strait.config.model import FlowConfig, StraitConfig, SyncsLocation
from strait.policy import ReplicationPolicy
from strait.records import MIRROR_SOURCE_CONNECTOR

Pairs = tuple[tuple[str, str], ...]


def pairs(settings: Mapping[str, str] | Pairs) -> Pairs:
    """librdkafka settings as a hashable, comparable value (sorted pairs)."""
    return tuple(sorted(dict(settings).items()))


@dataclass(frozen=True)
class SharedRemote:
    """Another flow writing into one of a repartitioning flow's remote topics (an aggregation):
    its source's ``topic`` goes to ``remote`` too, and its progress lives in ``progress``."""

    remote: str
    flow: str
    source_alias: str
    topic: str
    progress: SyncsLocation


@dataclass(frozen=True)
class FlowSpec:
    """Everything the data path needs to know about one flow (pickled to the Spark tasks).

    Client settings are librdkafka's, as sorted pairs (dicts are accepted and sorted): the spec is
    hashable and two plans compare equal exactly when they would copy the same way.
    """

    flow: str
    source_alias: str
    target_alias: str
    policy: ReplicationPolicy
    source_admin: Pairs = ()
    source_consumer: Pairs = ()
    target_admin: Pairs = ()
    target_consumer: Pairs = ()
    target_producer: Pairs = ()
    syncs: SyncsLocation | None = None  # the flow's offset syncs (None: it writes none)
    syncs_producer: Pairs = ()
    syncs_consumer: Pairs = ()
    progress: SyncsLocation | None = None  # strait's progress topic, on the target (None: none written)
    mm2_offsets: SyncsLocation | None = None  # MM2's Connect offsets topic, on the target
    mm2_connector: str = MIRROR_SOURCE_CONNECTOR  # the name MM2's MirrorSourceConnector ran under
    remote_names: Pairs = ()  # source topic -> remote topic, where the policy's name is not used
    repartition: bool = False  # the target places records by key hash (the flow's target_partitions)
    start: str | None = None  # the flow's (or the command line's) start choice
    shared: tuple[SharedRemote, ...] = ()  # a repartitioning flow: other flows writing to its remote topics
    exactly_once: bool = False  # records, progress and target-side syncs in one transaction per commit
    flush_timeout: float = 120.0
    read_timeout: float = 120.0

    def __post_init__(self) -> None:
        for name in ("source_admin", "source_consumer", "target_admin", "target_consumer", "target_producer",
                     "syncs_producer", "syncs_consumer", "remote_names"):
            object.__setattr__(self, name, pairs(getattr(self, name)))

    @property
    def syncs_in_transaction(self) -> bool:
        """Whether the offset syncs go into the copy's transactions (exactly once, syncs on the target)."""
        return self.exactly_once and self.syncs is not None and self.syncs.alias == self.target_alias

    def remote_topic(self, topic: str) -> str:
        """The remote topic name of a source topic."""
        return dict(self.remote_names).get(topic) or self.policy.format_remote_topic(self.source_alias, topic)


def flow_spec(config: StraitConfig, flow: FlowConfig, remote_names: Iterable[tuple[str, str]],
              start: str | None) -> FlowSpec:
    """The spec of ``flow`` copying the source topics of ``remote_names`` (source -> remote topic),
    with ``start`` (the command line's choice, else the flow's)."""
    source, target = config.cluster(flow.source), config.cluster(flow.target)
    names = flow.topic_names()
    syncs = names.offset_syncs
    syncs_cluster = config.cluster(syncs.alias)
    target_producer = target.librdkafka_config("producer")
    if flow.repartitions:  # Kafka's default partitioner for keys, keyless records spread at random
        # each keyless record placed on its own: librdkafka's sticky default (10 ms) would put a
        # whole burst of them (a catch-up) into one partition
        target_producer = {"sticky.partitioning.linger.ms": "0", **target_producer, "partitioner": "murmur2_random"}
    remotes = dict(remote_names)
    return FlowSpec(
        flow=flow.name, source_alias=flow.source, target_alias=flow.target, policy=flow.policy(),
        source_admin=source.librdkafka_config("admin"), source_consumer=source.librdkafka_config("consumer"),
        target_admin=target.librdkafka_config("admin"), target_consumer=target.librdkafka_config("consumer"),
        target_producer=target_producer,
        syncs=syncs if flow.writes_offset_syncs else None,
        syncs_producer=syncs_cluster.librdkafka_config("producer"),
        syncs_consumer=syncs_cluster.librdkafka_config("consumer"),
        progress=names.progress, mm2_offsets=names.mm2_offsets, mm2_connector=names.mm2_connector,
        remote_names=remotes, repartition=flow.repartitions, start=start or flow.start,
        shared=shared_remotes(config, flow, remotes) if flow.repartitions else (),
        exactly_once=flow.exactly_once,
    )


def shared_remotes(config: StraitConfig, flow: FlowConfig,
                   remote_names: Mapping[str, str]) -> tuple[SharedRemote, ...]:
    """The other flows of ``config`` to ``flow``'s target whose policies name a source topic of
    theirs as one of ``flow``'s remote topics (``remote_names``: source topic -> remote topic)."""
    found = []
    for other in config.flows:
        if other.name == flow.name or other.target != flow.target:
            continue
        policy, names = other.policy(), other.topic_names()
        for remote in sorted(set(remote_names.values())):
            upstream = policy.upstream_topic(remote)
            if upstream is not None and policy.format_remote_topic(other.source, upstream) == remote:
                found.append(SharedRemote(remote, other.name, other.source, upstream, names.progress))
    return tuple(found)
