"""Tables that two writers may create at once: the creation lock of a Postgres table.

``CREATE TABLE IF NOT EXISTS`` alone does not make two creators safe: both
find no table, both add the table's row type to ``pg_type``, and the second
fails on ``pg_type_typname_nsp_index`` when the first commits.  So a writer
that creates a table (the Postgres state's table, the batch table) first
takes :func:`creation_lock`, ``pg_advisory_xact_lock`` on a stable hash of the
table's qualified name, and then creates it if it is still missing: a second
creator waits until the first one's transaction ends and then finds the
table.  The lock is released with the transaction, so the creation must be
committed by that same transaction; writers that find the table take no lock.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["creation_lock", "lock_key"]


def lock_key(schema: str, table: str) -> int:
    """The advisory lock key of creating ``schema.table``: a signed 64-bit hash of the name,
    the same in every process and version."""
    digest = hashlib.blake2b(f"sqe.create-table:{schema}.{table}".encode(),
                             digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def creation_lock(cur: Any, schema: str | None, table: str) -> None:
    """Hold, until the transaction of ``cur`` ends, the lock of creating ``table`` in ``schema``
    (None: the schema an unqualified ``CREATE TABLE`` would use, ``current_schema()``)."""
    if schema is None:
        cur.execute("SELECT current_schema()")
        row = cur.fetchone()
        schema = row[0] if row is not None and row[0] is not None else ""
    cur.execute("SELECT pg_advisory_xact_lock(%s)", [lock_key(schema, table)])
