"""The Postgres state: a query's rows appended to a table, exactly once per micro-batch.

The table is ``insertInto.objectName`` (``table`` or ``schema.table``).  When
it is missing it is created with one column per ``fields`` entry, typed from
the Spark column (:func:`pg_type`); when it exists it must have those
columns, and rows are appended to them.

One micro-batch ``K`` of consumer ``C`` is one SQL transaction, as the sink
protocol (:mod:`state.sink`) runs it:

1. ``open``: lock the row ``(C, table)`` of the batch table (``sqe_batches`` in
   the target's schema, created when missing); a stored id above ``K`` is a stale
   writer and fails loudly (:class:`~sqe.errors.StaleBatchError`);
2. ``holds``: a stored batch id equal to ``K`` means this batch was written
   already (the process died after the Postgres commit and before the HWM
   commit): nothing is written again;
3. ``write``: ``COPY`` the rows in (CSV built by Arrow on the executors, so no
   row-by-row INSERT and no per-row Python) and record ``K``;
4. ``commit``: the SQL COMMIT, before the HWM commit to Redis; ``close`` rolls
   back what was not committed.

The lock is held while the batch is written, so two writers of the same
consumer cannot interleave; a retry consults the batch table and skips the write.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.csv as pcsv
from psycopg import sql
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sqe.config.secrets import redact_url
from sqe.errors import StaleBatchError, StateError
from sqe.faults import fault_point
from sqe.wire.columns import field_column
from state.sink import Batch, Sink, SinkTarget

__all__ = ["PostgresSink", "PostgresStateConfig", "PostgresWrite", "forget_batches", "pg_type",
           "write_postgres"]

BATCH_TABLE = "sqe_batches"


@dataclass(frozen=True)
class PostgresStateConfig:
    """Where one query writes in Postgres."""

    table: str
    dsn: str
    fields: tuple[str, ...]

    @classmethod
    def of(cls, target: SinkTarget) -> PostgresStateConfig:
        """The config of a query's Postgres state (its DSN checked by :meth:`PostgresSink.problems`)."""
        return cls(target.name, target.settings.postgres.dsn or "", target.fields)

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
    return sql.Identifier(name)


def _qualified(schema: str | None, name: str) -> Any:
    return sql.Identifier(schema, name) if schema else sql.Identifier(name)


def _ensure_table(cur: Any, cfg: PostgresStateConfig, df: DataFrame) -> None:
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


class _Transaction:
    """One batch of one consumer in one table: the SQL transaction of the module docstring."""

    def __init__(self, cfg: PostgresStateConfig, consumer: str, batch_id: int) -> None:
        self.cfg, self.consumer, self.batch_id = cfg, consumer, batch_id
        self.where = f"Postgres state {cfg.table}"
        self.copied = False
        try:
            self.conn = psycopg.connect(cfg.dsn, connect_timeout=10)
        except psycopg.Error as exc:
            raise StateError(f"{self.where}: cannot connect ({_error_text(exc)}); the batch "
                             "fails and is written when it is retried") from None
        try:
            with self.conn.cursor() as cur:
                self.stored = _lock_batch(cur, cfg, consumer)
        except psycopg.Error as exc:
            self.close()
            raise self._failed(exc) from None
        if self.stored is not None and self.stored > batch_id:
            self.close()
            raise StaleBatchError.behind(self.where, consumer, batch_id, self.stored,
                                         f"sqe hwm reset {consumer} --postgres DSN")

    def _failed(self, exc: Exception) -> StateError:
        return StateError(f"{self.where}: {_error_text(exc)}; nothing of batch "
                          f"{self.batch_id} was committed")

    def copy(self, frame: DataFrame) -> int:
        """COPY the rows in and record the batch id (not committed yet)."""
        cfg = self.cfg
        try:
            with self.conn.cursor() as cur:
                _ensure_table(cur, cfg, frame)
                chunks = (frame.select(*[_csv_column(frame, f) for f in cfg.fields])
                          .mapInArrow(_csv_task, "csv binary, rows long").collect())
                rows = sum(r["rows"] for r in chunks)
                copy = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
                    cfg.target, sql.SQL(", ").join(_ident(f) for f in cfg.fields))
                with cur.copy(copy) as sink:
                    for r in chunks:
                        if r["rows"]:
                            sink.write(r["csv"])
                cur.execute(sql.SQL("UPDATE {} SET batch_id = %s, rows = %s, "
                                    "committed_at = now() WHERE consumer = %s AND target = %s"
                                    ).format(cfg.batches),
                            [self.batch_id, rows, self.consumer, cfg.table])
        except psycopg.Error as exc:
            raise self._failed(exc) from None
        self.copied = True
        return int(rows)

    def commit(self) -> None:
        """The SQL COMMIT of the rows and the batch id (of the lock alone, when none were copied)."""
        if self.copied:
            fault_point("postgres-before-commit", self.batch_id)  # rows and K sent, no COMMIT
        try:
            self.conn.commit()
        except psycopg.Error as exc:
            raise self._failed(exc) from None

    def close(self) -> None:
        """Close the connection; what was not committed is rolled back."""
        self.conn.close()


class PostgresSink(Sink):
    """A Postgres state: the batch's rows and its id in one SQL transaction (see the module
    docstring)."""

    state_name = "POSTGRES"

    def __init__(self, target: SinkTarget) -> None:
        super().__init__(target)
        self.config = PostgresStateConfig.of(target)
        self._tx: _Transaction | None = None

    @classmethod
    def problems(cls, target: SinkTarget) -> list[str]:
        problems = []
        if target.aggregates:
            problems.append(f"{target.where}: an aggregating query (Sum, Max, CreateHll) merges "
                            "into a REDIS or KAFKA state, not POSTGRES")
        if not target.settings.postgres.dsn:
            problems.append(f"{target.where}: a POSTGRES state needs jw.sqe.state.postgres.dsn")
        return problems

    @property
    def _transaction(self) -> _Transaction:
        if self._tx is None:
            raise RuntimeError(f"{self.describe()}: no batch is open")
        return self._tx

    def open(self, batch: Batch) -> None:
        super().open(batch)
        self._tx = _Transaction(self.config, batch.consumer, batch.batch_id)

    def holds(self) -> bool:
        return self._transaction.stored == self.batch.batch_id

    def write(self, frame: DataFrame) -> int:
        return self._transaction.copy(frame)

    def commit(self) -> None:
        self._transaction.commit()

    def close(self) -> None:
        if self._tx is not None:
            self._tx.close()
            self._tx = None
        super().close()


def write_postgres(df: DataFrame, cfg: PostgresStateConfig, consumer: str,
                   batch_id: int) -> PostgresWrite:
    """Append ``df`` as batch ``batch_id`` of ``consumer``, once (the sink's steps in one go)."""
    tx = _Transaction(cfg, consumer, batch_id)
    try:
        if tx.stored == batch_id:
            return PostgresWrite(0, True)
        rows = tx.copy(df)
        tx.commit()
        return PostgresWrite(rows, False)
    finally:
        tx.close()


def forget_batches(dsn: str, consumer: str) -> int:
    """Delete ``consumer``'s rows from every batch table of the database; returns how many.

    For ``sqe hwm reset`` after a checkpoint was deleted on purpose: the next
    run starts again at batch 0, which the batch table would refuse.
    """
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
