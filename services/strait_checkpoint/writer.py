"""Writing one flow's checkpoints to the target: the changed ones only, never backwards, again until acknowledged."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaError, Producer

from strait.coord.leases import LeaseKeeper
from strait.records import Checkpoint
from strait.translation import CheckpointKey, PartitionTranslation, TranslationError
from strait_checkpoint import metrics

FLUSH_TIMEOUT = 15.0


class CheckpointWriter:
    """The newest checkpoint of every (group, remote topic, partition) and the writes not acknowledged yet."""

    def __init__(self, flow: str) -> None:
        self.flow = flow
        self.last: dict[CheckpointKey, Checkpoint] = {}
        self._sent: set[CheckpointKey] = set()  # written in the current pass
        self._resend: set[CheckpointKey] = set()  # written but not acknowledged
        self._delivery_errors: list[KafkaError] = []

    def begin_pass(self) -> None:
        """A new pass: what it writes is what its :meth:`flush` waits for."""
        self._sent = set()

    def emit(self, producer: Producer, topic: str, group: str, translations: list[PartitionTranslation],
             keeper: LeaseKeeper) -> int:
        """Write the group's changed checkpoints while ``keeper``'s lease holds; returns how many."""
        emitted = 0
        for t in translations:
            if t.downstream is None:
                continue
            key = (group, t.remote_topic, t.partition)
            checkpoint = Checkpoint(group, t.remote_topic, t.partition, t.upstream, t.downstream, t.metadata)
            previous = self.last.get(key)
            if previous == checkpoint and key not in self._resend:
                continue
            if previous is not None and checkpoint.downstream_offset < previous.downstream_offset \
                    and checkpoint.upstream_offset >= previous.upstream_offset:
                continue  # never move a checkpoint back unless the source group moved back
            keeper.ensure_valid()  # only the shard's lease holder writes
            producer.produce(topic, key=checkpoint.key_bytes(), value=checkpoint.value_bytes(),
                             partition=0, on_delivery=self._delivered)
            producer.poll(0)
            self.last[key] = checkpoint
            self._sent.add(key)
            emitted += 1
        return emitted

    def _delivered(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            self._delivery_errors.append(err)
        else:
            metrics.CHECKPOINTS.labels(self.flow).inc()

    def flush(self, producer: Producer, target: str) -> None:
        """Wait for the pass's checkpoints; a failed one is written again next pass, even unchanged."""
        remaining = producer.flush(FLUSH_TIMEOUT)
        failed, self._delivery_errors = self._delivery_errors, []
        if not remaining and not failed:
            self._resend -= self._sent
            return
        self._resend |= self._sent
        detail = failed[0].str() if failed else f"{remaining} not acknowledged in {FLUSH_TIMEOUT:.0f}s"
        raise TranslationError(f"cluster {target}: writing checkpoints failed: {detail}")

    def keep_only(self, owned: Callable[[CheckpointKey], bool]) -> None:
        """Forget the checkpoints of groups this process no longer serves."""
        self.last = {k: v for k, v in self.last.items() if owned(k)}
        self._resend = {k for k in self._resend if owned(k)}
