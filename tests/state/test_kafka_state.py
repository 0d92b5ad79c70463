"""The Kafka state (state/kafka/sink.py) against a real Kafka-protocol broker and real Spark.

Covers the three key types (StreamMetadata, message hash, field), the value
encodings, SourcePartitionPartitioner placement and per-partition order, the
producer's own partitioning without a partitioner, the returned count, and the
errors: a missing topic, a partitioner that cannot place the keys, a frame
without the carried StreamMetadata, and a value the producer refuses.
"""

from __future__ import annotations

import json
import uuid

import pytest
from pyspark.errors import PythonException
from pyspark.sql import functions as F

from partitioners import Murmur2Partitioner
from sqe.errors import StateError
from sqe.wire.headers import FILTER_HEADER
from sqe.wire.keys import StreamMetadata
from state.kafka.config import KafkaStateConfig
from state.kafka.sink import FILTER_VALUE_COLUMN, write_kafka
from tests.support.kafka_io import read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

CARRIED_DDL = "_sqe_pid bigint, _sqe_partition int, _sqe_offset bigint"
PID = -(2**62) - 12345  # a negative pid that needs all 64 bits
SOURCE_PARTITION_PARTITIONER = "partitioners.SourcePartitionPartitioner"


def config(topic, brokers, keytype, fields, partitioner=None, extra=()):
    return KafkaStateConfig(topic=topic, brokers=brokers, keytype=keytype, fields=tuple(fields),
                            partitioner=partitioner, extra=tuple(extra))


def xxhash64_of(spark, values):
    """Spark's xxhash64 of each byte string, as 8 bytes big-endian."""
    rows = spark.createDataFrame([(bytearray(v),) for v in values], "v binary") \
        .select(F.xxhash64("v").alias("h")).collect()
    return [r.h.to_bytes(8, "big", signed=True) for r in rows]


