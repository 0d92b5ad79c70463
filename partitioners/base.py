"""The Partitioner protocol and lookup of partitioners by dotted path or alias."""

from __future__ import annotations

import importlib
from typing import Protocol, cast, runtime_checkable

import numpy as np
import pyarrow as pa

from sqe.errors import ArgumentError, OptionError

__all__ = ["Partitioner", "resolve", "ALIASES", "canonical_name", "check_num_partitions"]

#: Names from the original SQE / Kafka Java world mapped to their dotted paths.
ALIASES = {
    "com.jwplayer.sqe.language.state.kafka.SourcePartitionPartitioner":
        "partitioners.SourcePartitionPartitioner",
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner":
        "partitioners.Murmur2Partitioner",
    "SourcePartitionPartitioner": "partitioners.SourcePartitionPartitioner",
    "Murmur2Partitioner": "partitioners.Murmur2Partitioner",
}


def canonical_name(name: str) -> str:
    """The dotted path a partitioner name stands for: an alias's, this package's modules by
    the name they had while the package lived inside ``sqe`` (``sqe.partitioners.X``, which
    topic layouts written then still hold, is ``partitioners.X``), else the name."""
    name = name.strip()
    name = ALIASES.get(name, name)
    return name.removeprefix("sqe.") if name.startswith("sqe.partitioners.") else name


@runtime_checkable
class Partitioner(Protocol):
    """Maps a record key to a destination partition in ``[0, num_partitions)``."""

    def partition(self, key: bytes | None, num_partitions: int) -> int:
        """Destination partition of one key; a key it cannot place is a ``ValueError``."""
        ...

    def partition_array(self, keys: pa.Array, num_partitions: int) -> np.ndarray:
        """Destination partitions (int32) of a whole key column, vectorised."""
        ...


def check_num_partitions(num_partitions: int) -> None:
    """Reject a destination partition count below 1."""
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, (int, np.integer)):
        raise ArgumentError(f"num_partitions must be an integer, got {type(num_partitions).__name__}")
    if num_partitions < 1:
        raise ArgumentError(f"num_partitions must be at least 1, got {num_partitions}")


def resolve(name: str) -> Partitioner:
    """Instantiate the partitioner named by a dotted path (``module.Class``) or an alias.

    Raises ``ValueError`` naming what could not be found or is not a partitioner.
    """
    if not isinstance(name, str) or not name.strip():
        raise OptionError(f"partitioner name must be a non-empty string, got {name!r}")
    path = canonical_name(name)
    module_name, _, attr = path.rpartition(".")
    if not module_name or not all(part.isidentifier() for part in path.split(".")):
        known = ", ".join(sorted(ALIASES))
        raise OptionError(f"partitioner {name!r} is not a dotted path (module.Class); known: {known}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise OptionError(f"partitioner {name!r}: cannot import module {module_name!r} ({exc})") from exc
    cls = getattr(module, attr, None)
    if cls is None:
        raise OptionError(f"partitioner {name!r}: module {module_name!r} has no {attr!r}")
    if not all(callable(getattr(cls, method, None)) for method in ("partition", "partition_array")):
        raise OptionError(
            f"partitioner {name!r} does not implement partition(key, num_partitions) "
            "and partition_array(keys, num_partitions)"
        )
    if not isinstance(cls, type):
        return cast(Partitioner, cls)
    try:
        return cast(Partitioner, cls())
    except TypeError as exc:  # its constructor wants arguments
        raise OptionError(f"partitioner {name!r} cannot be made without arguments ({exc})") from None
