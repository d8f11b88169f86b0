"""pytest fixtures on the real lab: Kafka clusters, Redis, Prometheus, strait's processes, unique names.

Session fixtures start the lab's processes once; every test gets unique topic and group names instead of a fresh cluster. Component
logs live under ``.cache/test-labs/<run>``: kept when a test failed (their paths are added to the
failure report), removed after an all-green run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from hypothesis import settings
from xdist.scheduler import LoadScopeScheduling

from strait.paths import cache_dir
from strait_lab import deps
from strait_lab.kafka import KafkaCluster, KafkaClusterSpec
from strait_lab.prometheus import PrometheusServer
from strait_lab.redis import RedisServer
from strait_lab.services import StraitProcess
from tests.oracle.mm2_oracle import ORACLE_SOURCE, Mm2Oracle
from tests.support.jvm import use_quick_jvms
from tests.support.machine import MachineShare, machine_busy_seconds, note_in_timeline
from tests.support.progress import LiveReport, fail_past_deadline, machine_facts, measure_slowness, scale_timeouts
from tests.support.summary import summaries_since

# Hypothesis fails an example slower than 200 ms by default: on a machine loaded by the other worker's
# clusters a pure function's example took longer (a flaky failure that says nothing of the code).
settings.register_profile("strait", deadline=None)
settings.load_profile("strait")

_MARKER_BY_FOLDER = {"unit": "unit", "integration": "integration", "e2e": "e2e"}
_failed_key = pytest.StashKey[bool]()
_log_dirs_key = pytest.StashKey[list[Path]]()
_machine_key = pytest.StashKey[MachineShare]()
_began_key = pytest.StashKey[float]()


def pytest_configure(config: pytest.Config) -> None:
    """Test JVMs compile with C1 only; the process writing the output measures the machine's slowness
    (its workers inherit it) and reports failures as they come (tests/support/progress.py); in a
    pytest-xdist worker: join the run's machine lock, and hand out ports no other worker does."""
    config.stash[_began_key] = time.time()
    use_quick_jvms()
    worker = getattr(config, "workerinput", None)
    if worker is None:  # the process that writes the run's output
        measure_slowness()
        config.pluginmanager.register(LiveReport(config, config.stash[_began_key]), "strait-live-report")
    config.stash[_machine_key] = MachineShare(cache_dir() / "test-machine-lock" if worker else None)
    if worker:
        os.environ["STRAIT_PORT_SHARD"] = f"{worker['workerid'].removeprefix('gw')}/{worker['workercount']}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by its folder (tests/unit, tests/integration, tests/e2e); scale its time limit
    by the machine's slowness; under xdist, order them for the scheduler (:func:`_run_order`)."""
    for item in items:
        for part in Path(str(item.fspath)).parts:
            if part in _MARKER_BY_FOLDER:
                item.add_marker(_MARKER_BY_FOLDER[part])
    scale_timeouts(items, float(config.getini("timeout") or 0))
    worker = getattr(config, "workerinput", None)
    if worker:
        _run_order(items, int(worker["workercount"]))


# Folders whose tests share a package-scoped fixture (the fault drills' rig): one xdist worker runs them all.
_PACKAGE_SCOPES = ("tests/faults/",)
# Seconds the slowest files took in a two-worker run on 2 cores (2026-11-29's timeline; the drills' and
# the compose lab's from one process, 2026-11-28). They start first, so that no long file runs on one
# worker at the end while the other has nothing left.
_SLOWEST_SECONDS = {
    "tests/faults/": 494,
    "tests/compose/test_compose_lab.py": 530,
    "tests/integration/test_disaster_recovery.py": 359,
    "tests/integration/test_replicator.py": 207,
    "tests/integration/test_mm2_takeover.py": 200,
    "tests/integration/test_dead_source_alerts.py": 140,
    "tests/integration/test_bench.py": 130,
    "tests/integration/test_stop_dead_cluster.py": 121,
    "tests/integration/test_bad_input_catalogue.py": 99,
    "tests/integration/test_mm2_scenarios.py": 98,
    "tests/integration/test_copy_tasks.py": 98,
    "tests/integration/test_dashboard_queries.py": 86,
    "tests/integration/test_verify.py": 75,
    "tests/integration/test_replicator_multi_host.py": 74,
    "tests/integration/test_checkpoint_replicas.py": 67,
    "tests/integration/test_replicator_faults.py": 61,
    "tests/integration/test_resume_evidence.py": 57,
    "tests/integration/test_checkpoint.py": 56,
    "tests/integration/test_guide_setups.py": 52,
    "tests/integration/test_failover.py": 44,
    "tests/integration/test_security.py": 40,
    "tests/integration/test_compat_matrix.py": 39,
    "tests/integration/test_guide_tls_setups.py": 34,
}
# The compose lab first builds its images for minutes (7 on a fresh machine), then holds the machine
# in a shared span (tests/support/machine.py): the other workers' tests run beside it, but no timed
# (exclusive) region starts until it ends. So the tests that run first beside it are ones without a
# timed region, about this much of them per other worker (the whole lab on a fresh machine, in the
# units of _SLOWEST_SECONDS: with 450 a fresh run's first timed test waited 161 s for the span's end);
# the drills (alone for minutes) come after this much of other work per other worker.
_COMPOSE_LAB, _DRILLS = "tests/compose/test_compose_lab.py", "tests/faults/"
_COMPOSE_SPAN_SECONDS = 700
_DRILLS_AFTER_SECONDS = 750


