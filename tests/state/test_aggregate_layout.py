"""The Lua merge script and the Spark expressions read and write the same aggregate entries:
what one writes, the other reads back, for every stateType (real Redis, real Spark)."""

from __future__ import annotations

import json

import pytest
import redis
from pyspark.sql import functions as F

from state.redis.aggregate_layout import LAYOUTS, MERGE_SCRIPT, encoded, stored_parts

pytestmark = [pytest.mark.spark, pytest.mark.redis]


def _merge(client, mode: str, batch_id: int, value: int) -> tuple[int, int]:
    """Merge ``value`` (a sum) into entry k/f with the Lua script; returns (applied, skipped)."""
    script = client.register_script(MERGE_SCRIPT)
    applied, skipped = script(keys=["k"], args=[mode, batch_id, 0, "f", "sum", "L", str(value), "0"])
    return applied, skipped


@pytest.mark.parametrize("mode", list(LAYOUTS))
def test_lua_and_spark_read_each_others_entries(spark, redis_url, mode):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    assert _merge(client, mode, 1, 5) == (1, 0)
    written_by_lua = client.hget("k", "f")
    batch, value, previous = spark.range(1).select(
        *stored_parts(mode, F.lit(written_by_lua))).first()
    assert (batch, json.loads(value), previous) == ({"NON_TRANSACTIONAL": None}.get(mode, 1), 5,
                                                     None)

    # Spark writes batch 2's entry (7 after 5), as the HLL merge does; Lua merges into it.
    entry = spark.range(1).select(encoded(mode, 2, "L", F.lit("7"), F.lit("5"))).first()[0]
    client.hset("k", "f", entry)
    expected = {"TRANSACTIONAL": [2, "L", 7], "OPAQUE": [2, "L", 7, "L", 5],
                "NON_TRANSACTIONAL": 7}[mode]
    assert json.loads(entry) == expected
    result = _merge(client, mode, 2, 1)  # batch 2 again, with 1 more
    after = json.loads(client.hget("k", "f"))
    if mode == "TRANSACTIONAL":  # applied already by batch 2: nothing changes
        assert result == (0, 1) and after == expected
    elif mode == "OPAQUE":  # a re-run of batch 2 starts again from the value before it
        assert result == (1, 0) and after == [2, "L", 6, "L", 5]
    else:
        assert result == (1, 0) and after == 8
