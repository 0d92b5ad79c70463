"""The Postgres state on a real Postgres: table creation, COPY round trips, batch-id fencing."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import psycopg
import pytest
from pyspark.sql import types as T

from sqe.config.settings import Settings
from sqe.config.views import StateSettings
from sqe.errors import StaleBatchError, StateError
from state.postgres.sink import PostgresSink, PostgresStateConfig, pg_type, write_postgres
from state.sink import SinkTarget

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


def _rows(dsn: str, query: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchall()


def test_pg_types_of_spark_types():
    assert pg_type(T.LongType()) == "bigint"
    assert pg_type(T.DecimalType(12, 3)) == "numeric(12,3)"
    assert pg_type(T.TimestampType()) == "timestamptz"
    assert pg_type(T.ArrayType(T.LongType())) == "jsonb"
    assert pg_type(T.VariantType()) == "jsonb"
    assert pg_type(T.BinaryType()) == "bytea"


def test_creates_the_table_and_copies_every_value_exactly(spark, postgres_dsn):
    schema = T.StructType([
        T.StructField("id", T.LongType()), T.StructField("name", T.StringType()),
        T.StructField("ok", T.BooleanType()), T.StructField("score", T.DoubleType()),
        T.StructField("price", T.DecimalType(10, 2)), T.StructField("at", T.TimestampType()),
        T.StructField("raw", T.BinaryType()), T.StructField("tags", T.ArrayType(T.StringType())),
    ])
    at = dt.datetime(2026, 11, 21, 12, 30, tzinfo=dt.timezone.utc)
    data = [
        (1, 'quote " comma , newline \n end', True, 1.5, Decimal("9.99"), at, b"\x00\xff",
         ["a", "b"]),
        (2, "", False, float("nan"), None, None, b"", []),
        (3, None, None, None, Decimal("-1.00"), at, None, None),
    ]
    df = spark.createDataFrame(data, schema)
    cfg = PostgresStateConfig("events", postgres_dsn, tuple(schema.names))
    assert write_postgres(df, cfg, "t.In", 0).rows == 3

    types = dict(_rows(postgres_dsn, "SELECT column_name, data_type FROM information_schema.columns"
                                     " WHERE table_name = 'events' AND table_schema = "
                                     "current_schema()"))
    assert types == {"id": "bigint", "name": "text", "ok": "boolean", "score": "double precision",
                     "price": "numeric", "at": "timestamp with time zone", "raw": "bytea",
                     "tags": "jsonb"}
    got = _rows(postgres_dsn, "SELECT id, name, ok, score::text, price, at, raw, tags "
                              "FROM events ORDER BY id")
    assert got == [
        (1, 'quote " comma , newline \n end', True, "1.5", Decimal("9.99"), at, b"\x00\xff",
         ["a", "b"]),
        (2, "", False, "NaN", None, None, b"", []),
        (3, None, None, None, Decimal("-1.00"), at, None, None),
    ]


def test_appends_to_an_existing_table_and_refuses_one_without_the_columns(spark, postgres_dsn):
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute("CREATE TABLE mine (serial_id bigserial, region text, n bigint)")
        conn.execute("INSERT INTO mine (region, n) VALUES ('before', 0)")
    df = spark.createDataFrame([("EU", 1), ("US", 2)], "region string, n long")
    write_postgres(df, PostgresStateConfig("mine", postgres_dsn, ("region", "n")), "t.In", 0)
    assert _rows(postgres_dsn, "SELECT serial_id, region, n FROM mine ORDER BY serial_id") == [
        (1, "before", 0), (2, "EU", 1), (3, "US", 2)]

    wrong = PostgresStateConfig("mine", postgres_dsn, ("region", "amount"))
    with pytest.raises(StateError, match="Postgres state mine: the table exists without "
                                         "column.s. amount"):
        write_postgres(df.withColumnRenamed("n", "amount"), wrong, "t.In", 1)
    assert _rows(postgres_dsn, "SELECT count(*) FROM mine") == [(3,)]


def test_key_fields_make_a_batchs_row_replace_the_stored_row_of_its_key(spark, postgres_dsn):
    cfg = PostgresStateConfig("windows", postgres_dsn, ("region", "minute", "cents"),
                              keys=("region", "minute"))
    first = spark.createDataFrame([("EU", "12:00", 5), ("US", "12:00", 7)],
                                  "region string, minute string, cents long")
    write_postgres(first, cfg, "t.In", 0)
    # a window's newer value replaces it; within a batch, the last row of a key wins
    later = spark.createDataFrame([("EU", "12:00", 9), ("EU", "12:01", 1), ("EU", "12:01", 3)],
                                  "region string, minute string, cents long").coalesce(1)
    write_postgres(later, cfg, "t.In", 1)
    assert _rows(postgres_dsn, "SELECT region, minute, cents FROM windows ORDER BY 1, 2") == [
        ("EU", "12:00", 9), ("EU", "12:01", 3), ("US", "12:00", 7)]
    assert write_postgres(later, cfg, "t.In", 1).skipped  # fenced by the batch id, as appends

    with psycopg.connect(postgres_dsn) as conn:  # a table of the user's, with no such index
        conn.execute("CREATE TABLE plain (region text, minute text, cents bigint)")
    with pytest.raises(StateError, match="Postgres state plain: the table has no primary key or "
                                         r"unique index on exactly \(region, minute\)"):
        write_postgres(first, PostgresStateConfig("plain", postgres_dsn, cfg.fields,
                                                  keys=cfg.keys), "t.In", 0)


def test_a_batch_is_written_once_and_an_older_one_refused(spark, postgres_dsn):
    df = spark.createDataFrame([(i,) for i in range(5)], "id long")
    cfg = PostgresStateConfig("ids", postgres_dsn, ("id",))
    assert write_postgres(df, cfg, "t.In", 7).skipped is False
    again = write_postgres(df, cfg, "t.In", 7)  # the process died before the HWM commit
    assert (again.rows, again.skipped) == (0, True)
    with pytest.raises(StaleBatchError,
                       match=r"batch 6 of consumer 't.In' is older than batch 7, which "
                             r"another writer of consumer 't.In' committed;"):
        write_postgres(df, cfg, "t.In", 6)
    assert write_postgres(df, cfg, "other.In", 0).rows == 5  # another consumer: its own batches
    assert _rows(postgres_dsn, "SELECT count(*) FROM ids") == [(10,)]
    assert _rows(postgres_dsn, "SELECT consumer, target, batch_id, rows FROM sqe_batches "
                               "ORDER BY consumer") == [("other.In", "ids", 0, 5),
                                                        ("t.In", "ids", 7, 5)]


def test_schema_qualified_table_and_bad_rows_fail_whole(spark, postgres_dsn):
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()[0]
        conn.execute("CREATE TABLE typed (n integer)")
    cfg = PostgresStateConfig(f"{schema}.typed", postgres_dsn, ("n",))
    ok = spark.createDataFrame([(1,), (2,)], "n long")
    assert write_postgres(ok, cfg, "t.In", 0).rows == 2
    too_big = spark.createDataFrame([(3,), (2**40,)], "n long")
    with pytest.raises(StateError, match=r"Postgres state .*typed: .*out of range.*nothing of "
                                         r"batch 1 was committed"):
        write_postgres(too_big, cfg, "t.In", 1)
    assert _rows(postgres_dsn, "SELECT n FROM typed ORDER BY n") == [(1,), (2,)]
    assert _rows(postgres_dsn, "SELECT batch_id FROM sqe_batches") == [(0,)]


def test_unreachable_server_is_a_clear_error(spark):
    df = spark.createDataFrame([(1,)], "n long")
    cfg = PostgresStateConfig("t", "postgresql://nobody@127.0.0.1:1/x", ("n",))
    with pytest.raises(StateError, match="Postgres state t: cannot connect"):
        write_postgres(df, cfg, "t.In", 0)


def test_the_batch_table_records_the_commit_and_a_reset_keeps_the_batch_id(spark, postgres_dsn):
    from state.sink import Batch

    df = spark.createDataFrame([(1,)], "id long")
    write_postgres(df, PostgresStateConfig("a", postgres_dsn, ("id",)), "keep.In", 3)
    sink = PostgresSink(SinkTarget("a", ("id",), StateSettings(Settings.defaults().overlay(
        {"jw.sqe.state.postgres.dsn": postgres_dsn}, "test")), where="t.yaml: command 2"))
    sink.open(Batch("r.In", 9, offsets='{"0": 12}', checkpoint="/ck/In"))
    assert not sink.holds()
    assert sink.write(df) == 1
    sink.commit()
    sink.close()
    commit = sink.committed("r.In")
    assert (commit.batch_id, commit.offsets, commit.checkpoint, commit.reset) == (
        9, '{"0": 12}', "/ck/In", False)
    with pytest.raises(StaleBatchError, match=r"batch 9 of consumer 'r.In' ends at other source "
                                              r"offsets \(\{\"0\": 13\}\) than batch 9, which another "
                                              r"writer of consumer 'r.In' committed \(the run on "
                                              r"checkpoint /ck/In, ending at source offsets "
                                              r"\{\"0\": 12\}\); that run is ahead"):
        sink.open(Batch("r.In", 9, offsets='{"0": 13}'))  # another checkpoint's batch 9
    sink.close()
    before = sink.reset("r.In")
    assert before.batch_id == 9 and sink.committed("r.In").reset
    with pytest.raises(StaleBatchError):  # ids the table has seen never come again
        write_postgres(df, PostgresStateConfig("a", postgres_dsn, ("id",)), "r.In", 0)
    assert write_postgres(df, PostgresStateConfig("a", postgres_dsn, ("id",)), "r.In", 10).rows == 1
    assert _rows(postgres_dsn, "SELECT consumer, batch_id, reset FROM sqe_batches ORDER BY 1") == [
        ("keep.In", 3, False), ("r.In", 10, False)]


def _proxied_sink(postgres_dsn: str, retry_s: int = 30):  # type: ignore[no-untyped-def]
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from support.fault_proxy import FaultProxy

    info = conninfo_to_dict(postgres_dsn)
    proxy = FaultProxy((str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432)))
    dsn = make_conninfo(postgres_dsn, host="127.0.0.1", port=proxy.port)
    sink = PostgresSink(SinkTarget("retried", ("id",), StateSettings(Settings.defaults().overlay(
        {"jw.sqe.state.postgres.dsn": dsn, "jw.sqe.state.postgres.commitRetrySeconds": retry_s},
        "test")), where="t.yaml: command 2"))
    return proxy, sink


def test_a_lost_commit_reply_or_a_cut_copy_is_sent_again_and_written_once(spark, postgres_dsn,
                                                                         caplog):
    import logging

    from state.sink import Batch

    df = spark.createDataFrame([(1,), (2,)], "id long")
    proxy, sink = _proxied_sink(postgres_dsn)
    try:
        sink.open(Batch("retry.In", 0, offsets='{"0": 2}'))
        assert sink.write(df) == 2
        proxy.lose_reply_to(b"COMMIT")  # Postgres commits; its answer never arrives
        with caplog.at_level(logging.WARNING, logger="sqe"):
            sink.commit()
        sink.close()
        assert proxy.replies_lost == 1
        assert any(r.getMessage().startswith(
            "batch 0 of retry.In: Postgres state retried's connection failed at the "
            "transaction (") for r in caplog.records)
        sink.open(Batch("retry.In", 1, offsets='{"0": 4}'))
        proxy.cut()  # the COPY's connection is gone: the commit sends the whole batch again
        assert sink.write(df) == 2
        sink.commit()
        sink.close()
        assert _rows(postgres_dsn, "SELECT id FROM retried ORDER BY id") == [(1,), (1,), (2,),
                                                                             (2,)]
        assert sink.committed("retry.In").batch_id == 1
    finally:
        sink.close()
        proxy.stop()


def test_postgres_away_longer_than_the_retry_time_fails_the_batch_in_one_sentence(
        spark, postgres_dsn):
    from state.sink import Batch

    df = spark.createDataFrame([(1,)], "id long")
    proxy, sink = _proxied_sink(postgres_dsn, retry_s=0)
    try:
        sink.open(Batch("away.In", 0, offsets='{"0": 1}'))
        sink.write(df)
        proxy.lose_reply_to(b"COMMIT")
        with pytest.raises(StateError) as failed:
            sink.commit()
        assert str(failed.value).startswith("Postgres state retried: ") and \
            "\n" not in str(failed.value)
        sink.close()
        # it did commit: the re-run of the batch finds it and writes nothing
        sink.open(Batch("away.In", 0, offsets='{"0": 1}'))
        assert sink.holds()
    finally:
        sink.close()
        proxy.stop()
