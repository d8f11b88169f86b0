"""Metrics helpers shared by every strait process: the /metrics server and common metric families.

Names start with ``strait_`` and carry their unit; labels are ``flow`` ("A->B") and ``topic``,
``partition``, ``group`` where they apply.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import HistogramMetricFamily

log = logging.getLogger(__name__)

FLOW_STATES = ("starting", "running", "stopped", "disabled", "error")

SERVICE_UP = Gauge("strait_service_up", "1 while this strait process runs", ["service"])
CONFIG_LOADED = Gauge("strait_config_loaded", "1 once this process has a configuration, 0 while it waits for one",
                      ["service"])
CONFIG_DURABLE = Gauge("strait_config_durable",
                       "1 while the durable configuration topic holds what Redis holds, 0 while it is behind or "
                       "unreachable (only with STRAIT_CONFIG_KAFKA)", ["service"])
ERRORS = Counter("strait_errors_total", "Errors by service, flow and kind", ["service", "flow", "kind"])
FLOW_STATE = Gauge("strait_flow_state", "1 for the flow's current state in this process", ["flow", "state", "service"])


def serve_metrics(port: int, addr: str = "127.0.0.1", registry: CollectorRegistry = REGISTRY) -> int:
    """Serve /metrics on ``addr:port`` (0 picks a free port); returns the port."""
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    bound = server.server_address[1]
    log.info("metrics served at http://%s:%s/metrics", addr, bound)
    return int(bound)


def set_flow_state(service: str, flow: str, state: str) -> None:
    """Mark ``state`` as the flow's current one (1) and every other state 0."""
    for candidate in FLOW_STATES:
        FLOW_STATE.labels(flow=flow, state=candidate, service=service).set(1 if candidate == state else 0)


class BucketedHistogram:
    """A histogram fed with pre-bucketed counts (e.g. computed on Spark executors).

    Args:
        name: metric name without the ``_bucket``/``_sum``/``_count`` suffixes.
        documentation: help text.
        labels: label names.
        buckets: upper bounds, ascending, without +Inf.
    """

    def __init__(self, name: str, documentation: str, labels: Sequence[str], buckets: Sequence[float],
                 registry: CollectorRegistry = REGISTRY) -> None:
        self.name, self.documentation = name, documentation
        self.labels, self.buckets = tuple(labels), tuple(buckets)
        self._counts: dict[tuple[str, ...], list[int]] = {}
        self._sums: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()
        registry.register(self)  # type: ignore[arg-type]

    def add(self, label_values: Sequence[str], counts: Sequence[int], total: float) -> None:
        """Add per-bucket counts (one per bucket plus the +Inf overflow; non-cumulative) and their sum."""
        if len(counts) != len(self.buckets) + 1:
            raise ValueError(f"{self.name}: {len(counts)} counts for {len(self.buckets)} buckets + Inf")
        key = tuple(label_values)
        with self._lock:
            current = self._counts.setdefault(key, [0] * len(counts))
            for i, count in enumerate(counts):
                current[i] += int(count)
            self._sums[key] = self._sums.get(key, 0.0) + float(total)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        with self._lock:
            for key, counts in self._counts.items():
                cumulative, running = [], 0
                for bound, count in zip((*self.buckets, float("inf")), counts):
                    running += count
                    cumulative.append((_bound(bound), running))
                family.add_metric(list(key), cumulative, self._sums[key])
        yield family


def _bound(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(float(value))
