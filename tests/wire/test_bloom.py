"""The chunk Bloom filter: sizes, RabbitMQ's reader semantics, false-positive rates, the
vectorised probe against the scalar reference."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sqe.wire.chunk.bloom import BloomFilter, probe_headers, value_bits


@pytest.mark.parametrize("size", [0, 15, 256, 1000, -1, True, 16.0])
def test_sizes_outside_16_to_255_are_refused(size):
    with pytest.raises(ValueError, match=r"Bloom filter size must be 16\.\.255 bytes"):
        BloomFilter(size)


def test_value_bits_are_stable_and_never_bit_zero():
    # Fixed: murmur64a of the UTF-8 bytes with BLOOM_SEED, not Python's salted hash().
    assert value_bits("eu", 16) == value_bits("eu", 16)
    for size in (16, 17, 128, 255):
        for v in ("", "eu", "δ", "x" * 300):
            assert all(1 <= b <= 8 * size - 1 for b in value_bits(v, size))
    assert value_bits("eu", 16) == (46, 15)  # pinned: a change would break written chunks


def test_reader_semantics():
    f = BloomFilter(16)
    assert f.might_contain([]) is True                      # no subscription: everything
    assert f.might_contain(["eu"]) is False                 # empty filter ...
    assert f.might_contain(["eu"], match_unfiltered=True)   # ... only with matchUnfiltered
    f.add("eu")
    assert f.might_contain(["us", "eu"]) and not f.might_contain(["us"])
    assert not f.might_contain(["us"], match_unfiltered=True)  # no unfiltered message in it
    f.add(None)
    assert f.might_contain(["us"], match_unfiltered=True) and not f.might_contain(["us"])
    again = BloomFilter.from_bytes(f.to_bytes())
    assert again.size == 16 and again.to_bytes() == f.to_bytes()


def test_a_reader_probes_at_the_chunks_size():
    small, big = BloomFilter(16), BloomFilter(200)
    small.add("eu")
    big.add("eu")
    mask = probe_headers([small.to_bytes(), big.to_bytes(), b"", None], ["eu"])
    assert mask.tolist() == [True, True, False, False]
    assert probe_headers([b"", None], ["eu"], match_unfiltered=True).tolist() == [True, True]


def _theory(n: int, size: int) -> float:
    return (1 - math.exp(-2 * n / (8 * size - 1))) ** 2


@pytest.mark.parametrize(("n", "size", "published"), [(10, 16, 0.02), (30, 16, 0.14),
                                                      (200, 128, 0.10)])
def test_false_positive_rate_matches_theory_and_rabbitmq(n, size, published):
    rnd = random.Random(n * 1000 + size)
    trials = 10_000
    filters, probes = [], []
    for t in range(trials):
        f = BloomFilter(size)
        for i in range(n):
            f.add(f"v{t}-{i}-{rnd.getrandbits(32)}")
        filters.append(f.to_bytes())
        probes.append(f"absent-{t}-{rnd.getrandbits(32)}")
    # one value not in the set per filter
    hits = sum(BloomFilter.from_bytes(b).might_contain([p]) for b, p in zip(filters, probes, strict=True))
    rate = hits / trials
    assert abs(rate - _theory(n, size)) < 0.01, (rate, _theory(n, size))
    assert abs(rate - published) < 0.01, (rate, published)


@given(st.lists(st.lists(st.one_of(st.none(), st.sampled_from(["eu", "us", "apac", "δ", ""])),
                         max_size=8), min_size=1, max_size=30),
       st.lists(st.sampled_from(["eu", "us", "apac", "mea", "δ", ""]), max_size=3),
       st.booleans(), st.sampled_from([16, 17, 64, 255]))
def test_vectorised_probe_equals_the_scalar_reference(chunks, wanted, unfiltered, size):
    filters = []
    for values in chunks:
        f = BloomFilter(size)
        for v in values:
            f.add(v)
        filters.append(f.to_bytes())
    expected = [BloomFilter.from_bytes(b).might_contain(wanted, unfiltered) for b in filters]
    assert probe_headers(filters, wanted, unfiltered).tolist() == expected
    assert isinstance(probe_headers(filters, wanted, unfiltered), np.ndarray)
