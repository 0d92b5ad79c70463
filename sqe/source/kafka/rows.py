"""What the source's ``read()`` makes of fetched Kafka records: the rows Spark gets.

Per fetched slice of one partition (:class:`Records`), :func:`to_rows`

* for a plain topic: decodes each key's StreamMetadata, drops replays at or
  below the HWM, and (when the stream filters) keeps the messages whose filter
  value -- the record header ``sqe-filter-value`` -- passes the post-filter;
* for a chunked topic (``chunks``, :mod:`sqe.wire.chunk.codec`), from the headers alone:
  drops whole chunks whose key (the StreamMetadata of their last message) is at
  or below the HWM, and chunks whose Bloom filter has none of ``filterValues``;
  then decodes the rest at once (:func:`sqe.wire.chunk.arrow.decode_chunks`), drops
  the replays of straddling chunks message by message, and post-filters
  exactly.  A chunk that cannot be decoded fails the batch naming its
  topic/partition/offset, or goes to the dead-letter topic
(:class:`~sqe.source.dead_letters.DeadLetters`).

A message of a chunk becomes a row with its own StreamMetadata key
(the chunk's pid and source partition, the message's offset), the chunk
record's ``_offset`` and its position in the chunk, ``_index``.  Every counter
lands in a :class:`~sqe.wire.columns.Tally`; each task yields its tally as one row
(``_offset`` NULL) that the runner sums.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqe.errors import SourceError
from sqe.source.dead_letters import DeadLetters
from sqe.source.kafka.config import RangePartition, SourceConfig
from sqe.source.marks import TaskMarks
from sqe.source.record_headers import headers_array, with_headers
from sqe.source.replay import beyond_bound, filter_replays_decoded, judgeable
from sqe.source.values import decoder, with_value
from sqe.wire.arrays import binaries, booleans, from_numpy, repeated, scalar, strings, to_numpy
from sqe.wire.chunk.arrow import decode_chunks, read_headers
from sqe.wire.chunk.bloom import probe_headers
from sqe.wire.chunk.codec import MAGIC, ChunkError, KeyMismatch, checked_body
from sqe.wire.columns import Tally, record_batch
from sqe.wire.headers import FILTER_HEADER
from sqe.wire.keys import decode_keys, encode_keys

__all__ = ["Records", "to_rows"]

Hwm = dict[tuple[int, int], int]
_FALSE = scalar(False)


@dataclass
class Records:
    """Records fetched from one partition, in offset order, as the consumer gave them."""

    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    stamps: list[int] = field(default_factory=list)
    filter_values: list[bytes | None] | None = None  # the header's, when the stream filters
    headers: list[list[tuple[str, bytes | None]] | None] | None = None  # with includeHeaders

    def __len__(self) -> int:
        return len(self.offsets)


def _merge(a: Hwm, b: Hwm) -> Hwm:
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out.get(k, v), v)
    return out


def _batch(part: RangePartition, n: int, columns: dict[str, Any]) -> pa.RecordBatch:
    """A batch of ``n`` record rows; columns not given are NULL."""
    return record_batch(n, {"_topic": repeated(part.topic, n),
                            "_partition": from_numpy(np.full(n, part.partition, dtype=np.int32)),
                            **columns})


def _stamps(stamps: list[int] | np.ndarray) -> pa.Array:
    return from_numpy(np.asarray(stamps, dtype=np.int64) * 1000, pa.timestamp("us", tz="UTC"))


def _metadata(pid: np.ndarray, spart: np.ndarray, soff: np.ndarray, valid: np.ndarray
              ) -> dict[str, pa.Array]:
    return {"_pid": from_numpy(pid, valid=valid), "_source_partition": from_numpy(spart, valid=valid),
            "_source_offset": from_numpy(soff, valid=valid)}


def _post_mask(batch: pa.RecordBatch, cfg: SourceConfig) -> np.ndarray:
    """Messages that pass the post-filter (all of them when the stream does not filter)."""
    n = batch.num_rows
    if cfg.post_filter is not None:
        return cfg.post_filter.mask(batch)
    if not cfg.stream.filter_values:
        return np.ones(n, dtype=bool)
    fv = batch.column("_filter_value")
    hit = pc.fill_null(pc.is_in(fv, strings(cfg.stream.filter_values)), _FALSE)
    if cfg.stream.match_unfiltered:
        hit = pc.or_(hit, fv.is_null())
    return to_numpy(hit)


def to_rows(cfg: SourceConfig, part: RangePartition, rec: Records, marks: TaskMarks | None,
            dead: DeadLetters | None) -> tuple[pa.RecordBatch, Tally]:
    """The rows of ``rec`` (replays and filtered messages dropped) and the counters.

    With ``marks`` (the stream filters replays), the marks of the pairs ``rec`` names are
    read first if they were not, and ``marks.now`` moves past the records kept.
    """
    tally = Tally()
    if cfg.stream.chunks:
        batch = _chunk_rows(cfg, part, rec, marks, tally, dead)
    else:
        batch = _plain_rows(cfg, part, rec, marks, tally, dead)
    return batch, tally


def _plain_rows(cfg: SourceConfig, part: RangePartition, rec: Records, marks: TaskMarks | None,
                tally: Tally, dead: DeadLetters | None) -> pa.RecordBatch:
    key_arr = binaries(rec.keys)
    value_arr = binaries(rec.values)
    _refuse_chunks(part, rec, value_arr)
    pid, spart, soff, valid = decode_keys(key_arr)
    judged = judgeable(spart, soff, valid)
    if marks is not None:
        marks.meet(pid, spart, valid)
    n = len(rec)
    columns = {"_key": key_arr, "_value": value_arr,
               "_offset": from_numpy(np.asarray(rec.offsets, dtype=np.int64)),
               "_timestamp": _stamps(rec.stamps), **_metadata(pid, spart, soff, judged)}
    if rec.filter_values is not None:
        columns["_filter_value"] = _header_values(part, rec)
    batch = with_headers(_batch(part, n, columns), rec.headers is not None,
                         None if rec.headers is None else headers_array(rec.headers))
    keep = np.ones(n, dtype=bool)
    if marks is not None:
        forged = _beyond(cfg, part, marks, pid, spart, soff, judged, "its key")
        tally.keys_beyond_bound += len(forged)
        _reject(cfg, part, rec, forged, "bad", dead, tally)
        out = np.zeros(n, dtype=bool)
        out[list(forged)] = True
        keep, marks.now = filter_replays_decoded(pid, spart, soff, judged & ~out, marks.now)
        keep &= ~out
        tally.replays_dropped += int((~keep & ~out).sum())
    if cfg.stream.post_filtering:
        passed = _post_mask(batch, cfg)
        tally.messages_filtered += int((keep & ~passed).sum())
        keep &= passed
    if cfg.value_format is not None:
        return _decoded(cfg, part, rec, batch, keep, dead, tally)
    return batch if keep.all() else batch.filter(booleans(keep))


def _decoded(cfg: SourceConfig, part: RangePartition, rec: Records, batch: pa.RecordBatch,
             keep: np.ndarray, dead: DeadLetters | None, tally: Tally) -> pa.RecordBatch:
    """The kept rows of ``batch`` with their values decoded (:data:`~sqe.source.values.VALUE`);
    a value that does not decode is a bad record (the stream's ``badRecordPolicy``)."""
    assert cfg.value_format is not None
    kept = np.flatnonzero(keep)
    values = batch.column("_value")
    if len(kept) < len(keep):
        values = values.take(from_numpy(kept))
    decoded = decoder(cfg.value_format).decode(values)
    out = decoded.values
    if decoded.bad:
        rejected = {int(kept[i]): reason for i, reason in decoded.bad.items()}
        _reject(cfg, part, rec, rejected, "bad", dead, tally)
        good = np.ones(len(kept), dtype=bool)
        good[list(decoded.bad)] = False
        keep[list(rejected)] = False
        out = out.filter(booleans(good))
    rows = batch if keep.all() else batch.filter(booleans(keep))
    return with_value(rows, cfg.value_format, out)


def _header_values(part: RangePartition, rec: Records) -> pa.Array:
    raw = binaries(rec.filter_values or [])
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        for i, v in enumerate(rec.filter_values or ()):
            if v is not None:
                try:
                    v.decode("utf-8")
                except UnicodeDecodeError:
                    raise SourceError(f"{part.topic}/{part.partition} offset {rec.offsets[i]}: "
                                      f"the {FILTER_HEADER} header is not UTF-8: {v[:40]!r}"
                                      ) from None
        raise


def _refuse_chunks(part: RangePartition, rec: Records, values: pa.Array) -> None:
    """A stream that does not read chunks must not pass chunks on as opaque values."""
    looks = pc.fill_null(pc.starts_with(values, MAGIC.decode("ascii")), _FALSE)
    for i in np.flatnonzero(to_numpy(looks)).tolist():
        try:
            checked_body(rec.values[i] or b"", rec.keys[i])
        except ChunkError:
            continue  # starts like a chunk by chance: a plain value
        raise SourceError(f"{part.topic}/{part.partition} offset {rec.offsets[i]} holds an SQE "
                          "chunk (written with jw.sqe.state.kafka.chunking); read this topic "
                          "with jw.sqe.spout.kafka.chunks: true")


_POLICY_OPTIONS = {"corrupt": "corruptChunkPolicy", "bad": "badRecordPolicy"}


def _reject(cfg: SourceConfig, part: RangePartition, rec: Records, rejected: dict[int, str],
            kind: str, dead: DeadLetters | None, tally: Tally) -> None:
    """Apply the policy of ``kind`` ("corrupt": a chunk that cannot be decoded; "bad": a
    record a step cannot take) to the records in ``rejected`` (position -> reason): fail
    the batch naming the first, or send each unchanged to the dead-letter topic."""
    policy = cfg.stream.corrupt_policy if kind == "corrupt" else cfg.stream.bad_record_policy
    what = "corrupt chunk" if kind == "corrupt" else "bad record"
    for i in sorted(rejected):
        offset = rec.offsets[i]
        if policy != "deadletter" or dead is None:
            raise SourceError(f"{what} at {part.topic}/{part.partition} offset {offset}: "
                              f"{rejected[i]}; the batch fails (jw.sqe.spout.kafka."
                              f"{_POLICY_OPTIONS[kind]}: deadletter sends such records to a "
                              "dead-letter topic and goes on)")
        dead.send(part.topic, part.partition, offset, rec.keys[i], rec.values[i], rejected[i])
        tally.dead_letters += 1


def _beyond(cfg: SourceConfig, part: RangePartition, marks: TaskMarks, pid: np.ndarray,
            spart: np.ndarray, off: np.ndarray, judged: np.ndarray, what: str
            ) -> dict[int, str]:
    """Records (by position) whose key claims an offset beyond maxAdvance, with the reason."""
    start = marks.start
    bound = cfg.stream.max_advance
    found = beyond_bound(pid, spart, off, judged, start, bound)
    out = {}
    for i in np.flatnonzero(found).tolist():
        group = (int(pid[i]), int(spart[i]))
        out[i] = (f"{what} claims source offset {int(off[i])} of (pid {group[0]}, partition "
                  f"{group[1]}), more than jw.sqe.spout.kafka.filterReplays.maxAdvance "
                  f"({bound}) above the mark {start.get(group, -1)} it had when the batch "
                  "began; as a mark it would drop every good record after it as a replay")
    return out


def _chunk_rows(cfg: SourceConfig, part: RangePartition, rec: Records, marks: TaskMarks | None,
                tally: Tally, dead: DeadLetters | None) -> pa.RecordBatch:
    n = len(rec)
    values = [v if v is not None else b"" for v in rec.values]
    sizes = np.fromiter(map(len, values), dtype=np.int64, count=n)
    heads = read_headers(values, rec.keys)  # the CRC is checked before any skip decision
    pid, spart, last, valid = decode_keys(binaries(rec.keys))
    judged = judgeable(spart, last, valid)
    if marks is not None:
        marks.meet(pid, spart, valid)
    corrupt: dict[int, str] = {i: _reason(e) for i, e in heads.bad.items()}
    good = np.ones(n, dtype=bool)
    good[list(corrupt)] = False
    forged: dict[int, str] = {}
    if marks is not None:
        forged = _beyond(cfg, part, marks, pid, spart, last, good & judged, "its key")
        good[list(forged)] = False
    tally.chunks_read += n
    # 1. whole chunks at or below the HWM, from their keys (a version 1 chunk's key is not
    #    covered by its CRC: such chunks are decoded, and their messages judged one by one)
    trusted = good & judged & (heads.version >= 2)
    skip_hwm = np.zeros(n, dtype=bool)
    if marks is not None:
        keep_c, _ = filter_replays_decoded(pid, spart, last, trusted, marks.now)
        skip_hwm = trusted & ~keep_c
        tally.chunks_skipped_hwm += int(skip_hwm.sum())
        tally.replays_dropped += int(heads.count[skip_hwm].sum())
    # 2. chunks whose Bloom filter has none of the wanted values
    skip_bloom = np.zeros(n, dtype=bool)
    if cfg.stream.filter_values:
        rows = np.flatnonzero(good & ~skip_hwm)
        hit = probe_headers([heads.blooms[i] for i in rows.tolist()], cfg.stream.filter_values,
                            cfg.stream.match_unfiltered)
        skip_bloom[rows[~hit]] = True
        tally.chunks_skipped_bloom += int(skip_bloom.sum())
    tally.bytes_not_decoded += int(sizes[skip_hwm | skip_bloom].sum())
    # 3. decode the rest at once
    todo = np.flatnonzero(good & ~skip_hwm & ~skip_bloom)
    tally.bytes_decoded += int(sizes[todo].sum())
    dec = decode_chunks([values[i] for i in todo.tolist()], [rec.keys[i] for i in todo.tolist()],
                        crc_checked=True)
    bad: dict[int, ChunkError] = {int(todo[k]): exc for k, exc in dec.bad.items()}
    record = todo[dec.chunk]  # the record position of each message
    _check_keys(record, dec.offset, last, valid, bad)
    corrupt.update({i: _reason(e) for i, e in bad.items()})
    if marks is not None:  # a message beyond the bound makes its whole chunk a bad record
        m_forged = _beyond(cfg, part, marks, pid[record], spart[record], dec.offset,
                           judgeable(spart[record], dec.offset, valid[record]), "a message")
        for k, reason in m_forged.items():
            forged.setdefault(int(record[k]), f"{reason} (message offset in the chunk)")
    _reject(cfg, part, rec, corrupt, "corrupt", dead, tally)
    tally.keys_beyond_bound += len(forged)
    _reject(cfg, part, rec, forged, "bad", dead, tally)
    rejected = np.fromiter([*corrupt, *forged], dtype=np.int64, count=len(corrupt) + len(forged))
    ok = ~np.isin(record, rejected)
    record, soff = record[ok], dec.offset[ok]
    fv, value = dec.filter_value.filter(booleans(ok)), dec.value.filter(booleans(ok))
    m = len(record)
    tally.messages_decoded += m
    # which decoded chunk each message is in (0, 1, ...), and where each chunk starts
    chunk_no = np.cumsum(np.r_[False, record[1:] != record[:-1]]) if m else np.zeros(0, int)
    first = np.flatnonzero(np.r_[True, record[1:] != record[:-1]]) if m else np.zeros(0, int)
    index = np.arange(m) - first[chunk_no]
    m_pid, m_spart, m_valid = pid[record], spart[record], valid[record]
    offsets = np.asarray(rec.offsets, dtype=np.int64)
    keys = encode_keys(m_pid, m_spart, soff)
    m_judged = judgeable(m_spart, soff, m_valid)
    batch = _batch(part, m, {
        "_key": pc.if_else(booleans(m_valid), keys, pa.nulls(m, pa.binary())),
        "_value": value, "_offset": from_numpy(offsets[record]),
        "_timestamp": _stamps(np.asarray(rec.stamps, dtype=np.int64)[record]),
        **_metadata(m_pid, m_spart, soff, m_judged),
        "_index": from_numpy(index.astype(np.int32)), "_filter_value": fv,
    })
    keep = np.ones(m, dtype=bool)
    if marks is not None:
        keep, message_hwm = filter_replays_decoded(m_pid, m_spart, soff, m_valid, marks.now)
        tally.replays_dropped += int((~keep).sum())
        # the keys of accepted chunks (skipped ones too) are marks; rejected ones never are
        accepted = trusted.copy()
        accepted[rejected] = False
        _, chunk_hwm = filter_replays_decoded(pid, spart, last, accepted, marks.now)
        marks.now = _merge(chunk_hwm, message_hwm)
    if cfg.stream.post_filtering:
        passed = _post_mask(batch, cfg)
        if cfg.stream.filter_values:  # decoded because of the Bloom filter, yet nothing matched
            hits = np.bincount(chunk_no, weights=passed, minlength=len(first))
            tally.chunks_false_positive += int((hits == 0).sum())
        tally.messages_filtered += int((keep & ~passed).sum())
        keep &= passed
    return batch if keep.all() else batch.filter(booleans(keep))


def _reason(exc: ChunkError) -> str:
    return f"{type(exc).__name__}: {exc}"


def _check_keys(record: np.ndarray, offset: np.ndarray, last: np.ndarray, valid: np.ndarray,
                bad: dict[int, ChunkError]) -> None:
    """A chunk's key must name its last message: the HWM stage trusts it without decoding."""
    if not len(record):
        return
    ends = np.flatnonzero(np.r_[record[1:] != record[:-1], True])
    chunks, final = record[ends], offset[ends]
    wrong = valid[chunks] & (last[chunks] != final)
    for c, got in zip(chunks[wrong].tolist(), final[wrong].tolist(), strict=True):
        bad.setdefault(c, KeyMismatch(f"the record key names offset {int(last[c])} as the last "
                                      f"message, the chunk's last message has offset {got}"))
