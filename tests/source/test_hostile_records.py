"""Hostile records in the source's read(): flipped bits in chunks, forged and negative keys.

Each case runs :func:`sqe.source.kafka.rows.to_rows` as a source task does, with the
dead letters going to a real broker: a rejected record is dead-lettered (or fails
the batch naming it), never moves a high-water mark, and never costs a good
record after it.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pytest

from sqe.clients.kafka import CLIENT_LOG_ENV, read_all
from sqe.clients.producers import drop_sender
from sqe.errors import SourceError
from sqe.source.dead_letters import DeadLetters
from sqe.source.kafka.config import RangePartition, SourceConfig
from sqe.source.kafka.rows import Records, to_rows
from sqe.source.marks import TaskMarks
from sqe.wire.chunk.codec import Message, encode_chunk
from sqe.wire.headers import DEAD_LETTER_REASON, DEAD_LETTER_SOURCE
from sqe.wire.keys import StreamMetadata

pytestmark = [pytest.mark.kafka]

PID = 77
MARK = 99  # the mark (PID, 1) had when the batch began


def _cfg(bootstrap: str, dead_topic: str | None, **options) -> SourceConfig:
    given = {k: json.dumps(list(v)) if isinstance(v, tuple) else v for k, v in options.items()}
    policy = {"deadLetterTopic": dead_topic, "corruptChunkPolicy": "deadletter",
              "badRecordPolicy": "deadletter"} if dead_topic else {}
    return SourceConfig.from_options({"topic": "t", "brokers": bootstrap, "filterReplays": True,
                                      "hwmConsumer": "c", **policy, **given})


def _part() -> RangePartition:
    return RangePartition("t", 3, 0, 10**6)


def _chunk(first: int, fvs: list[str | None]) -> tuple[bytes, bytes]:
    msgs = [Message(first + i, fv, f"{fv}:{first + i}".encode()) for i, fv in enumerate(fvs)]
    key = StreamMetadata(PID, 1, msgs[-1].offset).to_bytes()
    return key, encode_chunk(msgs, first, 16, key=key)


def _dead_letters(bootstrap: str, topic: str) -> list:
    return list(read_all(bootstrap, topic))


def test_every_single_bit_flip_of_a_chunk_is_dead_lettered_or_delivered_intact(
        kafka_bootstrap, kafka_topic):
    """Flip each bit of a chunk record (its value and its key), one at a time, followed by a
    good chunk: the flipped record is dead-lettered or delivered exactly as written, and the
    good chunk after it always arrives (a flipped key never moves the mark)."""
    dead_topic = kafka_topic(1, "dead")
    cfg = _cfg(kafka_bootstrap, dead_topic, chunks=True, filterValues=("eu",))
    key, value = _chunk(100, ["eu", None, "us"])
    next_key, next_value = _chunk(103, ["eu", "eu"])
    intact = [(100, "eu", b"eu:100")]
    after = [(103, "eu", b"eu:103"), (104, "eu", b"eu:104")]
    dead = DeadLetters(cfg.stream)
    outcomes: Counter[str] = Counter()
    flips = [("value", i) for i in range(len(value) * 8)] + [("key", i) for i in range(160)]
    for where, bit in flips:
        k, v = bytearray(key), bytearray(value)
        (v if where == "value" else k)[bit // 8] ^= 1 << (bit % 8)
        rec = Records(keys=[bytes(k), next_key], values=[bytes(v), next_value],
                      offsets=[500, 501], stamps=[0, 0])
        marks = TaskMarks.given({(PID, 1): MARK})
        batch, tally = to_rows(cfg, _part(), rec, marks, dead)
        hwm = marks.now
        rows = list(zip(batch.column("_source_offset").to_pylist(),
                        batch.column("_filter_value").to_pylist(),
                        batch.column("_value").to_pylist(), strict=True))
        assert rows[-2:] == after, f"{where} bit {bit}: the good chunk after it was lost"
        if rows[:-2] == intact:
            outcomes["delivered intact"] += 1
            assert tally.dead_letters == 0
        else:
            assert rows[:-2] == [], f"{where} bit {bit}: delivered wrong: {rows[:-2]}"
            assert tally.dead_letters == 1, f"{where} bit {bit}: lost without a dead letter"
            outcomes["dead-lettered"] += 1
        assert hwm == {(PID, 1): 104}, f"{where} bit {bit}: the mark moved to {hwm}"
    dead.finish()
    letters = _dead_letters(kafka_bootstrap, dead_topic)
    assert len(letters) == outcomes["dead-lettered"] == len(flips)  # the CRC covers every bit
    sources = {dict(m.headers())[DEAD_LETTER_SOURCE] for m in letters}
    assert sources == {b"t/3/500"}
    reasons = Counter(dict(m.headers())[DEAD_LETTER_REASON].split(b":")[0] for m in letters)
    assert set(reasons) <= {b"CrcMismatch", b"BadMagic", b"UnknownVersion", b"BadLength",
                            b"BadCount", b"TruncatedChunk"}


def test_a_forged_key_far_above_the_mark_fails_the_batch_naming_the_record(kafka_bootstrap):
    cfg = _cfg(kafka_bootstrap, None)
    keys = [StreamMetadata(PID, 1, o).to_bytes() for o in (100, 2**63 - 1, 101)]
    rec = Records(keys=keys, values=[b"a", b"forged", b"b"], offsets=[7, 8, 9], stamps=[0] * 3)
    with pytest.raises(SourceError, match=(
            r"^bad record at t/3 offset 8: its key claims source offset 9223372036854775807 "
            r"of \(pid 77, partition 1\), more than jw.sqe.spout.kafka.filterReplays.maxAdvance "
            r"\(1099511627776\) above the mark 99 .*badRecordPolicy: deadletter")):
        to_rows(cfg, _part(), rec, TaskMarks.given({(PID, 1): MARK}), None)


def test_a_forged_key_is_dead_lettered_and_every_good_record_after_it_arrives(
        kafka_bootstrap, kafka_topic):
    dead_topic = kafka_topic(1, "dead")
    cfg = _cfg(kafka_bootstrap, dead_topic)
    offsets = [100, 2**63 - 1, *range(101, 296)]  # the forged key early in the partition
    keys = [StreamMetadata(PID, 1, o).to_bytes() for o in offsets]
    rec = Records(keys=keys, values=[b"v%d" % i for i in range(len(keys))],
                  offsets=list(range(len(keys))), stamps=[0] * len(keys))
    dead = DeadLetters(cfg.stream)
    marks = TaskMarks.given({})
    batch, tally = to_rows(cfg, _part(), rec, marks, dead)
    hwm = marks.now
    dead.finish()
    assert batch.column("_source_offset").to_pylist() == [100, *range(101, 296)]
    assert hwm == {(PID, 1): 295}
    assert (tally.keys_beyond_bound, tally.dead_letters, tally.replays_dropped) == (1, 1, 0)
    (letter,) = _dead_letters(kafka_bootstrap, dead_topic)
    assert (letter.key(), letter.value()) == (keys[1], b"v1")  # unchanged
    headers = dict(letter.headers())
    assert headers[DEAD_LETTER_SOURCE] == b"t/3/1"
    assert b"maxAdvance" in headers[DEAD_LETTER_REASON]


def test_dead_letters_of_later_tasks_go_through_the_producer_made_ahead(
        kafka_bootstrap, kafka_topic, tmp_path, monkeypatch):
    """The process's dead-letter producer is made with its first DeadLetters, ahead of the
    first letter (a new idempotent producer delivers nothing in its first half second), and
    every later task sends through it: one producer for two tasks' letters."""
    dead_topic = kafka_topic(1, "dead")
    cfg = _cfg(kafka_bootstrap, dead_topic, **{"consumer.client.id": f"dl-{uuid.uuid4().hex}"})
    log = tmp_path / "clients.jsonl"
    monkeypatch.setenv(CLIENT_LOG_ENV, str(log))
    try:
        for task in range(2):
            keys = [StreamMetadata(PID, 1, o).to_bytes() for o in (100 + task, 2**63 - 1)]
            rec = Records(keys=keys, values=[b"ok", b"forged%d" % task], offsets=[0, 1],
                          stamps=[0, 0])
            dead = DeadLetters(cfg.stream)
            to_rows(cfg, _part(), rec, TaskMarks.given({}), dead)
            dead.finish()
        letters = _dead_letters(kafka_bootstrap, dead_topic)
        assert [letter.value() for letter in letters] == [b"forged0", b"forged1"]
        made = [json.loads(line) for line in log.read_text().splitlines()]
        assert [m["role"] for m in made if m["client"] == "producer"] == [DeadLetters.ROLE]
    finally:
        drop_sender(DeadLetters(cfg.stream).conf)


