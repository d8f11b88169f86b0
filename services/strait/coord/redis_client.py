"""The coordination Redis: connecting to it and turning its failures into strait errors.

Every coordination call goes through :func:`redis_errors`, so callers see one error type when
Redis is down (:class:`CoordinationUnavailableError`) and can keep their current work until their
local lease deadline instead of crashing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from strait.errors import CoordinationError, CoordinationUnavailableError  # defined with the root, raised here

log = logging.getLogger(__name__)

DEFAULT_SOCKET_TIMEOUT = 2.0
"""Seconds a command may take. Short, because a lease renewal that hangs is worse than one that fails."""

DEFAULT_RETRIES = 1
"""Extra attempts redis-py makes on a connection error; every coordination script is safe to repeat."""

# Lua shared by the scripts of this package. NOW_US is the Redis server's clock in microseconds.
# BUMP(key) raises a counter to max(previous + 1, NOW_US): strictly increasing while Redis keeps
# its data, and still above every earlier value after Redis restarts empty, because the server
# clock has moved on since (numbers stay exact in Lua doubles until the year 2255).
LUA_PRELUDE = """
local _t = redis.call('TIME')
local NOW_US = tonumber(_t[1]) * 1000000 + tonumber(_t[2])
local NOW_MS = math.floor(NOW_US / 1000)
local function INT(n) return string.format('%.0f', n) end
local function BUMP(key)
  local next = math.max(tonumber(redis.call('GET', key) or '0') + 1, NOW_US)
  redis.call('SET', key, INT(next))
  return INT(next)
end
"""


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (user name, host, port and db kept)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def connect(
    url: str,
    *,
    socket_timeout: float | None = DEFAULT_SOCKET_TIMEOUT,
    retries: int = DEFAULT_RETRIES,
    check: bool = True,
) -> redis.Redis:
    """A Redis client for coordination, with short timeouts and bounded retries.

    Args:
        url: ``redis://[user:password@]host:port/db`` (``rediss://`` and ``unix://`` work too).
        socket_timeout: seconds per command; None only for a client dedicated to blocking reads.
        retries: extra attempts on a connection error, with a short exponential backoff.
        check: PING once so that a wrong URL or a stopped Redis fails here, clearly.

    Raises:
        CoordinationUnavailableError: ``check`` is set and Redis does not answer.
        CoordinationError: the URL is malformed.
    """
    try:
        client = redis.Redis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=min(socket_timeout or DEFAULT_SOCKET_TIMEOUT, DEFAULT_SOCKET_TIMEOUT),
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries),
        )
    except ValueError as exc:
        raise CoordinationError(f"invalid Redis URL {redact_url(url)}: {exc}") from exc
    if check:
        with redis_errors(client, "connect"):
            client.ping()
        log.info("redis connected url=%s", describe(client))
    return client


def describe(client: redis.Redis) -> str:
    """The client's server as a URL without credentials, for messages and logs."""
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    scheme = "rediss" if client.connection_pool.connection_class.__name__.startswith("SSL") else "redis"
    return f"{scheme}://{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


def text(value: object) -> str:
    """A Redis reply part (bytes or a number) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


@contextmanager
def redis_errors(client: redis.Redis, action: str) -> Iterator[None]:
    """Re-raise redis-py failures inside the block as coordination errors naming the server."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise CoordinationUnavailableError(
            f"Redis at {describe(client)} is unavailable ({action}): {exc}. "
            "Check that redis-server is running and the URL in the strait config is right."
        ) from exc
    except redis.RedisError as exc:
        raise CoordinationError(f"Redis at {describe(client)} refused {action}: {exc}") from exc