def _scope(nodeid: str) -> str:
    """The unit xdist hands to one worker: the test's file, or its folder when listed in _PACKAGE_SCOPES."""
    path = nodeid.split("::", 1)[0]
    return next((scope for scope in _PACKAGE_SCOPES if path.startswith(scope)), path)


def _run_order(items: list[pytest.Item], workers: int) -> None:
    """Sort the tests by file (or package), the slowest first, but the compose lab first of all, then
    files without a timed region (they run beside the lab), and the drills after
    ``_DRILLS_AFTER_SECONDS`` of other work per other worker, their timed ones last."""
    ranked = sorted({_scope(item.nodeid) for item in items}, key=lambda scope: (-_SLOWEST_SECONDS.get(scope, 0), scope))
    if _COMPOSE_LAB in ranked and _DRILLS in ranked:
        timed = {_scope(item.nodeid) for item in items if "machine" in getattr(item, "fixturenames", ())}
        ranked.remove(_COMPOSE_LAB)
        ranked.remove(_DRILLS)
        beside = _first_seconds([scope for scope in ranked if scope not in timed], _COMPOSE_SPAN_SECONDS * max(1, workers - 1))
        ranked = beside + [scope for scope in ranked if scope not in beside]
        before = _first_seconds(ranked, _DRILLS_AFTER_SECONDS * max(1, workers - 1))
        ranked.insert(len(before), _DRILLS)
        ranked.insert(0, _COMPOSE_LAB)
    order = {scope: i for i, scope in enumerate(ranked)}
    # the fault drills that time something come after those that only count (tests/faults/conftest.py)
    items.sort(key=lambda item: (order[_scope(item.nodeid)], "alone_from_here" in getattr(item, "fixturenames", ())))


def _first_seconds(scopes: list[str], seconds: float) -> list[str]:
    """The leading scopes whose measured seconds (``_SLOWEST_SECONDS``) first reach ``seconds``."""
    taken, total = [], 0.0
    for scope in scopes:
        if total >= seconds:
            break
        taken.append(scope)
        total += _SLOWEST_SECONDS.get(scope, 0)
    return taken


class _ByFileOrPackage(LoadScopeScheduling):
    """xdist's scheduling by file (a module's fixtures are set up once), the folders above kept whole,
    in the order of the collection (:func:`_run_order`).

    (xdist's own ``loadgroup`` marks do not work with pytest 9: they rename the node id, which pytest
    9 no longer takes.)"""

    def _split_scope(self, nodeid: str) -> str:
        return _scope(nodeid)

    def schedule(self) -> None:
        """xdist's scheduling, without its reordering by the number of tests per file."""
        self.config.option.loadscopereorder = False
        super().schedule()


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LoadScopeScheduling:
    """The scheduler of ``pytest -n N``: by file, the fault drills' folder as one unit."""
    return _ByFileOrPackage(config, log)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outside pytest-timeout: waiting for the lock is not the test's time
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each test holds the machine shared from set-up to teardown (see tests/support/machine.py)."""
    machine = item.config.stash[_machine_key]
    asked = time.time()
    machine.begin_test()
    began, busy = time.time(), machine_busy_seconds()
    if began - asked > 0.5:
        note_in_timeline("waiting for another to be alone", asked, began)
    try:
        yield
    finally:
        machine.end_test()
        note_in_timeline(item.nodeid, began, time.time(), (busy, machine_busy_seconds()))


def pytest_report_header(config: pytest.Config) -> str:
    """The machine the run is on (cores, memory, disk, speed): CI shows only a run's output."""
    return machine_facts(str(config.rootpath))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that would begin past the run's deadline fails at once (tests/support/progress.py)."""
    fail_past_deadline(item.config.stash[_began_key])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Print the sections tests wrote for this run's summary (tests/support/summary.py)."""
    for title, lines in summaries_since(config.stash.get(_began_key, time.time())):
        terminalreporter.section(title)
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def machine(pytestconfig: pytest.Config) -> MachineShare:
    """This worker's share of the machine: ``with machine.alone():`` around what is timed."""
    return pytestconfig.stash[_machine_key]


