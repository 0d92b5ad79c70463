"""The sqe-kafka source: planning, exact range reads, AvailableNow, restarts, replay filtering."""

from __future__ import annotations

import json
import time
import uuid

import numpy as np
import pyarrow as pa
import pytest
from confluent_kafka import Producer
from hypothesis import given
from hypothesis import strategies as st

from sqe.cli.local_services import free_port
from sqe.clients.kafka import CLIENT_DEFAULTS, CLIENT_LOG_ENV, producer_conf
from sqe.clients.producers import drop_sender, shared_sender
from sqe.errors import SourceError
from sqe.ledger.hwm import HwmStore
from sqe.source.admission import ADMISSION_CONTROL
from sqe.source.kafka import KafkaSource, KafkaStreamReader, read_range
from sqe.source.kafka.config import RangePartition, SourceConfig
from sqe.source.kafka.native import decode_key_columns
from sqe.source.kafka.offsets import limit_offsets
from sqe.source.replay import (
    beyond_bound,
    beyond_bound_frame,
    filter_replays_frame,
    judgeable,
)
from sqe.wire.columns import data_rows
from sqe.wire.keys import StreamMetadata, decode_keys
from tests.support.kafka_io import produce

# -- planning (pure) -------------------------------------------------------------------------


@given(st.dictionaries(st.integers(0, 5), st.tuples(st.integers(0, 50), st.integers(0, 500)),
                       min_size=1),
       st.one_of(st.none(), st.integers(1, 400)))
def test_limit_offsets_reads_at_most_the_limit_and_all_when_it_can(ranges, limit):
    start = {p: s for p, (s, _) in ranges.items()}
    latest = {p: s + n for p, (s, n) in ranges.items()}
    end = limit_offsets(start, latest, limit)
    backlog = sum(n for _, n in ranges.values())
    read = sum(end[p] - start[p] for p in latest)
    assert all(start[p] <= end[p] <= latest[p] for p in latest)
    assert read == (backlog if limit is None else min(limit, backlog))


def test_limit_offsets_shares_the_limit_by_backlog():
    assert limit_offsets({0: 0, 1: 0}, {0: 300, 1: 100}, 100) == {0: 75, 1: 25}
    # A partition missing from the start offsets (new since) starts at its latest.
    assert limit_offsets({0: 0}, {0: 10, 1: 5}, None) == {0: 10, 1: 5}


def source_config(topic, brokers, **options):
    return SourceConfig.from_options({"topic": topic, "brokers": brokers, **options})


def test_source_config_validates_and_round_trips():
    # Spark hands the options over with lower-cased keys: both spellings work.
    for options in ({"topic": "t", "brokers": "a:1,b:2", "maxRecordsPerBatch": "5",
                   "filterReplays": "true", "filterReplays.redis.url": "redis://x:1/0",
                   "hwmConsumer": "c", "consumer.client.id": "me"},
                  {"topic": "t", "jw.sqe.spout.kafka.brokers": "a:1,b:2",
                   "maxrecordsperbatch": "5", "filterreplays": "true",
                   "filterreplays.redis.url": "redis://x:1/0", "hwmconsumer": "c",
                   "consumer.client.id": "me"}):
        cfg = SourceConfig.from_options(options)
        assert cfg.stream.max_records == 5 and cfg.stream.filter_replays
        assert cfg.stream.consumer_properties == {"client.id": "me"}
        assert cfg.stream.brokers == ("a:1", "b:2") and cfg.hwm_consumer == "c"
        assert SourceConfig.from_options(cfg.to_options()) == cfg
    with pytest.raises(SourceError, match="needs the option topic"):
        SourceConfig.from_options({"brokers": "a:1"})
    ahead = {"Kafka state out": {"bootstrap.servers": "a:1", "sasl.password": "hush"}}
    cfg = source_config("t", "a:1", producersAhead=json.dumps(ahead))
    assert cfg.producers_ahead == ahead
    assert SourceConfig.from_options(cfg.to_options()).producers_ahead == ahead
    with pytest.raises(SourceError, match="producersAhead must be a JSON object of producer "
                                          "settings by role") as bad:
        source_config("t", "a:1", producersAhead='{"Kafka state out": "sasl.password=hush"}')
    assert "hush" not in str(bad.value)  # settings may hold secrets: never said back
    with pytest.raises(SourceError, match="maxRecordsPerBatch = '0': expected an integer >= 1"):
        source_config("t", "a:1", maxRecordsPerBatch="0")
    with pytest.raises(SourceError, match="filterReplays needs the option hwmConsumer"):
        source_config("t", "a:1", filterReplays="true")
    with pytest.raises(SourceError, match="startingOffsets = 'soon': expected earliest, latest or "
                                          "JSON"):
        source_config("t", "a:1", startingOffsets="soon")
    with pytest.raises(SourceError, match="unknown option jw.sqe.spout.kafka.maxrecordperbatch; "
                                          "did you mean jw.sqe.spout.kafka.maxRecordsPerBatch"):
        source_config("t", "a:1", maxRecordPerBatch="5")


