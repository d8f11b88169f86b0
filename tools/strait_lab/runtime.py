"""Runs a whole lab (clusters, Redis, Prometheus) in this process and reports where it listens.

`Lab` starts and stops the components; `run_foreground` is what `make lab` and `strait lab up` run:
it writes a state file that `strait lab status|down` read, serves the lab's own /metrics, and tears
everything down on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily

from strait.config.durable import DurableLocation
from strait_lab.errors import LabError
from strait_lab.kafka import KafkaCluster
from strait_lab.ports import claim_port, free_port
from strait_lab.process import ManagedProcess
from strait_lab.prometheus import PrometheusServer, lab_rule_files
from strait_lab.redis import RedisServer
from strait_lab.services import StraitProcess
from strait_lab.topology import LabSpec, lab_config

log = logging.getLogger(__name__)

STATE_FILE = "state.json"


class Lab:
    """The components of one lab, started and stopped together.

    Args:
        spec: what to run.
        workdir: folder for every component's config, data and logs.
    """

    def __init__(self, spec: LabSpec, workdir: Path) -> None:
        self.spec = spec
        self.workdir = workdir
        self.clusters: dict[str, KafkaCluster] = {
            c.alias: KafkaCluster(c, workdir / f"kafka-{c.alias}") for c in spec.clusters
        }
        # The same persistence as the compose lab's Redis (an append-only file)
        self.redis = RedisServer(workdir / "redis", port=spec.port(79), persistent=True) if spec.redis else None
        self.prometheus = (
            PrometheusServer(workdir / "prometheus", port=spec.port(90), rule_files=lab_rule_files())
            if spec.prometheus else None
        )
        self.metrics_endpoints: dict[str, str] = {}
        self.services: list[StraitProcess] = []

    def processes(self) -> Iterator[ManagedProcess]:
        """Every started process of the lab."""
        for cluster in self.clusters.values():
            yield from cluster.nodes
        for server in (self.redis, self.prometheus):
            if server is not None and server.process is not None:
                yield server.process
        for service in self.services:
            yield service.process

    def up(self, prepare: Callable[[Lab], None] | None = None) -> None:
        """Start everything; on any failure stop what already started and re-raise. ``prepare`` runs
        once the clusters are ready, before the strait services start (a drill's topics, say)."""
        try:
            for cluster in self.clusters.values():
                cluster.launch()
            if self.redis:
                self.redis.start()
            if self.prometheus:
                self.prometheus.start()
            for cluster in self.clusters.values():
                cluster.wait_ready()
            if prepare is not None:
                prepare(self)
            if self.spec.services:
                self._start_services()
        except BaseException:
            self.down()
            raise

    def _start_services(self) -> None:
        """Apply the lab's strait config to Redis and start each strait component against it."""
        import yaml

        from strait.config import load_config
        from strait.config.store import apply_config

        if self.redis is None:
            raise LabError("the lab's strait services need its Redis")
        config_path = self.workdir / "strait.yaml"
        bootstrap = {alias: c.bootstrap_servers for alias, c in self.clusters.items()}
        config_path.write_text(yaml.safe_dump(lab_config(self.spec, bootstrap, self.redis.url), sort_keys=False))
        durable = self.durable_config()
        apply_config(self.redis.client(), load_config(config_path), str(config_path), durable=durable)
        for index, name in enumerate(self.spec.services):
            port = self.spec.port(92 + index)
            service = StraitProcess(name, ["--redis-url", self.redis.url,
                                           *(["--state-dir", str(self.workdir / name)] if name == "replicator" else [])],
                                    self.workdir / "services", env={"STRAIT_CONFIG_KAFKA": durable.bootstrap},
                                    metrics_port=claim_port(port, f"strait {name} metrics") if port else None)
            self.services.append(service)
            service.start(timeout=120)
            self.add_metrics_endpoint(name, service.metrics_address)

    def durable_config(self) -> DurableLocation:
        """Where the lab keeps the configuration's durable copy: on the first flow's target cluster (the
        one a disaster recovery keeps), else the first cluster."""
        alias = self.spec.flows[0].split("->")[1] if self.spec.flows else next(iter(self.clusters))
        return DurableLocation(self.clusters[alias].bootstrap_servers)

    def down(self) -> None:
        """Stop everything that runs: strait services, Prometheus, Redis, then brokers."""
        for service in self.services:
            service.terminate()  # all at once: each ends within its stop grace, in parallel
        for service in reversed(self.services):
            service.stop()
        for server in (self.prometheus, self.redis):
            if server is not None:
                server.stop()
        for cluster in self.clusters.values():
            cluster.stop()

    def add_metrics_endpoint(self, name: str, address: str) -> None:
        """Register a process's /metrics address; Prometheus scrapes it from now on."""
        self.metrics_endpoints[name] = f"http://{address}/metrics"
        if self.prometheus:
            self.prometheus.add_target(address, job=name)

    def describe(self) -> dict[str, Any]:
        """Where everything listens, as printed by `strait lab up|status --json`."""
        return {
            "clusters": {
                alias: {
                    "bootstrap_servers": c.bootstrap_servers,
                    **({"sasl_bootstrap_servers": c.sasl_bootstrap_servers} if c.spec.sasl else {}),
                    "brokers": c.spec.brokers,
                }
                for alias, c in self.clusters.items()
            },
            "flows": list(self.spec.flows),
            "redis_url": self.redis.url if self.redis else None,
            "prometheus_url": self.prometheus.url if self.prometheus else None,
            "metrics_endpoints": dict(self.metrics_endpoints),
            "config": str(self.workdir / "strait.yaml") if self.services else None,
            "config_kafka": self.durable_config().bootstrap if self.services else None,
            "logs": str(self.workdir),
        }


class _ProcessUpCollector:
    """Exposes ``strait_lab_process_up{process=...}``: 1 while a lab process runs."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily("strait_lab_process_up", "1 while a lab process runs", labels=["process"])
        for process in self.lab.processes():
            gauge.add_metric([process.name], 1.0 if process.alive() else 0.0)
        yield gauge


@dataclass(frozen=True)
class LabState:
    """The state file of a running lab, read by `strait lab status|down`."""

    path: Path

    def read(self) -> dict[str, Any] | None:
        """The state, or None when no lab was started here."""
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return None

    def write(self, state: dict[str, Any]) -> None:
        """Replace the state atomically."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.path)

    def clear(self) -> None:
        """Forget the lab."""
        self.path.unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists (and is not a zombie we could reap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def running_lab(workdir: Path) -> dict[str, Any] | None:
    """The state of the lab running from ``workdir``, or None when none runs."""
    state = LabState(workdir / STATE_FILE).read()
    if state and pid_alive(int(state.get("supervisor_pid", -1))):
        return state
    return None


def _clear_component_dirs(workdir: Path) -> None:
    """Each lab starts from empty clusters, like a compose lab without volumes."""
    for child in workdir.iterdir():
        if child.is_dir():
            shutil.rmtree(child)


def run_foreground(spec: LabSpec, workdir: Path, on_ready: Any = None, stop: threading.Event | None = None,
                   on_tick: Any = None) -> None:
    """Start the lab, write its state, call ``on_ready(description)``, then ``on_tick()`` every second
    until a signal.

    SIGINT (Ctrl-C) and SIGTERM (`strait lab down`) stop every component before returning.
    """
    if running_lab(workdir):
        raise LabError(f"a lab already runs from {workdir}: run `strait lab down` first")
    workdir.mkdir(parents=True, exist_ok=True)
    state = LabState(workdir / STATE_FILE)
    state.write({"supervisor_pid": os.getpid(), "status": "starting"})
    stop = stop or threading.Event()
    # The handler runs in the main thread, maybe inside stop.wait() holding the event's lock: setting
    # the event there could deadlock, so it only notes the signal, and the loop below looks each second.
    signalled: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: signalled.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    lab: Lab | None = None
    failed = False
    try:
        started = time.monotonic()
        try:
            _clear_component_dirs(workdir)
            lab = Lab(spec, workdir)
            lab.up()
            metrics_port = claim_port(spec.port(91), "lab metrics") if spec.base_port else free_port()
            registry = CollectorRegistry()
            registry.register(_ProcessUpCollector(lab))  # type: ignore[arg-type]
            start_http_server(metrics_port, addr="127.0.0.1", registry=registry)
            lab.add_metrics_endpoint("lab", f"127.0.0.1:{metrics_port}")
        except Exception as exc:
            failed = True  # the state keeps the error for `strait lab up --detach` to print
            state.write({"supervisor_pid": os.getpid(), "status": "failed", "error": str(exc).splitlines()[0]})
            raise
        description = {**lab.describe(), "startup_seconds": round(time.monotonic() - started, 1)}
        state.write({"supervisor_pid": os.getpid(), "status": "ready", **description,
                     "pids": [p.pid for p in lab.processes() if p.pid]})
        if on_ready:
            on_ready(description)
        reported: set[str] = set()
        while not stop.wait(1.0) and not signalled:
            if on_tick:
                on_tick()
            for process in lab.processes():
                if not process.alive() and process.name not in reported:
                    reported.add(process.name)  # the rest of the lab keeps running
                    log.error("lab process=%r exited with code %s; log %s",
                              process.name, process.returncode(), process.log_path)
    finally:
        if lab is not None:
            lab.down()
        if not failed:
            state.clear()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
