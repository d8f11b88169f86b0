"""How the replicator's streaming source plans epochs: where partitions start, which task copies them."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strait.config.model import SyncsLocation
from strait.flow_spec import FlowSpec
from strait.kafka.admin import ClusterUnreachableError, KafkaAdminError
from strait.policy import DefaultReplicationPolicy
from strait_replicator import source
from strait_replicator.live import Hold
from strait_replicator.planner import (SMALL_BACKLOG, CopyTask, EpochPlanner, SourcePlan, assign_partitions, epoch_starts,
                                       logged_epoch, resumed_ranges)
from strait_replicator.source import ClusterSources
from strait_replicator.state import CheckpointFormatError, CheckpointLog, EpochOffsets, Offsets, epoch_of_log_text, is_local
from strait_replicator.writer import MIN_TASK_SECONDS, CopyRange, EpochLimits

keys = st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 5))
offsets = st.dictionaries(keys, st.integers(0, 10**12), max_size=12)


@given(offsets, offsets, st.integers(-1, 10**6))
def test_an_epoch_entry_survives_sparks_offsets_log(start: Offsets, until: Offsets, epoch: int) -> None:
    entry = EpochOffsets(epoch, start, until)
    assert EpochOffsets.from_json(entry.to_json()) == entry


@given(st.dictionaries(keys, st.tuples(st.integers(0, 1_000), st.integers(0, 2 * SMALL_BACKLOG)), max_size=18),
       st.integers(1, 8))
@settings(max_examples=300, deadline=None)
def test_tasks_get_every_partition_once_with_about_equal_backlog_and_count(
        spans: dict[tuple[str, int], tuple[int, int]], tasks: int) -> None:
    ranges = [CopyRange(topic, p, start) for (topic, p), (start, _) in sorted(spans.items())]
    until = {key: start + backlog for key, (start, backlog) in spans.items()}
    groups = assign_partitions(ranges, until, tasks)
    assert len(groups) == min(tasks, len(ranges))
    assert sorted((r for g in groups for r in g), key=lambda r: (r.topic, r.partition)) == ranges
    backlogs = [sum(spans[(r.topic, r.partition)][1] for r in g) for g in groups]
    biggest = max((backlog for _, backlog in spans.values()), default=0)
    sizes = [len(g) for g in groups]
    if biggest >= SMALL_BACKLOG:  # catching up: greedy largest-first balancing
        assert max(backlogs) - min(backlogs) <= biggest
    else:  # keeping up: dealt out in name order, the same groups whatever the backlogs
        assert not sizes or max(sizes) - min(sizes) <= 1
        assert groups == assign_partitions(ranges, {}, tasks)


class _Clusters:
    """The clusters as the planner sees them, given instead of read (pure planning logic)."""

    def __init__(self, latest: Offsets, copied: Offsets | None = None) -> None:
        self.latest, self.copied = latest, dict(copied or {})  # the source's ends, the progress on the target
        self.stopping = False  # a stop record of this query was read
        self.leaders_slow = False  # the source's leaders answer no quick listing

    def source_ends(self, wait: bool) -> Offsets | None:
        if not wait and self.leaders_slow:
            return None
        return dict(self.latest)

    def progress(self) -> Offsets:
        return dict(self.copied)

    def stop_requested(self, read: bool) -> bool:
        return self.stopping

    def progress_positions(self) -> tuple[tuple[int, int], ...]:
        return ()

    def holds(self) -> tuple[Hold, ...]:
        return ()


def _planner(plan: SourcePlan, latest: Offsets, copied: Offsets | None = None) -> tuple[EpochPlanner, _Clusters]:
    clusters = _Clusters(latest, copied)
    return EpochPlanner(plan, clusters), clusters


def _plan(tmp_path: Path, partitions: tuple[tuple[str, int], ...] = (("t", 2),), tasks: int = 2,
          rate: float = 0.0, resume: Offsets | None = None, last_epoch: EpochOffsets | None = None,
          on_target: Offsets | None = None) -> SourcePlan:
    spec = FlowSpec("A->B", "A", "B", DefaultReplicationPolicy(), syncs=SyncsLocation("A", "syncs"))
    return SourcePlan(partitions, tasks, str(tmp_path), spec, epoch_seconds=5.0, max_records_per_epoch=1000,
                      records_per_second=rate, resume=tuple(sorted((resume or {}).items())), last_epoch=last_epoch,
                      on_target=tuple(sorted((on_target or {}).items())))


def _planned(planner: EpochPlanner) -> EpochOffsets:
    """The planner's next epoch, through Spark's offsets log (written, then read to run it)."""
    return EpochOffsets.from_json(planner.next_epoch().to_json())


def test_each_epoch_starts_where_the_progress_on_the_target_says_else_where_the_last_one_started(
        tmp_path: Path) -> None:
    planner, clusters = _planner(_plan(tmp_path, resume={("t", 0): 3, ("t", 1): 0}), latest={("t", 0): 10, ("t", 1): 4})
    first = _planned(planner)
    assert first == EpochOffsets(0, {("t", 0): 3, ("t", 1): 0}, {("t", 0): 10, ("t", 1): 4})
    clusters.copied = {("t", 0): 10}  # partition 1 copied nothing: it stays
    second = _planned(planner)
    assert second.epoch == 1 and second.start == {("t", 0): 10, ("t", 1): 0}
    clusters.copied = {}  # the progress cannot be read: where the last epoch started, never further
    third = _planned(planner)
    assert third.epoch == 2 and third.start == second.start


_planned_keys = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
_some_offsets = st.dictionaries(st.sampled_from(_planned_keys), st.integers(0, 10_000))


@given(resume=st.fixed_dictionaries({key: st.integers(0, 10_000) for key in _planned_keys}),
       logged=st.none() | st.tuples(st.integers(0, 50), _some_offsets), copied=_some_offsets,
       on_target=_some_offsets, replayed=st.booleans(), rate=st.sampled_from([0.0, 300.0]),
       copiers=st.integers(1, 7), tasks=st.integers(1, 4))
@settings(max_examples=300, deadline=None)
def test_a_head_start_starts_every_partition_where_the_querys_first_epoch_does(
        tmp_path_factory: pytest.TempPathFactory, resume: Offsets, logged: tuple[int, Offsets] | None,
        copied: Offsets, on_target: Offsets, replayed: bool, rate: float, copiers: int, tasks: int) -> None:
    """The driver's head start copies until the first epoch's tasks take over: it must start each
    partition exactly where they would have (lower copies again, higher skips records), each
    partition in one of its copiers, as many as the epoch's tasks (one at this rate limit) and at most
    ``copiers``, which share the flow's rate limit."""
    latest = {key: 20_000 for key in _planned_keys}
    last = None if logged is None else EpochOffsets(logged[0], logged[1], {key: 20_000 for key in logged[1]})
    plan = _plan(tmp_path_factory.getbasetemp(), partitions=(("a", 3), ("b", 2)), tasks=tasks, rate=rate,
                 resume=resume, last_epoch=last, on_target=on_target)
    heads = _planner(plan, latest, copied)[0].head_start(copiers)
    assert len(heads) == (1 if rate else min(copiers, tasks))
    for head in heads:
        assert head.epoch == (0 if last is None else last.epoch + 1)
        assert head.limits.task_seconds() == float("inf")
        assert head.limits.records_per_second == rate / len(heads)
    head_starts = {(r.topic, r.partition): r.start for head in heads for r in head.ranges}
    assert sorted(head_starts) == _planned_keys and sum(len(head.ranges) for head in heads) == len(_planned_keys)
    planner = _planner(plan, latest, copied)[0]
    # a query resumed from its checkpoint runs its newest epoch again when it was not committed
    first = last if replayed and last is not None else planner.next_epoch()
    starts = {(r.topic, r.partition): r.start for task in planner.tasks(first) for r in task.ranges}
    assert starts == {key: head_starts[key] for key in starts}
    assert first is last or sorted(starts) == _planned_keys