# -- read_range against the real broker ------------------------------------------------------


class _Spy:
    """A real consumer that counts the consume() calls that came back empty."""

    def __init__(self, inner):
        self.inner, self.empty, self.asked = inner, 0, []

    def consume(self, num_messages, timeout):
        self.asked.append(num_messages)
        got = self.inner.consume(num_messages=num_messages, timeout=timeout)
        self.empty += not got
        return got

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _SpyConfig(SourceConfig):
    spies: list = []

    def consumer(self, role):
        spy = _Spy(super().consumer(role))
        self.spies.append(spy)
        return spy


def _spy_config(bootstrap, topic):
    cfg = _SpyConfig(topic, source_config(topic, bootstrap).stream)
    object.__setattr__(cfg, "spies", [])
    return cfg


def _rows(batches):
    table = pa.Table.from_batches(batches) if batches else None
    return [] if table is None else table.to_pylist()


def test_a_range_ending_at_the_partition_end_never_waits_for_more(kafka_bootstrap, kafka_topic):
    topic = kafka_topic(1)
    produce(kafka_bootstrap, topic, [(None, b"v%d" % i, 0) for i in range(50)])
    cfg = _spy_config(kafka_bootstrap, topic)
    rows = _rows(list(read_range(cfg, RangePartition(topic, 0, 10, 50))))
    assert [r["_offset"] for r in rows] == list(range(10, 50))
    assert [r["_value"] for r in rows] == [b"v%d" % i for i in range(10, 50)]
    spy = cfg.spies[0]
    assert spy.empty == 0  # never a consume call that had to wait out its timeout
    assert all(n <= 40 for n in spy.asked)  # never asked for more than what remains


def test_latest_offset_without_a_start_caps_from_where_spark_planned_last(kafka_bootstrap,
                                                                          kafka_topic):
    """What PySpark 4.0 and 4.1 ask (``latestOffset()``: no start, no limit), on every release."""
    topic = kafka_topic(2)
    produce(kafka_bootstrap, topic, [(None, b"%d" % i, i % 2) for i in range(300)])
    reader = KafkaStreamReader(source_config(topic, kafka_bootstrap, maxRecordsPerBatch="100"))
    try:
        # The run's first ask (before initialOffset()) is not capped: it may fix the end of an
        # AvailableNow run.
        assert reader.latestOffset() == {"0": 150, "1": 150}
        reader.partitions(reader.initialOffset(), {"0": 20, "1": 30})
        second = reader.latestOffset()  # capped, from where Spark planned last
        assert sum(second.values()) == 150 and second["0"] >= 20 and second["1"] >= 30
        reader.partitions({"0": 150, "1": 150}, {"0": 150, "1": 150})  # a restart's position
        assert reader.latestOffset() == {"0": 150, "1": 150}  # all read: no batch
        capping = KafkaStreamReader(source_config(topic, kafka_bootstrap, maxRecordsPerBatch="100",
                                                  capFirstBatch="true"))
        assert sum(capping.latestOffset().values()) == 100  # not AvailableNow: capped at once
        capping.stop()
    finally:
        reader.stop()


