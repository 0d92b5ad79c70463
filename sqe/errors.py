"""Error classes of SQE on Spark.

Every error a user can cause derives from :class:`SqeError` and carries a
message that says what was wrong and where (file, command, option key,
topic/partition/offset).  The CLI prints the message as one sentence and
never a stack trace.  Errors about bad values also derive from
:class:`ValueError`, so code that validates inputs can catch them as such
(the CLI exits 2); failures at run time derive from :class:`RuntimeError`
(the CLI exits 1).
"""

from __future__ import annotations

__all__ = [
    "SqeError",
    "OptionError",
    "TopologyError",
    "PrerequisiteError",
    "SourceError",
    "StateError",
    "StaleBatchError",
    "RunError",
    "RunStopped",
]


class SqeError(Exception):
    """Base class of every error SQE reports to a user."""


class OptionError(SqeError, ValueError):
    """A ``jw.sqe.*`` option is unknown, retired or has a value of the wrong type."""


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


class StaleBatchError(SqeError, RuntimeError):
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


class RunError(SqeError, RuntimeError):
    """A streaming query (or a step of ``sqe demo``) failed; the message is the cause."""


class RunStopped(SqeError, RuntimeError):
    """A run stopped on request (Ctrl-C, SIGTERM); the message says where each stream stopped."""
