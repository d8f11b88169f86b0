"""A standalone ZooKeeper server for the lab's ZooKeeper-mode Kafka clusters (Kafka 3.9 and older).

It runs from the ``zookeeper`` jar that the cluster's Kafka jar set brings in (ZooKeeper 3.5 with
Kafka 2.4, 3.8 with Kafka 3.9), on loopback, with its data under its own folder, logging through
that jar set's log4j 1 binding (reload4j) to its log file. One server per cluster, so no chroot.
"""

from __future__ import annotations

import logging
import shutil
import socket
from pathlib import Path

from strait_lab.ports import claim_port, free_port
from strait_lab.process import ManagedProcess, console_log4j

log = logging.getLogger(__name__)

SERVER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
TICK_TIME_MS = 2000  # sessions expire on tick boundaries: up to one tick after their timeout

class ZooKeeperServer:
    """A ZooKeeper process of the lab.

    Args:
        name: what the operator calls it (``Kafka cluster A ZooKeeper``), used in messages.
        workdir: folder for its config, data and log.
        port: fixed client port, or None for a free one.
    """

    def __init__(self, name: str, workdir: Path, port: int | None = None) -> None:
        self.name = name
        self.workdir = workdir
        self.port = claim_port(port, name) if port is not None else free_port()
        self.process: ManagedProcess | None = None

    @property
    def connect(self) -> str:
        """The ``zookeeper.connect`` string of this server."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """Where the server logs."""
        return self.workdir / "zookeeper.log"

    def start(self, classpath: str, timeout: float = 30.0) -> None:
        """Start the server from ``classpath`` (a Kafka jar set) and wait until it answers ``srvr``."""
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "zoo.cfg"
        config.write_text(
            f"dataDir={data}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\ntickTime={TICK_TIME_MS}\n"
            "maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=srvr\n"
        )
        log4j = self.workdir / "log4j.properties"
        log4j.write_text(console_log4j())
        java = shutil.which("java") or "java"
        argv = [
            java, "-Xmx128m", "-Djava.awt.headless=true", f"-Dlog4j.configuration=file:{log4j}",
            # reload4j has no JMX classes, which ZooKeeper would register for log4j by default
            "-Dzookeeper.jmx.log4j.disable=true", "-Dzookeeper.admin.enableServer=false",
            "-cp", classpath, SERVER_MAIN, str(config),
        ]
        self.process = ManagedProcess(self.name, argv, self.log_path)
        self.process.start()
        self.process.wait_until(self._answers, timeout, f"srvr on port {self.port}")
        log.info("zookeeper ready name=%r connect=%s", self.name, self.connect)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL); stop its Kafka brokers first."""
        if self.process is not None:
            self.process.stop()

    def _answers(self) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
            sock.sendall(b"srvr")
            return sock.recv(64).startswith(b"Zookeeper version")
