"""A real Apache Kafka 4 cluster in KRaft combined mode, run from Maven Central jars.

Each node is both broker and controller (static quorum), listening on loopback. Optional extras:
StandardAuthorizer with the right super users, a SASL_PLAINTEXT listener with SCRAM users
created at format time, and TLS: SSL and (with SASL) SASL_SSL listeners whose certificates are made
at start by the lab's own CA (:mod:`strait_lab.tls`). The PLAINTEXT listener is the lab's admin
door: its principal (``User:ANONYMOUS``) is a super user so fixtures can set things up; ACL tests
connect through SASL. Controllers and brokers talk PLAINTEXT among themselves in every case.
"""

from __future__ import annotations

import base64
import logging
import shutil
import subprocess
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from strait_lab.errors import LabError, ProcessStartError
from strait_lab import deps
from strait_lab.ports import claim_port, free_port
from strait_lab.process import ManagedProcess, console_log4j2, tail
from strait_lab.tls import TlsFiles, make_tls_files

log = logging.getLogger(__name__)
# librdkafka reports "connection refused" while a broker starts; the probe expects that, so mute it.
_quiet_librdkafka = logging.getLogger("strait_lab.librdkafka")
_quiet_librdkafka.setLevel(logging.CRITICAL)

BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
SCRAM_MECHANISM = "SCRAM-SHA-512"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ADMIN_USER = "admin"

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
        scram_users: user -> password created at format time when ``sasl`` is on.
        base_port: fixed ports from here (node n uses base+10n .. base+10n+4); None picks free ports.
        audit_log: log the authorizer's allowed decisions too (DEBUG ``kafka.authorizer.logger``),
            to learn which ACLs clients really use.
        overrides: extra broker properties, applied last.
        heap: Java heap size per node.
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


@dataclass(frozen=True)
class NodePorts:
    """The loopback ports of one node."""

    client: int
    controller: int
    sasl: int | None
    ssl: int | None = None
    sasl_ssl: int | None = None


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
        self._tls: TlsFiles | None = None

    @property
    def alias(self) -> str:
        """The cluster alias."""
        return self.spec.alias

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

        Must run on the thread that owns the lab: children die with the thread that forked them.
        """
        deps.ensure_java()
        cp = deps.classpath("kafka")
        self.workdir.mkdir(parents=True, exist_ok=True)
        audit = _AUDIT_LOG4J2 if self.spec.audit_log else ""
        (self.workdir / "log4j2.properties").write_text(
            console_log4j2() + _BROKER_LOG4J2.format(level="INFO") + audit)
        if self.spec.tls and self._tls is None:
            self._tls = make_tls_files(self.workdir / "tls", f"kafka-{self.alias}")
        for n in range(self.spec.brokers):
            self._node_dir(n).mkdir(parents=True, exist_ok=True)
            (self._node_dir(n) / "server.properties").write_text(self._server_properties(n))
        with ThreadPoolExecutor(max_workers=self.spec.brokers) as pool:
            list(pool.map(lambda n: self._format(cp, n), range(self.spec.brokers)))
        self.nodes = [self._node_process(cp, n) for n in range(self.spec.brokers)]
        for node in self.nodes:
            node.start()

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Block until describe_cluster sees every broker of the cluster."""
        last = ["no answer"]

        def all_brokers_registered() -> bool:
            for node in self.nodes:
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
            return len(result.nodes) == self.spec.brokers
        try:
            self.nodes[0].wait_until(all_brokers_registered, timeout, "describe cluster")
        except ProcessStartError as exc:
            raise ProcessStartError(f"kafka cluster {self.alias}: {last[0]} of {self.spec.brokers}; {exc}") from None
        log.info("kafka cluster ready alias=%s bootstrap=%s", self.alias, self.bootstrap_servers)

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL)."""
        for node in reversed(self.nodes):
            node.stop()

    def stop_node(self, n: int) -> None:
        """Stop one node cleanly (fault drills)."""
        self.nodes[n].stop()

    def restart_node(self, n: int, timeout: float = 90.0) -> None:
        """Start node ``n`` again on the same ports and data, then wait for the full cluster."""
        self.nodes[n].stop()
        self.nodes[n] = self._node_process(deps.classpath("kafka"), n)
        self.nodes[n].start()
        self.wait_ready(timeout)

    def pids(self) -> list[int]:
        """Pids of the running nodes."""
        return [n.pid for n in self.nodes if n.pid is not None and n.alive()]

    def log_paths(self) -> list[Path]:
        """One log file per node."""
        return [node.log_path for node in self.nodes]

    # -- internals -------------------------------------------------------------------------------

    def _node_ports(self, n: int) -> NodePorts:
        base = self.spec.base_port
        owner = f"Kafka cluster {self.spec.alias} node {n + 1}"
        sasl, tls = self.spec.sasl, self.spec.tls
        if base is None:
            return NodePorts(free_port(), free_port(), free_port() if sasl else None,
                             free_port() if tls else None, free_port() if tls and sasl else None)
        port = base + 10 * n
        return NodePorts(
            claim_port(port, f"{owner} (client listener)"),
            claim_port(port + 1, f"{owner} (controller listener)"),
            claim_port(port + 2, f"{owner} (SASL listener)") if sasl else None,
            claim_port(port + 3, f"{owner} (SSL listener)") if tls else None,
            claim_port(port + 4, f"{owner} (SASL_SSL listener)") if tls and sasl else None,
        )

    def _node_dir(self, n: int) -> Path:
        return self.workdir / f"node{n + 1}"

    def _server_properties(self, n: int) -> str:
        ports = self.ports[n]
        rf = min(3, self.spec.brokers)
        voters = ",".join(f"{i + 1}@127.0.0.1:{p.controller}" for i, p in enumerate(self.ports))
        listeners = [f"PLAINTEXT://127.0.0.1:{ports.client}", f"CONTROLLER://127.0.0.1:{ports.controller}"]
        advertised = [f"PLAINTEXT://127.0.0.1:{ports.client}"]
        extra = (("SASL_PLAINTEXT", ports.sasl), ("SSL", ports.ssl), ("SASL_SSL", ports.sasl_ssl))
        for protocol, port in extra:
            if port is not None:
                listeners.append(f"{protocol}://127.0.0.1:{port}")
                advertised.append(f"{protocol}://127.0.0.1:{port}")
        props: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": str(n + 1),
            "controller.quorum.voters": voters,
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
                                              "SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL",
            "log.dirs": str(self._node_dir(n) / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": str(rf),
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.cleaner.backoff.ms": "1000",
        }
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
            props["authorizer.class.name"] = AUTHORIZER
            # Controllers and brokers talk PLAINTEXT as ANONYMOUS; they must be super users.
            props["super.users"] = f"User:{ADMIN_USER};User:ANONYMOUS"
            props["allow.everyone.if.no.acl.found"] = "false"
        props.update(self.spec.overrides)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _java(self, cp: str, main: str, *args: str, heap: str = "256m") -> list[str]:
        java = shutil.which("java") or "java"
        return [
            java, f"-Xmx{heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp", cp, main, *args,
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

    def _node_process(self, cp: str, n: int) -> ManagedProcess:
        argv = self._java(cp, BROKER_MAIN, str(self._node_dir(n) / "server.properties"), heap=self.spec.heap)
        return ManagedProcess(f"Kafka cluster {self.alias} node {n + 1}", argv, self._node_dir(n) / "server.log")
