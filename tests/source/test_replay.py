"""Replay filter: vectorised == scalar reference, on retries, partial attempts and SQE's scenario."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from sqe.source.replay import (
    DEFAULT_MAX_ADVANCE,
    beyond_bound,
    beyond_bound_reference,
    filter_replays,
    filter_replays_reference,
    judgeable,
    pair_groups,
)
from sqe.wire.keys import StreamMetadata, decode_keys, encode_keys


def keys_of(rows):
    return [StreamMetadata(p, q, o).to_bytes() if o is not None else None for p, q, o in rows]


def check_equal(keys, hwm):
    keep, new = filter_replays(pa.array(keys, type=pa.binary()), hwm)
    ref_keep, ref_new = filter_replays_reference(keys, hwm)
    assert keep.dtype == np.bool_ and keep.tolist() == ref_keep
    assert new == ref_new
    return keep, new


def test_sqe_replay_scenario_keeps_13_of_27():
    sequences = {0: [0, 1, 2, 1, 2, 3, 2, 3, 4],
                 1: [0, 1, 2, 1, 0, 1, 2, 1, 0],
                 2: [0, 1, 2, 3, 4, 3, 2, 1, 0]}
    rows = [(99, part, o) for part, seq in sequences.items() for o in seq]
    keep, new = check_equal(keys_of(rows), {})
    kept = [r for r, k in zip(rows, keep, strict=True) if k]
    assert kept == [(99, 0, o) for o in range(5)] + [(99, 1, o) for o in range(3)] + \
                   [(99, 2, o) for o in range(5)]
    assert new == {(99, 0): 4, (99, 1): 2, (99, 2): 4}


def test_stored_hwm_drops_at_or_below_and_keeps_above():
    keys = keys_of([(1, 0, 5), (1, 0, 6), (1, 0, 7), (2, 0, 0)])
    keep, new = check_equal(keys, {(1, 0): 6, (3, 3): 10})
    assert keep.tolist() == [False, False, True, True]
    assert new == {(1, 0): 7, (2, 0): 0, (3, 3): 10}  # untouched entries are carried over


def test_invalid_keys_are_kept():
    keys = [None, b"x" * 19] + keys_of([(1, 0, 3), (1, 0, 3)])
    keep, _ = check_equal(keys, {})
    assert keep.tolist() == [True, True, True, False]
    assert (~decode_keys(pa.array(keys, type=pa.binary()))[3]).sum() == 2


def test_extreme_offsets():
    lo, hi = -(2**63), 2**63 - 1
    keep, new = check_equal(keys_of([(0, 0, lo), (0, 0, lo), (0, 0, hi), (0, 0, hi)]), {})
    assert keep.tolist() == [True, True, True, False] and new == {(0, 0): hi}


def test_negative_source_partitions_and_offsets_cannot_be_judged_and_never_become_marks():
    keys = keys_of([(777, 1, -5), (777, 1, -5), (779, -1, 3), (779, -1, 3), (777, 1, 2)])
    keep, new = check_equal(keys, {(777, 1): 0})
    assert keep.tolist() == [True, True, True, True, True]  # passed through, like a 19-byte key
    assert new == {(777, 1): 2}
    pid, part, off, valid = decode_keys(pa.array(keys, pa.binary()))
    assert judgeable(part, off, valid).tolist() == [False, False, False, False, True]


def test_the_bound_finds_keys_far_above_the_mark_the_batch_began_with():
    bound = DEFAULT_MAX_ADVANCE
    rows = [(7, 0, 195), (7, 0, 2**63 - 1), (7, 0, 196), (7, 1, bound - 1), (7, 1, bound),
            (8, 0, 2**63 - 1), (7, 0, 195 + bound), (7, 0, 196 + bound), (7, 0, -4)]
    keys = keys_of(rows)
    start = {(7, 0): 195, (8, 0): 2**63 - 1}
    found = beyond_bound(*decode_keys(pa.array(keys, pa.binary())), start, bound)
    assert found.tolist() == beyond_bound_reference(keys, start, bound)
    assert found.tolist() == [False, True, False, False, True, False, False, True, False]


@given(st.lists(st.one_of(st.none(), st.binary(max_size=22),
                          st.tuples(st.integers(-2, 2), st.integers(-1, 2),
                                    st.integers(-(2**63), 2**63 - 1))
                          .map(lambda t: StreamMetadata(*t).to_bytes())), max_size=40),
       st.dictionaries(st.tuples(st.integers(-2, 2), st.integers(-1, 2)),
                       st.integers(-1, 2**63 - 1), max_size=4),
       st.sampled_from([1, 5, 2**40, 2**63 - 1]))
def test_the_bound_equals_its_reference(keys, start, bound):
    found = beyond_bound(*decode_keys(pa.array(keys, pa.binary())), start, bound)
    assert found.tolist() == beyond_bound_reference(keys, start, bound)


def test_input_hwm_is_not_modified():
    hwm = {(1, 0): 1}
    filter_replays(encode_keys([1], [0], [5]), hwm)
    assert hwm == {(1, 0): 1}


# A source partition's producer: contiguous attempts over offset ranges, possibly retried.
@st.composite
def producer_log(draw):
    """Records as a retrying upstream writes them into one destination partition.

    Each (pid, source partition) writes batches [a, b); a batch may fail part-way and be
    retried (a partial attempt followed by a full one), and two attempts of the same range
    may interleave (concurrent writers).  Different groups interleave arbitrarily.
    """
    groups = draw(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 3)),
                           min_size=1, max_size=4, unique=True))
    streams = []
    for pid, part in groups:
        out, start = [], draw(st.integers(0, 5))
        for _ in range(draw(st.integers(1, 4))):
            size = draw(st.integers(1, 6))
            batch = [(pid, part, o) for o in range(start, start + size)]
            mode = draw(st.sampled_from(["once", "partial-retry", "interleaved-retry"]))
            if mode == "once":
                out += batch
            elif mode == "partial-retry":
                out += batch[: draw(st.integers(0, size))] + batch
            else:
                a, b = list(batch), list(batch)
                while a or b:
                    src = a if (a and (not b or draw(st.booleans()))) else b
                    out.append(src.pop(0))
            start += size
        streams.append(out)
    merged = []
    while any(streams):
        live = [s for s in streams if s]
        merged.append(draw(st.sampled_from(live)).pop(0))
    junk = draw(st.lists(st.sampled_from([None, b"", b"z" * 21]), max_size=3))
    for item in junk:
        merged.insert(draw(st.integers(0, len(merged))), ("junk", item))
    return merged


def _materialise(log):
    return [item[1] if item[0] == "junk" else StreamMetadata(*item).to_bytes() for item in log]


@given(producer_log(), st.dictionaries(st.tuples(st.integers(-3, 3), st.integers(0, 3)),
                                       st.integers(-3, 30), max_size=5))
def test_vectorised_equals_reference_on_retried_logs(log, hwm):
    keys = _materialise(log)
    keep, new = check_equal(keys, hwm)
    # Exactly-once: every (pid, partition, offset) above the stored mark is kept once.
    kept = [k for k, flag in zip(keys, keep, strict=True) if flag and k is not None and len(k) == 20]
    metas = [StreamMetadata.from_bytes(k) for k in kept]
    assert len(metas) == len({(m.pid, m.partition, m.offset) for m in metas})
    expected = {(p, q, o) for item in log if item[0] != "junk" for (p, q, o) in [item]
                if (p, q) not in hwm or o > hwm[(p, q)]}
    assert {(m.pid, m.partition, m.offset) for m in metas} == expected


@given(st.lists(st.one_of(st.none(), st.binary(max_size=22),
                          st.tuples(st.integers(-2, 2), st.integers(-1, 2),
                                    st.integers(-(2**63), 2**63 - 1))
                          .map(lambda t: StreamMetadata(*t).to_bytes())), max_size=50),
       st.dictionaries(st.tuples(st.integers(-2, 2), st.integers(-1, 2)),
                       st.integers(-(2**63), 2**63 - 1), max_size=4))
def test_vectorised_equals_reference_on_arbitrary_keys(keys, hwm):
    check_equal(keys, hwm)


def test_first_record_of_a_group_above_its_stored_mark_is_kept():
    """Regression (found by bench/replay.py): the first record of each (pid, partition) in a
    call was judged on uninitialised memory when the group had a stored mark. Memory is
    dirtied first, so the bug shows whatever the allocator hands back."""
    junk = np.zeros(4_000_000, dtype=bool)  # freed pages that np.empty may reuse
    del junk
    groups = [(pid, part) for pid in (1, 2) for part in range(8)]
    rows = [(pid, part, 1000 + i) for i in range(25_000) for pid, part in groups]
    hwm = {g: 999 for g in groups}
    keys = keys_of(rows)
    for _ in range(3):
        keep, new_hwm = filter_replays(pa.array(keys, type=pa.binary()), hwm)
        assert int(np.asarray(keep).sum()) == len(rows)
        assert new_hwm == {g: 1000 + 24_999 for g in groups}
    check_equal(keys, hwm)


@given(st.lists(st.tuples(st.sampled_from([-(2**63), -1, 0, 7, 2**63 - 1]),
                          st.sampled_from([-(2**31), -1, 0, 3, 2**31 - 1])), max_size=60),
       st.booleans())
def test_pair_groups_equals_numpys_unique_over_rows(pairs, in_runs):
    """The run-based grouping gives numpy's sorted distinct pairs and inverse, whether the
    rows come in runs of one pair (a Kafka partition's order) or interleaved."""
    if in_runs:
        pairs = sorted(pairs, key=lambda p: hash(p))  # equal pairs next to each other
    pid = np.array([p for p, _ in pairs], dtype=np.int64)
    part = np.array([q for _, q in pairs], dtype=np.int32)
    groups, inverse = pair_groups(pid, part)
    if not pairs:
        assert groups.shape == (0, 2) and inverse.size == 0
        return
    want, want_inverse = np.unique(np.stack([pid, part.astype(np.int64)], axis=1), axis=0,
                                   return_inverse=True)
    assert groups.tolist() == want.tolist()
    assert inverse.tolist() == want_inverse.ravel().tolist()
