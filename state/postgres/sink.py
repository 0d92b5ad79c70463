"""The Postgres state: a query's rows appended to a table, exactly once per micro-batch.

The table is ``insertInto.objectName`` (``table`` or ``schema.table``).  When
it is missing it is created with one column per ``fields`` entry, typed from
the Spark column (:func:`pg_type`); when it exists it must have those
columns, and rows are appended to them (:mod:`state.postgres.table`).

With ``keyFields`` a row replaces the stored row with the same key (an aggregate's newer
value, a window's update) instead of adding one: the batch is copied into a temporary table and
merged with ``INSERT ... ON CONFLICT (keys) DO UPDATE``, the batch's last row of each key
winning, in the same transaction.

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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sqe.config.extras import missing, optional
from sqe.errors import StaleBatchError, StateError, StoreConnectionLost
from sqe.faults import fault_point
from sqe.ledger.commits import Commit
from sqe.ledger.hwm import HwmStore
from sqe.ledger.retry import Unreachable, retried, times_tried
from sqe.secrets import redact_url
from sqe.wire.columns import field_column
from state.postgres.batches import (
    batch_committed,
    connect,
    error_text,
    lock_batch,
    record_batch,
    reset_batch,
)
from state.postgres.config import PostgresStateConfig
from state.postgres.encoding import csv_column, csv_task, pass_csv, pg_type
from state.postgres.table import copy_in, ensure_table
from state.sink import Batch, RowTask, Sink, SinkTarget

if TYPE_CHECKING:
    import psycopg
else:  # the postgres extra: PostgresSink.problems says when it is missing
    psycopg = optional("psycopg")

T_ = TypeVar("T_")

__all__ = ["PostgresSink", "PostgresStateConfig", "PostgresWrite", "pg_type", "write_postgres"]


@dataclass(frozen=True)
class PostgresWrite:
    """What one batch did to the table: rows copied, or skipped as already written."""

    rows: int
    skipped: bool


class _Transaction:
    """One batch of one consumer in one table: the SQL transaction of the module docstring."""

    def __init__(self, cfg: PostgresStateConfig, batch: Batch) -> None:
        self.cfg, self.batch = cfg, batch
        self.where = f"Postgres state {cfg.table}"
        self.copied = False
        self.sent: tuple[T.StructType, Sequence[bytes], int] | None = None  # what COPY got
        try:
            self.conn = connect(cfg.dsn)
        except psycopg.Error as exc:
            text = f"{self.where}: cannot connect ({error_text(exc)}); the batch fails and " \
                "is written when it is retried"
            if isinstance(exc, psycopg.OperationalError):
                raise StoreConnectionLost(text, f"connect: {error_text(exc)}") from None
            raise StateError(text) from None
        schema, table = cfg.schema_and_table
        try:
            with self.conn.cursor() as cur:
                self.stored = lock_batch(cur, schema, batch.consumer, cfg.table, self.where)
        except psycopg.Error as exc:
            self.close()
            raise self._failed(exc) from None
        stored = self.stored
        if stored is not None and not stored.same_batch(batch.batch_id, batch.offsets) \
                and stored.batch_id >= batch.batch_id:
            self.close()
            raise StaleBatchError.behind(self.where, batch.consumer, batch.batch_id,
                                         stored.batch_id, stored.checkpoint, batch.offsets,
                                         stored.offsets)

    @property
    def holds(self) -> bool:
        """Whether the table holds this batch already."""
        return self.stored is not None and self.stored.same_batch(self.batch.batch_id,
                                                                  self.batch.offsets)

    def _failed(self, exc: Exception) -> StateError:
        text = f"{self.where}: {error_text(exc)}; nothing of batch {self.batch.batch_id} " \
            "was committed"
        if isinstance(exc, psycopg.OperationalError):
            return StoreConnectionLost(text, error_text(exc))
        return StateError(text)

    def copy(self, frame: DataFrame, empty: bool = False) -> int:
        """COPY the rows in and record the batch id (not committed yet); ``empty``: the frame is
        known to hold no row (the table is made if missing, and no Spark job runs)."""
        chunks = [] if empty else (
            frame.select(*[csv_column(frame, f) for f in self.cfg.fields])
            .mapInArrow(csv_task, "csv binary, rows long").collect())
        return self.copy_csv(frame.schema, [r["csv"] for r in chunks if r["rows"]],
                             sum(r["rows"] for r in chunks))

    def copy_csv(self, schema: T.StructType, chunks: Sequence[bytes], rows: int) -> int:
        """COPY ``rows`` rows in, as CSV ``chunks`` of fields typed as ``schema`` says (the
        table is made if missing), and record the batch id (not committed yet)."""
        cfg = self.cfg
        self.sent = (schema, chunks, rows)
        try:
            with self.conn.cursor() as cur:
                ensure_table(cur, cfg, schema)
                copy_in(cur, cfg, chunks)
                b = self.batch
                record_batch(cur, cfg.schema_and_table[0], b.consumer, cfg.table, b.batch_id,
                             rows, b.offsets, b.checkpoint)
        except psycopg.Error as exc:
            raise self._failed(exc) from None
        self.copied = True
        return int(rows)

    def commit(self) -> None:
        """The SQL COMMIT of the rows and the batch id (of the lock alone, when none were copied)."""
        if self.copied:
            fault_point("postgres-before-commit", self.batch.batch_id)  # rows and K sent
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
    written_by_pass_done = True

    def where(self) -> str:
        """The Postgres connection string, its password masked."""
        return f"Postgres at {redact_url(self.config.dsn)}"

    def __init__(self, target: SinkTarget) -> None:
        super().__init__(target)
        self.config = PostgresStateConfig.of(target)
        self._tx: _Transaction | None = None
        self._lost: StoreConnectionLost | None = None  # at the COPY: the commit sends it again
        self._schema = T.StructType()  # the fields' types, as the one-pass plan saw them

    @classmethod
    def problems(cls, target: SinkTarget) -> list[str]:
        problems = []
        if target.aggregates:
            problems.append(f"{target.where}: an aggregating query (Sum, Max, CreateHll) merges "
                            "into a REDIS or KAFKA state, not POSTGRES")
        if not target.settings.postgres.dsn:
            problems.append(f"{target.where}: a POSTGRES state needs jw.sqe.state.postgres.dsn")
        strays = [k for k in target.settings.postgres.key_fields or () if k not in target.fields]
        if strays:
            problems.append(f"{target.where}: jw.sqe.state.postgres.keyFields names "
                            f"{', '.join(strays)}, which insertInto.fields does not")
        absent = missing("psycopg", f"{target.where}: a POSTGRES state")
        return problems + ([absent] if absent else [])

    @property
    def _transaction(self) -> _Transaction:
        if self._tx is None:
            raise StateError(f"{self.describe()}: no batch is open")
        return self._tx

    def open(self, batch: Batch) -> None:
        super().open(batch)
        self._lost = None
        self._tx = self._sent_again(lambda: _Transaction(self.config, batch),
                                    _of(batch), "opening the transaction")

    def holds(self) -> bool:
        return self._transaction.holds

    def committed(self, consumer: str) -> Commit | None:
        schema, _ = self.config.schema_and_table
        return self._sent_again(lambda: batch_committed(
            self.config.dsn, schema, consumer, self.config.table, self.describe()),
            f"consumer {consumer}", "reading its last batch")

    def reset(self, consumer: str) -> Commit | None:
        schema, _ = self.config.schema_and_table
        return reset_batch(self.config.dsn, schema, consumer, self.config.table, self.describe())

    def rejects(self, frame: DataFrame) -> list[tuple[Column, str]]:
        out = []
        for name in self.config.fields:
            dtype = frame.schema[name].dataType
            if isinstance(dtype, T.StringType):
                out.append((F.contains(field_column(name), F.lit("\u0000")),
                            f"{self.describe()}: field {name} holds the NUL character (\\u0000), "
                            "which Postgres text cannot hold"))
            elif pg_type(dtype) == "jsonb":
                out.append((F.contains(csv_column(frame, name), F.lit("\\u0000")),
                            f"{self.describe()}: field {name} holds the NUL character (\\u0000), "
                            "which Postgres jsonb cannot hold"))
        return out

    def _copying(self, copy: Callable[[_Transaction], int]) -> int:
        """``copy`` of the batch's rows; a connection lost meanwhile is left to the commit,
        which sends the whole transaction again."""
        try:
            return copy(self._transaction)
        except StoreConnectionLost as lost:
            if self._transaction.sent is None:  # the rows are not in hand: the batch fails
                raise
            self._lost = lost
            return self._transaction.sent[2]

    def write(self, frame: DataFrame) -> int:
        return self._copying(lambda tx: tx.copy(frame))

    def pass_columns(self, frame: DataFrame, hwm: HwmStore | None) -> list[Column]:
        """The fields as Postgres parses them from CSV; the table's types come from
        ``frame``'s."""
        self._schema = T.StructType([frame.schema[f] for f in self.config.fields])
        return [csv_column(frame, f) for f in self.config.fields]

    def pass_task(self, context: Mapping[str, Any]) -> RowTask:
        """The CSV of the task's rows, built by Arrow, for the driver's COPY."""
        return pass_csv

    def pass_done(self, counts: Mapping[str, int], data: Sequence[bytes]) -> int:
        """COPY the tasks' CSV in the batch's transaction, with the batch id."""
        return self._copying(lambda tx: tx.copy_csv(self._schema, data,
                                                    counts.get("written", 0)))

    def write_empty(self, frame: DataFrame) -> int:
        return self._copying(lambda tx: tx.copy(frame, empty=True))

    def commit(self) -> None:
        """The SQL COMMIT; a connection lost at the COPY or the COMMIT sends the transaction
        again on a new connection (``commitRetrySeconds``): a table that holds the batch by
        then (the COMMIT ran, its reply was lost) gets nothing twice."""
        lost, self._lost = self._lost, None
        if lost is None:
            try:
                self._transaction.commit()
                return
            except StoreConnectionLost as exc:
                lost = exc
        sent, batch = self._transaction.sent, self._transaction.batch

        def again() -> None:
            self._transaction.close()
            self._tx = _Transaction(self.config, batch)
            if not self._tx.holds and sent is not None:
                self._tx.copy_csv(*sent)
            self._tx.commit()

        self._sent_again(again, _of(batch), "the transaction", failed=lost)

    def _sent_again(self, call: Callable[[], T_], who: str, action: str,
                    failed: StoreConnectionLost | None = None) -> T_:
        """``call()``, made again on a new connection while Postgres is away for up to
        ``commitRetrySeconds`` (``failed``: the first try failed so already); longer, the
        batch fails in one sentence."""
        try:
            return retried(call, self.config.retry_s, who, action,
                           lambda exc: getattr(exc, "reason", str(exc)),
                           errors=(StoreConnectionLost,), store=self.describe(),
                           failed=failed)[0]
        except Unreachable as away:
            said = times_tried(away.tries, "jw.sqe.state.postgres.commitRetrySeconds")
            raise StateError(f"{away.error}{said}") from None

    def close(self) -> None:
        if self._tx is not None:
            self._tx.close()
            self._tx = None
        super().close()


def _of(batch: Batch) -> str:
    return f"batch {batch.batch_id} of {batch.consumer}"


def write_postgres(df: DataFrame, cfg: PostgresStateConfig, consumer: str, batch_id: int,
                   offsets: str | None = None, checkpoint: str | None = None) -> PostgresWrite:
    """Append ``df`` as batch ``batch_id`` of ``consumer`` (ending at source ``offsets``, made
    on ``checkpoint``), once: the sink's steps in one go."""
    tx = _Transaction(cfg, Batch(consumer, batch_id, offsets=offsets, checkpoint=checkpoint))
    try:
        if tx.holds:
            return PostgresWrite(0, True)
        rows = tx.copy(df)
        tx.commit()
        return PostgresWrite(rows, False)
    finally:
        tx.close()

