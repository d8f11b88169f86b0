"""Checks on a configuration that span more than one value, and error collection.

Loaders check each value where they read it (they know its key path); this module checks what only
the whole picture shows: flows naming unknown clusters, self-loops, duplicates, loops of flows the
replication policy cannot break, and inline secrets that must not reach Redis.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from strait.config.keystores import KeyStoreError
from strait.config.model import POLICY_NAMES, FlowConfig, StraitConfig
from strait.config.secrets import Secret, SecretRef, url_password
from strait.errors import ConfigError
from strait.filters import compile_pattern_list
from strait.policy import IdentityReplicationPolicy, policy_from_name

_MAX_LISTED = 20


class Problems:
    """Collects every problem of one file, then raises them as one ConfigError."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.items: list[str] = []

    def add(self, where: str, message: str) -> None:
        """Record a problem at a key path (``flows[0].topics.include[2]``) or a line."""
        item = f"{where}: {message}" if where else message
        if item not in self.items:  # a global MM2 key is read once per flow
            self.items.append(item)

    def raise_if_any(self) -> None:
        """Raise a ConfigError naming the file and every problem, if there is any."""
        if not self.items:
            return
        if len(self.items) == 1:
            raise ConfigError(f"{self.origin}: {self.items[0]}")
        listed = self.items[:_MAX_LISTED]
        more = len(self.items) - len(listed)
        lines = [f"{self.origin}: {len(self.items)} problems:", *(f"  {item}" for item in listed)]
        if more:
            lines.append(f"  ... and {more} more")
        raise ConfigError("\n".join(lines))


def regex_problem(pattern: str) -> str | None:
    """Why a filter regex cannot be used (compiled as strait.filters will), or None when it can."""
    try:
        compile_pattern_list([pattern])
    except ConfigError as exc:
        return str(exc)
    return None


def policy_name(value: str) -> str:
    """The short name (``default``/``identity``) of a policy name or MM2 class; raises ConfigError."""
    policy = policy_from_name(value)
    return "identity" if isinstance(policy, IdentityReplicationPolicy) else "default"


def policy_problem(value: str) -> str | None:
    """Why a replication policy name or MM2 class is unusable, or None."""
    try:
        policy_name(value)
    except ConfigError as exc:
        close = difflib.get_close_matches(value, POLICY_NAMES, n=1)
        return f"{exc}" + (f"; did you mean {close[0]!r}?" if close else "")
    return None


def check_flows(config: StraitConfig, problems: Problems, label: Callable[[int, FlowConfig], str]) -> None:
    """Add the problems of the flows as a whole; ``label`` names a flow in messages (key path)."""
    seen: dict[str, str] = {}
    for index, flow in enumerate(config.flows):
        where = label(index, flow)
        for role, alias in (("source", flow.source), ("target", flow.target)):
            if alias not in config.clusters:
                problems.add(where, f"{role} cluster {alias!r} is not defined{_known(config.clusters)}")
        if flow.source == flow.target:
            problems.add(where, f"source and target are both {flow.source!r}; a flow needs two clusters")
        elif flow.source in config.clusters and flow.target in config.clusters:
            shared = _bootstrap(config, flow.source) & _bootstrap(config, flow.target)
            if shared:
                problems.add(where, f"clusters {flow.source!r} and {flow.target!r} share bootstrap servers "
                                    f"{', '.join(sorted(shared))}: one cluster under two aliases would copy its "
                                    f"own copies forever; point them at two different clusters")
        ambiguous = ambiguous_aliases(config.clusters, flow)
        if ambiguous:
            shorter, longer = ambiguous
            problems.add(where, f"cluster aliases {shorter!r} and {longer!r} are ambiguous with separator "
                                f"{flow.separator!r}: a topic named {longer}{flow.separator}x could come from either; "
                                f"rename one of them or choose another separator")
        if flow.target in config.clusters:
            producer = config.clusters[flow.target].unresolved_settings("producer")
            problem = delivery_timeout_problem(producer)
            if problem:
                problems.add(where, f"cluster {flow.target}'s producer settings: {problem}")
            problem = exactly_once_problem(producer) if flow.exactly_once else None
            if problem:
                problems.add(where, f"exactly_once: cluster {flow.target}'s producer settings: {problem}")
        if flow.name in seen:
            problems.add(where, f"flow {flow.name} is defined twice (also at {seen[flow.name]})")
        seen.setdefault(flow.name, where)
    for loop in identity_loops(config.flows):
        problems.add(f"flows {', '.join(f.name for f in loop)}", _loop_message(loop))


