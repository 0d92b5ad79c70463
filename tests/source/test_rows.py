"""The source's record-to-row stage (sqe.source.kafka.rows.to_rows) against a scalar reference.

The reference reads chunk by chunk with the scalar pieces (read_header,
BloomFilter.might_contain, decode_chunk) and filters replays message by
message; the vectorised stage must give exactly its rows and its counters.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sqe.errors import SourceError
from sqe.source.kafka.config import RangePartition, SourceConfig
from sqe.source.kafka.rows import Records, to_rows
from sqe.source.marks import TaskMarks
from sqe.wire.chunk.arrow import read_headers
from sqe.wire.chunk.bloom import BloomFilter
from sqe.wire.chunk.codec import (
    VERSION,
    VERSIONS,
    ChunkError,
    Message,
    checked_body,
    crc_problem,
    decode_chunk,
    encode_chunk,
    read_header,
)
from sqe.wire.keys import StreamMetadata

PID = 77
REGIONS = [f"r{i}" for i in range(6)]


def _source(**options) -> SourceConfig:
    """A source config from reader options; tuples of filter values as JSON lists."""
    given = {k: json.dumps(list(v)) if isinstance(v, tuple) else v for k, v in options.items()}
    return SourceConfig.from_options({"topic": "t", "brokers": "127.0.0.1:1", **given})


def _cfg(**options) -> SourceConfig:
    return _source(chunks=True, **options)


def _part() -> RangePartition:
    return RangePartition("t", 3, 0, 10**6)


def _marks(hwm: dict | None) -> TaskMarks | None:
    return TaskMarks.given(hwm) if hwm is not None else None


def _chunked(spec: list[list[str | None]], spart: int = 1, start: int = 100,
             filter_size: int = 16, version: int = VERSION) -> Records:
    """One chunk record per list; message j of the whole stream has source offset start + j."""
    rec = Records()
    offset = start
    for k, fvs in enumerate(spec):
        msgs = [Message(offset + i, fv, f"{fv}:{offset + i}".encode()) for i, fv in enumerate(fvs)]
        offset += len(fvs)
        key = StreamMetadata(PID, spart, msgs[-1].offset).to_bytes()
        rec.keys.append(key)
        rec.values.append(encode_chunk(msgs, msgs[0].offset, filter_size, key=key,
                                       version=version))
        rec.offsets.append(500 + k)
        rec.stamps.append(1_700_000_000_000 + k)
    return rec


def _reference(cfg: SourceConfig, rec: Records, hwm: dict | None) -> tuple[list, dict]:
    """Rows (record offset, index, source offset, filter value, value) and counters."""
    rows, counts = [], dict(chunks_read=0, chunks_skipped_bloom=0, chunks_skipped_hwm=0,
                            chunks_false_positive=0, messages_decoded=0, replays_dropped=0,
                            messages_filtered=0)
    running = dict(hwm) if hwm is not None else None
    for key, value, offset in zip(rec.keys, rec.values, rec.offsets, strict=True):
        counts["chunks_read"] += 1
        meta = StreamMetadata.from_bytes(key)
        group = (meta.pid, meta.partition)
        header, _ = checked_body(value, key)  # the CRC is checked before any skip decision
        trusted = header.version >= 2  # a version 1 chunk's key is not covered by its CRC
        if (trusted and running is not None and group in running
                and meta.offset <= running[group]):
            counts["chunks_skipped_hwm"] += 1
            counts["replays_dropped"] += header.count
            continue
        if header.bloom:
            wants = BloomFilter.from_bytes(header.bloom).might_contain(cfg.stream.filter_values,
                                                                       cfg.stream.match_unfiltered)
        else:
            wants = not cfg.stream.filter_values or cfg.stream.match_unfiltered
        if not wants:
            counts["chunks_skipped_bloom"] += 1
            if running is not None and trusted:
                running[group] = max(running.get(group, meta.offset), meta.offset)
            continue
        passed_any = False
        for i, m in enumerate(decode_chunk(value, key)):
            counts["messages_decoded"] += 1
            wanted = (not cfg.stream.filter_values or m.filter_value in cfg.stream.filter_values
                      or (m.filter_value is None and cfg.stream.match_unfiltered))
            passed_any |= wanted
            if running is not None and group in running and m.offset <= running[group]:
                counts["replays_dropped"] += 1
                continue
            if running is not None:
                running[group] = m.offset
            if not wanted:
                counts["messages_filtered"] += 1
                continue
            rows.append((offset, i, m.offset, m.filter_value, m.value))
        if cfg.stream.filter_values and not passed_any:
            counts["chunks_false_positive"] += 1
    return rows, counts


def _vectorised(cfg: SourceConfig, rec: Records, hwm: dict | None) -> tuple[list, dict]:
    batch, tally = to_rows(cfg, _part(), rec, _marks(hwm), None)
    d = batch.to_pydict()
    rows = list(zip(d["_offset"], d["_index"], d["_source_offset"], d["_filter_value"],
                    d["_value"], strict=True))
    counts = {k: getattr(tally, k) for k in _reference(cfg, Records(), None)[1]}
    return rows, counts


chunk_specs = st.lists(st.lists(st.one_of(st.none(), st.sampled_from(REGIONS)), min_size=1,
                                max_size=12), min_size=1, max_size=15)


@settings(max_examples=150, deadline=None)
@given(chunk_specs, st.lists(st.sampled_from(REGIONS), max_size=2), st.booleans(),
       st.one_of(st.none(), st.integers(90, 200)), st.sampled_from(VERSIONS))
def test_equal_to_the_scalar_reference(spec, wanted, match_unfiltered, mark, version):
    cfg = _cfg(filterValues=tuple(wanted), matchUnfiltered=match_unfiltered)
    rec = _chunked(spec, version=version)
    hwm = {(PID, 1): mark} if mark is not None else None
    assert _vectorised(cfg, rec, hwm) == _reference(cfg, rec, hwm)


def test_a_selective_reader_gets_exactly_its_value_and_skips_most_chunks():
    rng = np.random.default_rng(5)
    regions = [f"region-{i}" for i in range(50)]
    spec = [[regions[int(rng.integers(0, 50))]] * 100 for _ in range(200)]  # one region a chunk
    rec = _chunked(spec)
    batch, tally = to_rows(_cfg(filterValues=("region-7",)), _part(), rec, None, None)
    expected = sum(100 for s in spec if s[0] == "region-7")
    assert batch.num_rows == expected > 0
    assert set(batch.column("_filter_value").to_pylist()) == {"region-7"}
    assert tally.chunks_skipped_bloom >= 150
    assert tally.messages_decoded == (200 - tally.chunks_skipped_bloom) * 100
    assert tally.bytes_not_decoded > 0 and tally.bytes_decoded > 0


def test_match_unfiltered_on_a_topic_mixing_filtered_and_unfiltered_messages():
    spec = [["eu", None], ["us"], [None, None], ["eu"]]
    rec = _chunked(spec)
    without, t1 = to_rows(_cfg(filterValues=("eu",)), _part(), rec, None, None)
    assert without.column("_filter_value").to_pylist() == ["eu", "eu"]
    assert t1.chunks_skipped_bloom == 2
    with_, t2 = to_rows(_cfg(filterValues=("eu",), matchUnfiltered=True), _part(), rec,
                           None, None)
    assert with_.column("_filter_value").to_pylist() == ["eu", None, None, None, "eu"]
    assert t2.chunks_skipped_bloom == 1


def test_hwm_at_a_chunk_boundary_skips_whole_chunks_without_decoding():
    rec = _chunked([["a"] * 4, ["a"] * 4, ["a"] * 4])  # source offsets 100..111
    marks = TaskMarks.given({(PID, 1): 107})
    batch, tally = to_rows(_cfg(), _part(), rec, marks, None)
    assert batch.column("_source_offset").to_pylist() == [108, 109, 110, 111]
    assert batch.column("_index").to_pylist() == [0, 1, 2, 3]
    assert (tally.chunks_skipped_hwm, tally.messages_decoded, tally.replays_dropped) == (2, 4, 8)
    assert tally.bytes_not_decoded == len(rec.values[0]) + len(rec.values[1])
    assert marks.now == {(PID, 1): 111}


def test_hwm_inside_a_chunk_filters_it_message_by_message():
    rec = _chunked([["a"] * 4, ["a"] * 4])  # 100..103, 104..107
    marks = TaskMarks.given({(PID, 1): 105})
    batch, tally = to_rows(_cfg(), _part(), rec, marks, None)
    assert batch.column("_source_offset").to_pylist() == [106, 107]
    assert batch.column("_index").to_pylist() == [2, 3]
    assert (tally.chunks_skipped_hwm, tally.messages_decoded, tally.replays_dropped) == (1, 4, 6)
    assert marks.now == {(PID, 1): 107}


def test_each_message_gets_its_own_stream_metadata_key():
    rec = _chunked([["x", None, "y"]], spart=9, start=40)
    batch, _ = to_rows(_cfg(), _part(), rec, None, None)
    keys = [StreamMetadata.from_bytes(k) for k in batch.column("_key").to_pylist()]
    assert [(k.pid, k.partition, k.offset) for k in keys] == [(PID, 9, 40), (PID, 9, 41),
                                                              (PID, 9, 42)]
    assert batch.column("_value").to_pylist() == [b"x:40", b"None:41", b"y:42"]
    assert batch.column("_partition").to_pylist() == [3, 3, 3]


def test_a_corrupt_chunk_fails_the_batch_naming_topic_partition_and_offset():
    rec = _chunked([["a"] * 3, ["b"] * 3])
    broken = bytearray(rec.values[1])
    broken[-1] ^= 0xFF
    rec.values[1] = bytes(broken)
    with pytest.raises(SourceError, match=r"corrupt chunk at t/3 offset 501: CrcMismatch"):
        to_rows(_cfg(), _part(), rec, None, None)


def test_a_key_that_does_not_name_the_last_message_is_a_corrupt_chunk():
    rec = _chunked([["a"] * 3])
    rec.keys[0] = StreamMetadata(PID, 1, 101).to_bytes()  # the last message is 102
    with pytest.raises(SourceError, match="CrcMismatch: CRC32C .* of the chunk and its record "
                                          "key does not match"):
        to_rows(_cfg(), _part(), rec, None, None)
    old = _chunked([["a"] * 3], version=1)  # the CRC of version 1 does not cover the key
    old.keys[0] = rec.keys[0]
    with pytest.raises(SourceError, match="KeyMismatch: the record key names offset 101"):
        to_rows(_cfg(), _part(), old, TaskMarks.given({(PID, 1): 101}), None)


def test_a_plain_record_in_a_chunked_stream_is_a_corrupt_chunk():
    rec = _chunked([["a"]])
    rec.values[0] = b'{"not": "a chunk", "but": "a JSON value"}'
    with pytest.raises(SourceError, match="BadMagic"):
        to_rows(_cfg(), _part(), rec, None, None)


def test_a_chunk_in_a_plain_stream_is_an_error_that_names_the_option():
    rec = _chunked([["a"]])
    plain = _source()
    with pytest.raises(SourceError, match=r"t/3 offset 500 holds an SQE chunk.*chunks: true"):
        to_rows(plain, _part(), rec, None, None)
    rec.values[0] = b"SQEC but plain text"  # starts like one, is not one: passed on
    batch, _ = to_rows(plain, _part(), rec, None, None)
    assert batch.column("_value").to_pylist() == [b"SQEC but plain text"]


def _plain(fvs: list[bytes | None]) -> Records:
    n = len(fvs)
    return Records(keys=[StreamMetadata(PID, 0, i).to_bytes() for i in range(n)],
                   values=[b"v%d" % i for i in range(n)], offsets=list(range(n)),
                   stamps=[0] * n, filter_values=fvs)


def test_plain_records_are_post_filtered_by_their_header():
    rec = _plain([b"eu", b"us", None, b"eu"])
    cfg = _source(filterValues=("eu",))
    batch, tally = to_rows(cfg, _part(), rec, None, None)
    assert batch.column("_offset").to_pylist() == [0, 3]
    assert tally.messages_filtered == 2
    cfg = _source(filterValues=("eu",), matchUnfiltered=True)
    assert to_rows(cfg, _part(), rec, None, None)[0].column("_offset").to_pylist() == [0, 2, 3]


def test_a_header_that_is_not_utf8_is_an_error_naming_the_offset():
    cfg = _source(filterValues=("eu",))
    with pytest.raises(SourceError, match="t/3 offset 1: the sqe-filter-value header is not"):
        to_rows(cfg, _part(), _plain([b"eu", b"\xff\xfe"]), None, None)


def test_post_filter_expression_replaces_the_default():
    post = json.dumps({"Or": [{"RLike": ["_filter_value", {"C": "^r[12]$"}]},
                              {"=": ["_filter_value", None]}]})
    cfg = _cfg(postFilter=post)
    rec = _chunked([["r1", "r2", "r3", None]])
    batch, tally = to_rows(cfg, _part(), rec, None, None)
    assert batch.column("_filter_value").to_pylist() == ["r1", "r2", None]
    assert tally.messages_filtered == 1


def test_a_post_filter_on_a_value_field_is_refused_with_the_columns_it_may_use():
    with pytest.raises(SourceError, match="sees the source's record columns"):
        _cfg(postFilter=json.dumps({"=": ["region", {"C": "eu"}]}))


def test_the_config_with_a_compiled_post_filter_survives_pickling():
    import pickle

    cfg = _cfg(postFilter=json.dumps({"In": ["_filter_value", {"C": "a"}]}))
    _ = cfg.post_filter
    back = pickle.loads(pickle.dumps(cfg))
    rec = _chunked([["a", "b"]])
    assert to_rows(back, _part(), rec, None, None)[0].num_rows == 1
    assert SourceConfig.from_options(cfg.to_options()) == cfg


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=60), max_size=20), st.data())
def test_read_headers_equals_read_header(raw, data):
    good = [encode_chunk([Message(5, "a", b"x")], 5, data.draw(st.sampled_from([0, 16, 20])))
            for _ in range(data.draw(st.integers(0, 3)))]
    chunks = [*raw, *good]
    for i, c in enumerate(list(chunks)):  # mutate header bytes of some good chunks
        if data.draw(st.booleans()) and len(c) >= 24:
            b = bytearray(c)
            b[data.draw(st.integers(0, 23))] = data.draw(st.integers(0, 255))
            chunks[i] = bytes(b)
    heads = read_headers(chunks)
    for i, c in enumerate(chunks):
        try:
            h = read_header(c)
            problem = crc_problem(c, h.crc, None)
            if problem is not None:
                raise problem
        except ChunkError as exc:
            assert (type(heads.bad[i]), str(heads.bad[i])) == (type(exc), str(exc))
            continue
        assert i not in heads.bad
        assert (heads.count[i], heads.base_offset[i], heads.blooms[i]) == (
            h.count, h.base_offset, h.bloom)
    assert pa.array(heads.count).type == pa.int64()
