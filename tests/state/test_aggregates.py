"""Aggregating queries merged into Redis exactly once (real Redis, real Spark)."""

from __future__ import annotations

import base64
import json
import re
import sys

import pytest
import redis
from pyspark.sql import functions as F

from sqe.cli.local_services import service_conf
from sqe.config.plan import plan_topology
from sqe.config.settings import Settings
from sqe.config.views import StateSettings
from sqe.engine.run.runner import run_topology
from sqe.faults import kill_group, start_with_fault, wait_for_fault
from sqe.lang.topology import load_topology
from state.redis.aggregates import AggregateSink, AggregateStateConfig, write_aggregates
from state.sink import SinkTarget
from tests.support import DATA

pytestmark = [pytest.mark.spark, pytest.mark.redis]

COMPLEX = DATA / "sqe_test_complex_query.json"


def _conf(redis_url: str) -> dict[str, str]:
    pairs = service_conf("127.0.0.1:1", redis_url)[1::2]
    return dict(p.split("=", 1) for p in pairs)


def _estimate(spark, b64: str) -> int:
    return spark.sql(f"SELECT hll_sketch_estimate(unbase64('{b64}')) AS n").first()["n"]


def test_sqes_complex_query_gives_the_right_sums_and_distinct_counts(spark, redis_url, tmp_path):
    plan = plan_topology(load_topology(COMPLEX), conf=_conf(redis_url))
    (report,) = run_topology(plan, spark, "TestTopo", tmp_path / "ck", "once")
    assert report.written == {"TestComplexQuery": 4}
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    stored = client.hgetall("TestComplexQuery:2015-05-01")
    assert sorted(stored) == ["Account1:HappyDanceCount", "Account1:UserHllBitmap",
                              "Account2:HappyDanceCount", "Account2:UserHllBitmap"]
    assert json.loads(stored["Account1:HappyDanceCount"]) == [0, "L", 5]
    assert json.loads(stored["Account2:HappyDanceCount"]) == [0, "L", 4]
    for account in ("Account1", "Account2"):  # Bob, Susy, Mr. Fancy Pants
        txid, tag, sketch = json.loads(stored[f"{account}:UserHllBitmap"])
        assert (txid, tag, _estimate(spark, sketch)) == (0, "B", 3)


def _config(redis_url: str, mode: str, datatype: str = "HASH") -> AggregateStateConfig:
    settings = {"jw.sqe.state.redis.keyname.fields": ["day"],
                "jw.sqe.state.redis.fieldname.fields": ["acct"] if datatype == "HASH" else [],
                "jw.sqe.state.redis.datatype": datatype, "jw.sqe.state.redis.delimiter": ":",
                "jw.sqe.state.redis.expireintervalsec": 0,
                **{k: v for k, v in _conf(redis_url).items() if k.startswith("jw.sqe.state.redis")}}
    if datatype != "HASH":
        settings["jw.sqe.state.redis.keyname.fields"] = ["day", "acct"]
    return AggregateStateConfig.of(_target(settings, ("day", "acct", "total", "top", "users"),
                                           {"total": "sum", "top": "max", "users": "createhll"},
                                           mode))


def _target(settings, fields, aggregates, mode) -> SinkTarget:
    return SinkTarget("Agg", fields, StateSettings(Settings.defaults().overlay(settings, "test")),
                      aggregates, mode, "t.yaml: command 2 (Query)")


def _batch(spark, rows):
    """A batch's aggregates, as an aggregating query computes them."""
    frame = spark.createDataFrame(rows, "day string, acct string, n long, x double, user string")
    return frame.groupBy("day", "acct").agg(F.sum("n").alias("total"), F.max("x").alias("top"),
                                            F.hll_sketch_agg("user", 11).alias("users"))


def _values(redis_url: str, spark, key="Agg:d1", field_prefix="a:"):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    out = {}
    for name in ("total", "top", "users"):
        raw = client.hget(key, f"{field_prefix}{name}")
        out[name] = json.loads(raw) if raw is not None else None
    users = out["users"]
    if isinstance(users, list):
        out["users"] = [users[0], _estimate(spark, users[2])]
    elif isinstance(users, str):
        out["users"] = _estimate(spark, users)
    return out


FIRST = [("d1", "a", 5, 1.5, "u1"), ("d1", "a", 2, 7.25, "u2")]
OTHER = [("d1", "a", 100, 0.5, "u3")]
SECOND = [("d1", "a", 1, 2.0, "u4")]