# Producer settings a transactional producer cannot take (librdkafka refuses them or they break fencing).
_NOT_TRANSACTIONAL = {"acks": ("all", "-1"), "enable.idempotence": ("true",)}
_IN_FLIGHT_KEYS = ("max.in.flight.requests.per.connection", "max.in.flight")  # librdkafka's name and alias
_MOST_IN_FLIGHT = 5


_DELIVERY_TIMEOUT_KEYS = ("message.timeout.ms", "delivery.timeout.ms")  # librdkafka's name and Java's


def delivery_timeout_problem(producer: Mapping[str, object]) -> str | None:
    """Why the target producer's delivery timeout cannot be used, or None: a copier that stopped
    answering writes nothing once its lease and this timeout have passed, which is when another may
    take its partitions over; librdkafka reads 0 as no timeout at all."""
    for key in _DELIVERY_TIMEOUT_KEYS:
        value = producer.get(key)
        if value is None or isinstance(value, SecretRef):  # a reference is read when the copy starts
            continue
        text = str(value).strip()
        if not text.isdecimal() or int(text) == 0:
            return (f"{key}={value} cannot be used: a copier that stopped answering must write nothing once its "
                    f"lease and this timeout have passed, for another to take its partitions over; set a "
                    f"positive number of milliseconds (strait's default 30000) or remove it")
    return None


def exactly_once_problem(producer: Mapping[str, object]) -> str | None:
    """Why these target producer settings cannot copy exactly once, or None."""
    for key, allowed in _NOT_TRANSACTIONAL.items():
        value = producer.get(key)
        if value is not None and str(value).strip().lower() not in allowed:
            return (f"{key}={value} cannot be used: exactly-once copies use an idempotent transactional "
                    f"producer ({key}={allowed[0]}); remove the setting or turn exactly_once off")
    if "transactional.id" in producer:
        return "transactional.id is strait's own (one per copier, from the flow's name): remove it"
    for key in _IN_FLIGHT_KEYS:
        value = producer.get(key)
        text = str(value).strip() if value is not None else ""
        if value is not None and (not text.isdecimal() or not 1 <= int(text) <= _MOST_IN_FLIGHT):
            return (f"{key}={value} cannot be used: an idempotent producer keeps at most {_MOST_IN_FLIGHT} "
                    f"requests in flight per broker; set 1 to {_MOST_IN_FLIGHT} or remove it")
    return None


def config_warnings(config: StraitConfig) -> list[str]:
    """What a valid configuration does that its author may not expect, one sentence per flow and topic."""
    warnings = []
    for flow in config.flows:
        if not flow.separator and policy_name(flow.replication_policy) == "default":
            example = flow.topic_names().remote("orders")
            warnings.append(f"flow {flow.name}: the default replication policy with an empty separator names "
                            f"remote topics <alias><topic> ({example}), as MM2 does; a local topic whose name "
                            "starts with a cluster alias is taken for a remote one and not replicated")
        syncing_groups = flow.emit_checkpoints.enabled or flow.sync_group_offsets.enabled
        if not flow.emit_offset_syncs and syncing_groups:
            warnings.append(f"flow {flow.name}: emit_offset_syncs is off, so it emits no checkpoints and syncs "
                            "no group offsets; consumers cannot fail over at translated offsets")
    return warnings


STORE_KEYS = ("ssl.truststore.location", "ssl.keystore.location")


def check_key_stores(config: StraitConfig) -> list[str]:
    """Read every JKS or PKCS#12 store the clusters name, as the services will; raise a KeyStoreError
    naming the cluster and key when one is missing or its password is wrong. Returns a warning per
    cluster whose stores cannot be checked here (a reference this host cannot resolve)."""
    unchecked = []
    for cluster in config.clusters.values():
        for role in (None, "consumer", "producer", "admin"):
            if not any(key in cluster.unresolved_settings(role) for key in STORE_KEYS):
                continue
            try:
                cluster.librdkafka_config(role)
            except KeyStoreError:
                raise
            except ConfigError as exc:  # it names the cluster
                unchecked.append(f"key stores not checked here: {exc}")
                break
    return unchecked


def repartition_warning(flow: FlowConfig, topics: Sequence[str] | None) -> str:
    """The warning for a flow that repartitions, naming its topics (or saying they could not be listed)."""
    named = ", ".join(topics) if topics else ("none yet" if topics is not None else
                                               f"the source {flow.source} could not be listed")
    return (f"flow {flow.name}: target_partitions {flow.target_partitions}: remote topics get "
            f"{flow.target_partitions} partitions and records are placed by key, so offsets no longer map 1:1; "
            f"these topics get no offset syncs and no checkpoints, and `strait verify` checks them per key: {named}")