def test_a_replayed_epoch_goes_on_where_the_progress_says(tmp_path: Path) -> None:
    resume = {("t", 0): 0, ("t", 1): 0}
    planner, clusters = _planner(_plan(tmp_path, resume=resume), latest={("t", 0): 10, ("t", 1): 4})
    epoch = _planned(planner)
    starts = {(r.topic, r.partition): r.start for task in planner.tasks(epoch) for r in task.ranges}
    assert starts == epoch.start, "the epoch just planned starts where its planning read the progress"
    # the driver died mid-epoch; its tasks had copied this far; the next driver replays the epoch
    replaying, _ = _planner(_plan(tmp_path, resume=resume, last_epoch=epoch), latest={}, copied={("t", 0): 6})
    starts = {(r.topic, r.partition): r.start for task in replaying.tasks(epoch)
              for r in task.ranges}
    assert starts == {("t", 0): 6, ("t", 1): 0}
    assert {task.replayed for task in planner.tasks(epoch)} == {False}
    assert {task.replayed for task in replaying.tasks(epoch)} == {True}


def test_no_epoch_starts_below_where_the_evidence_says_the_target_holds_every_record(tmp_path: Path) -> None:
    """A run killed before one task's first progress record: the checkpoint's epoch says 0, the offset
    syncs on the target say 8,000 were copied; the replayed epoch and the next start there, not at 0."""
    logged = EpochOffsets(0, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 9000, ("t", 1): 9000})
    plan = _plan(tmp_path, resume={("t", 0): 8000, ("t", 1): 9000}, last_epoch=logged, on_target={("t", 0): 8000})
    planner, clusters = _planner(plan, latest={("t", 0): 9500, ("t", 1): 9500}, copied={})
    starts = {(r.topic, r.partition): r.start for task in planner.tasks(logged) for r in task.ranges}
    assert starts == {("t", 0): 8000, ("t", 1): 0}, "a policy's start (t-1: start latest) is no floor"
    clusters.copied = {("t", 1): 4000}  # the replayed epoch's task copied nothing new of t-0
    assert _planned(planner).start == {("t", 0): 8000, ("t", 1): 4000}
    clusters.copied = {("t", 0): 100}  # t-0 deleted and re-created: its progress says, not the old evidence
    assert _planned(planner).start == {("t", 0): 100, ("t", 1): 4000}
    clusters.copied = {}  # progress not read: where the last epoch started, not the old evidence
    assert _planned(planner).start == {("t", 0): 100, ("t", 1): 4000}


