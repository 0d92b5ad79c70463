"""The stages of a consumer's Redis state rows in its HWM store: their keys, the register of
them, and their deletion.

A Redis state that shares the HWM store's database stages a batch's rows in a hash of their
own (``sqe:{<consumer>}:stage:<batch>:<writer>:<n>``) until the batch's commit applies them
(:mod:`sqe.ledger.hwm`).  ``<writer>`` is a hash of one run's writer: a run stages under keys
no other run of the consumer uses, even on the same checkpoint, so two runs at once (a run
started while another still goes, or Spark's two attempts of a query) never clear or fill
each other's stages; a batch run again in the same run rewrites its own.

Each stage is entered in the consumer's register of stages (``sqe:{<consumer>}:stages``, a
sorted set scored by batch) when a batch opens it, before any row goes in.  A commit of batch
``N`` deletes every registered stage of a batch up to ``N`` that is not its own and not left to
apply: no commit can take those rows any more (the store holds their batch), so a run that
stopped mid-batch leaves nothing behind once another commits its batch.  A stage whose rows a
commit left to apply is never deleted, by anyone, until they are applied.

Example::

    >>> writer_hash("/ck/load#1f2e")
    'a9875862'
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from sqe.ledger.hwm_lua import DROP

__all__ = ["Stage", "Stages", "new_writer", "writer_hash"]


@dataclass(frozen=True)
class Stage:
    """Rows of a Redis state staged in ``key`` for the commit to apply (see state.redis)."""

    key: str
    datatype: str  # HASH or STRING
    expire_seconds: int = 0


def writer_hash(writer: str | None) -> str:
    """The writer part of a stage key: a short hash of the writer (``-``: none known)."""
    return "-" if writer is None else hashlib.blake2b(writer.encode(),
                                                     digest_size=4).hexdigest()


def new_writer(checkpoint: str | None) -> str:
    """A writer of its own for one run on ``checkpoint``: no other run shares its stages."""
    return f"{checkpoint or ''}#{uuid.uuid4().hex}"


class Stages:
    """The stages of one consumer (key ``prefix``: ``sqe:{<consumer>}:``) in its HWM store,
    whose commits leave rows to apply in ``apply``."""

    def __init__(self, client: redis.Redis, prefix: str, apply: str) -> None:
        self.client = client
        self.register = f"{prefix}stages"  # stage key -> its batch
        self.apply = apply
        self._prefix = f"{prefix}stage:"
        self._drop = client.register_script(DROP)

    def key(self, batch_id: int, writer: str | None, index: int) -> str:
        """The key that stages the rows of the ``index``-th state ``writer`` writes in a
        batch."""
        return f"{self._prefix}{int(batch_id)}:{writer_hash(writer)}:{int(index)}"

    def open(self, key: str, batch_id: int) -> None:
        """Make ``key`` an empty stage of batch ``batch_id``, entered in the register (what a
        failed attempt of the same writer staged there goes: the batch is sent again)."""
        with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            pipe.zadd(self.register, {key: int(batch_id)})
            pipe.execute()

    def drop(self, keys: Sequence[str]) -> int:
        """Delete the stages ``keys`` (but any a commit left to apply) and take them out of
        the register; how many were deleted."""
        return int(self._drop(keys=[self.apply, self.register, *keys])) if keys else 0