@pytest.fixture(scope="module")
def alone_in_module(machine: MachineShare) -> Iterator[None]:
    """The whole module runs with no other xdist worker running a test (its verdicts rest on timing)."""
    with machine.alone():
        yield


@pytest.fixture(scope="module")
def timed_part(machine: MachineShare) -> Iterator[Callable[[], None]]:
    """Call ``timed_part()`` where a module's timed checks begin: from there to the module's end no other
    worker runs a test, while its set-up and untimed checks before that ran beside theirs."""
    with ExitStack() as stack:
        yield lambda: stack.enter_context(machine.alone())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On failure, name the lab log folders in the report and keep them after the run."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        item.session.config.stash[_failed_key] = True
        dirs = item.session.config.stash.get(_log_dirs_key, [])
        if dirs:
            report.sections.append(("strait lab logs (kept)", "\n".join(str(d) for d in dirs)))


@pytest.fixture(scope="session")
def lab_root(request: pytest.FixtureRequest) -> Iterator[Path]:
    """This run's folder for lab component data and logs."""
    root = cache_dir() / "test-labs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    root.mkdir(parents=True)
    request.config.stash[_log_dirs_key] = [root]
    yield root
    keep = os.environ.get("STRAIT_KEEP_TEST_LABS") == "1"  # to read a passing run's logs
    if not keep and not request.config.stash.get(_failed_key, False) and request.session.testsfailed == 0:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka_cluster_factory(lab_root: Path) -> Iterator[Callable[..., KafkaCluster]]:
    """Start more clusters: ``factory("C", brokers=3, authorizer=True, sasl=True)``; stopped at the end."""
    started: list[KafkaCluster] = []

    def start(alias: str, **spec: object) -> KafkaCluster:
        # Tests use fixed, often old record timestamps; time-based retention would delete them at
        # the next cleaner pass, so test clusters keep records unless a test says otherwise. A
        # controller that writes its no-op record every 10 s, not every 0.5 s: an idle 1-broker
        # cluster took 2.0 % of a core instead of 3.0 % (these clusters idle most of a run).
        overrides = {"log.retention.ms": "-1", "metadata.max.idle.interval.ms": "10000",
                     **dict(spec.pop("overrides", {}))}  # type: ignore[call-overload]
        cluster = KafkaCluster(
            KafkaClusterSpec(alias, overrides=overrides, **spec),  # type: ignore[arg-type]
            lab_root / f"kafka-{alias}-{uuid.uuid4().hex[:6]}",
        )
        started.append(cluster)
        cluster.start()
        return cluster

    yield start
    for cluster in started:  # SIGTERM to every node first: the clusters stop in the time of the slowest
        for node in cluster.nodes:
            node.terminate()
    for cluster in reversed(started):
        cluster.stop()


@pytest.fixture
def kafka_cluster_for_test(kafka_cluster_factory: Callable[..., KafkaCluster]) -> Iterator[Callable[..., KafkaCluster]]:
    """``kafka_cluster_factory`` for clusters only this test uses: killed when it ends (an idle cluster
    left running to the session's end costs 1.5-2 % of a core, and a run started a dozen of them)."""
    started: list[KafkaCluster] = []

    def start(alias: str, **spec: object) -> KafkaCluster:
        started.append(kafka_cluster_factory(alias, **spec))
        return started[-1]

    yield start
    for cluster in started:
        cluster.kill()


@pytest.fixture(scope="session")
def source_cluster(kafka_cluster_factory: Callable[..., KafkaCluster]) -> KafkaCluster:
    """Cluster A, the replication source (1 broker)."""
    return kafka_cluster_factory("A")


@pytest.fixture(scope="session")
def target_cluster(kafka_cluster_factory: Callable[..., KafkaCluster]) -> KafkaCluster:
    """Cluster B, the replication target (1 broker)."""
    return kafka_cluster_factory("B")