def test_transactional_rerun_of_the_same_batch_changes_nothing(spark, redis_url):
    cfg = _config(redis_url, "TRANSACTIONAL")
    assert write_aggregates(_batch(spark, FIRST), cfg, 7) == 3
    first = _values(redis_url, spark)
    assert first == {"total": [7, "L", 7], "top": [7, "D", 7.25], "users": [7, 2]}
    assert write_aggregates(_batch(spark, FIRST), cfg, 7) == 0  # Spark re-ran batch 7
    assert _values(redis_url, spark) == first
    assert write_aggregates(_batch(spark, SECOND), cfg, 8) == 3
    assert _values(redis_url, spark) == {"total": [8, "L", 8], "top": [8, "D", 7.25],
                                         "users": [8, 3]}


def test_opaque_rerun_with_other_contents_replaces_its_own_contribution(spark, redis_url):
    cfg = _config(redis_url, "OPAQUE")
    write_aggregates(_batch(spark, FIRST), cfg, 1)
    write_aggregates(_batch(spark, OTHER), cfg, 2)   # batch 2 as first run
    write_aggregates(_batch(spark, SECOND), cfg, 2)  # batch 2 re-run with other contents
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    assert json.loads(client.hget("Agg:d1", "a:total")) == [2, "L", 8, "L", 7]
    assert json.loads(client.hget("Agg:d1", "a:top")) == [2, "D", 7.25, "D", 7.25]
    txid, _, sketch, _, before = json.loads(client.hget("Agg:d1", "a:users"))
    assert (txid, _estimate(spark, sketch), _estimate(spark, before)) == (2, 3, 2)


def test_non_transactional_just_merges_and_string_keys_follow_sqe(spark, redis_url):
    import dataclasses

    cfg = dataclasses.replace(_config(redis_url, "NON_TRANSACTIONAL", datatype="STRING"),
                              expire_seconds=600)
    write_aggregates(_batch(spark, FIRST), cfg, 1)
    write_aggregates(_batch(spark, FIRST), cfg, 1)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    assert json.loads(client.get("Agg:d1:a:total")) == 14
    assert json.loads(client.get("Agg:d1:a:top")) == 7.25
    assert _estimate(spark, json.loads(client.get("Agg:d1:a:users"))) == 2
    assert 0 < client.ttl("Agg:d1:a:total") <= 600  # expireintervalsec


def test_an_integer_sum_beyond_2_53_fails_instead_of_losing_precision(spark, redis_url):
    from pyspark.errors import PythonException

    cfg = _config(redis_url, "TRANSACTIONAL")
    write_aggregates(_batch(spark, [("d1", "a", 2**53, 1.0, "u")]), cfg, 1)
    with pytest.raises(PythonException, match="beyond 2\\^53"):
        write_aggregates(_batch(spark, [("d1", "a", 2**53, 1.0, "u")]), cfg, 2)


@pytest.mark.parametrize("settings,message", [
    ({"jw.sqe.state.redis.keyname.fields": ["day"]}, "grouping field\\(s\\) acct are in neither"),
    ({"jw.sqe.state.redis.keyname.fields": ["total"]}, "'total' must be one of the plain"),
])
def test_layouts_that_would_mix_groups_are_refused(redis_url, settings, message):
    base = {"jw.sqe.state.redis.fieldname.fields": [], "jw.sqe.state.redis.datatype": "STRING",
            "jw.sqe.state.redis.delimiter": ":", "jw.sqe.state.redis.expireintervalsec": 0,
            **{k: v for k, v in _conf(redis_url).items() if k.startswith("jw.sqe.state.redis")}}
    target = _target({**base, **settings}, ("day", "acct", "total"), {"total": "sum"},
                     "TRANSACTIONAL")
    problems = AggregateSink.problems(target)
    assert any(re.search(f"^t.yaml: command 2 \\(Query\\): .*{message}", p) for p in problems)


@pytest.mark.slow
def test_killed_between_the_merge_and_the_spark_commit_totals_stay_exact(redis_url, tmp_path):
    command = [sys.executable, "-m", "sqe.cli.main", "run", str(COMPLEX), "--once", "--name",
               "TestTopo", "--checkpoint", str(tmp_path / "ck"),
               *service_conf("127.0.0.1:1", redis_url)]
    marker, log = tmp_path / "marker", tmp_path / "run.log"
    proc = start_with_fault(command, "before-commit", marker, log)
    try:
        wait_for_fault(proc, marker, log)
    finally:
        kill_group(proc)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    merged = client.hgetall("TestComplexQuery:2015-05-01")
    assert json.loads(merged["Account1:HappyDanceCount"]) == [0, "L", 5]  # merged, not committed
    import subprocess

    again = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr
    assert "batch 0" in again.stderr and "0 entries merged into TestComplexQuery" in again.stderr
    assert client.hgetall("TestComplexQuery:2015-05-01") == merged  # re-run: nothing added
    assert base64.b64decode(json.loads(merged["Account2:UserHllBitmap"])[2])
