"""The Postgres state: a query's rows appended to a table, exactly once per micro-batch.

The table is ``insertInto.objectName`` (``table`` or ``schema.table``).  When
it is missing it is created with one column per ``fields`` entry, typed from
the Spark column (:func:`pg_type`); when it exists it must have those
columns, and rows are appended to them.

One micro-batch ``K`` of consumer ``C`` is one SQL transaction:

1. lock the row ``(C, table)`` of the batch table (``sqe_batches`` in the
   target's schema, created when missing);
2. a stored batch id equal to ``K`` means this batch was written already
   (the process died after the Postgres commit and before the HWM commit):
   nothing is written again; a stored id above ``K`` is a stale writer and
   fails loudly (:class:`~sqe.errors.StaleBatchError`);
3. otherwise ``COPY`` the rows in (CSV built by Arrow on the executors, so
   no row-by-row INSERT and no per-row Python), record ``K`` and commit.

The lock is held while Spark computes the rows, so two writers of the same
consumer cannot interleave.  The runner commits the HWMs to Redis only after
this transaction; a retry consults the batch table and skips the write.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sqe.config.secrets import redact_url
from sqe.errors import StaleBatchError, StateError
from sqe.lang.compiler import field_column

__all__ = ["PostgresStateConfig", "PostgresWrite", "forget_batches", "pg_type", "write_postgres"]

BATCH_TABLE = "sqe_batches"


@dataclass(frozen=True)
class PostgresStateConfig:
    """Where one query writes in Postgres."""

    table: str
    dsn: str
    fields: tuple[str, ...]

    @classmethod
    def from_settings(cls, table: str, fields: list[str],
                      settings: Mapping[str, Any]) -> PostgresStateConfig:
        """The config of a query's Postgres state from its resolved options."""
        dsn = settings["jw.sqe.state.postgres.dsn"]
        if not dsn:
            raise StateError(f"Postgres state {table}: jw.sqe.state.postgres.dsn is not set")
        return cls(table, dsn, tuple(fields))

    @property
    def schema_and_table(self) -> tuple[str | None, str]:
        """``(schema or None, table)`` of ``objectName`` (``schema.table`` or ``table``)."""
        schema, dot, table = self.table.partition(".")
        return (schema, table) if dot else (None, self.table)

    @property
    def target(self) -> Any:
        """The quoted (maybe schema-qualified) name of the table."""
        return _qualified(*self.schema_and_table)

    @property
    def batches(self) -> Any:
        """The quoted name of the batch table beside it."""
        return _qualified(self.schema_and_table[0], BATCH_TABLE)


@dataclass(frozen=True)
class PostgresWrite:
    """What one batch did to the table: rows copied, or skipped as already written."""

    rows: int
    skipped: bool


def pg_type(dtype: T.DataType) -> str:
    """The Postgres column type a Spark type is stored as."""
    simple: list[tuple[type, str]] = [
        (T.StringType, "text"), (T.LongType, "bigint"), (T.IntegerType, "integer"),
        (T.ShortType, "smallint"), (T.ByteType, "smallint"), (T.DoubleType, "double precision"),
        (T.FloatType, "real"), (T.BooleanType, "boolean"), (T.DateType, "date"),
        (T.TimestampNTZType, "timestamp"), (T.TimestampType, "timestamptz"),
        (T.BinaryType, "bytea"), (T.NullType, "text"),
    ]
    for cls, name in simple:
        if isinstance(dtype, cls):
            return name
    if isinstance(dtype, T.DecimalType):
        return f"numeric({dtype.precision},{dtype.scale})"
    if isinstance(dtype, (T.StructType, T.ArrayType, T.MapType, T.VariantType)):
        return "jsonb"
    return "text"


def _csv_column(df: DataFrame, name: str) -> Column:
    """``name`` in the form Postgres parses from CSV (bytea as hex, nested values as JSON)."""
    dtype = df.schema[name].dataType
    col = field_column(name)
    if isinstance(dtype, T.BinaryType):
        return F.concat(F.lit("\\x"), F.hex(col)).alias(name)
    if isinstance(dtype, (T.StructType, T.ArrayType, T.MapType, T.VariantType)):
        return F.to_json(col).alias(name)
    if isinstance(dtype, T.NullType):
        return col.cast("string").alias(name)
    return col.alias(name)


def _csv_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import pyarrow.csv as pcsv

    out = io.BytesIO()
    rows = 0
    options = pcsv.WriteOptions(include_header=False)
    for batch in batches:
        if batch.num_rows:
            pcsv.write_csv(batch, out, options)
            rows += batch.num_rows
    yield pa.RecordBatch.from_pydict({"csv": [out.getvalue()], "rows": [rows]},
                                     schema=pa.schema([("csv", pa.binary()), ("rows", pa.int64())]))


def _ident(name: str) -> Any:
    from psycopg import sql

    return sql.Identifier(name)


def _qualified(schema: str | None, name: str) -> Any:
    from psycopg import sql

    return sql.Identifier(schema, name) if schema else sql.Identifier(name)


