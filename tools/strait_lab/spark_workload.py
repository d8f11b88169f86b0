"""A replicator-like Spark driver, run once so its JVM records the classes it loads (strait_lab.class_archive).

It starts the session as the replicator does (strait_replicator.session), runs a SQL aggregate, and a
streaming query of a Python data source written through foreachBatch for a few epochs: the paths
the replicator's driver takes, without clusters. ``python -m strait_lab.spark_workload``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from pyspark.sql import DataFrame
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from strait_replicator.session import build_session

BATCHES = 3


class _Counter(DataSource):
    """A stream of numbers, a few per epoch."""

    @classmethod
    def name(cls) -> str:
        return "strait_archive_counter"

    def schema(self) -> str:
        return "n long"

    def streamReader(self, schema: object) -> DataSourceStreamReader:
        return _CounterReader()


class _CounterReader(DataSourceStreamReader):
    def __init__(self) -> None:
        self._end = 0

    def initialOffset(self) -> dict[str, int]:
        return {"n": 0}

    def latestOffset(self) -> dict[str, int]:
        self._end += 10
        return {"n": self._end}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition((start["n"], end["n"]))]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        first, last = partition.value
        return iter([(n,) for n in range(first, last)])

    def commit(self, end: dict[str, int]) -> None:
        pass


def main() -> None:
    """Run the workload, then stop the session (the JVM writes its archive as it exits)."""
    spark = build_session(master="local[2]", app_name="strait-class-archive")
    spark.range(1000).selectExpr("sum(id)").collect()
    spark.dataSource.register(_Counter)
    batches: list[int] = []

    def write(frame: DataFrame, epoch: int) -> None:
        frame.count()
        batches.append(epoch)

    query = (spark.readStream.format(_Counter.name()).load().writeStream.foreachBatch(write)
             .trigger(processingTime="1 second").start())
    deadline = time.monotonic() + 120
    while len(batches) < BATCHES and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()
    spark.stop()
    if len(batches) < BATCHES:
        raise SystemExit(f"the recording query ran {len(batches)} of {BATCHES} batches in 120 s")


if __name__ == "__main__":
    main()
