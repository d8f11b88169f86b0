"""A real Apache Kafka cluster, run from Maven Central jars: Kafka 4 in KRaft combined mode by default.

Each node is both broker and controller (static quorum), listening on loopback. Optional extras:
StandardAuthorizer with the right super users, a SASL_PLAINTEXT listener with SCRAM users
created at format time, and TLS: SSL and (with SASL) SASL_SSL listeners whose certificates are made
at start by the lab's own CA (:mod:`strait_lab.tls`). The PLAINTEXT listener is the lab's admin
door: its principal (``User:ANONYMOUS``) is a super user so fixtures can set things up; ACL tests
connect through SASL. Controllers and brokers talk PLAINTEXT among themselves in every case.

Older release lines (:data:`KAFKA_VERSIONS`, for compatibility tests) run in ZooKeeper mode: a
ZooKeeper server of the cluster's own (:mod:`strait_lab.zookeeper`), brokers only, the same
listeners, SCRAM users written to ZooKeeper before the brokers start, and the ACL authorizer of
their era. Their jars are resolved on demand, when such a cluster first starts.
"""

from __future__ import annotations

import base64
import logging
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from strait_lab.errors import LabError, ProcessStartError
from strait_lab import class_archive, deps
from strait_lab.ports import claim_port, free_port
from strait_lab.process import ManagedProcess, console_log4j, console_log4j2, tail
from strait_lab.tls import TlsFiles, make_tls_files
from strait_lab.zookeeper import TICK_TIME_MS, ZooKeeperServer

log = logging.getLogger(__name__)
# librdkafka reports "connection refused" while a broker starts; the probe expects that, so mute it.
_quiet_librdkafka = logging.getLogger("strait_lab.librdkafka")
_quiet_librdkafka.setLevel(logging.CRITICAL)

BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
SCRAM_MECHANISM = "SCRAM-SHA-512"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"  # ZooKeeper mode, Kafka 2.4 to 3.9
CONFIG_COMMAND = "kafka.admin.ConfigCommand"
# ZooKeeper-mode brokers' session: how long a killed broker's registration outlives it (Kafka 2.4's
# default; 3.9's 18 s would hold a restart that long).
ZOOKEEPER_SESSION_TIMEOUT_MS = 6000
ADMIN_USER = "admin"


@dataclass(frozen=True)
class KafkaVersion:
    """A Kafka release line the lab can run.

    Args:
        name: its ``KafkaClusterSpec.version``.
        jar_set: the :mod:`strait_lab.deps` jar set it runs from; its pom pins the exact release.
        zookeeper: ZooKeeper mode (brokers only, metadata in ZooKeeper) instead of KRaft.
        authorizer: the ACL authorizer class of its era.
        pem_stores: reads PEM key and trust stores (Kafka 2.7+), as the lab's TLS listeners need.
    """

    name: str
    jar_set: str
    zookeeper: bool
    authorizer: str
    pem_stores: bool = True


DEFAULT_KAFKA_VERSION = "4"
_VERSIONS = {v.name: v for v in (
    KafkaVersion(DEFAULT_KAFKA_VERSION, "kafka", zookeeper=False, authorizer=AUTHORIZER),
    KafkaVersion("3.9", "kafka-3.9", zookeeper=True, authorizer=ACL_AUTHORIZER),
    # The oldest 2.x that runs on Java 17: 2.0 to 2.3 ship a ZooKeeper 3.4 client that cannot connect there.
    KafkaVersion("2.4", "kafka-2.4", zookeeper=True, authorizer=ACL_AUTHORIZER, pem_stores=False),
)}
# The versions a cluster can run, newest first: today's KRaft Kafka, then the ZooKeeper-mode lines.
KAFKA_VERSIONS = tuple(_VERSIONS)


def kafka_version(name: str) -> KafkaVersion:
    """What the lab knows of a release line; a LabError naming the known ones for any other name."""
    if name not in _VERSIONS:
        raise LabError(f"unknown Kafka version {name!r} for a lab cluster; known: {', '.join(KAFKA_VERSIONS)}")
    return _VERSIONS[name]


