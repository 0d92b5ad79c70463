"""Round trips through the real services the suite runs against, so a broken one fails loudly."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import redis
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from sqe.wire.keys import StreamMetadata, decode_keys, kafka_secondary_id, pid_for


def test_kafka_round_trip_with_stream_metadata_keys(kafka_bootstrap, kafka_topic,
                                                    kafka_consumer_conf):
    topic = kafka_topic(partitions=4)
    metadata = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(topic, timeout=10)
    assert len(metadata.topics[topic].partitions) == 4
    pid = pid_for("test", "Source", kafka_secondary_id(metadata.cluster_id,
                                                       kafka_bootstrap.split(","), topic))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    sent: dict[int, list[bytes]] = {p: [] for p in range(4)}
    errors = []
    for i in range(40):
        part = i % 4
        key = StreamMetadata(pid, part, i).to_bytes()
        sent[part].append(key)
        producer.produce(topic, key=key, value=f"v{i}".encode(), partition=part,
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and errors == []

    consumer = Consumer(kafka_consumer_conf)
    try:
        for part in range(4):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=10)
            assert (low, high) == (0, 10)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
        got = []
        while len(got) < 40:
            batch = consumer.consume(num_messages=40 - len(got), timeout=10)
            assert batch, f"only {len(got)} of 40 records came back"
            for msg in batch:
                assert msg.error() is None, msg.error()
                got.append(msg)
    finally:
        consumer.close()
    for part in range(4):
        records = sorted((m for m in got if m.partition() == part), key=lambda m: m.offset())
        assert [m.offset() for m in records] == list(range(10))
        keys = pa.array([m.key() for m in records], type=pa.binary())
        assert keys.to_pylist() == sent[part]
        pids, parts, offsets, valid = decode_keys(keys)
        assert valid.all() and set(pids.tolist()) == {pid} and set(parts.tolist()) == {part}
        assert offsets.tolist() == [part + 4 * j for j in range(10)]


def test_redis_round_trip_and_isolated_databases(redis_url):
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.dbsize() == 0  # each test starts with an empty database of its own
        client.hset("hwm", mapping={"1:0": 41, "1:1": 7})
        assert client.eval("return redis.call('HINCRBY', KEYS[1], ARGV[1], 1)", 1, "hwm", "1:0") == 42
        assert {k.decode(): int(v) for k, v in client.hgetall("hwm").items()} == {"1:0": 42, "1:1": 7}
    finally:
        client.close()


def test_redis_databases_do_not_leak_between_tests(redis_url):
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.dbsize() == 0 and client.exists("hwm") == 0
    finally:
        client.close()


def _decode_batches(batches):
    for batch in batches:
        pid, part, off, valid = decode_keys(batch.column("key"))
        yield pa.RecordBatch.from_arrays(
            [pa.array(pid), pa.array(part), pa.array(off), pa.array(valid)],
            names=["pid", "partition", "offset", "valid"],
        )


def _worker_python(batches):
    import pyspark

    for batch in batches:
        yield pa.RecordBatch.from_pydict({"executable": [sys.executable] * batch.num_rows,
                                          "pyspark": [pyspark.__file__] * batch.num_rows})


def test_spark_workers_run_this_interpreter_and_package(spark):
    """Workers run this interpreter, and import pyspark from the installed package (its
    bytecode cached), not from Spark's pyspark.zip (compiled again by every worker)."""
    import pyspark

    seen = {(r.executable, str(Path(r.pyspark).resolve())) for r in spark.range(4).mapInArrow(
        _worker_python, "executable string, pyspark string").collect()}
    assert seen == {(sys.executable, str(Path(pyspark.__file__).resolve()))}
    keys = [StreamMetadata(-3, p, 10 + p).to_bytes() for p in range(6)] + [None, b"short"]
    df = spark.createDataFrame([(k,) for k in keys], "key binary")
    out = df.mapInArrow(_decode_batches,
                        "pid long, partition int, offset long, valid boolean").collect()
    rows = sorted((r.pid, r.partition, r.offset, r.valid) for r in out)
    assert rows == sorted([(-3, p, 10 + p, True) for p in range(6)] + [(0, 0, 0, False)] * 2)
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