def test_offsets_with_gaps_from_transaction_markers(kafka_bootstrap, kafka_topic):
    topic = kafka_topic(1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{topic}",
                         **CLIENT_DEFAULTS})
    producer.init_transactions(30)
    for batch in range(3):
        producer.begin_transaction()
        for i in range(4):
            producer.produce(topic, value=b"%d-%d" % (batch, i), partition=0)
        producer.commit_transaction(30)
    # Each commit marker takes an offset: data at 0-3, 5-8, 10-13; the log ends at 15.
    cfg = _spy_config(kafka_bootstrap, topic)
    rows = _rows(list(read_range(cfg, RangePartition(topic, 0, 0, 15))))
    assert [r["_offset"] for r in rows] == [0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13]
    # A range that starts on a marker and ends on one reads just the records between.
    rows = _rows(list(read_range(cfg, RangePartition(topic, 0, 4, 10))))
    assert [r["_offset"] for r in rows] == [5, 6, 7, 8]


def test_a_reader_consumer_is_reused_by_the_next_task_and_reads_only_its_range(kafka_bootstrap,
                                                                              kafka_topic):
    """Tasks of one executor process share a consumer, one at a time: each reads exactly its
    own range, whatever the consumer fetched for the task before it; a failed task's consumer
    is closed, not kept."""
    topic = kafka_topic(2)
    produce(kafka_bootstrap, topic, [(None, b"p%d-%d" % (p, i), p) for p in (0, 1)
                                     for i in range(30)])
    cfg = _spy_config(kafka_bootstrap, topic)
    ranges = [(0, 0, 10), (0, 10, 20), (1, 5, 25), (0, 3, 8), (1, 25, 30), (0, 20, 30)]
    for p, start, end in ranges:
        rows = _rows(list(read_range(cfg, RangePartition(topic, p, start, end))))
        assert [r["_offset"] for r in rows] == list(range(start, end))
        assert [r["_value"] for r in rows] == [b"p%d-%d" % (p, i) for i in range(start, end)]
        assert {r["_partition"] for r in rows} == {p}
    assert len(cfg.spies) == 1  # one consumer made, for six tasks
    failing = read_range(cfg, RangePartition(topic, 0, 0, 30))
    next(failing)
    failing.close()  # the task stopped with its range half read
    rows = _rows(list(read_range(cfg, RangePartition(topic, 0, 0, 30))))
    assert [r["_offset"] for r in rows] == list(range(30))
    assert len(cfg.spies) == 2  # the stopped task's consumer was not given to the next


def test_a_read_makes_the_streams_producers_ahead_once_per_process(kafka_bootstrap, kafka_topic,
                                                                   tmp_path, monkeypatch):
    """A worker's first read makes the producers its stream's Kafka states write with, so they
    have their idempotent producer id when the worker first writes; later reads make none, and
    the state's task takes the one made ahead."""
    topic = kafka_topic(1)
    produce(kafka_bootstrap, topic, [(None, b"v%d" % i, 0) for i in range(5)])
    role, conf = f"Kafka state {topic}", producer_conf(kafka_bootstrap,
                                                       {"client.id": f"ahead-{uuid.uuid4().hex}"})
    log = tmp_path / "clients.jsonl"
    monkeypatch.setenv(CLIENT_LOG_ENV, str(log))
    cfg = source_config(topic, kafka_bootstrap, producersAhead=json.dumps({role: conf}))
    try:
        for _ in range(2):
            assert len(_rows(list(read_range(cfg, RangePartition(topic, 0, 0, 5))))) == 5
        sender = shared_sender(conf, role)
        sender.send(topic, b"written by the state", partition=0)
        assert sender.finish(30) is None
        made = [json.loads(line) for line in log.read_text().splitlines()]
        assert [m["role"] for m in made if m["client"] == "producer"] == [role]
    finally:
        drop_sender(conf)