def test_a_partition_whose_leader_did_not_answer_is_still_copied_and_is_no_reset(tmp_path: Path) -> None:
    planner, clusters = _planner(_plan(tmp_path, resume={("t", 0): 0, ("t", 1): 0}), latest={("t", 0): 10, ("t", 1): 4})
    _planned(planner)
    clusters.copied = {("t", 0): 10, ("t", 1): 4}
    clusters.latest = {("t", 0): -1001, ("t", 1): 8}  # librdkafka's answer for a partition without a leader
    epoch = _planned(planner)
    assert epoch.until == {("t", 0): 10, ("t", 1): 8}, "no end known: the epoch's start, never below it"
    copied = sorted((r.topic, r.partition) for task in planner.tasks(epoch) for r in task.ranges)
    assert copied == [("t", 0), ("t", 1)], "both partitions get a task in the epoch"


def test_a_stop_request_plans_no_new_epoch(tmp_path: Path) -> None:
    planner, clusters = _planner(_plan(tmp_path, resume={("t", 0): 0, ("t", 1): 0}), latest={("t", 0): 5, ("t", 1): 5})
    first = _planned(planner)
    clusters.copied = {("t", 0): 5}
    clusters.stopping = True
    assert _planned(planner) == first  # the same offset: Spark starts no batch
    # A stop read while its epoch was being planned: its tasks watch from after it, so they end at once
    assert all(task.limits.ends_at <= time.time() for task in planner.tasks(first))
    clusters.stopping = False
    assert _planned(planner).start == {("t", 0): 5, ("t", 1): 0}


def test_a_resumed_stream_goes_on_from_the_progress_and_new_partitions_start_where_the_evidence_says(
        tmp_path: Path) -> None:
    logged = EpochOffsets(4, {("t", 0): 7, ("gone", 0): 9}, {("t", 0): 9})  # the checkpoint's newest epoch
    plan = _plan(tmp_path, partitions=(("t", 1), ("u", 1)), resume={("t", 0): 0, ("u", 0): 2}, last_epoch=logged)
    planner, clusters = _planner(plan, latest={("t", 0): 9, ("u", 0): 6}, copied={("t", 0): 9})
    entry = _planned(planner)
    # A topic no longer planned keeps its offset, so it resumes there if it comes back.
    assert entry == EpochOffsets(5, {("t", 0): 9, ("u", 0): 2, ("gone", 0): 9}, {("t", 0): 9, ("u", 0): 6})