@pytest.fixture(scope="session")
def redis_server_factory(lab_root: Path) -> Iterator[Callable[..., RedisServer]]:
    """Start a dedicated Redis (for restart or password tests); stopped at the end."""
    started: list[RedisServer] = []

    def start(password: str | None = None, persistent: bool = False) -> RedisServer:
        server = RedisServer(lab_root / f"redis-{uuid.uuid4().hex[:6]}", password=password, persistent=persistent)
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def redis_server(redis_server_factory: Callable[..., RedisServer]) -> RedisServer:
    """The session's shared Redis."""
    return redis_server_factory()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """URL of the shared Redis, emptied for this test."""
    redis_server.client().flushall()
    return redis_server.url


@pytest.fixture(scope="session")
def prometheus_server(lab_root: Path) -> Iterator[PrometheusServer]:
    """A Prometheus scraping whatever tests register with ``add_target``."""
    server = PrometheusServer(lab_root / "prometheus")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Names unique to this test: ``unique_name("orders")`` -> ``orders-test_x-1a2b3c``."""
    test = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:40]

    def make(prefix: str) -> str:
        return f"{prefix}-{test}-{uuid.uuid4().hex[:6]}"

    return make


def _process_starter(state_dir: Path, lab_root: Path, tag: str,
                     started: list[StraitProcess]) -> Callable[..., StraitProcess]:
    """The start function behind :func:`services` and :func:`module_services`."""

    def start(component: str, *args: str, timeout: float = 120.0, env: dict[str, str] | None = None
              ) -> StraitProcess:
        argv = ["--state-dir", str(state_dir), *args] if component == "replicator" else list(args)
        process = StraitProcess(component, argv, lab_root / component, env=env,
                                name=f"{component}-{len(started)}-{tag}")
        started.append(process)
        process.start(timeout=timeout)
        return process

    return start


def _stop_processes(started: list[StraitProcess]) -> None:
    for process in started:
        if process.process.alive():
            process.stop()


@pytest.fixture
def services(tmp_path: Path, lab_root: Path) -> Iterator[Callable[..., StraitProcess]]:
    """The one factory of strait processes in tests: ``services("checkpoint", "--config", path)`` runs
    `strait run checkpoint --config path` until the test ends.

    A replicator gets ``--state-dir <tmp_path>/state`` unless the arguments name another one, so a
    replicator restarted in a test resumes from its own checkpoint, as on its host.
    """
    started: list[StraitProcess] = []
    yield _process_starter(tmp_path / "state", lab_root, tmp_path.name, started)
    _stop_processes(started)


@pytest.fixture(scope="module")
def module_services(tmp_path_factory: pytest.TempPathFactory, lab_root: Path
                    ) -> Iterator[Callable[..., StraitProcess]]:
    """:func:`services` for a module's shared set-up: the processes run until the module ends (give
    each replicator its own ``--state-dir``)."""
    folder = tmp_path_factory.mktemp("module-services")
    started: list[StraitProcess] = []
    yield _process_starter(folder / "state", lab_root, folder.name, started)
    _stop_processes(started)


@pytest.fixture
def replicator(services: Callable[..., StraitProcess]) -> Callable[..., StraitProcess]:
    """``replicator("--config", path)``: `strait run replicator` with this test's state dir."""
    return lambda *args: services("replicator", *args)


@pytest.fixture
def configsync(services: Callable[..., StraitProcess]) -> Callable[..., StraitProcess]:
    """``configsync("--config", path)``: one configsync replica per call."""
    return lambda *args: services("configsync", *args, timeout=60.0)


SCRAM_USERS = {"admin": "admin-secret", "strait": "strait-secret"}


@pytest.fixture(scope="session")
def secured_clusters(kafka_cluster_factory: Callable[..., KafkaCluster]) -> tuple[KafkaCluster, KafkaCluster]:
    """Clusters S and T with StandardAuthorizer and SCRAM users (PLAINTEXT stays a super-user door)."""
    return (kafka_cluster_factory("S", authorizer=True, sasl=True, scram_users=SCRAM_USERS),
            kafka_cluster_factory("T", authorizer=True, sasl=True, scram_users=SCRAM_USERS))


@pytest.fixture(scope="session")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mm2Oracle]:
    """MirrorMaker 2's classes answering requests (tests/oracle), compiled and started once per session."""
    deps.ensure_jars("mm2")
    mm2 = deps.classpath("mm2")
    classes = tmp_path_factory.mktemp("mm2-oracle")
    compiled = subprocess.run([deps.ensure_binary("javac"), "-d", str(classes), "-cp", mm2, str(ORACLE_SOURCE)],
                              capture_output=True, text=True)
    assert compiled.returncode == 0, f"javac failed:\n{compiled.stdout}{compiled.stderr}"
    server = Mm2Oracle(f"{classes}:{mm2}", classes / "oracle.log")
    yield server
    server.close()