@pytest.mark.redis
def test_read_drops_replays_by_the_marks_it_reads_and_tallies_them(kafka_bootstrap, kafka_topic,
                                                                     redis_url):
    """The task reads the marks of the pairs its records name (one round trip: one script
    call), however many other marks the store holds, and drops the replays."""
    topic = kafka_topic(1)
    offs = [5, 6, 7, 6, 7, 8, 3]
    keys = [StreamMetadata(9, 2, o).to_bytes() for o in offs] + [b"x" * 19, None]
    produce(kafka_bootstrap, topic, [(k, b"v", 0) for k in keys])
    store = HwmStore.from_url(redis_url, "c", 3600)
    store.commit(0, {(9, 2): 5, **{(10, p): 99 for p in range(5000)}})
    before = _script_calls(store)
    cfg = source_config(topic, kafka_bootstrap, filterReplays=True, emitTally=True,
                        hwmConsumer="c", **{"filterReplays.redis.url": redis_url})
    batches = list(read_range(cfg, RangePartition(topic, 0, 0, len(keys))))
    assert _script_calls(store) - before == 1
    rows = _rows(batches)
    data = [r for r in rows if r["_offset"] is not None]
    tally = [r for r in rows if r["_offset"] is None]
    assert [r["_source_offset"] for r in data] == [6, 7, 8, None, None]
    assert [r["_key"] for r in data[-2:]] == [b"x" * 19, None]
    assert [r["_pid"] for r in data] == [9, 9, 9, None, None]
    assert [t["_replays_dropped"] for t in tally] == [4]


def _script_calls(store: HwmStore) -> int:
    stats = store.client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_eval",
                                                                   "cmdstat_evalsha"))


def test_unreachable_broker_is_a_clear_error():
    reader = KafkaStreamReader(source_config(
        "t", f"127.0.0.1:{free_port()}", readTimeoutSeconds=2,
        **{"consumer.socket.connection.setup.timeout.ms": "1000"}))
    try:
        with pytest.raises(SourceError,
                           match=r"Kafka source t: cannot reach the Kafka brokers 127\.0\.0\.1:\d+ "
                                 r"for 2 s \(jw.sqe.spout.kafka.readTimeoutSeconds"):
            reader.initialOffset()
    finally:
        reader.stop()


# -- the source in Spark ---------------------------------------------------------------------


