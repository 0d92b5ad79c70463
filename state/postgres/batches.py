"""The batch table of the Postgres state: which batch of each consumer a table holds.

``sqe_batches`` (in the target table's schema) has one row per ``(consumer,
target)``: the last ``batch_id`` committed to the target with its rows, the
source offsets the batch ended at (``end_offsets``), the ``checkpoint`` that
committed it, and ``reset`` (set by ``sqe reset``), the record of
:mod:`sqe.ledger.commits`.  A table made by an earlier version, without the last
three columns, gets them when it is next locked.  The row is locked ``FOR
UPDATE`` by the transaction that writes the batch, so two writers of one
consumer cannot interleave.  The table is created (or brought up to date) under its
creation lock (:mod:`state.postgres.ddl`), so writers that start at once do not race.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqe.config.extras import optional, require
from sqe.errors import StateError, StoreConnectionLost
from sqe.ledger.commits import Commit
from sqe.secrets import redact_url
from state.postgres.ddl import creation_lock

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql
else:  # the postgres extra: connect() says when it is missing, PostgresSink.problems before
    psycopg = optional("psycopg")
    sql = optional("psycopg.sql")

__all__ = ["BATCH_TABLE", "batch_committed", "connect", "error_text", "lock_batch", "qualified",
           "record_batch", "reset_batch"]

BATCH_TABLE = "sqe_batches"

_COLUMNS = "batch_id, end_offsets, checkpoint, reset"
_ADDED = ("end_offsets", "checkpoint", "reset")  # the columns earlier versions lacked


def connect(dsn: str) -> Any:
    """A connection to ``dsn`` (psycopg, which the ``postgres`` extra installs)."""
    return require("psycopg", "the Postgres state").connect(dsn, connect_timeout=10)


def qualified(schema: str | None, name: str) -> Any:
    """The quoted, maybe schema-qualified name of a table."""
    return sql.Identifier(schema, name) if schema else sql.Identifier(name)


def error_text(exc: Exception) -> str:
    """A psycopg error in one line: the server's message and where (``COPY t, line 2, ...``)."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None)
    if not primary:
        return " ".join(str(exc).split())
    context = (getattr(diag, "context", None) or "").strip().splitlines()
    return f"{primary} ({context[0]})" if context else primary


def _commit(row: Any, where: str) -> Commit | None:
    if row is None or row[0] < 0:
        return None
    return Commit(where, int(row[0]), row[1], row[2], bool(row[3]))


def _up_to_date(cur: Any, schema: str | None) -> bool:
    """Whether the batch table exists with every column this version writes."""
    cur.execute("SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                "AND attname = ANY(%s) AND NOT attisdropped",
                [qualified(schema, BATCH_TABLE).as_string(cur), list(_ADDED)])
    row = cur.fetchone()
    return row is not None and row[0] == len(_ADDED)


def _ensure_table(cur: Any, schema: str | None) -> None:
    """Create the batch table, or add the columns an earlier version lacked, when needed.

    Under the table's creation lock (:mod:`state.postgres.ddl`), so writers that start at
    once do not race, and committed at once, so the batch that follows neither holds the
    lock nor the table's ``ALTER`` lock while it writes.  The first statements of ``cur``'s
    transaction.
    """
    if _up_to_date(cur, schema):
        return
    batches = qualified(schema, BATCH_TABLE)
    creation_lock(cur, schema, BATCH_TABLE)
    cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (consumer text NOT NULL, "
                        "target text NOT NULL, batch_id bigint NOT NULL, rows bigint NOT NULL, "
                        "committed_at timestamptz NOT NULL DEFAULT now(), "
                        "PRIMARY KEY (consumer, target))").format(batches))
    cur.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS end_offsets text, "
                        "ADD COLUMN IF NOT EXISTS checkpoint text, "
                        "ADD COLUMN IF NOT EXISTS reset boolean NOT NULL DEFAULT false"
                        ).format(batches))
    cur.connection.commit()


def lock_batch(cur: Any, schema: str | None, consumer: str, target: str, where: str
               ) -> Commit | None:
    """Create (or bring up to date) the batch table, lock the row of ``(consumer, target)``
    and return what it holds (the first statements of ``cur``'s transaction)."""
    _ensure_table(cur, schema)
    batches = qualified(schema, BATCH_TABLE)
    cur.execute(sql.SQL("INSERT INTO {} (consumer, target, batch_id, rows) VALUES (%s, %s, -1, 0) "
                        "ON CONFLICT DO NOTHING").format(batches), [consumer, target])
    cur.execute(sql.SQL(f"SELECT {_COLUMNS} FROM {{}} WHERE consumer = %s AND target = %s "
                        "FOR UPDATE").format(batches), [consumer, target])
    return _commit(cur.fetchone(), where)


def record_batch(cur: Any, schema: str | None, consumer: str, target: str, batch_id: int,
                 rows: int, offsets: str | None, checkpoint: str | None) -> None:
    """Record batch ``batch_id`` in the locked row (committed with the transaction)."""
    cur.execute(sql.SQL("UPDATE {} SET batch_id = %s, rows = %s, end_offsets = %s, "
                        "checkpoint = %s, reset = false, committed_at = now() "
                        "WHERE consumer = %s AND target = %s").format(
                            qualified(schema, BATCH_TABLE)),
                [batch_id, rows, offsets, checkpoint, consumer, target])


def _table_exists(cur: Any, schema: str | None) -> bool:
    cur.execute("SELECT to_regclass(%s)", [qualified(schema, BATCH_TABLE).as_string(cur)])
    return cur.fetchone()[0] is not None


def batch_committed(dsn: str, schema: str | None, consumer: str, target: str, where: str
                    ) -> Commit | None:
    """What the batch table holds of ``(consumer, target)``, read without a lock."""
    try:
        with connect(dsn) as conn, conn.cursor() as cur:
            if not _table_exists(cur, schema):
                return None
            columns = _COLUMNS
            cur.execute("SELECT count(*) FROM information_schema.columns WHERE table_schema = "
                        "coalesce(%s, current_schema()) AND table_name = %s "
                        "AND column_name = 'end_offsets'", [schema, BATCH_TABLE])
            row = cur.fetchone()
            if row is None or not row[0]:  # a table of an earlier version
                columns = "batch_id, NULL, NULL, false"
            cur.execute(sql.SQL(f"SELECT {columns} FROM {{}} WHERE consumer = %s AND target = %s"
                                ).format(qualified(schema, BATCH_TABLE)), [consumer, target])
            return _commit(cur.fetchone(), where)
    except psycopg.Error as exc:
        text = f"{where} at {redact_url(dsn)}: {error_text(exc)}"
        if isinstance(exc, psycopg.OperationalError):  # sent again by the caller, for a while
            raise StoreConnectionLost(text, error_text(exc)) from None
        raise StateError(text) from None


def reset_batch(dsn: str, schema: str | None, consumer: str, target: str, where: str
                ) -> Commit | None:
    """Mark ``(consumer, target)`` as reset: its offsets are forgotten, its batch id kept (the
    next batch must come after it).  Returns what was there before."""
    try:
        with connect(dsn) as conn, conn.cursor() as cur:
            before = lock_batch(cur, schema, consumer, target, where)
            if before is not None:
                cur.execute(sql.SQL("UPDATE {} SET end_offsets = NULL, reset = true "
                                    "WHERE consumer = %s AND target = %s").format(
                                        qualified(schema, BATCH_TABLE)), [consumer, target])
            return before
    except psycopg.Error as exc:
        raise StateError(f"{where} at {redact_url(dsn)}: {error_text(exc)}") from None
