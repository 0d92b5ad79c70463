"""Error classes of SQE on Spark.

Every error a user can cause derives from :class:`SqeError` and carries a
message that says what was wrong and where (file, command, option key,
topic/partition/offset).  The CLI prints the message as one sentence and
never a stack trace.  Errors about bad values also derive from
:class:`ValueError`, so code that validates inputs can catch them as such
(the CLI exits 2); failures at run time derive from :class:`RuntimeError`
(the CLI exits 1); :class:`RefusedOption` alone is neither, since validation raises and
catches it inside itself and no user meets it.  Every error class of the package is defined
here, so one import reaches them all (the modules that raise them re-export them where they
were).  :class:`RedisBusyError` is also redis-py's ``ResponseError``, so that every handler of
Redis errors locates it.
"""

from __future__ import annotations

import redis

__all__ = [
    "SqeError",
    "OptionError",
    "RefusedOption",
    "TopologyError",
    "PrerequisiteError",
    "SourceError",
    "StateError",
    "ReplicaLagError",
    "StoreConnectionLost",
    "StaleBatchError",
    "RedisBusyError",
    "RunError",
    "RunStopped",
    "CheckpointMismatch",
    "StoreBehind",
    "TopologyChanged",
    "BadRecordError",
    "ProgressError",
    "ReportError",
    "ArgumentError",
    "WireError",
    "ChunkError",
    "TruncatedChunk",
    "BadMagic",
    "UnknownVersion",
    "CrcMismatch",
    "BadCount",
    "BadLength",
    "KeyMismatch",
    "SchemaError",
    "RegistryError",
]


class SqeError(Exception):
    """Base class of every error SQE reports to a user."""


class OptionError(SqeError, ValueError):
    """A ``jw.sqe.*`` option is unknown, retired or has a value of the wrong type."""


class RefusedOption(SqeError):
    """An option whose value was refused (and reported) was read: what needs its value cannot be
    checked, so a check of ``sqe validate`` that reads it is left out rather than run on a
    default the user did not mean.  Not a :class:`ValueError`, so that the checks' own
    ``except ValueError`` do not turn it into a message."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"{key}: its value was refused, so it has none")


class TopologyError(SqeError, ValueError):
    """A topology file is malformed; the message names the file and the path inside it."""

    def __init__(self, messages: list[str] | str) -> None:
        self.messages = [messages] if isinstance(messages, str) else list(messages)
        super().__init__("\n".join(self.messages))


class PrerequisiteError(SqeError, RuntimeError):
    """Something the machine must provide (Java 17+, a service binary) is missing."""


class SourceError(SqeError, RuntimeError):
    """Reading a source failed: the message names the topic, partition and offsets."""


class StateError(SqeError, RuntimeError):
    """Writing a state failed: the message names the state and what was refused."""


class ReplicaLagError(StateError):
    """A commit that the Redis primary holds but too few of its replicas acknowledged in time:
    a failover could lose it, so the batch does not count as done."""


class StoreConnectionLost(StateError):
    """A store's connection dropped under a batch (a restart, a reset, a reply lost): what
    the batch sent is sent again on a new connection.  ``reason``: the driver's words."""

    def __init__(self, text: str, reason: str | None = None) -> None:
        super().__init__(text)
        self.reason = reason or text


class StaleBatchError(StateError):
    """A batch id lower than the committed one, or the same id ending at other source offsets:
    another writer of the consumer is ahead, and the message names it."""

    @classmethod
    def behind(cls, store: str, consumer: str, batch_id: int, committed: int,
               checkpoint: str | None = None, offsets: str | None = None,
               committed_offsets: str | None = None) -> StaleBatchError:
        """The refusal of batch ``batch_id`` by ``store`` (a sentence naming it and the other
        writer): ``store`` holds batch ``committed`` of ``consumer``, made on ``checkpoint``
        and ending at ``committed_offsets`` (when recorded); ``offsets``, this batch's end,
        when the same batch id ends at other source offsets."""
        if offsets is not None and batch_id == committed:
            what = (f"batch {batch_id} of consumer {consumer!r} ends at other source offsets "
                    f"({offsets}) than batch {committed}")
        else:
            what = f"batch {batch_id} of consumer {consumer!r} is older than batch {committed}"
        known = ([f"the run on checkpoint {checkpoint}"] if checkpoint else []) + (
            [f"ending at source offsets {committed_offsets}"] if committed_offsets else [])
        made = f" ({', '.join(known)})" if known else ""
        return cls(f"{store}: {what}, which another writer of consumer {consumer!r} "
                   f"committed{made}; that run is ahead of this one, which is refused so that "
                   "nothing is written twice: stop one of the two runs, or give this one a "
                   "--name of its own")