_BROKER_LOG4J2 = """\
logger.kafka.name = kafka
logger.kafka.level = {level}
logger.state.name = state.change.logger
logger.state.level = WARN
"""
# Every authorization decision (allowed ones at DEBUG): what a least-privilege test checks its ACLs by.
_AUDIT_LOG4J2 = """\
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = DEBUG
"""
# The same for ZooKeeper-mode brokers, which log through log4j 1 (reload4j).
_BROKER_LOG4J = """\
log4j.logger.kafka={level}
log4j.logger.state.change.logger=WARN
"""
_AUDIT_LOG4J = "log4j.logger.kafka.authorizer.logger=DEBUG\n"


@dataclass(frozen=True)
class KafkaClusterSpec:
    """What cluster to run.

    Args:
        alias: the cluster's name in strait's config (A, B, ...).
        brokers: number of combined broker+controller nodes (1 or 3 usually).
        authorizer: enable StandardAuthorizer (ACLs enforced on the SASL listener).
        sasl: add a SASL_PLAINTEXT listener with SCRAM-SHA-512.
        tls: add an SSL listener and, with ``sasl``, a SASL_SSL one (SCRAM-SHA-512), with a CA and
            a broker certificate made at start.
        client_auth: the SSL listener requires a client certificate the lab's CA signed
            (``client_keystore_path``); SASL_SSL ones authenticate by SASL as before.
        scram_users: user -> password created at format time when ``sasl`` is on (in ZooKeeper
            mode: written to ZooKeeper before the brokers start).
        base_port: fixed ports from here (node n uses base+10n .. base+10n+4, a ZooKeeper base+5);
            None picks free ports.
        audit_log: log the authorizer's allowed decisions too (DEBUG ``kafka.authorizer.logger``),
            to learn which ACLs clients really use.
        overrides: extra broker properties, applied last.
        heap: Java heap size per node.
        jvm_options: more options of each node's JVM (not of the format tool's).
        version: the Kafka release line, one of :data:`KAFKA_VERSIONS`: today's Kafka 4 in KRaft
            mode by default, or an older line in ZooKeeper mode (``"3.9"``, ``"2.4"``). Kafka 2.4
            cannot read the lab's PEM stores, so ``tls`` is refused for it.
    """

    alias: str
    brokers: int = 1
    authorizer: bool = False
    sasl: bool = False
    tls: bool = False
    client_auth: bool = False
    scram_users: Mapping[str, str] = field(default_factory=lambda: {ADMIN_USER: "admin-secret"})
    base_port: int | None = None
    audit_log: bool = False
    overrides: Mapping[str, str] = field(default_factory=dict)
    heap: str = "512m"
    version: str = DEFAULT_KAFKA_VERSION
    jvm_options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        version = kafka_version(self.version)  # a LabError for an unknown version
        if self.tls and not version.pem_stores:
            raise LabError(f"Kafka {self.version} cannot read PEM key stores (Kafka 2.7+ can), which the lab's "
                           f"TLS listeners use: start cluster {self.alias} without tls=True")


@dataclass(frozen=True)
class NodePorts:
    """The loopback ports of one node (no controller port in ZooKeeper mode)."""

    client: int
    controller: int | None
    sasl: int | None
    ssl: int | None = None
    sasl_ssl: int | None = None


_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL"


def _listeners(ports: NodePorts) -> tuple[str, str]:
    """A node's ``listeners`` and ``advertised.listeners`` (a KRaft node's CONTROLLER one not advertised)."""
    door = f"PLAINTEXT://127.0.0.1:{ports.client}"
    controller = [] if ports.controller is None else [f"CONTROLLER://127.0.0.1:{ports.controller}"]
    extra = [f"{protocol}://127.0.0.1:{port}" for protocol, port in
             (("SASL_PLAINTEXT", ports.sasl), ("SSL", ports.ssl), ("SASL_SSL", ports.sasl_ssl)) if port is not None]
    return ",".join([door, *controller, *extra]), ",".join([door, *extra])


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, not starting with '-'."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