@pytest.mark.parametrize(("rate", "tasks"), [(0.0, 2), (200.0, 1), (120_000.0, 2)])
def test_partitions_become_tasks_that_share_the_epochs_limits(tmp_path: Path, rate: float, tasks: int) -> None:
    planner, clusters = _planner(_plan(tmp_path, partitions=(("t", 3),), rate=rate), latest={})
    epoch = EpochOffsets(0, {("t", 0): 1, ("t", 1): 2, ("t", 2): 3}, {("t", 0): 1, ("t", 2): 9})  # t-1 deleted
    planned = planner.tasks(epoch)
    assert len(planned) == tasks
    assert sorted(r.partition for task in planned for r in task.ranges) == [0, 2]
    for task in planned:
        assert time.time() < task.limits.ends_at <= time.time() + task.limits.seconds  # the same for every task
        assert task.limits.max_records == 1000 // tasks
        assert task.limits.records_per_second == rate / tasks


def test_every_epoch_lasts_the_configured_time_and_tasks_know_their_epoch(tmp_path: Path) -> None:
    planner, clusters = _planner(_plan(tmp_path), latest={})
    epoch = EpochOffsets(7, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 1, ("t", 1): 1}).to_json()
    tasks = [task for _ in range(2) for task in planner.tasks(EpochOffsets.from_json(epoch))]
    assert {(task.epoch, task.limits.seconds) for task in tasks} == {(7, 5.0)}


def test_a_task_copying_an_epoch_again_resumes_where_the_progress_since_its_planning_says() -> None:
    ranges = (CopyRange("t", 0, 100), CopyRange("t", 1, 50), CopyRange("t", 2, None))
    task = CopyTask(3, ranges, EpochLimits(seconds=5.0, max_records=10))
    resumed = resumed_ranges(task, {("t", 0): 180, ("t", 1): 20, ("t", 2): 9}, "A->B")
    assert resumed == [CopyRange("t", 0, 180), CopyRange("t", 1, 50), CopyRange("t", 2, None)], \
        "only forward, and a partition copied from its earliest offset has no start to move"


_OFFSETS = st.dictionaries(st.tuples(st.just("t"), st.integers(0, 5)), st.integers(0, 1000), max_size=6)


@given(planned=_OFFSETS, progress=_OFFSETS, floor=_OFFSETS)
def test_an_epoch_starts_at_the_progress_even_lower_and_elsewhere_no_lower_than_the_evidence(
        planned: Offsets, progress: Offsets, floor: Offsets) -> None:
    starts = epoch_starts(planned, progress, floor)
    assert set(starts) == set(planned) | set(progress)
    for key, at in starts.items():
        if key in progress:
            assert at == progress[key], "the progress on the target wins (a re-created topic starts lower)"
        else:
            assert at == max(planned[key], floor.get(key, planned[key]))


@given(planned=_OFFSETS, progress=_OFFSETS)
def test_a_copier_taking_partitions_over_never_goes_back_from_where_its_epoch_was_planned(
        planned: Offsets, progress: Offsets) -> None:
    task = CopyTask(1, tuple(CopyRange(t, p, at) for (t, p), at in sorted(planned.items())),
                    EpochLimits(seconds=5.0, max_records=10))
    for copy in resumed_ranges(task, progress, "A->B"):
        assert copy.start == max(planned[(copy.topic, copy.partition)], progress.get((copy.topic, copy.partition), 0))


def test_every_task_of_an_epoch_ends_at_the_same_time_and_a_late_one_still_copies() -> None:
    now = time.time()
    assert EpochLimits(seconds=5.0, max_records=1).task_seconds() == 5.0  # no end time: from the task's start
    assert 2.5 < EpochLimits(seconds=5.0, max_records=1, ends_at=now + 3).task_seconds() <= 3.0
    assert EpochLimits(seconds=5.0, max_records=1, ends_at=now - 3).task_seconds() == MIN_TASK_SECONDS


