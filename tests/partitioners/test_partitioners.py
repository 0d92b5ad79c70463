"""Partitioners: SourcePartitionPartitioner and Kafka's murmur2, scalar and vectorised."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from partitioners import Murmur2Partitioner, Partitioner, SourcePartitionPartitioner, resolve
from partitioners.murmur2 import murmur2, murmur2_array
from sqe.wire.keys import StreamMetadata


def key(partition: int, pid: int = 1, offset: int = 0) -> bytes:
    return StreamMetadata(pid, partition, offset).to_bytes()


@pytest.mark.parametrize(
    "source,dest_partitions,expected",
    [
        (5, 4, 1),   # fewer destination partitions: modulo
        (3, 4, 3),   # more destination partitions: same partition
        (3, 3, 0),
        (2, 3, 2),   # equal counts: same partition
        (0, 1, 0),
        (7, 8, 7),
        (2**31 - 1, 10, (2**31 - 1) % 10),
    ],
)
def test_source_partition_mapping(source, dest_partitions, expected):
    p = SourcePartitionPartitioner()
    assert p.partition(key(source), dest_partitions) == expected
    assert p.partition_array(pa.array([key(source)]), dest_partitions).tolist() == [expected]


@pytest.mark.parametrize("bad,text", [(None, "got NULL"), (b"x" * 19, "got 19 bytes"),
                                      (b"", "got 0 bytes"), (b"x" * 21, "got 21 bytes")])
def test_source_partition_rejects_bad_keys(bad, text):
    with pytest.raises(ValueError, match=text):
        SourcePartitionPartitioner().partition(bad, 4)


def test_source_partition_array_names_the_bad_row():
    keys = pa.array([key(0), key(1), None, key(2)])
    with pytest.raises(ValueError, match="row 2 is NULL"):
        SourcePartitionPartitioner().partition_array(keys, 4)
    with pytest.raises(ValueError, match="row 1 is 3 bytes"):
        SourcePartitionPartitioner().partition_array(pa.array([key(0), b"abc"]), 4)


def test_negative_source_partition_and_bad_counts_are_errors():
    p = SourcePartitionPartitioner()
    with pytest.raises(ValueError, match="negative source partition -1"):
        p.partition(key(-1), 4)
    with pytest.raises(ValueError, match="negative source partition -3 at row 1"):
        p.partition_array(pa.array([key(1), key(-3)]), 4)
    with pytest.raises(ValueError, match="at least 1"):
        p.partition(key(1), 0)


@given(st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**31 - 1)),
                max_size=40), st.integers(1, 64))
def test_source_partition_vectorised_equals_scalar(rows, n):
    p = SourcePartitionPartitioner()
    keys = [key(part, pid) for pid, part in rows]
    got = p.partition_array(pa.array(keys, type=pa.binary()), n)
    assert got.dtype == np.int32
    assert got.tolist() == [p.partition(k, n) for k in keys]


# Kafka's own test values (clients/src/test/.../UtilsTest.java testMurmur2).
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_kafka():
    for data, expected in KAFKA_MURMUR2.items():
        assert murmur2(data) == expected
    assert murmur2_array(pa.array(list(KAFKA_MURMUR2))).tolist() == list(KAFKA_MURMUR2.values())


@given(st.lists(st.binary(max_size=40), max_size=40), st.integers(1, 50))
def test_murmur2_vectorised_equals_scalar(keys, n):
    arr = pa.array(keys, type=pa.binary())
    assert murmur2_array(arr).tolist() == [murmur2(k) for k in keys]
    p = Murmur2Partitioner()
    assert p.partition_array(arr, n).tolist() == [p.partition(k, n) for k in keys]


def test_murmur2_partitioner_rejects_null_keys():
    with pytest.raises(ValueError, match="NULL"):
        Murmur2Partitioner().partition(None, 3)
    with pytest.raises(ValueError, match="row 1 is NULL"):
        Murmur2Partitioner().partition_array(pa.array([b"a", None]), 3)


@pytest.mark.parametrize(
    "name,cls",
    [
        ("partitioners.SourcePartitionPartitioner", SourcePartitionPartitioner),
        ("com.jwplayer.sqe.language.state.kafka.SourcePartitionPartitioner",
         SourcePartitionPartitioner),
        ("partitioners.source_partition.SourcePartitionPartitioner", SourcePartitionPartitioner),
        ("org.apache.kafka.clients.producer.internals.DefaultPartitioner", Murmur2Partitioner),
        ("partitioners.Murmur2Partitioner", Murmur2Partitioner),
    ],
)
def test_resolve_by_path_and_alias(name, cls):
    p = resolve(name)
    assert isinstance(p, cls) and isinstance(p, Partitioner)


@pytest.mark.parametrize(
    "name,text",
    [
        ("nosuchmodule.Foo", "cannot import module 'nosuchmodule'"),
        ("partitioners.NoSuch", "has no 'NoSuch'"),
        ("Whatever", "not a dotted path"),
        ("json.JSONDecoder", "does not implement partition"),
        ("", "non-empty"),
    ],
)
def test_resolve_errors_name_the_problem(name, text):
    with pytest.raises(ValueError, match=text):
        resolve(name)


@pytest.mark.parametrize(
    "name,problem",
    [
        ("...", "is not a dotted path (module.Class)"),
        ("a..b", "is not a dotted path (module.Class)"),
        ("datetime.date", "does not implement partition(key, num_partitions)"),
        ("fractions.Fraction", "does not implement partition(key, num_partitions)"),
    ],
)
def test_names_that_are_no_partitioner_are_value_errors(name, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        resolve(name)


class NeedsArguments:
    """A partitioner whose constructor wants an argument, which a topology cannot give."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def partition(self, key, num_partitions):
        return 0

    def partition_array(self, keys, num_partitions):
        return np.zeros(len(keys), dtype=np.int32)


def test_a_partitioner_that_needs_arguments_is_a_value_error():
    with pytest.raises(ValueError, match=r"cannot be made without arguments"):
        resolve(f"{__name__}.NeedsArguments")
