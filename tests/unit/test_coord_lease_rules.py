"""Lease rules that need no Redis: local deadlines, safety margins, URL redaction."""

from __future__ import annotations

import time

import pytest
import redis
from strait.coord.leases import Lease, LeaseLostError, Leases, default_safety_margin
from strait.coord.redis_client import describe, redact_url


def test_lease_is_valid_until_its_local_deadline() -> None:
    lease = Lease("flow:A->B", "h1", 7, time.monotonic() + 0.05, ttl=1.0)
    assert lease.is_valid()
    lease.ensure_valid()
    time.sleep(0.06)
    assert not lease.is_valid()
    with pytest.raises(LeaseLostError, match=r"flow:A->B holder=h1 token=7 passed its local deadline"):
        lease.ensure_valid()


@pytest.mark.parametrize(("ttl", "margin"), [(0.1, 0.02), (1.0, 0.1), (10.0, 1.0), (30.0, 3.0)])
def test_default_safety_margin_is_a_tenth_of_the_ttl_and_at_least_20ms(ttl: float, margin: float) -> None:
    assert default_safety_margin(ttl) == pytest.approx(margin)


@pytest.mark.parametrize("ttl", [0.0, 0.05])
def test_too_short_ttl_is_refused_before_touching_redis(ttl: float) -> None:
    leases = Leases(redis.Redis(port=1))  # never contacted
    with pytest.raises(ValueError, match="ttl"):
        leases.acquire("x", "h", ttl)


def test_margin_that_eats_half_the_ttl_is_refused() -> None:
    leases = Leases(redis.Redis(port=1), safety_margin=lambda ttl: ttl / 2)
    with pytest.raises(ValueError, match="safety margin"):
        leases.acquire("x", "h", 1.0)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("rediss://user:s3cret@redis.example:6380/2", "rediss://user:***@redis.example:6380/2"),
        ("redis://user@host/0", "redis://user@host/0"),
    ],
)
def test_redact_url_hides_only_the_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_describe_names_the_server_without_credentials() -> None:
    client = redis.Redis.from_url("redis://admin:s3cret@10.1.2.3:6390/4")
    assert describe(client) == "redis://10.1.2.3:6390/4"
