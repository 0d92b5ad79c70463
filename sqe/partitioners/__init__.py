"""Partitioners: which destination partition a keyed record goes to (installed as
``sqe.partitioners``).

A partitioner answers ``partition(key, num_partitions) -> int`` for one key
and ``partition_array(keys, num_partitions) -> int32[]`` for a whole Arrow key
column (the form the Kafka writer uses).  Partitioners are named by dotted
path in ``jw.sqe.state.kafka.partitionClass``; :func:`resolve` turns a name
into an instance and accepts the original SQE and Kafka Java class names, and
the ``partitioners.X`` names of topology files written before the package moved
inside ``sqe``, as aliases.

May import: :mod:`sqe.wire` (StreamMetadata keys), :mod:`sqe.errors`, NumPy, pyarrow.

Example::

    >>> p = resolve("com.jwplayer.sqe.language.state.kafka.SourcePartitionPartitioner")
    >>> from sqe.wire.keys import StreamMetadata
    >>> p.partition(StreamMetadata(1, 5, 0).to_bytes(), 4)
    1
"""

from __future__ import annotations

from sqe.partitioners.base import Partitioner, resolve
from sqe.partitioners.murmur2 import Murmur2Partitioner
from sqe.partitioners.source_partition import SourcePartitionPartitioner

__all__ = ["Partitioner", "SourcePartitionPartitioner", "Murmur2Partitioner", "resolve"]