def test_an_offsets_log_entry_of_another_format_names_the_checkpoint_and_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(CheckpointFormatError, match=f"checkpoint {tmp_path} was written by an older strait.*Move"):
        logged_epoch({"t": {"0": 5}}, _plan(tmp_path))  # a per-partition offsets entry, as Spark's Kafka source writes
    assert epoch_of_log_text('v1\n{"batchWatermarkMs":0}\n{"t": {"0": 5}}') is None


def test_leaders_slow_at_a_change_of_epochs_start_it_on_the_last_ends_once(tmp_path: Path) -> None:
    planner, clusters = _planner(_plan(tmp_path, resume={("t", 0): 0, ("t", 1): 0}), latest={("t", 0): 10, ("t", 1): 4})
    first = _planned(planner)
    clusters.copied, clusters.latest, clusters.leaders_slow = {("t", 0): 6}, {("t", 0): 20, ("t", 1): 9}, True
    second = _planned(planner)
    assert second.until == {("t", 0): 10, ("t", 1): 4}, "the last epoch's ends, not waited for"
    assert second.start == {("t", 0): 6, ("t", 1): 0}
    third = _planned(planner)
    assert third.until == {("t", 0): 20, ("t", 1): 9}, "the next change of epochs waits for the leaders"
    assert first.epoch + 2 == third.epoch
    clusters.copied = {("t", 0): 25}  # copied past the last known end meanwhile: no end below a start
    assert _planned(planner).until == {("t", 0): 25, ("t", 1): 9}
    clusters.leaders_slow, clusters.latest = False, {("t", 0): 30, ("t", 1): 9}
    assert _planned(planner).until == {("t", 0): 30, ("t", 1): 9}, "waited for after a fallback"
    clusters.latest = {("t", 0): -1001, ("t", 1): 12}  # one leader not answering the quick try in time
    assert _planned(planner).until == {("t", 0): 30, ("t", 1): 12}, "its last end known"
    clusters.leaders_slow, clusters.latest = True, {("t", 0): 40, ("t", 1): 15}
    assert _planned(planner).until == {("t", 0): 40, ("t", 1): 15}, "so the next one waits"


def test_a_querys_first_change_of_epochs_waits_for_the_leaders(tmp_path: Path) -> None:
    logged = EpochOffsets(3, {("t", 0): 5, ("t", 1): 5}, {("t", 0): 9, ("t", 1): 9})
    planner, clusters = _planner(_plan(tmp_path, last_epoch=logged), latest={("t", 0): 30, ("t", 1): 30})
    clusters.leaders_slow = True  # another process planned epoch 3: its ends may name other partitions
    assert _planned(planner).until == {("t", 0): 30, ("t", 1): 30}


