"""Two writers of a Postgres state at once, on a real Postgres: creating the same new tables, and
the refusal of the one behind naming the other."""

from __future__ import annotations

import psycopg
import pytest

from sqe.errors import StaleBatchError
from state.postgres.sink import PostgresStateConfig, write_postgres
from tests.support.race import race

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

ROUNDS = 6


def _schema(dsn: str, name: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        here = conn.execute("SELECT current_schema()").fetchone()[0]
        conn.execute(f'CREATE SCHEMA "{here}_{name}"')
    return f"{here}_{name}"


def test_two_writers_of_one_consumer_create_the_tables_at_once(spark, postgres_dsn):
    """Two runs of one consumer on separate checkpoints, both creating the state table and the
    batch table of a new schema: one commits batch 0, the other is refused naming it (before,
    one failed on pg_type's unique index, saying nothing of the other)."""
    df = spark.createDataFrame([(1,), (2,)], "id long")
    for r in range(ROUNDS):
        schema = _schema(postgres_dsn, f"one{r}")
        cfg = PostgresStateConfig(f"{schema}.out", postgres_dsn, ("id",))
        results = race(2, lambda i, cfg=cfg: write_postgres(
            df, cfg, "two.In", 0, offsets=f'{{"0": {i + 1}}}', checkpoint=f"/ck/run{i}"))
        refused = [x for x in results if isinstance(x, StaleBatchError)]
        written = [x for x in results if not isinstance(x, BaseException)]
        assert len(refused) == 1 and len(written) == 1, results
        winner = results.index(written[0])
        assert (f"another writer of consumer 'two.In' committed (the run on checkpoint "
                f"/ck/run{winner}, ending at source offsets {{\"0\": {winner + 1}}})"
                ) in str(refused[0])


def test_writers_of_two_consumers_create_one_new_table_at_once(spark, postgres_dsn):
    """Two consumers writing to the same new table (the batch table there already, and not):
    both commit, the table holds the rows of both."""
    df = spark.createDataFrame([(1,), (2,)], "id long")
    for r in range(ROUNDS):
        schema = _schema(postgres_dsn, f"two{r}")
        if r % 2:  # the batch table exists; only the state table is new
            write_postgres(df, PostgresStateConfig(f"{schema}.first", postgres_dsn, ("id",)),
                           "first.In", 0)
        cfg = PostgresStateConfig(f"{schema}.shared", postgres_dsn, ("id",))
        results = race(3, lambda i, cfg=cfg: write_postgres(df, cfg, f"c{i}.In", 0))
        assert [getattr(x, "rows", x) for x in results] == [2, 2, 2]
        with psycopg.connect(postgres_dsn) as conn:
            assert conn.execute(f'SELECT count(*) FROM "{schema}".shared').fetchone() == (6,)