@pytest.fixture
def small_arrow_batches(spark):
    """Arrow batches of 4 rows, so each Spark task produces several batches in turn."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "4")
    yield
    spark.conf.set(key, before)


# --- keytype streammetadata + SourcePartitionPartitioner --------------------------------------------


@pytest.mark.parametrize("partitioner", [
    SOURCE_PARTITION_PARTITIONER,
    "com.jwplayer.sqe.language.state.kafka.SourcePartitionPartitioner",
])
def test_streammetadata_keys_land_in_source_partition_mod_n_in_input_order(
        spark, kafka_bootstrap, kafka_topic, small_arrow_batches, partitioner):
    topic = kafka_topic(4, "sm")
    # Seven source partitions interleaved; offsets go up and down (replays) within a source partition.
    offsets = [5, 6, 7, 6, 8, 2**40, 3]
    rows = [(f"v{sp}-{i}", PID, sp, off) for i, off in enumerate(offsets) for sp in range(7)]
    df = spark.createDataFrame(rows, f"name string, {CARRIED_DDL}").coalesce(1)

    written = write_kafka(df, config(topic, kafka_bootstrap, "streammetadata", ["name"], partitioner))

    assert written == len(rows)
    records = read_topic(kafka_bootstrap, topic)
    assert len(records) == len(rows)
    by_name = {name: StreamMetadata(pid, sp, off) for name, pid, sp, off in rows}
    for r in records:
        meta = StreamMetadata.from_bytes(r.key)
        assert meta == by_name[r.value.decode()]
        assert r.partition == meta.partition % 4
    for dest in range(4):
        expected = [name for name, _, sp, _ in rows if sp % 4 == dest]
        got = [r.value.decode() for r in records if r.partition == dest]  # read_topic: offset order
        assert got == expected


def test_streammetadata_order_per_source_partition_across_several_tasks(spark, kafka_bootstrap,
                                                                         kafka_topic):
    topic = kafka_topic(4, "sm-tasks")
    rows = [(f"v{sp}-{off}", 7, sp, off) for off in range(40) for sp in range(6)]
    df = (spark.createDataFrame(rows, f"name string, {CARRIED_DDL}")
          .repartition(3, "_sqe_partition").sortWithinPartitions("_sqe_offset"))
    assert df.rdd.getNumPartitions() == 3

    written = write_kafka(df, config(topic, kafka_bootstrap, "streammetadata", ["name"],
                                     SOURCE_PARTITION_PARTITIONER))

    assert written == len(rows)
    records = read_topic(kafka_bootstrap, topic)
    assert sorted(r.value.decode() for r in records) == sorted(name for name, *_ in rows)
    decoded = [(r.partition, StreamMetadata.from_bytes(r.key)) for r in records]  # in offset order
    for sp in range(6):
        mine = [(dest, meta) for dest, meta in decoded if meta.partition == sp]
        assert {dest for dest, _ in mine} == {sp % 4}
        assert [meta.offset for _, meta in mine] == list(range(40))  # two tasks may share a destination
        assert {meta.pid for _, meta in mine} == {7}


# --- values -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ddl", "values", "expected"), [
    ("v string", ["plain", "ünïcødé ✓", ""], [b"plain", "ünïcødé ✓".encode(), b""]),
    ("v binary", [bytearray(b"\x00\xff\x10"), bytearray(b"")], [b"\x00\xff\x10", b""]),
    ("v int", [0, -17, 2**31 - 1], [b"0", b"-17", b"2147483647"]),
    ("v bigint", [-(2**63), 2**63 - 1], [str(-(2**63)).encode(), str(2**63 - 1).encode()]),
])
def test_a_single_field_is_the_value(spark, kafka_bootstrap, kafka_topic, ddl, values, expected):
    topic = kafka_topic(1, "value")
    df = spark.createDataFrame([(v,) for v in values], ddl).coalesce(1)

    assert write_kafka(df, config(topic, kafka_bootstrap, "messagehash", ["v"])) == len(values)

    assert [r.value for r in read_topic(kafka_bootstrap, topic)] == expected


def test_several_fields_are_a_json_object(spark, kafka_bootstrap, kafka_topic):
    topic = kafka_topic(1, "json")
    rows = [("a", 1, 2.5, True, "x"), ("ü \"q\"", -3, None, False, "y")]
    df = spark.createDataFrame(rows, "name string, n int, d double, flag boolean, `a.b` string") \
        .coalesce(1)

    written = write_kafka(df, config(topic, kafka_bootstrap, "messagehash",
                                     ["name", "n", "d", "flag", "a.b"]))

    assert written == 2
    got = [json.loads(r.value) for r in read_topic(kafka_bootstrap, topic)]
    assert got[0] == {"name": "a", "n": 1, "d": 2.5, "flag": True, "a.b": "x"}
    assert got[1]["name"] == "ü \"q\"" and got[1]["n"] == -3 and got[1]["flag"] is False
    assert got[1]["a.b"] == "y"
    assert got[1].get("d") is None  # Spark's to_json leaves out NULL fields


def test_a_subset_of_fields_leaves_the_others_and_the_carried_columns_out(spark, kafka_bootstrap,
                                                                           kafka_topic):
    topic = kafka_topic(1, "subset")
    df = spark.createDataFrame([("a", 1, "secret", 1, 0, 9)],
                               f"name string, n int, other string, {CARRIED_DDL}")

    write_kafka(df, config(topic, kafka_bootstrap, "streammetadata", ["name", "n"]))

    (record,) = read_topic(kafka_bootstrap, topic)
    assert json.loads(record.value) == {"name": "a", "n": 1}
    assert StreamMetadata.from_bytes(record.key) == StreamMetadata(1, 0, 9)


# --- keytype messagehash ----------------------------------------------------------------------------


def test_messagehash_key_is_sparks_xxhash64_of_the_value_big_endian(spark, kafka_bootstrap, kafka_topic):
    topic = kafka_topic(3, "hash")
    values = ["alpha", "beta", "alpha", "", "ünïcødé", "beta", "alpha"]
    df = spark.createDataFrame([(v,) for v in values], "v string")
    expected = {r.v: r.h.to_bytes(8, "big", signed=True)
                for r in df.select("v", F.xxhash64(F.col("v").cast("binary")).alias("h")).collect()}
    cfg = config(topic, kafka_bootstrap, "messagehash", ["v"])

    assert write_kafka(df, cfg) == len(values)
    first = read_topic(kafka_bootstrap, topic)
    assert write_kafka(df, cfg) == len(values)  # a second write of the same rows
    both = read_topic(kafka_bootstrap, topic)

    assert len(first) == len(values) and len(both) == 2 * len(values)
    for r in both:
        assert len(r.key) == 8
        assert r.key == expected[r.value.decode()]
    keys_of = {}
    for r in both:
        keys_of.setdefault(r.value, set()).add(r.key)
    assert all(len(keys) == 1 for keys in keys_of.values())  # equal values, equal keys, both writes
    assert len({r.key for r in both}) == len(set(values))


def test_messagehash_of_a_json_value_hashes_the_json_bytes(spark, kafka_bootstrap, kafka_topic):
    topic = kafka_topic(1, "hash-json")
    df = spark.createDataFrame([("a", 1), ("b", 2), ("a", 1)], "name string, n int").coalesce(1)

    write_kafka(df, config(topic, kafka_bootstrap, "messagehash", ["name", "n"]))

    records = read_topic(kafka_bootstrap, topic)
    assert [r.key for r in records] == xxhash64_of(spark, [r.value for r in records])
    assert records[0].key == records[2].key != records[1].key


# --- keytype field ----------------------------------------------------------------------------------


def test_field_keytype_first_field_is_the_key_second_the_value(spark, kafka_bootstrap, kafka_topic):
    topic = kafka_topic(1, "field")
    rows = [("k1", 10, "ignored"), ("k2", -2, "ignored"), ("k1", 30, "ignored")]
    df = spark.createDataFrame(rows, "k string, v int, other string").coalesce(1)

    assert write_kafka(df, config(topic, kafka_bootstrap, "field", ["k", "v"])) == 3

    got = [(r.key, r.value) for r in read_topic(kafka_bootstrap, topic)]
    assert got == [(b"k1", b"10"), (b"k2", b"-2"), (b"k1", b"30")]


def test_field_keytype_binary_key_and_value_are_written_as_they_are(spark, kafka_bootstrap, kafka_topic):
    topic = kafka_topic(1, "field-bin")
    df = spark.createDataFrame([(bytearray(b"\x00\x01"), bytearray(b"\xfe\xff"))], "k binary, v binary")

    write_kafka(df, config(topic, kafka_bootstrap, "field", ["k", "v"]))

    (record,) = read_topic(kafka_bootstrap, topic)
    assert (record.key, record.value) == (b"\x00\x01", b"\xfe\xff")


# --- without a partitioner --------------------------------------------------------------------------


def test_without_partitioner_equal_keys_share_a_partition_as_the_java_client_places_them(
        spark, kafka_bootstrap, kafka_topic):
    topic = kafka_topic(8, "murmur")
    keys = [f"key-{i}" for i in range(12)]
    rows = [(k, f"{k}/{n}") for n in range(5) for k in keys]
    df = spark.createDataFrame(rows, "k string, v string").repartition(3)

    assert write_kafka(df, config(topic, kafka_bootstrap, "field", ["k", "v"])) == len(rows)

    records = read_topic(kafka_bootstrap, topic)
    assert len(records) == len(rows)
    partitions_of = {}
    for r in records:
        partitions_of.setdefault(r.key, set()).add(r.partition)
    assert set(partitions_of) == {k.encode() for k in keys}
    murmur2 = Murmur2Partitioner()
    for key, partitions in partitions_of.items():
        assert partitions == {murmur2.partition(key, 8)}
    assert len(set().union(*partitions_of.values())) > 1  # 12 keys do not all hash to one partition


# --- the returned count -----------------------------------------------------------------------------


def test_count_is_the_number_written_over_several_tasks(spark, kafka_bootstrap, kafka_topic,
                                                        small_arrow_batches):
    topic = kafka_topic(2, "count")
    df = spark.range(0, 250).select(F.col("id").cast("string").alias("v")).repartition(4)

    assert write_kafka(df, config(topic, kafka_bootstrap, "messagehash", ["v"])) == 250

    assert sorted(int(r.value) for r in read_topic(kafka_bootstrap, topic)) == list(range(250))


def test_an_empty_frame_writes_nothing_and_returns_zero(spark, kafka_bootstrap, kafka_topic):
    topic = kafka_topic(2, "empty")
    empty = spark.createDataFrame([], f"name string, {CARRIED_DDL}")
    cfg = config(topic, kafka_bootstrap, "streammetadata", ["name"], SOURCE_PARTITION_PARTITIONER)

    assert write_kafka(empty, cfg) == 0
    assert write_kafka(empty.repartition(3), cfg) == 0
    assert read_topic(kafka_bootstrap, topic) == []


# --- errors -----------------------------------------------------------------------------------------


def test_a_missing_topic_is_auto_created_when_the_broker_allows_it(spark, kafka_bootstrap):
    """Observed on the local broker (noida-db): the producer's metadata request creates the topic and
    the write succeeds.  A broker that refuses auto-creation gives the StateError of the next test."""
    topic = f"missing-{uuid.uuid4().hex[:12]}"
    df = spark.createDataFrame([("a",), ("b",)], "v string").coalesce(1)
    cfg = config(topic, kafka_bootstrap, "messagehash", ["v"])

    try:
        written = write_kafka(df, cfg)
    except PythonException as exc:  # a broker without auto-creation: the error must be clear
        assert f"Kafka state {topic}: the topic on {kafka_bootstrap} cannot be used" in str(exc)
        return
    assert written == 2
    assert sorted(r.value for r in read_topic(kafka_bootstrap, topic)) == [b"a", b"b"]


def test_a_missing_topic_without_auto_creation_is_a_state_error(spark, kafka_bootstrap):
    topic = f"missing-{uuid.uuid4().hex[:12]}"
    df = spark.createDataFrame([("a",)], "v string")
    cfg = config(topic, kafka_bootstrap, "messagehash", ["v"],
                 extra=(("allow.auto.create.topics", False),))

    with pytest.raises(PythonException) as caught:  # Spark wraps the task's StateError
        write_kafka(df, cfg)

    text = str(caught.value)
    assert "sqe.errors.StateError" in text
    expected = f"Kafka state {topic}: the topic on {kafka_bootstrap} cannot be used: UNKNOWN_TOPIC_OR_PART"
    assert expected in text


def test_source_partition_partitioner_refuses_keys_that_are_not_stream_metadata(
        spark, kafka_bootstrap, kafka_topic):
    topic = kafka_topic(4, "badkeys")
    df = spark.createDataFrame([("k1", "a"), ("k2", "b")], "k string, v string").coalesce(1)
    cfg = config(topic, kafka_bootstrap, "field", ["k", "v"], SOURCE_PARTITION_PARTITIONER)

    with pytest.raises(PythonException) as caught:  # Spark wraps the task's StateError
        write_kafka(df, cfg)

    text = str(caught.value)
    assert "sqe.errors.StateError" in text
    assert f"Kafka state {topic}: partitioner {SOURCE_PARTITION_PARTITIONER}: " \
           "SourcePartitionPartitioner needs 20-byte StreamMetadata keys; row 0 is 2 bytes" in text
    assert read_topic(kafka_bootstrap, topic) == []


@pytest.mark.parametrize("ddl", ["name string", "name string, _sqe_pid bigint, _sqe_offset bigint"])
def test_streammetadata_without_the_carried_columns_is_a_state_error(spark, kafka_bootstrap,
                                                                     kafka_topic, ddl):
    topic = kafka_topic(1, "nometa")
    df = spark.createDataFrame([("a", *[1] * ddl.count(","))], ddl)

    with pytest.raises(StateError, match=f"Kafka state {topic}: keytype StreamMetadata needs the "
                                         "carried StreamMetadata"):
        write_kafka(df, config(topic, kafka_bootstrap, "streammetadata", ["name"]))
    assert read_topic(kafka_bootstrap, topic) == []


def test_a_value_larger_than_the_producer_accepts_fails_the_write(spark, kafka_bootstrap, kafka_topic):
    topic = kafka_topic(1, "big")
    values = ["small-1", "x" * 5000, "small-2"]
    df = spark.createDataFrame([(v,) for v in values], "v string").coalesce(1)
    cfg = config(topic, kafka_bootstrap, "messagehash", ["v"], extra=(("message.max.bytes", 1000),))

    with pytest.raises(PythonException, match="delivery failed|MSG_SIZE_TOO_LARGE"):  # no count returned
        write_kafka(df, cfg)

    # The refused value is never written; what the failed attempt did write are replays of the retry.
    assert {r.value for r in read_topic(kafka_bootstrap, topic)} <= {b"small-1", b"small-2"}


def test_a_value_the_broker_refuses_fails_with_delivery_failed(spark, kafka_bootstrap):
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"small-max-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "1000"})])[topic] \
        .result(timeout=30)
    df = spark.createDataFrame([("small-1",), ("x" * 5000,), ("small-2",)], "v string").coalesce(1)

    with pytest.raises(PythonException) as caught:  # Spark wraps the task's StateError
        write_kafka(df, config(topic, kafka_bootstrap, "messagehash", ["v"]))

    text = str(caught.value)
    assert "sqe.errors.StateError" in text
    assert f"Kafka state {topic} on {kafka_bootstrap}: delivery failed ({topic}/0: MSG_SIZE_TOO_LARGE" in text
    assert {r.value for r in read_topic(kafka_bootstrap, topic)} <= {b"small-1", b"small-2"}


# --- filter values and chunks --------------------------------------------------------------------


def test_chunks_pack_each_source_partition_with_its_last_key_and_bloom(spark, kafka_bootstrap,
                                                                       kafka_topic):
    from sqe.wire.chunk.bloom import BloomFilter
    from sqe.wire.chunk.codec import decode_chunk, read_header

    topic = kafka_topic(2)
    rows = [(PID, p, o, f"m{p}-{o}", ["eu", "us", None][o % 3]) for p in (0, 1, 2)
            for o in range(10, 35)]
    df = spark.createDataFrame(rows, f"{CARRIED_DDL}, v string, region string").repartition(1)
    df = df.withColumn(FILTER_VALUE_COLUMN, F.col("region"))  # the filterValue the runner adds
    cfg = KafkaStateConfig(topic=topic, brokers=kafka_bootstrap, keytype="StreamMetadata",
                           fields=("v",), partitioner=SOURCE_PARTITION_PARTITIONER,
                           chunking=True, chunk_messages=10, chunk_codec="zstd")
    assert write_kafka(df.orderBy("_sqe_partition", "_sqe_offset"), cfg) == 9  # 3 x (10+10+5)
    records = read_topic(kafka_bootstrap, topic)
    seen = []
    for r in records:
        key = StreamMetadata.from_bytes(r.key)
        msgs = decode_chunk(r.value, r.key)
        assert key.pid == PID and key.offset == msgs[-1].offset
        assert r.partition == key.partition % 2
        assert all(m.value == f"m{key.partition}-{m.offset}".encode() for m in msgs)
        bloom = BloomFilter.from_bytes(read_header(r.value).bloom)
        assert all(bloom.might_contain([m.filter_value]) for m in msgs if m.filter_value)
        assert bloom.might_contain(["x"], match_unfiltered=True) == any(
            m.filter_value is None for m in msgs)
        seen += [(key.partition, m.offset, m.filter_value) for m in msgs]
    assert sorted(seen) == sorted((p, o, r) for _, p, o, _, r in rows)


def test_without_chunking_the_filter_value_is_a_record_header(spark, kafka_bootstrap, kafka_topic):
    from confluent_kafka import Consumer, TopicPartition

    topic = kafka_topic(1)
    df = spark.createDataFrame([(PID, 0, 1, "a", "eu"), (PID, 0, 2, "b", None)],
                               f"{CARRIED_DDL}, v string, region string")
    df = df.withColumn(FILTER_VALUE_COLUMN, F.upper("region"))
    cfg = KafkaStateConfig(topic=topic, brokers=kafka_bootstrap, keytype="StreamMetadata",
                           fields=("v",))
    assert write_kafka(df.coalesce(1), cfg) == 2
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": uuid.uuid4().hex,
                         "receive.message.max.bytes": 2**30})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = consumer.consume(2, timeout=30)
    consumer.close()
    assert [(m.value(), m.headers()) for m in got] == [(b"a", [(FILTER_HEADER, b"EU")]),
                                                      (b"b", None)]


def test_chunks_are_the_same_when_a_batch_is_written_again(spark, kafka_bootstrap, kafka_topic,
                                                          small_arrow_batches):
    topic = kafka_topic(1)
    rows = [(PID, 0, o, f"value {o}" * (o % 7)) for o in range(200)]
    df = spark.createDataFrame(rows, f"{CARRIED_DDL}, v string").coalesce(1)
    cfg = KafkaStateConfig(topic=topic, brokers=kafka_bootstrap, keytype="StreamMetadata",
                           fields=("v",), chunking=True, chunk_messages=30, chunk_bytes=1024)
    first = write_kafka(df, cfg)
    again = write_kafka(df, cfg)  # a retried batch
    records = read_topic(kafka_bootstrap, topic)
    assert first == again and len(records) == 2 * first
    assert [r.value for r in records[:first]] == [r.value for r in records[first:]]
    assert [r.key for r in records[:first]] == [r.key for r in records[first:]]
