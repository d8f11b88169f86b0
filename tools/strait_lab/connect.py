"""A Kafka Connect worker in distributed mode, from the project's MM2 jar set, to run MM2 as connectors.

Some guides deploy MirrorMaker 2 as three connectors posted to a Connect cluster instead of dedicated
mode; this worker runs those JSON documents as they are, with its REST API on a loopback port.
"""

from __future__ import annotations

import json
import logging
import shutil
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from strait_lab import deps
from strait_lab.errors import LabError
from strait_lab.kafka import KafkaCluster
from strait_lab.ports import free_port
from strait_lab.process import ManagedProcess, console_log4j2

log = logging.getLogger(__name__)

CONNECT_MAIN = "org.apache.kafka.connect.cli.ConnectDistributed"
BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"


class ConnectWorker:
    """One distributed Connect worker storing its configs, offsets and status on ``cluster``.

    Args:
        cluster: the Kafka cluster of the Connect cluster (MM2 guides use the target).
        workdir: folder for the worker's properties and log.
        offsets_topic: the worker's ``offset.storage.topic``.
        group: the Connect cluster's ``group.id`` (its config and status topics are named after it).
    """

    def __init__(self, cluster: KafkaCluster, workdir: Path, offsets_topic: str, group: str) -> None:
        self.cluster, self.workdir, self.offsets_topic, self.group = cluster, workdir, offsets_topic, group
        self.port = free_port()
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        """The REST API's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> None:
        """Start the worker and wait until its REST API answers."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        settings = {
            "bootstrap.servers": self.cluster.bootstrap_servers, "group.id": self.group,
            "key.converter": BYTES, "value.converter": BYTES,
            "offset.storage.topic": self.offsets_topic, "config.storage.topic": f"{self.group}-configs",
            "status.storage.topic": f"{self.group}-status", "offset.storage.replication.factor": "1",
            "config.storage.replication.factor": "1", "status.storage.replication.factor": "1",
            "offset.flush.interval.ms": "2000", "listeners": self.url,
        }
        props = self.workdir / "worker.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        log_config = self.workdir / "log4j2.properties"
        log_config.write_text(console_log4j2())
        deps.ensure_java()
        deps.ensure_jars("mm2")
        argv = [shutil.which("java") or "java", "-Xmx512m", f"-Dlog4j2.configurationFile={log_config}",
                "-cp", deps.classpath("mm2"), CONNECT_MAIN, str(props)]
        self.process = ManagedProcess(f"Connect worker {self.group}", argv, self.workdir / "connect.log")
        self.process.start()
        self.process.wait_until(lambda: self._get("/connectors") is not None, timeout, "the Connect REST API")

    def post(self, document: Mapping[str, Any]) -> None:
        """Create a connector from its ``{"name": ..., "config": {...}}`` document."""
        self._request("POST", "/connectors", document)

    def running(self, name: str) -> bool:
        """True once the connector and at least one task of it run."""
        status = self._get(f"/connectors/{name}/status")
        if not isinstance(status, dict):
            return False
        tasks = status.get("tasks") or []
        return status.get("connector", {}).get("state") == "RUNNING" and bool(tasks) and \
            all(task.get("state") == "RUNNING" for task in tasks)

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the worker and wait for it (SIGTERM: its tasks commit their offsets first)."""
        if self.process is not None:
            self.process.stop(timeout=timeout)

    def _get(self, path: str) -> Any:
        try:
            return self._request("GET", path)
        except (OSError, LabError):
            return None

    def _request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read()
        except urllib.error.HTTPError as exc:
            raise LabError(f"Connect {method} {path}: HTTP {exc.code}: {exc.read()[:500]!r}") from None
        return json.loads(text) if text else None
