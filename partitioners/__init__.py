"""Partitioners: which destination partition a keyed record goes to (the top-level package
``partitioners``, a folder at the repository's top as the project's card lays it out).

A partitioner answers ``partition(key, num_partitions) -> int`` for one key
and ``partition_array(keys, num_partitions) -> int32[]`` for a whole Arrow key
column (the form the Kafka writer uses).  Partitioners are named by dotted
path in ``jw.sqe.state.kafka.partitionClass``; :func:`resolve` turns a name
into an instance and accepts the original SQE and Kafka Java class names, and
the ``sqe.partitioners.X`` names that topic layouts written while the package
lived inside ``sqe`` hold, as aliases.

May import: :mod:`sqe.wire` (StreamMetadata keys), :mod:`sqe.errors`, NumPy, pyarrow.

Example::

    >>> p = resolve("com.jwplayer.sqe.language.state.kafka.SourcePartitionPartitioner")
    >>> from sqe.wire.keys import StreamMetadata
    >>> p.partition(StreamMetadata(1, 5, 0).to_bytes(), 4)
    1
"""

from __future__ import annotations

from partitioners.base import Partitioner, resolve
from partitioners.murmur2 import Murmur2Partitioner
from partitioners.source_partition import SourcePartitionPartitioner

__all__ = ["Partitioner", "SourcePartitionPartitioner", "Murmur2Partitioner", "resolve"]
