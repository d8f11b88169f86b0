"""What every strait service process shares: its configuration feed and its run-until-signal frame.

A process runs either from a file (fixed configuration) or from Redis, where every new version of
the configuration stored by `strait config apply` is adopted live, without a restart.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable

import redis

from strait.config import load_config
from strait.config.model import StraitConfig
from strait.config.durable import ConfigKeeper, DurableConfigTopic
from strait.config.store import ConfigStoreError, load_stored_config, watch_config
from strait.coord.documents import Watcher
from strait.metrics import CONFIG_LOADED, SERVICE_UP, serve_metrics
from strait.settings import STOP_GRACE_SECONDS, Settings

log = logging.getLogger(__name__)


class ConfigFeed:
    """The newest configuration and an event raised each time a new one arrives."""

    def __init__(self) -> None:
        self._config: StraitConfig | None = None
        self._lock = threading.Lock()
        self.changed = threading.Event()

    def set(self, config: StraitConfig) -> None:
        """Adopt a configuration (called from the Redis watcher thread)."""
        with self._lock:
            self._config = config
        self.changed.set()

    def current(self) -> StraitConfig | None:
        """The newest configuration, or None before the first."""
        with self._lock:
            return self._config


class ConfigFollower:
    """What follows the stored configuration for a process: the Redis watcher and, with a durable
    topic, the keeper that restores the configuration into a Redis that lost it."""

    def __init__(self, watcher: Watcher, keeper: ConfigKeeper | None) -> None:
        self.watcher, self.keeper = watcher, keeper

    def stop(self) -> None:
        """Stop watching and keeping."""
        self.watcher.stop()
        if self.keeper is not None:
            self.keeper.stop()


def follow_config(feed: ConfigFeed, settings: Settings, client: redis.Redis | None,
                  service: str = "strait") -> ConfigFollower | None:
    """Feed the settings' configuration file, or the stored configuration and every later version;
    returns the follower (``stop()`` it at the end) or None for a file.

    With nothing stored yet (a new Redis, or one that lost its data) the process waits for the
    first `strait config apply`, says so in its log and in ``strait_config_loaded``, and goes on
    serving metrics: a supervisor restarting it would only turn the wait into a crash loop. With a
    durable topic (``settings.durable_config``), a keeper puts the configuration kept there back into
    Redis within seconds.
    """
    namespace, durable = settings.namespace, settings.durable_config
    def adopt(config: StraitConfig) -> None:
        feed.set(config)
        CONFIG_LOADED.labels(service).set(1)

    CONFIG_LOADED.labels(service).set(0)
    if settings.config_file is not None:
        adopt(load_config(settings.config_file))
        return None
    assert client is not None, "a Redis client is needed without a config file"
    keeper = ConfigKeeper(client, DurableConfigTopic(durable, namespace), namespace, service).start() \
        if durable else None
    try:
        version, config = load_stored_config(client, None, namespace)
    except ConfigStoreError as exc:
        where = f" (or its durable copy in {durable.describe()})" if durable else ""
        log.warning("service=%s waiting for a configuration%s: %s", service, where, exc)
        return ConfigFollower(watch_config(client, adopt, poll_interval=2.0, namespace=namespace), keeper)
    except BaseException:
        if keeper is not None:
            keeper.stop()
        raise
    adopt(config)
    return ConfigFollower(watch_config(client, adopt, poll_interval=2.0, namespace=namespace, after_version=version),
                          keeper)


STOP_MARGIN_SECONDS = 2.0  # of the grace, kept for the interpreter's own exit once the body's stop path ended
END_GRACE_SECONDS = 5.0  # for threads left running once the body ended


class StopEvent(threading.Event):
    """The event SIGINT and SIGTERM set; it knows when the process will exit by itself."""

    def __init__(self, grace: float) -> None:
        super().__init__()
        self.grace = grace
        self.exit_at: float | None = None  # monotonic, once a stop was requested

    def request(self) -> None:
        """Ask for the stop; the process exits by itself ``grace`` seconds from the first request."""
        if self.exit_at is None:
            self.exit_at = time.monotonic() + self.grace
        self.set()


def stop_time_left(stop: threading.Event) -> float:
    """Seconds a body that saw ``stop`` may still spend ending its work (waiting for threads, committing).

    That is until :data:`STOP_MARGIN_SECONDS` before the process exits by itself; for a plain event
    (a test's), the default grace less the margin.
    """
    exit_at = stop.exit_at if isinstance(stop, StopEvent) else None
    if exit_at is None:
        grace = stop.grace if isinstance(stop, StopEvent) else STOP_GRACE_SECONDS
        return max(0.0, grace - STOP_MARGIN_SECONDS)
    return max(0.0, exit_at - STOP_MARGIN_SECONDS - time.monotonic())


def run_service(service: str, settings: Settings, body: Callable[[threading.Event, int], None]) -> int:
    """Serve /metrics, then run ``body(stop, metrics_port)`` until SIGINT or SIGTERM sets ``stop``.

    The process always ends: a stop signal gives it the settings' stop grace (default 9 s, under
    the 10 s Docker and the lab give a process before SIGKILL) to finish its work, whatever state
    the clusters are in; a body bounds its stop path with :func:`stop_time_left` to end by itself
    before that. Once the body returned or failed the interpreter gets a few seconds to shut down.
    So a thread that would not end (py4j's, when Spark's JVM died under it; one blocked in a request
    to a dead cluster) cannot keep a stopped or dead service running, where no supervisor would
    restart it.
    """
    grace = settings.stop_grace
    stop = StopEvent(grace)

    def on_signal(signum: int, _frame: object) -> None:
        if not stop.is_set():
            _exit_after(service, grace, f"signal {signal.Signals(signum).name}", code=0)
        stop.request()

    _handle_stop_signals(on_signal)
    # In containers Prometheus scrapes from another host: STRAIT_METRICS_ADDR=0.0.0.0 there.
    port = serve_metrics(settings.metrics_port, addr=settings.metrics_addr)
    print(f"{service} metrics on http://127.0.0.1:{port}/metrics", flush=True)
    SERVICE_UP.labels(service=service).set(1)
    failed = True
    try:
        body(stop, port)
        failed = False
    finally:
        SERVICE_UP.labels(service=service).set(0)
        _exit_after(service, END_GRACE_SECONDS, "a fatal error" if failed else "its work ended", code=int(failed))
    return 0


def _handle_stop_signals(on_signal: Callable[[int, object], None]) -> None:
    """Run ``on_signal`` for each SIGINT and SIGTERM in a thread of its own, never in the main thread.

    Python runs a signal's handler in the main thread between two bytecodes, wherever that thread is:
    a handler that set the stop event there deadlocked when the signal landed while the main thread
    held the event's own lock (inside ``stop.wait()``; seen in CI, reproduced with a stream of
    signals), and a handler waits until a blocking call of the main thread returns (a SIGTERM was
    still unhandled 30 s later). So the main thread's handler only writes the signal's number to a
    pipe, which takes no lock, and a watcher thread reads it and acts. The interpreter's C-level
    handler writes the number to the same pipe (its wakeup file) the moment the signal arrives, so
    the watcher sees it even while the main thread is blocked; the handler's own write keeps that
    true if a library replaced the wakeup file (each signal may come twice: ``on_signal`` is
    idempotent).
    """
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def note(signum: int, _frame: object) -> None:
        try:
            os.write(write_end, bytes([signum]))
        except BlockingIOError:
            pass  # the pipe is full of signals the watcher has not read yet: this one adds nothing

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, note)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)

    def watch() -> None:
        while True:
            for signum in os.read(read_end, 64):
                if signum in (signal.SIGINT, signal.SIGTERM):
                    on_signal(signum, None)

    threading.Thread(target=watch, name="stop-signals", daemon=True).start()


def _exit_after(service: str, seconds: float, cause: str, code: int) -> None:
    """End the process ``seconds`` from now unless it has ended by itself."""

    def watchdog() -> None:
        time.sleep(seconds)
        log.error("service=%s still running %.0fs after %s: exiting now", service, seconds, cause)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(code)

    threading.Thread(target=watchdog, name="exit-watchdog", daemon=True).start()