def _bootstrap(config: StraitConfig, alias: str) -> set[str]:
    """The cluster's bootstrap servers as lower-case ``host:port`` entries."""
    servers = config.clusters[alias].bootstrap_servers
    text = servers if isinstance(servers, str) else ""  # a secret reference is compared when the flow starts
    return {entry.strip().lower() for entry in text.split(",") if entry.strip()}


def ambiguous_aliases(aliases: Iterable[str], flow: FlowConfig) -> tuple[str, str] | None:
    """Two aliases where one plus the flow's separator begins the other (the default policy cannot tell
    their remote topics apart), or None."""
    try:
        if policy_name(flow.replication_policy) != "default":
            return None
    except ConfigError:  # reported on its own
        return None
    names = sorted(aliases)
    for shorter in names:
        for longer in names:
            if longer != shorter and longer.startswith(shorter + flow.separator):
                return shorter, longer
    return None


def _known(names: Iterable[str]) -> str:
    listed = ", ".join(sorted(names))
    return f" (clusters: {listed})" if listed else " (no clusters are defined)"


def identity_loops(flows: Sequence[FlowConfig]) -> list[tuple[FlowConfig, ...]]:
    """Loops of enabled flows that contain a flow with the identity policy, one per such flow.

    Cycle detection works on topic names only: the identity policy keeps names unchanged, so a
    topic that came round a loop looks local again and would be replicated forever.
    """
    enabled = [f for f in flows if f.enabled and f.source != f.target]
    loops: list[tuple[FlowConfig, ...]] = []
    covered: set[frozenset[str]] = set()
    for flow in enabled:
        if flow.replication_policy != "identity":
            continue
        back = _path(enabled, flow.target, flow.source)
        if back is None:
            continue
        loop = (flow, *back)
        key = frozenset(f.name for f in loop)
        if key not in covered:
            covered.add(key)
            loops.append(loop)
    return loops


def _path(flows: Sequence[FlowConfig], start: str, goal: str) -> tuple[FlowConfig, ...] | None:
    frontier: list[tuple[str, tuple[FlowConfig, ...]]] = [(start, ())]
    visited = {start}
    while frontier:
        node, path = frontier.pop(0)
        for flow in flows:
            if flow.source != node or (flow.target in visited and flow.target != goal):
                continue
            if flow.target == goal:
                return (*path, flow)
            visited.add(flow.target)
            frontier.append((flow.target, (*path, flow)))
    return None


def _loop_message(loop: tuple[FlowConfig, ...]) -> str:
    identity = [f.name for f in loop if f.replication_policy == "identity"]
    route = " -> ".join([loop[0].source, *(f.target for f in loop)])
    return (
        f"these enabled flows form a loop ({route}) and {', '.join(identity)} "
        f"{'uses' if len(identity) == 1 else 'use'} the identity replication policy. Identity keeps topic "
        "names unchanged, so a replicated topic cannot be recognised when it comes back round and its "
        "records would be replicated forever. Use the default policy on every flow of the loop, or "
        "disable one of them"
    )


@dataclass(frozen=True)
class InlineSecret:
    """Where an inline (not referenced) secret sits in a configuration."""

    cluster: str | None
    scope: str
    key: str

    @property
    def path(self) -> str:
        """Key path in strait's YAML form, e.g. ``clusters.A.client.sasl.password``."""
        if self.cluster is None:
            return self.key
        return f"clusters.{self.cluster}.{self.scope}.{self.key}"

    @property
    def mm2_key(self) -> str:
        """The key as an MM2 properties file spells it, e.g. ``A.sasl.password``."""
        if self.cluster is None:
            return "strait.redis.url"
        scope = "" if self.scope == "client" else f"{self.scope}."
        return f"{self.cluster}.{scope}{self.key}"


def describe_inline_secrets(found: list[InlineSecret], source_name: str) -> str:
    """The keys of inline secrets as the file spells them (MM2 names for a .properties file)."""
    mm2 = source_name.endswith(".properties")
    return ", ".join(secret.mm2_key if mm2 else secret.path for secret in found)


def inline_secrets(config: StraitConfig) -> list[InlineSecret]:
    """Every inline secret of a configuration (client settings and the Redis URL's password)."""
    found = []
    for alias, cluster in config.clusters.items():
        for scope in ("client", "consumer", "producer", "admin"):
            for key, value in getattr(cluster, scope).items():
                if isinstance(value, Secret):
                    found.append(InlineSecret(alias, scope, key))
    if isinstance(config.redis_url, Secret) or (
        isinstance(config.redis_url, str) and url_password(config.redis_url)
    ):
        found.append(InlineSecret(None, "", "redis_url"))
    return found