def _ensure_table(cur: Any, cfg: PostgresStateConfig, df: DataFrame) -> None:
    from psycopg import sql

    cur.execute("SELECT a.attname FROM pg_attribute a "
                "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped",
                [cfg.target.as_string(cur)])
    existing = {r[0] for r in cur.fetchall()}
    if not existing:
        columns = sql.SQL(", ").join(
            sql.SQL("{} {}").format(_ident(f), sql.SQL(pg_type(df.schema[f].dataType)))
            for f in cfg.fields)
        cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(cfg.target, columns))
        return
    missing = [f for f in cfg.fields if f not in existing]
    if missing:
        raise StateError(f"Postgres state {cfg.table}: the table exists without column(s) "
                         f"{', '.join(missing)} that insertInto.fields names; add them or "
                         "write to another table")


def _lock_batch(cur: Any, cfg: PostgresStateConfig, consumer: str) -> int | None:
    from psycopg import sql

    batches = cfg.batches
    cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (consumer text NOT NULL, "
                        "target text NOT NULL, batch_id bigint NOT NULL, rows bigint NOT NULL, "
                        "committed_at timestamptz NOT NULL DEFAULT now(), "
                        "PRIMARY KEY (consumer, target))").format(batches))
    cur.execute(sql.SQL("INSERT INTO {} (consumer, target, batch_id, rows) VALUES (%s, %s, -1, 0) "
                        "ON CONFLICT DO NOTHING").format(batches), [consumer, cfg.table])
    cur.execute(sql.SQL("SELECT batch_id FROM {} WHERE consumer = %s AND target = %s "
                        "FOR UPDATE").format(batches), [consumer, cfg.table])
    stored = cur.fetchone()[0]
    return None if stored < 0 else int(stored)


def _error_text(exc: Exception) -> str:
    """A psycopg error in one line: the server's message and where (``COPY t, line 2, ...``)."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None)
    if not primary:
        return " ".join(str(exc).split())
    context = (getattr(diag, "context", None) or "").strip().splitlines()
    return f"{primary} ({context[0]})" if context else primary


def write_postgres(df: DataFrame, cfg: PostgresStateConfig, consumer: str,
                   batch_id: int) -> PostgresWrite:
    """Append ``df`` as batch ``batch_id`` of ``consumer``, once (see the module docstring)."""
    import psycopg
    from psycopg import sql

    from sqe.faults import fault_point

    where = f"Postgres state {cfg.table}"
    try:
        conn = psycopg.connect(cfg.dsn, connect_timeout=10)
    except psycopg.Error as exc:
        raise StateError(f"{where}: cannot connect ({_error_text(exc)}); the batch fails "
                         "and is written when it is retried") from None
    try:
        with conn.transaction(), conn.cursor() as cur:
            stored = _lock_batch(cur, cfg, consumer)
            if stored is not None and stored > batch_id:
                raise StaleBatchError(
                    f"{where}: batch {batch_id} of consumer {consumer!r} is older than batch "
                    f"{stored} already written to the table; another writer with the same "
                    "consumer is ahead, so this one is refused (if this query's checkpoint "
                    f"was deleted on purpose, run 'sqe hwm reset {consumer} --postgres DSN')")
            if stored == batch_id:
                return PostgresWrite(0, True)
            _ensure_table(cur, cfg, df)
            chunks = (df.select(*[_csv_column(df, f) for f in cfg.fields])
                      .mapInArrow(_csv_task, "csv binary, rows long").collect())
            rows = sum(r["rows"] for r in chunks)
            copy = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
                cfg.target, sql.SQL(", ").join(_ident(f) for f in cfg.fields))
            with cur.copy(copy) as sink:
                for r in chunks:
                    if r["rows"]:
                        sink.write(r["csv"])
            cur.execute(sql.SQL("UPDATE {} SET batch_id = %s, rows = %s, committed_at = now() "
                                "WHERE consumer = %s AND target = %s").format(cfg.batches),
                        [batch_id, rows, consumer, cfg.table])
            fault_point("postgres-before-commit", batch_id)  # rows and K sent, COMMIT not yet
        return PostgresWrite(rows, False)
    except psycopg.Error as exc:
        raise StateError(f"{where}: {_error_text(exc)}; nothing of batch {batch_id} was "
                         "committed") from None
    finally:
        conn.close()


def forget_batches(dsn: str, consumer: str) -> int:
    """Delete ``consumer``'s rows from every batch table of the database; returns how many.

    For ``sqe hwm reset`` after a checkpoint was deleted on purpose: the next
    run starts again at batch 0, which the batch table would refuse.
    """
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(dsn, connect_timeout=10) as conn, conn.cursor() as cur:
            cur.execute("SELECT schemaname FROM pg_tables WHERE tablename = %s", [BATCH_TABLE])
            deleted = 0
            for (schema,) in cur.fetchall():
                cur.execute(sql.SQL("DELETE FROM {} WHERE consumer = %s").format(
                    _qualified(schema, BATCH_TABLE)), [consumer])
                deleted += cur.rowcount
            return deleted
    except psycopg.Error as exc:
        raise StateError(f"Postgres batch tables at {redact_url(dsn)}: {_error_text(exc)}") from None