def _stream(spark, topic, bootstrap, **options):
    spark.dataSource.register(KafkaSource)
    reader = spark.readStream.format("sqe-kafka").option("topic", topic).option("brokers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def _run(frame, checkpoint, handle):
    query = (frame.writeStream.foreachBatch(handle).trigger(availableNow=True)
             .option("checkpointLocation", str(checkpoint)).start())
    query.awaitTermination()
    return query


@pytest.mark.spark
def test_available_now_reads_everything_once_in_limited_batches(spark, kafka_bootstrap, kafka_topic,
                                                                 tmp_path):
    topic = kafka_topic(3)
    produce(kafka_bootstrap, topic, [(None, b"%d" % i, i % 3) for i in range(1000)])
    batches = {}

    def handle(df, batch_id):
        batches[batch_id] = [(r["_partition"], r["_offset"]) for r in df.collect()]

    # Where PySpark has no admission control (4.0, 4.1) an AvailableNow run reads its backlog in
    # one batch (sqe.source.admission).
    frame = _stream(spark, topic, kafka_bootstrap, maxRecordsPerBatch=300)
    _run(frame, tmp_path / "ck", handle)
    seen = [x for b in batches.values() for x in b]
    assert sorted(seen) == sorted((i % 3, i // 3) for i in range(1000))
    assert all(len(b) <= (300 if ADMISSION_CONTROL else 1000) for b in batches.values())
    assert len([b for b in batches.values() if b]) == (4 if ADMISSION_CONTROL else 1)
    # Records produced after the run are the next run's, not this one's.
    produce(kafka_bootstrap, topic, [(None, b"late", 0)])
    batches.clear()
    _run(frame, tmp_path / "ck", handle)
    assert [x for b in batches.values() for x in b] == [(0, 334)]


def _keep(batches):
    def handle(df, batch_id):
        batches[batch_id] = [(r["_partition"], r["_offset"]) for r in df.collect()]
    return handle


def _running(frame, checkpoint, handle):
    return (frame.writeStream.foreachBatch(handle).trigger(processingTime="100 milliseconds")
            .option("checkpointLocation", str(checkpoint)).start())


def _run_until(frame, checkpoint, handle, read, count):
    """Run ``frame`` with a processing-time trigger until ``read()`` rows were handled."""
    query = _running(frame, checkpoint, handle)
    try:
        deadline = time.monotonic() + 120
        while read() < count and time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            time.sleep(0.2)
    finally:
        query.stop()


@pytest.mark.spark
@pytest.mark.smoke
def test_a_running_query_reads_in_capped_batches_also_after_a_restart(spark, kafka_bootstrap,
                                                                      kafka_topic, tmp_path):
    """maxRecordsPerBatch caps every batch on each PySpark release: by Spark's admission control
    from 4.2, by the source itself before (sqe.source.admission: capFirstBatch, as sqe run sets
    it for a query that is not AvailableNow), on a new query and from the checkpoint's offsets
    after a restart."""
    topic = kafka_topic(2)
    produce(kafka_bootstrap, topic, [(None, b"%d" % i, i % 2) for i in range(700)])
    frame = _stream(spark, topic, kafka_bootstrap, maxRecordsPerBatch=200, capFirstBatch="true")
    first: dict[int, list] = {}
    _run_until(frame, tmp_path / "ck", _keep(first), lambda: sum(map(len, first.values())), 700)
    produce(kafka_bootstrap, topic, [(None, b"%d" % i, i % 2) for i in range(700, 1200)])
    second: dict[int, list] = {}  # a batch stopped before its commit may run again in it
    _run_until(frame, tmp_path / "ck", _keep(second),
               lambda: len({x for b in {**first, **second}.values() for x in b}), 1200)
    # A batch stopped before its commit runs again, the same, after the restart.
    assert all(first[b] == rows for b, rows in second.items() if b in first)
    batches = {**first, **second}
    sizes = [len(b) for b in batches.values()]
    assert max(sizes) <= 200 and sum(sizes) == 1200, sizes
    seen = sorted(x for b in batches.values() for x in b)
    assert seen == sorted((i % 2, i // 2) for i in range(1200))
    assert min(second) in (max(first), max(first) + 1)  # the restart went on from the checkpoint


@pytest.mark.spark
def test_restart_rereads_exactly_the_uncommitted_range(spark, kafka_bootstrap, kafka_topic, tmp_path):
    topic = kafka_topic(2)
    produce(kafka_bootstrap, topic, [(None, b"%d" % i, i % 2) for i in range(400)])
    done, failed_attempt, crash = [], [], [True]

    def handle(df, batch_id):
        rows = sorted((r["_partition"], r["_offset"]) for r in df.collect())
        if batch_id == 1 and crash[0]:
            failed_attempt.extend(rows)
            raise RuntimeError("injected failure in batch 1")
        done.append((batch_id, rows))

    frame = _stream(spark, topic, kafka_bootstrap, maxRecordsPerBatch=100, capFirstBatch="true")
    with pytest.raises(Exception, match="injected failure"):
        _running(frame, tmp_path / "ck", handle).awaitTermination(120)
    assert [b for b, _ in done] == [0] and len(failed_attempt) == 100
    crash[0] = False
    _run_until(frame, tmp_path / "ck", handle, lambda: sum(len(rows) for _, rows in done), 400)
    assert done[1] == (1, failed_attempt)  # the same range, not more, not less
    seen = [x for _, rows in done for x in rows]
    assert sorted(seen) == sorted((i % 2, i // 2) for i in range(400))


@pytest.mark.spark
@pytest.mark.redis
def test_filter_in_read_equals_the_dataframe_filter(spark, kafka_bootstrap, kafka_topic, redis_url,
                                                     tmp_path):
    import random

    rnd = random.Random(7)
    topic = kafka_topic(2)
    records = []
    for p in range(2):
        for pid in (11, 12):
            for sp in (p, p + 2):
                offsets, o = [], 0
                for _ in range(40):  # retries: runs that go back a few offsets
                    o = max(0, o - rnd.randint(1, 4)) if rnd.random() < 0.2 else o + 1
                    offsets.append(o)
                records += [(StreamMetadata(pid, sp, x).to_bytes(), b"%d" % x, p) for x in offsets]
    records += [(b"short", b"s", 0), (None, b"n", 1)]
    rnd.shuffle(records)  # interleave groups; order inside each group is kept by stable sort
    records.sort(key=lambda r: r[2])
    produce(kafka_bootstrap, topic, records)
    hwm = {(11, 0): 5, (12, 3): 9}
    store = HwmStore.from_url(redis_url, "eq", 3600)
    store.commit(0, hwm)
    got = {}

    def collect(name):
        def handle(df, batch_id):
            got.setdefault(name, []).extend(
                (r["_partition"], r["_offset"]) for r in data_rows(df).collect())
        return handle

    filtered = _stream(spark, topic, kafka_bootstrap, filterReplays="true", **{
        "filterReplays.redis.url": redis_url, "hwmConsumer": "eq", "emitTally": "true"})
    _run(filtered, tmp_path / "a", collect("read"))

    def frame_filter(df, batch_id):
        kept = filter_replays_frame(df, hwm)
        got.setdefault("frame", []).extend((r["_partition"], r["_offset"]) for r in kept.collect())

    _run(_stream(spark, topic, kafka_bootstrap), tmp_path / "b", frame_filter)
    assert sorted(got["read"]) == sorted(got["frame"])
    assert 0 < len(got["read"]) < len(records)


@pytest.mark.spark
def test_key_decoding_with_spark_builtins_equals_the_numpy_decoder(spark):
    import random

    rnd = random.Random(3)
    keys = [StreamMetadata(rnd.randint(-2**63, 2**63 - 1), rnd.randint(-2**31, 2**31 - 1),
                           rnd.randint(-2**63, 2**63 - 1)).to_bytes() for _ in range(300)]
    keys += [None, b"", b"x" * 19, b"y" * 21, b"\xff" * 20, b"\x80" + b"\x00" * 19]
    frame = spark.createDataFrame([(k,) for k in keys], "_key binary")
    rows = decode_key_columns(frame).collect()
    pid, part, off, valid = decode_keys(pa.array(keys, pa.binary()))
    judged = judgeable(part, off, valid)
    assert 0 < judged.sum() < valid.sum()  # negative partitions and offsets are not judged
    for i, r in enumerate(rows):
        if judged[i]:
            assert (r["_pid"], r["_source_partition"], r["_source_offset"]) == (
                int(pid[i]), int(part[i]), int(off[i]))
        else:
            assert (r["_pid"], r["_source_partition"], r["_source_offset"]) == (None, None, None)


@pytest.mark.spark
def test_the_bound_as_a_frame_stage_equals_the_numpy_guard(spark):
    """Spark's own connector gets the same guard: rows beyond maxAdvance are found by
    beyond_bound_frame and judge nothing in filter_replays_frame."""
    offsets = [5, 2**63 - 1, 6, 6, 2**41, 7, 12, 2**40 + 3]
    groups = [(7, 0)] * 6 + [(8, 0), (8, 0)]
    rows = [("t", 0, i, p, q, o) for i, ((p, q), o) in enumerate(zip(groups, offsets, strict=True))]
    frame = spark.createDataFrame(rows, "_topic string, _partition int, _offset long, _pid long, "
                                        "_source_partition int, _source_offset long")
    marks, bound = {(7, 0): 4}, 2**40
    keys = [StreamMetadata(p, q, o).to_bytes() for _, _, _, p, q, o in rows]
    found = beyond_bound(*decode_keys(pa.array(keys, pa.binary())), marks, bound)
    beyond = beyond_bound_frame(frame, marks, bound).collect()
    assert sorted(r["_offset"] for r in beyond) == np.flatnonzero(found).tolist() == [1, 4, 7]
    kept = [r["_source_offset"] for r in filter_replays_frame(frame, marks, bound).collect()]
    assert sorted(kept) == [5, 6, 7, 12]


def test_a_small_batch_is_read_by_one_task_and_a_large_one_by_a_task_per_partition(
        kafka_bootstrap, kafka_topic):
    """jw.sqe.spout.kafka.minRecordsPerTask: the planner packs the partitions' ranges into as
    few input partitions as hold that many records each; a group's task reads every range of
    it exactly, each row naming its Kafka partition."""
    import doctest

    import sqe.source.kafka.config

    assert doctest.testmod(sqe.source.kafka.config).failed == 0  # group_ranges' examples
    topic = kafka_topic(4)
    produce(kafka_bootstrap, topic, [(None, b"p%d-%d" % (p, i), p) for p in range(4)
                                     for i in range(40)])
    start, end = {"0": 0, "1": 10, "2": 0, "3": 40}, {"0": 40, "1": 40, "2": 25, "3": 40}
    packed = KafkaStreamReader(source_config(topic, kafka_bootstrap, minRecordsPerTask="40"))
    groups = packed.partitions(start, end)
    assert [[(r.partition, r.start, r.end) for r in g.ranges] for g in groups] == [
        [(0, 0, 40)], [(1, 10, 40), (2, 0, 25)]]
    rows = _rows([b for g in groups for b in packed.read(g)])
    assert sorted((r["_partition"], r["_offset"]) for r in rows) == sorted(
        [(0, o) for o in range(40)] + [(1, o) for o in range(10, 40)]
        + [(2, o) for o in range(25)])
    one_each = KafkaStreamReader(source_config(topic, kafka_bootstrap, minRecordsPerTask="1"))
    assert [[r.partition for r in g.ranges] for g in one_each.partitions(start, end)] == [
        [0], [1], [2]]
    default = KafkaStreamReader(source_config(topic, kafka_bootstrap))
    assert [[r.partition for r in g.ranges] for g in default.partitions(start, end)] == [
        [0, 1, 2]]


@pytest.mark.spark
@pytest.mark.kafka
def test_a_batch_read_reads_exactly_the_offsets_between_its_start_and_end(spark, kafka_bootstrap,
                                                                          kafka_topic):
    topic = kafka_topic(2, "batchread")
    produce(kafka_bootstrap, topic, [(None, f"v{i}".encode(), i % 2) for i in range(10)])
    spark.dataSource.register(KafkaSource)
    def read(**options: str):
        return spark.read.format("sqe-kafka").options(topic=topic, brokers=kafka_bootstrap,
                                                      **options).load()

    rows = read(startingOffsets='{"0": 1, "1": 0}', endingOffsets='{"0": 4, "1": 2}')
    got = sorted((r["_partition"], r["_offset"]) for r in data_rows(rows).collect())
    assert got == [(0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]
    with pytest.raises(Exception, match="a batch read needs the option endingOffsets"):
        read(startingOffsets='{"0": 0}').collect()
    with pytest.raises(Exception, match="a batch read needs startingOffsets as JSON offsets"):
        read(startingOffsets="earliest", endingOffsets='{"0": 4}').collect()
    with pytest.raises(SourceError, match="endingOffsets must be JSON offsets"):
        SourceConfig.from_options({"topic": topic, "endingOffsets": "latest"})


@pytest.mark.kafka
def test_a_range_past_the_end_of_the_log_says_the_broker_lost_acknowledged_records(
        kafka_bootstrap, kafka_topic):
    from types import SimpleNamespace

    from confluent_kafka import Consumer

    from sqe.source.kafka.offsets import undelivered

    topic = kafka_topic(1, "short")
    produce(kafka_bootstrap, topic, [(None, b"x", 0)] * 5)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "short",
                         **CLIENT_DEFAULTS})
    stream = SimpleNamespace(read_timeout=120, bootstrap=kafka_bootstrap)
    try:  # planned to 9 when the broker had 9 records; it has 5 now
        lost = undelivered(consumer, SimpleNamespace(topic=topic, partition=0, end=9), 5, stream)
        assert f"reading {topic}/0: the partition ends at offset 5 now, before 9" in lost
        assert "the broker lost records 5..8 it had acknowledged" in lost and "\n" not in lost
        late = undelivered(consumer, SimpleNamespace(topic=topic, partition=0, end=5), 3, stream)
        assert late == (f"reading {topic}/0: offsets 3..5 were not delivered within 120 s "
                        f"(brokers {kafka_bootstrap}); nothing of this batch was committed")
    finally:
        consumer.close()
