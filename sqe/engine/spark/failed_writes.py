"""The files a checkpoint write that failed leaves behind, found and removed.

Spark writes each file of a streaming checkpoint (``metadata``, ``offsets/N``, ``commits/N``)
atomically: to a temporary ``.<name>.<uuid>.tmp`` beside it (and, on a local disk, its checksum
``..<name>.<uuid>.tmp.crc``), renamed when complete.  When the write fails -- a full disk is the
usual cause -- both files stay there (seen with the FileContext manager Spark uses unless told
otherwise, and in classic hops' checkpoints).  No reader takes them for a batch, but a query
that has not finished its first batch checks that ``offsets`` is empty, and refuses to start
with ``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY`` as long as they are there: every later run
fails the same way.  :func:`clear_failed_writes` removes them before a query starts: each
stream's start does (:func:`sqe.engine.run.start.prepare_stream`, for a checkpoint on this
machine), and ``sqe pipelines run`` for a pipeline's storage on this machine.

Example::

    >>> bool(TEMPORARY.match(".0.0c0ffee0-1111-2222-3333-444455556666.tmp"))
    True
    >>> bool(TEMPORARY.match("0")), bool(TEMPORARY.match(".0.crc"))
    (False, False)
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["TEMPORARY", "clear_failed_writes", "failed_writes"]

#: The name of a temporary file of Spark's atomic checkpoint write, or of its checksum.
TEMPORARY = re.compile(r"^\.\.?[^/]+\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                       r"[0-9a-f]{12}\.tmp(\.crc)?$")


def failed_writes(root: Path) -> list[Path]:
    """The temporary files of Spark's checkpoint writes under ``root``, in path order."""
    return sorted(p for p in root.rglob(".*") if TEMPORARY.match(p.name) and p.is_file())


def clear_failed_writes(root: Path) -> list[Path]:
    """Remove :func:`failed_writes` under ``root`` (nothing, when it is not a directory); the
    files removed.  Only while no query writes there: a running query's write in progress has
    such a file too."""
    if not root.is_dir():
        return []
    found = failed_writes(root)
    for path in found:
        path.unlink(missing_ok=True)
    return found