def test_the_quick_listing_gives_up_on_a_transient_error_and_raises_any_other(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    renewed: list[bool] = []

    class _Admin:
        def get(self) -> object:
            return object()

        def renew(self, *_: object) -> None:
            renewed.append(True)
    monkeypatch.setattr(source, "cached_admin", lambda _config: _Admin())
    clusters = ClusterSources(_plan(tmp_path))

    def unreachable(*_: object, **__: object) -> Offsets:
        raise ClusterUnreachableError("cluster A: no partition leader answered")
    monkeypatch.setattr(source, "list_offsets_per_leader", unreachable)
    assert clusters.source_ends(wait=False) is None and renewed == [True]

    def refused(*_: object, **__: object) -> Offsets:
        raise KafkaAdminError("cluster A: not authorized to describe topic t")
    monkeypatch.setattr(source, "list_offsets_per_leader", refused)
    with pytest.raises(KafkaAdminError):
        clusters.source_ends(wait=False)


def test_a_state_location_is_local_unless_it_names_another_file_system() -> None:
    assert is_local("/var/lib/strait") and is_local("relative/state") and is_local("file:///var/lib/strait")
    assert not is_local("hdfs://namenode/strait") and not is_local("s3a://bucket/strait")


@pytest.mark.parametrize("as_uri", [False, True])
def test_a_local_checkpoint_is_read_without_sparks_jvm(tmp_path: Path, as_uri: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The head start needs the checkpoint's newest epoch before the JVM is up: a local one is read
    from the disk (Spark's offsets-log layout: a version line, the batch metadata, the offset); a
    folder that a Hadoop configuration may put on another file system is read through the JVM."""
    for name in ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "PYSPARK_GATEWAY_PORT"):
        monkeypatch.delenv(name, raising=False)
    offsets, commits = tmp_path / "offsets", tmp_path / "commits"
    offsets.mkdir()
    commits.mkdir()
    for batch in (3, 4):
        entry = EpochOffsets(batch, {("t", 0): batch * 10}, {("t", 0): batch * 10 + 5})
        (offsets / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(entry.to_json())}')
    (offsets / ".5.tmp").write_text("half written")
    (commits / "3").write_text('v1\n{"nextBatchWatermarkMs":0}')

    def no_session() -> None:
        raise AssertionError("the JVM was asked")
    log = CheckpointLog(tmp_path.as_uri() if as_uri else str(tmp_path), no_session)
    assert log.newest_epoch() == EpochOffsets(4, {("t", 0): 40}, {("t", 0): 45})
    assert log.uncommitted_batch() == 4
    assert CheckpointLog(str(tmp_path / "none"), no_session).newest_epoch() is None
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    if as_uri:
        assert log.newest_epoch() is not None and CheckpointLog(tmp_path.as_uri(), no_session).uncommitted_batch() == 4
    else:
        with pytest.raises(AssertionError, match="the JVM was asked"):
            CheckpointLog(str(tmp_path), no_session).newest_epoch()


class _SlowClusters(_Clusters):
    """Clusters whose source ends take ``seconds`` to list (the planner's clock moved on by then)."""

    def __init__(self, latest: Offsets, clock: list[float], seconds: float) -> None:
        super().__init__(latest)
        self.clock, self.seconds = clock, seconds

    def source_ends(self, wait: bool) -> Offsets | None:
        self.clock[0] += self.seconds
        return super().source_ends(wait)


@pytest.mark.parametrize(("seconds", "linger"), [(0.5, 1.5), (22.0, 66.0)])
def test_copiers_wait_longer_for_the_next_epoch_when_planning_is_slow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seconds: float, linger: float) -> None:
    from strait_replicator import planner as planner_module
    clock = [1000.0]
    monkeypatch.setattr(planner_module.time, "monotonic", lambda: clock[0])
    planner = EpochPlanner(_plan(tmp_path, resume={("t", 0): 0, ("t", 1): 0}),
                           _SlowClusters({("t", 0): 10, ("t", 1): 10}, clock, seconds))
    tasks = planner.tasks(_planned(planner))
    assert tasks and all(task.limits.linger_seconds == pytest.approx(linger) for task in tasks)


def test_copiers_wait_for_the_next_epoch_as_long_as_the_last_tasks_took_to_come(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first epoch's copiers wait 1.5 times the time from the plan to its tasks; later ones 1.5 times the
    last turnaround (from the previous epoch's end to the next tasks)."""
    from strait_replicator import planner as planner_module
    wall = [1000.0]
    monkeypatch.setattr(planner_module.time, "time", lambda: wall[0])
    planner = EpochPlanner(replace(_plan(tmp_path, resume={("t", 0): 0, ("t", 1): 0}), made_at=990.0),
                           _Clusters({("t", 0): 10, ("t", 1): 10}))
    wall[0] += 26.0  # a wide flow's start: the query, listing every end, Spark's first batch
    first = planner.tasks(_planned(planner))
    assert first and all(task.limits.linger_seconds >= 1.5 * 36.0 for task in first)
    wall[0] = first[0].limits.ends_at + 44.0  # the next epoch's tasks come 44 s after this one ended
    second = planner.tasks(_planned(planner))
    assert second and all(task.limits.linger_seconds >= 1.5 * 44.0 for task in second)
    wall[0] = second[0].limits.ends_at + 1.0  # back to back: the shortest wait is the copier's own
    third = planner.tasks(_planned(planner))
    assert third and all(task.limits.linger_seconds < 20.0 for task in third)
