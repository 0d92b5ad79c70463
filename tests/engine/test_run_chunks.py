"""Chunked topics end to end (real broker, Redis, Spark): a writer packs events into Bloom-
filtered chunks; selective readers get exactly their region's events, replays are dropped
whole-chunk, and corrupt chunks fail the batch or go to the dead-letter topic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sqe.clients.kafka import read_all
from sqe.config.plan import plan_topology
from sqe.engine.run.runner import run_topology
from sqe.errors import RunError
from sqe.lang.topology import load_topology
from sqe.wire.headers import DEAD_LETTER_REASON, DEAD_LETTER_SOURCE
from sqe.wire.keys import StreamMetadata
from tests.support.kafka_io import produce, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]

PID = 31
REGIONS = [f"region-{i}" for i in range(50)]


def _events(n: int, partitions: int) -> list[tuple[bytes, bytes, int]]:
    """Events with a region (every 9th without one), keyed by StreamMetadata."""
    out = []
    for i in range(n):
        p = i % partitions
        region = None if i % 9 == 4 else REGIONS[(i * 7) % 50]
        value = json.dumps({"id": i, "region": region}).encode()
        out.append((StreamMetadata(PID, p, i // partitions).to_bytes(), value, p))
    return out


def _write(tmp_path: Path, name: str, commands: list) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(commands))
    return path


def _typed(typed: bool, fields: dict[str, str]) -> dict:
    """The stream's options: with ``typed``, its declared fields (planned once: one pass)."""
    return {"options": {"jw.sqe.spout.fields": fields}} if typed else {}


def _writer(tmp_path: Path, source: str, chunked: str, typed: bool = False) -> Path:
    return _write(tmp_path, "writer", [
        {"CreateStream": {"streamName": "Events", "objectName": source, "spoutName": "KAFKA",
                          "deserializer": "json",
                          **_typed(typed, {"id": "bigint", "region": "string"})}},
        {"Query": {"insertInto": {
            "objectName": chunked, "stateName": "KAFKA", "fields": ["id", "region"],
            "options": {"jw.sqe.state.kafka.keytype": "StreamMetadata",
                        "jw.sqe.state.kafka.partitionClass":
                            "partitioners.SourcePartitionPartitioner",
                        "jw.sqe.state.kafka.chunking": True,
                        "jw.sqe.state.kafka.chunk.maxMessages": 20,
                        "jw.sqe.state.kafka.chunk.compression": "lz4",
                        "jw.sqe.state.kafka.filterValue": "region"}},
            "select": {"expressions": ["id", "region"]}, "from": {"objectName": "Events"}}},
    ])


def _reader(tmp_path: Path, name: str, chunked: str, dest: str, typed: bool = False,
            **options) -> Path:
    fields = {"jw.sqe.spout.fields": {"id": "bigint"}} if typed else {}
    return _write(tmp_path, name, [
        {"CreateStream": {"streamName": "Chunked", "objectName": chunked, "spoutName": "KAFKA",
                          "deserializer": "json",
                          "options": {"jw.sqe.spout.kafka.chunks": True,
                                      "jw.sqe.spout.kafka.filterReplays": True, **fields,
                                      **options}}},
        {"Query": {"insertInto": {"objectName": dest, "stateName": "KAFKA", "fields": ["id"],
                                  "options": {"jw.sqe.state.kafka.keytype": "StreamMetadata"}},
                   "select": {"expressions": ["id"]}, "from": {"objectName": "Chunked"}}},
    ])