class RedisBusyError(StateError, redis.ResponseError):
    """Redis kept refusing commands with ``BUSY`` (a Lua script or function running) for longer
    than SQE waits; a Redis error too, for the handlers that say which store it was."""


class RunError(SqeError, RuntimeError):
    """A streaming query (or a step of ``sqe demo``) failed; the message is the cause."""


class RunStopped(SqeError, RuntimeError):
    """A run stopped on request (Ctrl-C, SIGTERM); the message says where each stream stopped."""


class CheckpointMismatch(RunError):
    """A checkpoint that does not belong to the commits the stores hold; nothing was read."""


class StoreBehind(RunError):
    """An HWM store that lost commits its checkpoint counts as done (its marks with them);
    nothing was read."""

    @classmethod
    def unless_holding(cls, store: str, consumer: str, held: int | None, seen: int | None,
                       batch_id: int) -> None:
        """Refuse batch ``batch_id`` (:meth:`since`) when ``store``, whose last batch is
        ``held`` (None: none), is short of batch ``seen`` (None: none it must hold)."""
        if seen is not None and (held is None or held < seen):
            raise cls.since(store, consumer, held, seen, batch_id)

    @classmethod
    def since(cls, store: str, consumer: str, held: int | None, seen: int, batch_id: int
              ) -> StoreBehind:
        """The refusal of batch ``batch_id`` of a running ``consumer`` whose ``store`` holds
        batch ``held`` (None: none) as its last after batch ``seen`` was committed there."""
        has = f"holds batch {held} as its last" if held is not None else "holds no batch"
        return cls(f"{consumer}: the {store} {has}, but batch {seen} was committed there: the "
                   "store lost commits while the stream ran (a failover to a replica that was "
                   "behind, or a restart that lost acknowledged writes), so replays of their "
                   f"records would pass the replay filter, and batch {batch_id} stops before "
                   f"reading anything: restore the store from a copy that holds batch {seen}, "
                   "or go on without those marks on purpose (--accept-lost-marks "
                   f"{seen}, accept_lost_marks={seen}) (docs/troubleshooting.md, StoreBehind)")


class TopologyChanged(RunError):
    """A change to the topology that the checkpoint or the stores cannot follow; nothing read."""


class BadRecordError(SqeError, RuntimeError):
    """A record a step cannot take, under ``badRecordPolicy: fail`` (one sentence)."""


class ProgressError(SqeError, ValueError):
    """A progress file that is missing, empty or holds a line that is not a batch entry."""


class ReportError(SqeError, ValueError):
    """A report that cannot be written where it was asked to go."""


class ArgumentError(SqeError, TypeError, ValueError):
    """A value given to SQE's Python API that it cannot take: of a type it does not take, out
    of its range, or excluding another argument given with it."""


class WireError(SqeError, ValueError):
    """Bytes or values a wire format cannot read or hold: a record key that is not a 20-byte
    StreamMetadata, a field that does not fit its width, a message index, a chunk's limits."""


class ChunkError(WireError):
    """A chunk that cannot be decoded; the message says what is wrong with it."""


class TruncatedChunk(ChunkError):
    """The bytes end before the header or a message does."""


class BadMagic(ChunkError):
    """The record does not start with ``SQEC``: it is not a chunk."""


class UnknownVersion(ChunkError):
    """A chunk version (or codec, or flag) this reader does not know."""


class CrcMismatch(ChunkError):
    """The CRC32C does not match: the chunk was corrupted."""


class BadCount(ChunkError):
    """The message count cannot be true for the bytes present."""


class BadLength(ChunkError):
    """A length field points outside the chunk or is impossible."""


class KeyMismatch(ChunkError):
    """The record's key does not name the chunk's last message (a broken writer)."""


class SchemaError(SqeError, ValueError):
    """A record schema (Avro, Protobuf) SQE cannot map to Spark columns, or cannot find."""


class RegistryError(SqeError, RuntimeError):
    """A Schema Registry that cannot be reached, or answers with an error other than a
    schema it does not hold."""
