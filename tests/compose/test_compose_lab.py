"""`make test-compose`: the compose lab booted on a real Docker engine and checked end to end.

In order, on one lab: every service healthy; the load generator's group checkpointed on B;
Prometheus scraping every strait service and both brokers with the rules loaded; the load's records
byte-identical in A.orders on B (`strait verify` inside a strait container); checkpoint scaled to 3
and configsync to 2, the group shards spread over the three checkpoint containers; one of them
SIGKILLed and its shards held by the others within one lease TTL; the replicator moved onto the
`spark-cluster` profile (a master and two workers, the replicator as driver, its state volume on the
driver alone) with the load running, its tasks on both workers, and the load again byte-identical on
B; `down -v` leaving nothing. Grafana does not run here (no registry has it): the lab boots without it.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from datetime import datetime
from typing import Any

import pytest

from strait.settings import DEFAULT_LEASE_TTL
from tests.compose.lab import WITHOUT, ComposeLab
from tests.support.waiting import slack, wait_for

# the first test's set-up builds the engine's tools, the base images and the lab's images
pytestmark = [pytest.mark.compose, pytest.mark.slow, pytest.mark.timeout(2400)]

FLOW = "A->B"
GROUP = "orders-app"
STRAIT_JOBS = ("replicator", "configsync", "heartbeat", "checkpoint")
LEASE_TTL = DEFAULT_LEASE_TTL
SHARD_LEASES = "strait:lease:checkpoint:*"
# A dead holder's lease expires at most one TTL after its last renewal; the others then take it at
# their next tick (0.5 s). Timed by the takers' own log lines (docker's timestamps), not by this
# test's polls: the check runs beside other tests, whose load slows each `docker compose exec`.
TAKEOVER_SLACK = 2.0
ACQUIRED = re.compile(r"^(\S+) .*lease acquired name=(\S+) ")
# README's spark-cluster lines, with workers small enough for a 2-core machine.
# The driver's UI on: its REST API tells which executor ran how many tasks.
SPARK_CLUSTER = {"COMPOSE_PROFILES": "spark-cluster", "STRAIT_SPARK_MASTER": "spark://spark-master:7077",
                 "SPARK_WORKER_CORES": "1", "SPARK_WORKER_MEMORY": "1g", "STRAIT_SPARK_UI": "true"}
MASTER = "http://spark-master:8080/json/"
DRIVER = "http://127.0.0.1:4040/api/v1/applications"


def test_every_service_is_healthy(compose_lab: ComposeLab) -> None:
    print(compose_lab.compose("ps", "-a").stdout)
    records = compose_lab.ps()
    by_service = {r["Service"]: r for r in records}
    assert set(by_service) == set(compose_lab.services()), f"not every service started: {sorted(by_service)}"
    for record in records:
        if record["Service"] == "config-init":
            assert record["State"] == "exited" and record["ExitCode"] == 0, record
        else:
            assert record["State"] == "running" and record["Health"] == "healthy", record
    print(f"booted without {', '.join(WITHOUT)} (not on any registry here)")


def test_the_load_generators_group_is_checkpointed_on_b(compose_lab: ComposeLab) -> None:
    def checkpoints() -> list[dict[str, Any]] | None:
        done = compose_lab.exec("checkpoint", "strait", "offsets", "translate", "--flow", FLOW, "--group", GROUP,
                                "--source-down", "--json")
        rows = json.loads(done.stdout)["partitions"] if done.returncode == 0 and done.stdout.strip() else []
        return rows or None
    rows = wait_for(checkpoints, 180, f"checkpoints of {GROUP} on B", interval=3)
    print(f"{len(rows)} partitions of {GROUP} checkpointed on B")


def test_prometheus_scrapes_every_strait_service_and_the_brokers_with_rules_loaded(compose_lab: ComposeLab) -> None:
    base = f"http://127.0.0.1:{compose_lab.env['PROMETHEUS_PORT']}/api/v1"

    def healthy_jobs() -> set[str] | None:
        targets = _get(f"{base}/targets")["data"]["activeTargets"]
        up = {t["labels"]["job"] for t in targets if t["health"] == "up"}
        wanted = {*STRAIT_JOBS, "kafka"}
        return up if wanted <= up else None
    wait_for(healthy_jobs, 120, "every strait service and the brokers scraped", interval=3)
    brokers = {t["labels"].get("cluster") for t in _get(f"{base}/targets")["data"]["activeTargets"]
               if t["labels"]["job"] == "kafka" and t["health"] == "up"}
    assert brokers == {"a", "b"}, brokers
    groups = _get(f"{base}/rules")["data"]["groups"]
    assert groups and any(rule["name"] == "StraitSourceUnreachable" for g in groups for rule in g["rules"])


def test_the_load_arrives_byte_identical_on_b(compose_lab: ComposeLab) -> None:
    _stop_load_and_verify(compose_lab, "strait verify of A.orders with exit code 0")


def test_checkpoint_shards_spread_over_three_replicas_and_move_off_a_killed_one(compose_lab: ComposeLab) -> None:
    scale = ("--scale", "checkpoint=3", "--scale", "configsync=2")
    compose_lab.compose("up", "--detach", "--wait", "--wait-timeout", "300", *scale, *compose_lab.services())
    hosts = {c["ID"][:12]: c["Name"] for c in compose_lab.containers("checkpoint")}
    assert len(hosts) == 3 and len(compose_lab.containers("configsync")) == 2

    def spread() -> dict[str, str] | None:
        held = _shard_holders(compose_lab)
        holders = {holder.split("-", 1)[0] for holder in held.values()}
        return held if holders == set(hosts) else None
    held = wait_for(spread, 120, "the checkpoint shards spread over three containers", interval=2)
    print("shards: " + ", ".join(f"{shard} -> {hosts[h.split('-', 1)[0]]}" for shard, h in sorted(held.items())))

    victim = next(iter(hosts))
    victims_shards = {shard for shard, holder in held.items() if holder.startswith(victim)}

    def moved() -> dict[str, str] | None:
        now = _shard_holders(compose_lab)
        return now if len(now) == len(held) and all(not h.startswith(victim) for h in now.values()) else None
    compose_lab.host.run("kill", "--signal", "KILL", hosts[victim], timeout=60)
    compose_lab.host.run("wait", hosts[victim], timeout=60)  # its death recorded: FinishedAt is set
    killed = _docker_time(compose_lab.host.run("inspect", "--format", "{{.State.FinishedAt}}", hosts[victim],
                                               timeout=60).stdout.strip())
    wait_for(moved, LEASE_TTL * 3, "the killed container's shards taken by the others", interval=1)
    taken = _acquired_since(compose_lab, [name for cid, name in hosts.items() if cid != victim], killed)
    assert victims_shards <= set(taken), f"no taker logged shards {sorted(victims_shards - set(taken))}"
    took = max(taken[shard] for shard in victims_shards) - killed
    print(f"shards of the SIGKILLed checkpoint container held by the others {took:.1f}s after the kill "
          f"(lease TTL {LEASE_TTL:.0f}s)")
    assert took <= LEASE_TTL + slack(TAKEOVER_SLACK), f"the shards moved {took:.1f}s after the kill, more than one lease TTL"


def test_the_replicator_moves_onto_the_spark_cluster_profile_and_copies_through_both_workers(
    compose_lab: ComposeLab,
) -> None:
    compose_lab.env.update(SPARK_CLUSTER)  # from here on, `down` included
    began = time.monotonic()
    compose_lab.compose("up", "--detach", "--wait", "--wait-timeout", "420", "--scale", "spark-worker=2",
                        "--scale", "checkpoint=3", "--scale", "configsync=2", *compose_lab.services())
    print(f"spark-cluster profile up in {time.monotonic() - began:.0f}s (the load generator running again)")
    assert len(compose_lab.containers("spark-worker")) == 2

    def executors_on_both_workers() -> dict[str, Any] | None:
        state = _json_in(compose_lab, "replicator", MASTER)
        alive = [w for w in state["workers"] if w["state"] == "ALIVE"] if state else []
        busy = len(alive) == 2 and all(w["coresused"] == 1 for w in alive)
        return state if busy and len(state["activeapps"]) == 1 else None
    state = wait_for(executors_on_both_workers, 240, "the replicator's executors on both Spark workers",
                     interval=2)
    app = state["activeapps"][0]
    print(f"Spark application {app['name']} ({app['id']}) on {app['cores']} cores: "
          + ", ".join(f"{w['host']} {w['coresused']}/{w['cores']} cores" for w in state["workers"]))
    assert app["cores"] == 2

    def tasks_on_both() -> list[dict[str, Any]] | None:
        applications = _json_in(compose_lab, "replicator", DRIVER)
        executors = _json_in(compose_lab, "replicator", f"{DRIVER}/{applications[0]['id']}/executors") \
            if applications else None
        working = [e for e in executors or [] if e["id"] != "driver" and e["activeTasks"] + e["completedTasks"] > 0]
        return working if len({e["hostPort"].rsplit(":", 1)[0] for e in working}) == 2 else None
    working = wait_for(tasks_on_both, 240, "copy tasks run by the executors of both workers", interval=2)
    print("tasks per executor (active, completed): "
          + ", ".join(f"{e['hostPort']} {e['activeTasks']}, {e['completedTasks']}" for e in working))

    copied = _replicated_total(compose_lab)
    wait_for(lambda: _replicated_total(compose_lab) > copied + 500, 180,
             "records copied by the tasks on the workers", interval=2)
    report = _stop_load_and_verify(compose_lab, "strait verify of A.orders after the move onto the cluster")
    print(f"copied twice across the move: {sum(p['duplicates'] for p in report['partitions'])}")


def test_down_leaves_no_container_network_or_volume(compose_lab: ComposeLab) -> None:
    compose_lab.down()
    assert compose_lab.leftovers() == {}


def _shard_holders(lab: ComposeLab) -> dict[str, str]:
    """Checkpoint shard lease -> holder (``<hostname>-<pid>-<nonce>``), read from the lab's Redis."""
    script = (f'for key in $(redis-cli -a "$REDIS_PASSWORD" --no-auth-warning --scan --pattern "{SHARD_LEASES}"); '
              'do echo "$key $(redis-cli -a "$REDIS_PASSWORD" --no-auth-warning hget "$key" holder)"; done')
    done = lab.exec("redis", "sh", "-c", script, check=True)
    pairs = (line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    return {key: holder for key, holder in pairs if re.search(r"#\d+/\d+$", key) and holder}  # not the fences


def _acquired_since(lab: ComposeLab, containers: list[str], since: float) -> dict[str, float]:
    """Shard lease (its Redis key) -> when one of ``containers`` first logged acquiring it after
    ``since`` (epoch seconds on the engine's clock, from docker's timestamps of the log lines)."""
    taken: dict[str, float] = {}
    for container in containers:
        done = lab.host.run("logs", "--timestamps", "--since", f"{since:.3f}", container, timeout=60)
        for line in (done.stdout + done.stderr).splitlines():
            found = ACQUIRED.match(line)
            if found:
                at = _docker_time(found[1])
                key = f"strait:lease:{found[2]}"
                taken[key] = min(at, taken.get(key, at))
    return taken


def _docker_time(stamp: str) -> float:
    """Epoch seconds of a time docker gives (RFC 3339 in UTC, to the nanosecond)."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(whole + "+00:00").timestamp() + float(f"0.{fraction or 0}")


def _stop_load_and_verify(lab: ComposeLab, what: str) -> dict[str, Any]:
    """Stop the load generator (a still topic: verify compares all of it), then `strait verify` inside a
    strait container until it exits 0; its report."""
    lab.compose("stop", "loadgen", timeout=120)

    def verified() -> dict[str, Any] | None:
        done = lab.exec("configsync", "strait", "verify", "--flow", FLOW, "--topic", "orders", "--json", timeout=300)
        return json.loads(done.stdout) if done.returncode == 0 else None
    report = wait_for(verified, 240, what, interval=3)
    print(json.dumps(report)[:1000])
    return report


def _json_in(lab: ComposeLab, service: str, url: str) -> Any:
    """A JSON document fetched inside ``service``'s container (None while it does not answer)."""
    script = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=5).read().decode())"
    done = lab.exec(service, "python", "-c", script)
    try:
        return json.loads(done.stdout) if done.returncode == 0 else None
    except ValueError:
        return None


def _replicated_total(lab: ComposeLab) -> float:
    """The replicator's strait_replicated_records_total, read from its /metrics inside its container."""
    script = ("import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9400/metrics', "
              "timeout=5).read().decode())")
    done = lab.exec("replicator", "python", "-c", script)
    return sum(float(line.rsplit(" ", 1)[1]) for line in done.stdout.splitlines()
               if line.startswith("strait_replicated_records_total{"))


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return dict(json.load(response))
