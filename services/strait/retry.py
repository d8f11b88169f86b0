"""The one retry policy of every path that talks to a Kafka cluster, and what kind an error is.

Leader moves, fenced leader epochs, a broker restarting or refusing connections, a coordinator
loading: ordinary events in a cluster's life, answered by a prompt retry with fresh metadata, not
by a back-off of minutes. The pause before the next try doubles from :data:`FIRST_SECONDS` up to
:data:`CAP_SECONDS`, so work resumes within a few seconds of a broker's (or a whole cluster's)
return however long it was gone. An error that persists is reported (the flow's ``error`` state,
``strait_errors_total{kind}``) while the caller keeps trying.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from strait.errors import ConfigError, CoordinationError
from strait.kafka.acls import AuthorizerDisabledError
from strait.kafka.configs import ConfigRejectedError
from strait.kafka.admin import ClusterUnreachableError, KafkaAdminError, KafkaPermissionError, KafkaRetriableError
from strait.metrics import ERRORS, set_flow_state
from strait.translation import TranslationError

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_SECONDS = 0.5
CAP_SECONDS = 4.0


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential pause between tries: ``first`` seconds after the first failure, doubling up to ``cap``."""

    first: float = FIRST_SECONDS
    cap: float = CAP_SECONDS

    def delay(self, failures: int) -> float:
        """The pause after ``failures`` failures in a row (at least one)."""
        return min(self.cap, self.first * 2.0 ** min(64, max(0, failures - 1)))


CLUSTER_RETRY = RetryPolicy()
# A change the cluster refused (a config it rejects, a missing permission) is asked again less often.
REFUSED_RETRY = RetryPolicy(first=1.0, cap=300.0)


class Backoff:
    """One caller's failures in a row and the pause its next try waits for."""

    def __init__(self, policy: RetryPolicy = CLUSTER_RETRY) -> None:
        self.policy = policy
        self.failures = 0

    def failed(self) -> float:
        """Count a failure; returns the seconds to wait before the next try."""
        self.failures += 1
        return self.policy.delay(self.failures)

    def succeeded(self) -> None:
        """Forget the failures: the next one waits ``first`` seconds again."""
        self.failures = 0


class KeyedBackoff:
    """Backoff per item (a topic, an ACL binding); a different wanted change (signature) is tried at once.

    A transient failure waits as :data:`CLUSTER_RETRY` says, a refusal as ``refused`` says.
    """

    def __init__(self, refused: RetryPolicy = REFUSED_RETRY, clock: Callable[[], float] = time.monotonic) -> None:
        self._refused, self._clock = refused, clock
        self._state: dict[str, tuple[str, int, float]] = {}  # key -> (signature, failures, retry_at)

    def ready(self, key: str, signature: str = "") -> bool:
        """Whether the item may be tried now."""
        state = self._state.get(key)
        return state is None or state[0] != signature or self._clock() >= state[2]

    def failed(self, key: str, signature: str = "", transient: bool = False) -> float:
        """Record a failure; returns the seconds until the next try."""
        previous = self._state.get(key)
        failures = 1 if previous is None or previous[0] != signature else previous[1] + 1
        delay = (CLUSTER_RETRY if transient else self._refused).delay(failures)
        self._state[key] = (signature, failures, self._clock() + delay)
        return delay

    def succeeded(self, key: str) -> None:
        """Forget the item's failures."""
        self._state.pop(key, None)


class FlowTrouble:
    """One flow's failed steps in a row, reported as every strait service reports them.

    A failure counts in ``strait_errors_total{service,flow,kind}``, turns the flow's state to
    ``error``, is logged once at ``level`` (an error with its traceback when its kind is
    ``internal``: a bug, not a cluster) and returns the pause before the next try; a step that works again resets the pause
    and, unless told otherwise, turns the state back to ``running``.
    """

    def __init__(self, service: str, flow: str, doing: str, policy: RetryPolicy = CLUSTER_RETRY,
                 level: int = logging.WARNING) -> None:
        self.service, self.flow, self.doing, self.level = service, flow, doing, level
        self._backoff = Backoff(policy)
        self.kind: str | None = None  # the last failure's kind, until a step works again

    def failed(self, exc: BaseException, kind: str | None = None, message: str | None = None) -> float:
        """Report a failure (``kind`` defaults to :func:`error_kind`); returns the seconds to wait."""
        delay = self._backoff.failed()
        self.kind = kind or error_kind(exc)
        ERRORS.labels(service=self.service, flow=self.flow, kind=self.kind).inc()
        set_flow_state(self.service, self.flow, "error")
        internal = self.kind == "internal"
        log.log(logging.ERROR if internal else self.level, "service=%s flow=%s kind=%s %s failed, retry_in=%.1fs: %s",
                self.service, self.flow, self.kind, self.doing, delay, message or exc, exc_info=exc if internal else None)
        return delay

    def succeeded(self, state: str | None = "running") -> None:
        """A step worked: the next failure waits the shortest pause again; the flow is ``state`` (unless None)."""
        self._backoff.succeeded()
        self.kind = None
        if state is not None:
            set_flow_state(self.service, self.flow, state)


def error_kind(exc: BaseException) -> str:
    """The ``kind`` label of an error in ``strait_errors_total``."""
    kinds: tuple[tuple[type[BaseException], str], ...] = (
        (KafkaPermissionError, "permission"), (ClusterUnreachableError, "unreachable"),
        (ConfigRejectedError, "rejected"), (AuthorizerDisabledError, "no_authorizer"),
        (KafkaRetriableError, "kafka"), (KafkaAdminError, "admin"), (KafkaException, "kafka"),
        (TranslationError, "kafka"), (CoordinationError, "coordination"), (ConfigError, "config"),
    )
    return next((kind for cls, kind in kinds if isinstance(exc, cls)), "internal")


def is_transient(exc: BaseException) -> bool:
    """Whether a retry with fresh metadata may succeed (a leader moving, a broker down or restarting)."""
    if isinstance(exc, KafkaRetriableError):
        return True
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return KafkaRetriableError.is_transient(exc.args[0])
    return isinstance(exc, TimeoutError)


def retry_transient(call: Callable[[], T], what: str, stopped: Callable[[], bool],
                    on_failure: Callable[[BaseException], None] | None = None,
                    policy: RetryPolicy = CLUSTER_RETRY, sleep: Callable[[float], None] = time.sleep) -> T | None:
    """Run ``call`` until it succeeds; a transient error is retried after the policy's pause (forever),
    any other error is raised. Returns None once ``stopped()`` says to give up.

    ``on_failure`` runs after each transient failure (e.g. to replace a client whose metadata is stale).
    """
    backoff = Backoff(policy)
    while not stopped():
        try:
            return call()
        except Exception as exc:
            if not is_transient(exc):
                raise
            delay = backoff.failed()
            if on_failure is not None:
                on_failure(exc)
            level = logging.INFO if backoff.failures == 1 else logging.WARNING
            log.log(level, "%s failed (try %d, again in %.1fs): %s", what, backoff.failures, delay, exc)
            sleep(delay)
    return None
