"""SourcePartitionPartitioner: destination partition = source partition % partitions.

The key must be a 20-byte StreamMetadata; its ``partition`` field is the
source partition.  All records of one (pid, source partition) land in one
destination partition in source-offset order, which is what replay filtering
downstream needs.  With as many or more destination partitions than source
partitions, destination equals source.  A NULL, non-20-byte key or a
negative source partition is a ``ValueError``, never a silent partition 0.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from partitioners.base import check_num_partitions
from sqe.errors import WireError
from sqe.wire.keys import KEY_SIZE, StreamMetadata, decode_keys

__all__ = ["SourcePartitionPartitioner"]


def _describe(key: bytes | None) -> str:
    return "NULL" if key is None else f"{len(key)} bytes"


class SourcePartitionPartitioner:
    """Partition by the source partition carried in a StreamMetadata key."""

    def partition(self, key: bytes | None, num_partitions: int) -> int:
        """Scalar reference: ``StreamMetadata.from_bytes(key).partition % num_partitions``."""
        check_num_partitions(num_partitions)
        if key is None or len(key) != KEY_SIZE:
            raise WireError(
                f"SourcePartitionPartitioner needs a {KEY_SIZE}-byte StreamMetadata key, "
                f"got {_describe(key)}"
            )
        source = StreamMetadata.from_bytes(key).partition
        if source < 0:
            raise WireError(f"SourcePartitionPartitioner: negative source partition {source}")
        return source % num_partitions

    def partition_array(self, keys: pa.Array, num_partitions: int) -> np.ndarray:
        """Vectorised form over a key column; the first bad row is named in the error."""
        check_num_partitions(num_partitions)
        _, source, _, valid = decode_keys(keys)
        if not valid.all():
            row = int(np.argmin(valid))
            key = keys[row].as_py()
            raise WireError(
                f"SourcePartitionPartitioner needs {KEY_SIZE}-byte StreamMetadata keys; "
                f"row {row} is {_describe(key)}"
            )
        if len(source) and source.min() < 0:
            row = int(np.argmin(source))
            raise WireError(
                f"SourcePartitionPartitioner: negative source partition {source[row]} at row {row}"
            )
        return (source % np.int32(num_partitions)).astype(np.int32)