class KafkaCluster:
    """A running (or startable) Kafka cluster of the lab.

    Args:
        spec: what to run.
        workdir: folder for this cluster's configs, data and logs.
    """

    def __init__(self, spec: KafkaClusterSpec, workdir: Path) -> None:
        self.spec = spec
        self.workdir = workdir
        self.cluster_id = new_cluster_id()
        self.ports = [self._node_ports(n) for n in range(spec.brokers)]
        self.nodes: list[ManagedProcess] = []
        self.zookeeper_server: ZooKeeperServer | None = self._zookeeper_server()
        self._tls: TlsFiles | None = None

    @property
    def alias(self) -> str:
        """The cluster alias."""
        return self.spec.alias

    @property
    def zookeeper(self) -> bool:
        """True for a ZooKeeper-mode cluster (an older ``spec.version``), False for KRaft."""
        return self.zookeeper_server is not None

    @property
    def zookeeper_connect(self) -> str | None:
        """The brokers' ``zookeeper.connect``, or None in KRaft mode."""
        return self.zookeeper_server.connect if self.zookeeper_server else None

    @property
    def bootstrap_servers(self) -> str:
        """PLAINTEXT bootstrap servers (the admin door)."""
        return ",".join(f"127.0.0.1:{p.client}" for p in self.ports)

    @property
    def sasl_bootstrap_servers(self) -> str | None:
        """SASL_PLAINTEXT bootstrap servers, or None without SASL."""
        if not self.spec.sasl:
            return None
        return ",".join(f"127.0.0.1:{p.sasl}" for p in self.ports)

    @property
    def ssl_bootstrap_servers(self) -> str | None:
        """SSL bootstrap servers, or None without TLS."""
        if not self.spec.tls:
            return None
        return ",".join(f"127.0.0.1:{p.ssl}" for p in self.ports)

    @property
    def sasl_ssl_bootstrap_servers(self) -> str | None:
        """SASL_SSL bootstrap servers, or None without both TLS and SASL."""
        if not (self.spec.tls and self.spec.sasl):
            return None
        return ",".join(f"127.0.0.1:{p.sasl_ssl}" for p in self.ports)

    @property
    def ca_path(self) -> Path:
        """The PEM file of the CA that signed the brokers' certificates (exists once started)."""
        if not self.spec.tls:
            raise LabError(f"cluster {self.alias} has no TLS listener; start it with tls=True")
        return self.workdir / "tls" / "ca.pem"

    @property
    def client_keystore_path(self) -> Path:
        """A client's PEM key and certificate chain, signed by the cluster's CA (exists once started)."""
        return self.ca_path.with_name("client-keystore.pem")

    def security_protocol(self, user: str | None, tls: bool) -> str:
        """The listener a client of ``user`` (None: no SASL) reaches, checking the cluster has it."""
        if user is not None and not self.spec.sasl:
            raise LabError(f"cluster {self.alias} has no SASL listener; start it with sasl=True")
        if tls and not self.spec.tls:
            raise LabError(f"cluster {self.alias} has no TLS listener; start it with tls=True")
        return {(False, False): "PLAINTEXT", (True, False): "SASL_PLAINTEXT",
                (False, True): "SSL", (True, True): "SASL_SSL"}[(user is not None, tls)]

    def listener_bootstrap(self, protocol: str) -> str:
        """Bootstrap servers of the listener speaking ``protocol``."""
        servers = {"PLAINTEXT": self.bootstrap_servers, "SASL_PLAINTEXT": self.sasl_bootstrap_servers,
                   "SSL": self.ssl_bootstrap_servers, "SASL_SSL": self.sasl_ssl_bootstrap_servers}[protocol]
        if servers is None:
            raise LabError(f"cluster {self.alias} has no {protocol} listener")
        return servers

    def client_config(self, user: str | None = None, password: str | None = None,
                      tls: bool = False) -> dict[str, str]:
        """confluent-kafka settings: PLAINTEXT by default, SCRAM for ``user``, over TLS with ``tls``."""
        protocol = self.security_protocol(user, tls)
        if protocol == "PLAINTEXT":
            return {"bootstrap.servers": self.bootstrap_servers}
        settings = {"bootstrap.servers": self.listener_bootstrap(protocol), "security.protocol": protocol}
        if user is not None:
            settings.update({
                "sasl.mechanism": SCRAM_MECHANISM,
                "sasl.username": user,
                "sasl.password": password if password is not None else self.spec.scram_users[user],
            })
        if tls:
            settings["ssl.ca.location"] = str(self.ca_path)
        return settings

    def java_client_config(self, user: str | None = None, password: str | None = None,
                           tls: bool = False) -> dict[str, str]:
        """The same client settings as a Java (MM2-style) client writes them.

        ``password`` is put in the JAAS line as given, so a test can pass a ``${...}`` reference.
        """
        protocol = self.security_protocol(user, tls)
        settings = {"bootstrap.servers": self.listener_bootstrap(protocol)}
        if protocol != "PLAINTEXT":
            settings["security.protocol"] = protocol
        if user is not None:
            secret = password if password is not None else self.spec.scram_users[user]
            settings["sasl.mechanism"] = SCRAM_MECHANISM
            settings["sasl.jaas.config"] = (
                f'org.apache.kafka.common.security.scram.ScramLoginModule required '
                f'username="{user}" password="{secret}";'
            )
        if tls:
            settings["ssl.truststore.type"] = "PEM"
            settings["ssl.truststore.location"] = str(self.ca_path)
        return settings

    def admin(self) -> AdminClient:
        """An AdminClient on the PLAINTEXT (super user) listener; keep it alive while using futures."""
        return AdminClient({**self.client_config(), "logger": _quiet_librdkafka})

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> None:
        """Launch the nodes and wait until every broker registered."""
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Format every node's storage and start the nodes, without waiting for readiness.

        In ZooKeeper mode, start the ZooKeeper server (and wait for it) and write the SCRAM users
        into it instead of formatting. Must run on the thread that owns the lab: children die with
        the thread that forked them.
        """
        deps.ensure_java()
        cp = self._classpath()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_log_config()
        if self.spec.tls and self._tls is None:
            self._tls = make_tls_files(self.workdir / "tls", f"kafka-{self.alias}")
        for n in range(self.spec.brokers):
            self._node_dir(n).mkdir(parents=True, exist_ok=True)
            (self._node_dir(n) / "server.properties").write_text(self._server_properties(n))
        if self.zookeeper_server is not None:
            self.zookeeper_server.start(cp)
            self._add_scram_users(cp)
        else:
            with ThreadPoolExecutor(max_workers=self.spec.brokers) as pool:
                list(pool.map(lambda n: self._format(cp, n), range(self.spec.brokers)))
        self.nodes = [self._node_process(cp, n) for n in range(self.spec.brokers)]
        for node in self.nodes:
            node.start()

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Block until describe_cluster sees every broker of the cluster.

        In ZooKeeper mode also until every topic the brokers hold on disk is listed with a leader for
        each partition: a broker is listed once registered, while the controller sends it the topics
        later (a restarted 1-broker cluster answered "unknown topic" in between).
        """
        last = ["no answer"]

        def all_brokers_registered() -> bool:
            for node in self._processes():
                node.check_alive()
            # A fresh client per probe: one made while a node restarts once kept a view without that
            # node for the whole 180 s of a drill's restart, though the node was serving.
            admin = self.admin()
            try:
                result = admin.describe_cluster(request_timeout=5).result(timeout=10)
            except Exception as exc:
                last[0] = f"describe_cluster failed: {exc}"
                raise
            last[0] = f"brokers seen: {sorted(n.id for n in result.nodes)}"
            if len(result.nodes) != self.spec.brokers:
                return False
            if self.zookeeper_server is None:
                return True
            waiting = self._topics_without_leader(admin)
            last[0] += f", topics without a leader yet: {waiting[:5]}" if waiting else ""
            return not waiting
        try:
            self.nodes[0].wait_until(all_brokers_registered, timeout, "describe cluster")
        except ProcessStartError as exc:
            raise ProcessStartError(f"kafka cluster {self.alias}: {last[0]} of {self.spec.brokers}; {exc}") from None
        log.info("kafka cluster ready alias=%s bootstrap=%s", self.alias, self.bootstrap_servers)

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL), then the ZooKeeper server if any."""
        for node in reversed(self.nodes):
            node.stop()
        if self.zookeeper_server is not None:
            self.zookeeper_server.stop()

    def kill(self) -> None:
        """SIGKILL every node and the ZooKeeper server if any: for a cluster whose data nobody reads again."""
        for node in self.nodes:
            node.kill()
        if self.zookeeper_server is not None:
            self.zookeeper_server.kill()

    def stop_node(self, n: int) -> None:
        """Stop one node cleanly (fault drills)."""
        self.nodes[n].stop()

    def restart_node(self, n: int, timeout: float = 90.0) -> None:
        """Start node ``n`` again on the same ports and data, then wait for the full cluster.

        In ZooKeeper mode, a node that was killed (SIGKILL) is started only once its ZooKeeper
        session has expired: until then its registration stands and a new broker of the same id exits.
        """
        killed = (self.nodes[n].returncode() or 0) < 0
        self.nodes[n].stop()
        if self.zookeeper and killed:
            seconds = (ZOOKEEPER_SESSION_TIMEOUT_MS + TICK_TIME_MS) / 1000
            log.info("waiting for a killed broker's zookeeper session to expire alias=%s node=%d seconds=%.0f",
                     self.alias, n + 1, seconds)
            time.sleep(seconds)
        began = time.monotonic()
        self.nodes[n] = self._node_process(self._classpath(), n)
        self.nodes[n].start()
        self.wait_ready(timeout)
        log.info("kafka node restarted alias=%s node=%d seconds_to_ready=%.1f", self.alias, n + 1, time.monotonic() - began)

    def pids(self) -> list[int]:
        """Pids of the running nodes, and of the ZooKeeper server in ZooKeeper mode."""
        return [n.pid for n in self._processes() if n.pid is not None and n.alive()]

    def log_paths(self) -> list[Path]:
        """One log file per node, then the ZooKeeper server's in ZooKeeper mode."""
        zookeeper = [self.zookeeper_server.log_path] if self.zookeeper_server else []
        return [node.log_path for node in self.nodes] + zookeeper

    # -- internals -------------------------------------------------------------------------------

    @property
    def _version(self) -> KafkaVersion:
        return kafka_version(self.spec.version)

    def _processes(self) -> list[ManagedProcess]:
        """The nodes, then the ZooKeeper server once started."""
        zookeeper = self.zookeeper_server.process if self.zookeeper_server else None
        return self.nodes + ([zookeeper] if zookeeper is not None else [])

    def _topics_on_disk(self) -> dict[str, int]:
        """Topic -> partition count, from the partition folders in every node's data folder."""
        topics: dict[str, int] = {}
        for n in range(self.spec.brokers):
            data = self._node_dir(n) / "data"
            for entry in data.iterdir() if data.is_dir() else ():
                match = _PARTITION_DIR.match(entry.name)  # not a deleted topic's "-delete" folder
                if match and entry.is_dir():
                    topics[match["topic"]] = max(topics.get(match["topic"], 0), int(match["partition"]) + 1)
        return topics

    def _topics_without_leader(self, admin: AdminClient) -> list[str]:
        """The topics held on disk that the cluster does not list yet with a leader for every partition."""
        listed = admin.list_topics(timeout=5).topics
        return sorted(
            name for name, count in self._topics_on_disk().items()
            if name not in listed or len(listed[name].partitions) < count
            or any(p.leader < 0 for p in listed[name].partitions.values())
        )

    def _classpath(self) -> str:
        jar_set = self._version.jar_set
        if jar_set != "kafka":  # compatibility versions: resolved when first used, not by `make deps`
            deps.ensure_jars(jar_set)
        return deps.classpath(jar_set)

    def _zookeeper_server(self) -> ZooKeeperServer | None:
        if not self._version.zookeeper:
            return None
        base = self.spec.base_port
        return ZooKeeperServer(f"Kafka cluster {self.alias} ZooKeeper", self.workdir / "zookeeper",
                               None if base is None else base + 5)

    def _node_ports(self, n: int) -> NodePorts:
        base = self.spec.base_port
        owner = f"Kafka cluster {self.spec.alias} node {n + 1}"
        sasl, tls, kraft = self.spec.sasl, self.spec.tls, not self._version.zookeeper
        if base is None:
            return NodePorts(free_port(), free_port() if kraft else None, free_port() if sasl else None,
                             free_port() if tls else None, free_port() if tls and sasl else None)
        port = base + 10 * n
        return NodePorts(
            claim_port(port, f"{owner} (client listener)"),
            claim_port(port + 1, f"{owner} (controller listener)") if kraft else None,
            claim_port(port + 2, f"{owner} (SASL listener)") if sasl else None,
            claim_port(port + 3, f"{owner} (SSL listener)") if tls else None,
            claim_port(port + 4, f"{owner} (SASL_SSL listener)") if tls and sasl else None,
        )

    def _node_dir(self, n: int) -> Path:
        return self.workdir / f"node{n + 1}"

    def _server_properties(self, n: int) -> str:
        props = {**self._node_properties(n), **self._storage_properties(n), **self._security_properties()}
        props.update(self.spec.overrides)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _node_properties(self, n: int) -> dict[str, str]:
        """Identity and listeners: a KRaft broker+controller, or a ZooKeeper-mode broker."""
        zookeeper = self.zookeeper_server
        if zookeeper is not None:
            # The last broker of a cluster retries its controlled shutdown 3 times; 5 s apart by default.
            props = {"broker.id": str(n + 1), "zookeeper.connect": zookeeper.connect,
                     "zookeeper.session.timeout.ms": str(ZOOKEEPER_SESSION_TIMEOUT_MS),
                     "controlled.shutdown.retry.backoff.ms": "500"}
        else:
            voters = ",".join(f"{i + 1}@127.0.0.1:{p.controller}" for i, p in enumerate(self.ports))
            props = {"process.roles": "broker,controller", "node.id": str(n + 1), "controller.quorum.voters": voters}
        listeners, advertised = _listeners(self.ports[n])
        props.update({"listeners": listeners, "advertised.listeners": advertised,
                      "inter.broker.listener.name": "PLAINTEXT"})
        if zookeeper is None:
            props["controller.listener.names"] = "CONTROLLER"
        props["listener.security.protocol.map"] = ("" if zookeeper else "CONTROLLER:PLAINTEXT,") + _PROTOCOL_MAP
        return props

    def _storage_properties(self, n: int) -> dict[str, str]:
        """Data folder, internal topics sized for the cluster, short delays for tests."""
        rf = min(3, self.spec.brokers)
        props = {
            "log.dirs": str(self._node_dir(n) / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": str(rf),
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "5",
        }
        if self.zookeeper_server is None:  # share groups: Kafka 4 only
            props.update({"share.coordinator.state.topic.replication.factor": str(rf),
                          "share.coordinator.state.topic.min.isr": "1"})
        props.update({"group.initial.rebalance.delay.ms": "0", "log.cleaner.backoff.ms": "1000"})
        return props

    def _security_properties(self) -> dict[str, str]:
        """SASL SCRAM, TLS and authorizer settings, as the spec asks."""
        props: dict[str, str] = {}
        if self.spec.sasl:
            props["sasl.enabled.mechanisms"] = SCRAM_MECHANISM
            for listener in ("sasl_plaintext", "sasl_ssl") if self.spec.tls else ("sasl_plaintext",):
                props[f"listener.name.{listener}.scram-sha-512.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
        if self.spec.tls:
            tls = self.workdir / "tls"
            props.update({
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(tls / "server-keystore.pem"),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(tls / "ca.pem"),
                "ssl.client.auth": "required" if self.spec.client_auth else "none",
            })
        if self.spec.authorizer:
            props["authorizer.class.name"] = self._version.authorizer
            # Controllers and brokers talk PLAINTEXT as ANONYMOUS; they must be super users.
            props["super.users"] = f"User:{ADMIN_USER};User:ANONYMOUS"
            props["allow.everyone.if.no.acl.found"] = "false"
        return props

    def _write_log_config(self) -> None:
        """The brokers' logging, INFO to the console (their log files): log4j2 for Kafka 4, else log4j 1."""
        if self.zookeeper_server is None:
            audit = _AUDIT_LOG4J2 if self.spec.audit_log else ""
            (self.workdir / "log4j2.properties").write_text(
                console_log4j2() + _BROKER_LOG4J2.format(level="INFO") + audit)
        else:
            audit = _AUDIT_LOG4J if self.spec.audit_log else ""
            (self.workdir / "log4j.properties").write_text(
                console_log4j() + _BROKER_LOG4J.format(level="INFO") + audit)

    def _java(self, cp: str, main: str, *args: str, heap: str = "256m", options: tuple[str, ...] = ()) -> list[str]:
        java = shutil.which("java") or "java"
        if self.zookeeper_server is None:
            log_config = f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}"
        else:
            log_config = f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}"
        return [
            java, f"-Xmx{heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true", log_config,
            *class_archive.archive_options(self._version.jar_set), *options, "-cp", cp, main, *args,
        ]

    def _format(self, cp: str, n: int) -> None:
        args = ["format", "-t", self.cluster_id, "-c", str(self._node_dir(n) / "server.properties")]
        if self.spec.sasl:
            for user, password in self.spec.scram_users.items():
                args += ["--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]"]
        log_path = self._node_dir(n) / "format.log"
        with open(log_path, "wb") as out:
            proc = subprocess.run(self._java(cp, STORAGE_TOOL, *args), stdout=out, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            raise ProcessStartError(
                f"formatting Kafka cluster {self.alias} node {n + 1} failed; log {log_path}:\n{tail(log_path)}"
            )

    def _add_scram_users(self, cp: str) -> None:
        """ZooKeeper mode: write each SCRAM user's credential into ZooKeeper (before the brokers start)."""
        if not self.spec.sasl:
            return
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda item: self._add_scram_user(cp, *item), self.spec.scram_users.items()))

    def _add_scram_user(self, cp: str, user: str, password: str) -> None:
        args = ["--zookeeper", str(self.zookeeper_connect), "--alter", "--entity-type", "users",
                "--entity-name", user, "--add-config", f"{SCRAM_MECHANISM}=[password={password}]"]
        log_path = self.workdir / "zookeeper" / f"scram-{user}.log"
        with open(log_path, "wb") as out:
            proc = subprocess.run(self._java(cp, CONFIG_COMMAND, *args), stdout=out, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            raise ProcessStartError(
                f"adding SCRAM user {user} to Kafka cluster {self.alias} failed; log {log_path}:\n{tail(log_path)}"
            )
        log.info("scram user added alias=%s user=%s", self.alias, user)

    def _node_process(self, cp: str, n: int) -> ManagedProcess:
        argv = self._java(cp, BROKER_MAIN, str(self._node_dir(n) / "server.properties"), heap=self.spec.heap,
                          options=self.spec.jvm_options)
        return ManagedProcess(f"Kafka cluster {self.alias} node {n + 1}", argv, self._node_dir(n) / "server.log")