def _run(path: Path, spark, kafka: str, redis_url: str, name: str, checkpoint: Path):
    conf = {"jw.sqe.spout.kafka.brokers": kafka, "jw.sqe.state.kafka.brokers": kafka,
            "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url}
    return run_topology(plan_topology(load_topology(path), conf=conf), spark, name, checkpoint,
                        "once")


def _ids(kafka: str, topic: str) -> list[int]:
    return [json.loads(r.value) for r in read_topic(kafka, topic)]


@pytest.mark.parametrize("typed", [False, True], ids=["per-batch", "one-pass"])
def test_selective_readers_get_exactly_their_messages(spark, kafka_bootstrap, kafka_topic,
                                                      redis_url, tmp_path, typed):
    source, chunked = kafka_topic(2, "events"), kafka_topic(2, "chunked")
    events = _events(1200, 2)
    produce(kafka_bootstrap, source, events)
    _run(_writer(tmp_path, source, chunked, typed), spark, kafka_bootstrap, redis_url, "writer",
         tmp_path / "ck-w")
    regions = {i: json.loads(v)["region"] for i, (_, v, _) in enumerate(events)}

    only, with_unfiltered = kafka_topic(1, "only"), kafka_topic(1, "unf")
    queries = []
    conf = {"jw.sqe.spout.kafka.brokers": kafka_bootstrap,
            "jw.sqe.state.kafka.brokers": kafka_bootstrap,
            "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url,
            "jw.sqe.spout.observedMetrics": True}
    plan = plan_topology(load_topology(_reader(
        tmp_path, "only", chunked, only, typed,
        **{"jw.sqe.spout.kafka.filterValues": ["region-7"]})), conf=conf)
    (report,) = run_topology(plan, spark, "only", tmp_path / "ck-o", "once",
                             on_start=queries.extend)
    assert sorted(_ids(kafka_bootstrap, only)) == [i for i, r in regions.items() if r == "region-7"]
    t = report.source
    assert t.chunks_read == len(read_topic(kafka_bootstrap, chunked)) > 0
    assert t.chunks_skipped_bloom > t.chunks_read / 2
    assert t.bytes_not_decoded > t.bytes_decoded
    assert t.messages_decoded == 20 * (t.chunks_read - t.chunks_skipped_bloom)
    assert "skipped by the Bloom filter" in report.line()
    metrics = queries[0].lastProgress["observedMetrics"]["sqe.Chunked"]
    assert metrics["chunks_skipped_bloom"] == t.chunks_skipped_bloom
    assert metrics["messages_decoded"] == t.messages_decoded

    _run(_reader(tmp_path, "unf", chunked, with_unfiltered, typed,
                 **{"jw.sqe.spout.kafka.filterValues": ["region-7"],
                    "jw.sqe.spout.kafka.matchUnfiltered": True}),
         spark, kafka_bootstrap, redis_url, "unf", tmp_path / "ck-u")
    assert sorted(_ids(kafka_bootstrap, with_unfiltered)) == [
        i for i, r in regions.items() if r in ("region-7", None)]

    # the keys a reader writes carry increasing offsets (record offset << 24 | index)
    keys = [StreamMetadata.from_bytes(r.key) for r in read_topic(kafka_bootstrap, with_unfiltered)]
    for p in {k.partition for k in keys}:
        offsets = [k.offset for k in keys if k.partition == p]
        assert offsets == sorted(set(offsets))


@pytest.mark.parametrize("typed", [False, True], ids=["per-batch", "one-pass"])
def test_replayed_chunks_are_dropped_whole_and_a_second_run_reads_nothing_new(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, typed):
    source, chunked, out = kafka_topic(1, "events"), kafka_topic(1, "chunked"), kafka_topic(1)
    produce(kafka_bootstrap, source, _events(300, 1))
    writer = _writer(tmp_path, source, chunked, typed)
    _run(writer, spark, kafka_bootstrap, redis_url, "writer", tmp_path / "ck-w1")
    _run(writer, spark, kafka_bootstrap, redis_url, "writer", tmp_path / "ck-w2")  # all replayed
    (report,) = _run(_reader(tmp_path, "all", chunked, out, typed), spark, kafka_bootstrap,
                     redis_url, "all", tmp_path / "ck-r")
    assert sorted(_ids(kafka_bootstrap, out)) == list(range(300))
    assert (report.source.chunks_skipped_hwm, report.replays_dropped) == (15, 300)
    assert report.source.messages_decoded == 300


def test_corrupt_chunks_fail_the_batch_or_go_to_the_dead_letter_topic(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    source, chunked = kafka_topic(1, "events"), kafka_topic(1, "chunked")
    produce(kafka_bootstrap, source, _events(60, 1))
    _run(_writer(tmp_path, source, chunked), spark, kafka_bootstrap, redis_url, "writer",
         tmp_path / "ck-w")
    good = read_topic(kafka_bootstrap, chunked)
    bad = bytearray(good[1].value)
    bad[30] ^= 0x40
    key = StreamMetadata.from_bytes(good[-1].key)
    key = StreamMetadata(key.pid, key.partition, key.offset + 100).to_bytes()  # not a replay
    produce(kafka_bootstrap, chunked, [(key, bytes(bad), 0)])  # offset 3: a corrupt chunk

    with pytest.raises(RunError, match=rf"corrupt chunk at {chunked}/0 offset 3: CrcMismatch"):
        _run(_reader(tmp_path, "fail", chunked, kafka_topic(1)), spark, kafka_bootstrap,
             redis_url, "fail", tmp_path / "ck-f")

    dead, out = kafka_topic(1, "dead"), kafka_topic(1, "out")
    (report,) = _run(_reader(tmp_path, "dl", chunked, out,
                             **{"jw.sqe.spout.kafka.corruptChunkPolicy": "deadletter",
                                "jw.sqe.spout.kafka.deadLetterTopic": dead}),
                     spark, kafka_bootstrap, redis_url, "dl", tmp_path / "ck-d")
    assert sorted(_ids(kafka_bootstrap, out)) == list(range(60))
    (letter,) = list(read_all(kafka_bootstrap, dead))
    assert (letter.key(), letter.value()) == (key, bytes(bad))
    headers = dict(letter.headers())
    assert headers[DEAD_LETTER_SOURCE] == f"{chunked}/0/3".encode()
    assert headers[DEAD_LETTER_REASON].startswith(b"CrcMismatch: CRC32C")
    assert report.source.dead_letters == 1
    assert "1 records sent to the dead-letter topic" in report.line()


def test_plain_records_with_filter_headers_are_post_filtered(spark, kafka_bootstrap, kafka_topic,
                                                            redis_url, tmp_path):
    source, plain, out = kafka_topic(1, "events"), kafka_topic(1, "plain"), kafka_topic(1)
    events = _events(90, 1)
    produce(kafka_bootstrap, source, events)
    writer = yaml.safe_load(_writer(tmp_path, source, plain).read_text())
    writer[1]["Query"]["insertInto"]["options"]["jw.sqe.state.kafka.chunking"] = False
    _run(_write(tmp_path, "plainw", writer), spark, kafka_bootstrap, redis_url, "pw",
         tmp_path / "ck-w")
    reader = yaml.safe_load(_reader(tmp_path, "pr", plain, out, **{
        "jw.sqe.spout.kafka.filterValues": ["region-14", "region-21"]}).read_text())
    reader[0]["CreateStream"]["options"]["jw.sqe.spout.kafka.chunks"] = False
    (report,) = _run(_write(tmp_path, "pr", reader), spark, kafka_bootstrap, redis_url, "pr",
                     tmp_path / "ck-r")
    wanted = [i for i, (_, v, _) in enumerate(events)
              if json.loads(v)["region"] in ("region-14", "region-21")]
    assert sorted(_ids(kafka_bootstrap, out)) == wanted
    assert report.source.messages_filtered == 90 - len(wanted)
