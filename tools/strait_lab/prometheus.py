"""A real Prometheus server from the OS packages, scraping lab targets found through a file.

Targets are written to a file_sd JSON file that Prometheus watches, so processes can be added to the
scrape while it runs (`add_target`). The embedded lab loads the same recording and alert rules as
the compose lab (`prometheus/rules.yml` of the checkout, see `lab_rule_files`), so its alerts fire
and `alerts()` lists them.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from strait_lab.errors import LabError
from strait_lab import deps
from strait_lab.ports import claim_port, free_port
from strait_lab.process import ManagedProcess
from strait.paths import repo_root

log = logging.getLogger(__name__)

RULES_ENV = "STRAIT_PROMETHEUS_RULES"


def lab_rule_files() -> list[Path]:
    """The rule files the embedded lab's Prometheus loads: ``prometheus/rules.yml``, as in compose.

    ``$STRAIT_PROMETHEUS_RULES`` names the file explicitly (an install without the source checkout);
    otherwise it is the checkout's, found from this package's own location (strait is installed
    editable from ``services/``). A missing file is logged and the lab runs without rules.
    """
    configured = os.environ.get(RULES_ENV)
    path = Path(configured) if configured else repo_root() / "prometheus" / "rules.yml"
    if path.is_file():
        return [path.resolve()]
    where = f"${RULES_ENV}={configured}" if configured else f"{path} (not a strait source checkout?)"
    log.warning("prometheus rules not found at %s: the lab's Prometheus starts without recording or "
                "alert rules; set %s to the path of strait's prometheus/rules.yml", where, RULES_ENV)
    return []


class PrometheusServer:
    """A Prometheus process of the lab.

    Args:
        workdir: folder for its config, targets file, TSDB and log.
        port: fixed port, or None for a free one.
        scrape_interval: how often every target is scraped.
        rule_files: alerting/recording rule files to load.
    """

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        scrape_interval: str = "1s",
        rule_files: Iterable[Path] = (),
    ) -> None:
        self.workdir = workdir
        self.port = claim_port(port, "Prometheus") if port is not None else free_port()
        self.scrape_interval = scrape_interval
        self.rule_files = [str(p) for p in rule_files]
        self.process: ManagedProcess | None = None
        self._targets: dict[str, dict[str, Any]] = {}

    @property
    def url(self) -> str:
        """Base URL of the HTTP API."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def targets_file(self) -> Path:
        """The file_sd file Prometheus watches."""
        return self.workdir / "targets.json"

    def add_target(self, address: str, job: str, labels: Mapping[str, str] | None = None) -> None:
        """Scrape ``address`` (host:port serving /metrics) under ``job``; takes effect while running."""
        self._targets[address] = {"targets": [address], "labels": {"job": job, **(labels or {})}}
        self._write_targets()

    def remove_target(self, address: str) -> None:
        """Stop scraping ``address``."""
        self._targets.pop(address, None)
        self._write_targets()

    def _write_targets(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(list(self._targets.values()), indent=2))
        tmp.replace(self.targets_file)  # atomic: Prometheus never reads half a file

    def _config(self) -> str:
        config = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.scrape_interval},
            "rule_files": self.rule_files,
            "scrape_configs": [
                {"job_name": "strait-lab", "file_sd_configs": [{"files": [str(self.targets_file)],
                                                                "refresh_interval": "1s"}]},
            ],
        }
        return json.dumps(config, indent=2)  # JSON is valid YAML

    def start(self, timeout: float = 60.0) -> None:
        """Write the config, start Prometheus and wait for its ready endpoint."""
        binary = deps.ensure_binary("prometheus")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_targets()
        config = self.workdir / "prometheus.yml"
        config.write_text(self._config())
        argv = [
            binary, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle",
            "--storage.tsdb.retention.time=1d",
        ]
        self.process = ManagedProcess("Prometheus", argv, self.workdir / "prometheus.log")
        self.process.start()
        self.process.wait_until(self._ready, timeout, "/-/ready")
        log.info("prometheus ready url=%s rule_files=%s", self.url, ",".join(self.rule_files) or "none")

    def _ready(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
            return resp.status == 200

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Run an instant query; return the result vector."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise LabError(f"Prometheus query {promql!r} failed: {body.get('error')}")
        return body["data"]["result"]

    def alerts(self) -> list[dict[str, Any]]:
        """Every pending and firing alert (``/api/v1/alerts``): labels, annotations, ``state``, ``activeAt``."""
        with urllib.request.urlopen(f"{self.url}/api/v1/alerts", timeout=10) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise LabError(f"Prometheus alerts failed: {body.get('error')}")
        return list(body["data"]["alerts"])

    def rule_groups(self) -> list[dict[str, Any]]:
        """The loaded rule groups (``/api/v1/rules``), with each rule's health and last error."""
        with urllib.request.urlopen(f"{self.url}/api/v1/rules", timeout=10) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise LabError(f"Prometheus rules failed: {body.get('error')}")
        return list(body["data"]["groups"])

    def stop(self) -> None:
        """Stop Prometheus."""
        if self.process:
            self.process.stop()

    def pids(self) -> list[int]:
        """The running server's pid, if any."""
        return [self.process.pid] if self.process and self.process.alive() and self.process.pid else []
