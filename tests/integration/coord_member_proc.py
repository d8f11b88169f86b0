"""A lease holder in its own process, for the SIGSTOP test; run as a script, not collected.

Usage: ``python coord_member_proc.py REDIS_URL LEASE KEY HOLDER TTL MODE``

It acquires LEASE, keeps it with a LeaseKeeper and "acts" every 20 ms by a fenced write of
``HOLDER:TOKEN:N`` to KEY. MODE ``checked`` acts only after the keeper's local check passes (the
normal way); ``unchecked`` pretends its local clock failed and relies on the Redis fence alone.
Prints ``ACQUIRED <token>``, ``ACTED <n>`` and ``REFUSED <reason>`` lines; exits after 3 refusals.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time

from strait.coord.leases import LeaseKeeper, LeaseLostError, Leases
from strait.coord.redis_client import connect


def main(url: str, name: str, key: str, holder: str, ttl: float, mode: str) -> None:
    leases = Leases(connect(url))
    lease = leases.acquire(name, holder, ttl, wait=30)
    if lease is None:
        sys.exit(f"could not acquire {name}")
    keeper = LeaseKeeper(leases, lease).start()
    print(f"ACQUIRED {lease.token}", flush=True)
    refusals = 0
    for n in range(1, 100_000):
        try:
            current = keeper.ensure_valid() if mode == "checked" else keeper.lease
            if mode == "unchecked":
                current = dataclasses.replace(current, expires_at_monotonic=math.inf)
            leases.fenced_set(current, key, f"{holder}:{current.token}:{n}")
        except LeaseLostError as exc:
            print(f"REFUSED {exc}", flush=True)
            refusals += 1
            if refusals == 3:
                return
        else:
            print(f"ACTED {n}", flush=True)
        time.sleep(0.02)


if __name__ == "__main__":
    url, name, key, holder, ttl, mode = sys.argv[1:]
    main(url, name, key, holder, float(ttl), mode)
