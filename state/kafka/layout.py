"""How a Kafka state lays its records out over its topic, and why that layout is kept.

A downstream stream with ``filterReplays`` judges each (pid, source partition) by
its records in offset order, so it needs all records of a pair in one partition
of the topic.  The :class:`KafkaLayout` is what decides that partition: the
partitioner (``jw.sqe.state.kafka.partitionClass``), the number of partitions it
spreads over, the key type and chunking.  When the topic gains partitions
(``kafka-topics --alter --partitions``), ``source % partitions`` would send the
newer records of some pairs to other partitions than their older ones; a reader
still behind on the old partitions would read the newer ones first and drop the
older ones as replays.  So a Kafka state keeps routing over the partition count it
started with (:attr:`KafkaLayout.partitions`, kept in its stream's checkpoint), and
says so; it spreads over the new partitions only when the run is told to adopt the
topic's layout after its readers caught up (``sqe run --adopt-layout``).

Example::

    >>> old = KafkaLayout(2, "partitioners.SourcePartitionPartitioner", "streammetadata",
    ...                   False)
    >>> KafkaLayout.from_json(old.to_json()) == old
    True
    >>> old.changes(KafkaLayout(2, old.partitioner, "messagehash", True))
    ['the key type changed from streammetadata to messagehash', 'chunking was turned on']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from partitioners.base import canonical_name

__all__ = ["KafkaLayout", "canonical_partitioner", "grown_topic"]


def canonical_partitioner(name: str | None) -> str | None:
    """A partitioner's dotted path, its original SQE and Java aliases mapped to it."""
    return canonical_name(name) if name is not None else None


@dataclass(frozen=True)
class KafkaLayout:
    """What places a Kafka state's records in its topic's partitions."""

    #: The partition count the partitioner spreads over; None: no partitioner (the producer
    #: places each record by its key over whatever the topic has).
    partitions: int | None
    partitioner: str | None  # canonical dotted path (canonical_partitioner)
    keytype: str  # streammetadata | messagehash | field
    chunking: bool

    def to_json(self) -> dict[str, Any]:
        """The layout as the checkpoint keeps it."""
        return {"partitions": self.partitions, "partitioner": self.partitioner,
                "keytype": self.keytype, "chunking": self.chunking}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KafkaLayout:
        """A layout kept by :meth:`to_json`."""
        partitions = data.get("partitions")
        return cls(int(partitions) if partitions is not None else None,
                   canonical_partitioner(data.get("partitioner")),
                   str(data.get("keytype", "")).lower(), bool(data.get("chunking", False)))

    def changes(self, new: KafkaLayout) -> list[str]:
        """How ``new`` places records differently, besides its partition count: each a clause."""
        out = []
        if self.partitioner != new.partitioner:
            out.append(f"the partitioner changed from {self.partitioner or 'none'} to "
                       f"{new.partitioner or 'none (the producer places records)'}")
        if self.keytype != new.keytype:
            out.append(f"the key type changed from {self.keytype} to {new.keytype}")
        if self.chunking != new.chunking:
            out.append("chunking was turned " + ("on" if new.chunking else "off"))
        return out


def grown_topic(topic: str, layout: int, now: int) -> str:
    """The sentence a Kafka state says when ``topic`` has ``now`` partitions, more than the
    ``layout`` count it keeps routing over."""
    return (f"Kafka state {topic}: the topic has {now} partitions now, and this stream keeps "
            f"placing records over the first {layout} as before, so that a reader still "
            "behind on them loses no record; to spread over all "
            f"{now}: stop this topology, let every topology that reads {topic} catch up, then "
            "start it once with --adopt-layout (docs/operations.md, 'Adding partitions')")
