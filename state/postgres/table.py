"""The Postgres state's table: made when missing, checked, and a batch's rows copied in.

A missing table is made with one column per field, typed from the Spark column
(:func:`~state.postgres.encoding.pg_type`), under its creation lock
(:mod:`state.postgres.ddl`), with ``keyFields`` as its primary key; an existing one must
have the fields' columns (and, with ``keyFields``, a unique index on exactly them).  Rows are
appended by ``COPY``, or with ``keyFields`` merged through a temporary table so that the
batch's last row of each key replaces the stored one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql import types as T

from sqe.config.extras import optional
from sqe.errors import StateError
from state.postgres.ddl import creation_lock
from state.postgres.encoding import pg_type

if TYPE_CHECKING:
    from psycopg import sql

    from state.postgres.config import PostgresStateConfig
else:  # the postgres extra: PostgresSink.problems says when it is missing
    sql = optional("psycopg.sql")

__all__ = ["copy_in", "ensure_table"]


def _ident(name: str) -> Any:
    return sql.Identifier(name)


def _columns(cur: Any, cfg: PostgresStateConfig) -> set[str]:
    """The columns of the state's table (none when it is missing)."""
    cur.execute("SELECT a.attname FROM pg_attribute a "
                "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped",
                [cfg.target.as_string(cur)])
    return {r[0] for r in cur.fetchall()}


def ensure_table(cur: Any, cfg: PostgresStateConfig, schema: T.StructType) -> None:
    """Create the table when it is missing (under its creation lock, held until the batch
    commits: :mod:`state.postgres.ddl`), and check it has the fields' columns."""
    existing = _columns(cur, cfg)
    if not existing:
        creation_lock(cur, *cfg.schema_and_table)
        columns = sql.SQL(", ").join(
            sql.SQL("{} {}").format(_ident(f), sql.SQL(pg_type(schema[f].dataType)))
            for f in cfg.fields)
        if cfg.keys:
            columns = sql.SQL("{}, PRIMARY KEY ({})").format(columns, _names(cfg.keys))
        cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(cfg.target, columns))
        existing = _columns(cur, cfg)  # another writer's, when it created the table first
    missing = [f for f in cfg.fields if f not in existing]
    if missing:
        raise StateError(f"Postgres state {cfg.table}: the table exists without column(s) "
                         f"{', '.join(missing)} that insertInto.fields names; add them or "
                         "write to another table")
    if cfg.keys and not _unique_on(cur, cfg):
        raise StateError(f"Postgres state {cfg.table}: the table has no primary key or unique "
                         f"index on exactly ({', '.join(cfg.keys)}), which keyFields names; "
                         "add one, or write to another table (SQE makes a new one with it)")


def _names(names: Sequence[str]) -> Any:
    return sql.SQL(", ").join(_ident(n) for n in names)


def _unique_on(cur: Any, cfg: PostgresStateConfig) -> bool:
    """Whether the table has a unique index on exactly the key fields."""
    cur.execute("SELECT array_agg(a.attname::text) FROM pg_index i "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                "WHERE i.indrelid = to_regclass(%s) AND i.indisunique AND i.indpred IS NULL "
                "GROUP BY i.indexrelid", [cfg.target.as_string(cur)])
    return any(set(r[0]) == set(cfg.keys) for r in cur.fetchall())


def copy_in(cur: Any, cfg: PostgresStateConfig, chunks: Sequence[bytes]) -> None:
    """COPY the CSV ``chunks`` into the table: appended, or with keyFields through a
    temporary table whose last row of each key replaces the table's."""
    fields = _names(cfg.fields)
    if not cfg.keys:
        with cur.copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(cfg.target,
                                                                              fields)) as sink:
            for chunk in chunks:
                sink.write(chunk)
        return
    staged = _ident("sqe_upsert")
    cur.execute(sql.SQL("CREATE TEMPORARY TABLE {} ON COMMIT DROP AS SELECT {} FROM {} "
                        "WITH NO DATA").format(staged, fields, cfg.target))
    cur.execute(sql.SQL("ALTER TABLE {} ADD COLUMN sqe_row bigserial").format(staged))
    with cur.copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(staged, fields)) as sink:
        for chunk in chunks:
            sink.write(chunk)
    others = [f for f in cfg.fields if f not in cfg.keys]
    update = sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
        sql.SQL("{} = EXCLUDED.{}").format(_ident(f), _ident(f)) for f in others)) \
        if others else sql.SQL("DO NOTHING")
    cur.execute(sql.SQL("INSERT INTO {} ({}) SELECT DISTINCT ON ({}) {} FROM {} "
                        "ORDER BY {}, sqe_row DESC ON CONFLICT ({}) {}").format(
        cfg.target, fields, _names(cfg.keys), fields, staged, _names(cfg.keys),
        _names(cfg.keys), update))
    cur.execute(sql.SQL("DROP TABLE {}").format(staged))
