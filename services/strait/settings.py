"""The one settings object of a strait process, read once from its flags and its environment.

Every command and every component process builds one :class:`Settings` at start
(``strait.cli.main``) and hands it down; nothing below reads these environment variables again.

| setting | flag | environment | default |
| --- | --- | --- | --- |
| coordination Redis | ``--redis-url`` | ``STRAIT_REDIS_URL`` | the embedded lab's (a file's ``redis_url`` with ``--config``) |
| metrics address | | ``STRAIT_METRICS_ADDR`` | 127.0.0.1 (0.0.0.0 in containers) |
| metrics port | ``--metrics-port`` | | 0: a free one |
| log level | ``--log-level`` | ``STRAIT_LOG_LEVEL`` | INFO |
| replicator state (a folder or a Hadoop URI) | ``--state-dir`` | ``STRAIT_STATE_DIR`` | ``<cache>/replicator`` |
| stop grace | | ``STRAIT_STOP_GRACE_SECONDS`` | 9 s, under the 10 s Docker gives before SIGKILL |
| durable configuration: cluster | | ``STRAIT_CONFIG_KAFKA`` | none: Redis alone keeps the configuration |
| durable configuration: client file | | ``STRAIT_CONFIG_KAFKA_PROPERTIES`` | none (plaintext) |
| durable configuration: topic | | ``STRAIT_CONFIG_TOPIC`` | ``__strait_config`` |
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strait.config import load_config
from strait.config.model import DEFAULT_REDIS_URL
from strait.config.secrets import resolve_value
from strait.errors import ConfigError

if TYPE_CHECKING:
    from strait.config.durable import DurableLocation

STOP_GRACE_SECONDS = 9.0
DEFAULT_LEASE_TTL = 15.0


@dataclass(frozen=True)
class Settings:
    """Where a strait process finds its configuration and coordination, and how it runs.

    ``redis_url`` is None only when a ``--config`` file names the coordination Redis itself
    (:meth:`coordination_url` reads it from there).
    """

    redis_url: str | None = DEFAULT_REDIS_URL
    config_file: Path | None = None
    metrics_addr: str = "127.0.0.1"
    metrics_port: int = 0
    log_level: str = "INFO"
    state_dir: str | None = None  # a folder or a Hadoop-compatible URI (strait_replicator.state)
    stop_grace: float = STOP_GRACE_SECONDS
    lease_ttl: float = DEFAULT_LEASE_TTL
    flows: tuple[str, ...] = ()  # only these flows (every wanted one when empty)
    namespace: str = "strait"
    durable_config: DurableLocation | None = None  # the configuration's durable topic (strait.config.durable)

    @classmethod
    def read(cls, flags: Any = None, environ: Mapping[str, str] = os.environ) -> Settings:
        """The settings from parsed command-line flags (any missing flag takes its default) and ``environ``."""

        def flag(name: str, default: Any = None) -> Any:
            value = getattr(flags, name, None)
            return default if value is None else value

        config_file = flag("config")
        explicit = flag("redis_url")
        state_dir = flag("state_dir") or environ.get("STRAIT_STATE_DIR")
        return cls(
            redis_url=explicit or (None if config_file else environ.get("STRAIT_REDIS_URL") or DEFAULT_REDIS_URL),
            config_file=Path(config_file) if config_file else None,
            metrics_addr=environ.get("STRAIT_METRICS_ADDR") or "127.0.0.1",
            metrics_port=int(flag("metrics_port", 0)),
            log_level=(flag("log_level") or environ.get("STRAIT_LOG_LEVEL") or "INFO").upper(),
            state_dir=str(state_dir) if state_dir else None,
            stop_grace=_seconds(environ, "STRAIT_STOP_GRACE_SECONDS", STOP_GRACE_SECONDS),
            lease_ttl=float(flag("lease_ttl", DEFAULT_LEASE_TTL)),
            flows=_flows(flag("flow", ())),
            durable_config=_durable_location(environ),
        )

    def coordination_url(self) -> str:
        """The Redis every replica coordinates through: ``--redis-url`` or the environment's, else the
        ``--config`` file's ``redis_url``."""
        if self.redis_url is not None:
            return self.redis_url
        assert self.config_file is not None
        return resolve_value(load_config(self.config_file).redis_url)


def settings_of(args: Any) -> Settings:
    """The settings a command's handler runs with: those ``strait.cli.main`` read, else read from ``args``."""
    return getattr(args, "settings", None) or Settings.read(args)


def _flows(flag: Any) -> tuple[str, ...]:
    """``--flow`` is repeatable for components (a list) and a single name for one-shot commands."""
    return (flag,) if isinstance(flag, str) else tuple(flag)


def _durable_location(environ: Mapping[str, str]) -> DurableLocation | None:
    bootstrap = environ.get("STRAIT_CONFIG_KAFKA", "").strip()
    if not bootstrap:
        return None
    from strait.config.durable import DEFAULT_TOPIC, DurableLocation  # Redis and Kafka clients: only when configured

    properties = environ.get("STRAIT_CONFIG_KAFKA_PROPERTIES", "").strip()
    return DurableLocation(bootstrap, environ.get("STRAIT_CONFIG_TOPIC", "").strip() or DEFAULT_TOPIC,
                           Path(properties) if properties else None)


def _seconds(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"${name}={raw!r} is not a number of seconds") from None
