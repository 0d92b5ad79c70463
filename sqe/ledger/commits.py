"""What a store remembers of a consumer's last committed batch, besides the batch's data.

Every store that fences by batch id -- the HWM store, a Postgres state's batch
table, a Redis aggregate state -- records, atomically with the batch, a
:class:`Commit`: the batch id as the stores count it, the source offsets the
batch ended at (Spark's JSON, as the checkpoint's offsets log holds it), and the
checkpoint that committed it.  The engine compares these records with the
checkpoint when a run starts, so a checkpoint that is empty or older than the
stores is noticed before anything is read, and a run may resume from the
offsets the stores recorded.  A reset (``sqe reset``) keeps the batch id, so the
ids the stores see never repeat, and marks the record as reset.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["Commit", "same_offsets"]


@dataclass(frozen=True)
class Commit:
    """A store's record of a consumer's last committed batch."""

    store: str  # which store holds it, for messages (never a password)
    batch_id: int
    offsets: str | None = None  # the source offsets the batch ended at; None: not recorded
    checkpoint: str | None = None  # the checkpoint that committed it; None: not recorded
    reset: bool = False  # `sqe reset` forgot the offsets on purpose

    def same_batch(self, batch_id: int, offsets: str | None) -> bool:
        """Whether batch ``batch_id`` ending at ``offsets`` is this committed batch (offsets
        that either side did not record do not tell them apart)."""
        if batch_id != self.batch_id:
            return False
        return self.offsets is None or offsets is None or same_offsets(self.offsets, offsets)


def same_offsets(a: str, b: str) -> bool:
    """Whether two offsets in Spark's JSON are the same (however they are spaced)."""
    try:
        return bool(json.loads(a) == json.loads(b))
    except ValueError:
        return a == b