def test_the_bound_is_an_option(kafka_bootstrap):
    cfg = _cfg(kafka_bootstrap, None, **{"filterReplays.maxAdvance": 10})
    keys = [StreamMetadata(PID, 1, o).to_bytes() for o in (105, 109, 120)]
    rec = Records(keys=keys, values=[b"a", b"b", b"c"], offsets=[0, 1, 2], stamps=[0] * 3)
    with pytest.raises(SourceError, match="offset 2: its key claims source offset 120 .* \\(10\\)"):
        to_rows(cfg, _part(), rec, TaskMarks.given({(PID, 1): MARK}), None)


def test_negative_source_partitions_and_offsets_pass_through_and_never_become_marks(
        kafka_bootstrap):
    cfg = _cfg(kafka_bootstrap, None)
    keys = [StreamMetadata(777, 1, -5).to_bytes(), StreamMetadata(779, -1, 3).to_bytes(),
            StreamMetadata(777, 1, 0).to_bytes()]
    rec = Records(keys=keys, values=[b"a", b"b", b"c"], offsets=[0, 1, 2], stamps=[0] * 3)
    marks = TaskMarks.given({})
    batch, _ = to_rows(cfg, _part(), rec, marks, None)
    hwm = marks.now
    assert batch.column("_value").to_pylist() == [b"a", b"b", b"c"]
    assert batch.column("_pid").to_pylist() == [None, None, 777]  # counted as unjudgeable
    assert hwm == {(777, 1): 0}
