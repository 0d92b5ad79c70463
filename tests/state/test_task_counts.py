"""task_counts: the count rows of a state's write tasks added up on the driver, per key, with
no Spark aggregate (so no shuffle stage in the write job).  A real local Spark session."""

from __future__ import annotations

import pyarrow as pa

from sqe.wire.arrays import counts_batch
from state.sink import task_counts


def _per_task(batches):
    written = partitions = 0
    for batch in batches:
        written += batch.num_rows
        partitions = max(partitions, batch.num_rows)
    yield counts_batch(written=written, partitions=partitions)


def test_counts_are_summed_and_partitions_are_the_most_any_task_found(spark):
    rows = spark.range(0, 10, 1, 3)  # 3 tasks: 3, 3 and 4 rows
    sent = rows.mapInArrow(_per_task, "written long, partitions long")
    assert task_counts(sent) == {None: {"written": 10, "partitions": 4}}
    jobs = spark.sparkContext.statusTracker()
    group = "task-counts-test"
    spark.sparkContext.setJobGroup(group, "one stage")
    task_counts(sent)
    (job,) = jobs.getJobIdsForGroup(group)
    assert len(jobs.getJobInfo(job).stageIds) == 1  # no shuffle stage for the sums


def _per_stage(batches):
    for batch in batches:
        keys = batch.column("k").to_pylist()
        for k in sorted(set(keys)):
            yield pa.RecordBatch.from_pydict({"stage": [k], "written": [keys.count(k)]})


def test_counts_are_summed_per_key_and_nothing_sent_is_no_key(spark):
    rows = spark.createDataFrame([("a",), ("b",), ("a",), ("a",)], "k string").repartition(2)
    sent = rows.mapInArrow(_per_stage, "stage string, written long")
    assert task_counts(sent, "stage") == {"a": {"written": 3}, "b": {"written": 1}}
    assert task_counts(sent.limit(0), "stage") == {}
