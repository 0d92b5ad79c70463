"""Smoke tests of the benchmarks in bench/: each runs as a subprocess with tiny sizes against
the session's broker (and Redis), and its ``--json`` object must add up.

The numbers are not checked (the machine is shared); the counts are: every replay filter
drops exactly the replays the benchmark produced, and every writer writes every record.

And the rules of the ``bench`` package (its ``__init__`` says why): its modules import each
other by the package's name and leave ``sys.path`` alone, none is named like a module it
would hide, the harness imports nothing of the scripts, and every script runs as a file.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

BENCH = ROOT / "bench"
MODULES = sorted(BENCH.rglob("*.py"))
#: The names a module of bench/ could be imported by when bench/ is first on sys.path (a
#: script run as a file): its modules and its packages.
LOCAL_NAMES = {p.stem for p in BENCH.glob("*.py") if p.stem != "__init__"} | {
    p.parent.name for p in BENCH.glob("*/__init__.py")}


def run_bench(script: str, *args: str, timeout: float = 600, check: bool = True) -> dict:
    """Run ``bench/<script>`` with ``--json`` as the docs run it (``PYTHONPATH=.``); its last
    stdout line, parsed.

    With ``check=False`` an exit code 1 that still printed the JSON object (the benchmark's
    own consistency check failed) is left for the caller's asserts, which say more.
    """
    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args, "--json"],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=bench_env())
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    last = (done.stdout.strip().splitlines() or [""])[-1]
    printed = done.returncode == 1 and last.startswith("{")
    assert done.returncode == 0 or (printed and not check), (
        f"{script} exited {done.returncode}: {errors or done.stderr[-2000:]}")
    return json.loads(last)


def bench_env() -> dict[str, str]:
    """This environment with the repository's root first on ``PYTHONPATH``, as the documented
    commands give it (``PYTHONPATH=.``): how a script reaches ``bench`` and ``support``."""
    rest = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *rest])}


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_replay_bench_drops_exactly_the_replays(kafka_bootstrap, redis_url):
    # Without the enrich -> load chain (--chain-events 0): it is sqe run's own path, which
    # test_exactly_once and test_run_replays cover, and it would double this test's time.
    # One Kafka partition holding all 16 (pid, partition) groups: one task per batch (fast),
    # and every group meets its stored HWM in the same filter call in batch 2.
    r = run_bench("replay.py", "--records", "6000", "--batch-records", "3000", "--repeat", "1",
                  "--partitions", "1", "--chain-events", "0", "--no-warm-up",
                  "--brokers", kafka_bootstrap, "--redis", redis_url, check=False)
    for key in ("plain_rps", "pushdown_rps", "dataframe_rps", "dropduplicates_rps",
                "kernel_keys_per_s", "hwm_entries", "statestore_rows", "pushdown_vs_plain",
                "dataframe_vs_plain", "dropduplicates_vs_plain"):
        assert r[key] > 0, key
    assert r["replays"] > 0 and r["distinct"] == r["records"] - r["replays"]
    assert r["plain_rows"] == r["records"]
    # Two micro-batches per consumer: replays at the boundary are dropped by the stored HWMs.
    assert r["pushdown_batches"] == r["dataframe_batches"] == 2
    assert r["dataframe_dropped"] == r["replays"] and r["dataframe_rows"] == r["distinct"]
    assert r["dropduplicates_rows"] == r["distinct"] == r["statestore_rows"]
    assert r["kernel_dropped"] == r["replays"], (
        f"filter_replays dropped {r['kernel_dropped'] - r['replays']} keys that are not replays")
    assert r["pushdown_rows"] == r["distinct"], (
        f"the source's filter dropped {r['distinct'] - r['pushdown_rows']} records that are not "
        "replays (the first record above the stored HWM of a group?)")
    assert r["pushdown_dropped"] == r["replays"]
    assert r["hwm_entries"] == 16  # one per (pid, source partition), whatever the data size
    assert "chain_rps" not in r


@pytest.mark.spark
@pytest.mark.kafka
def test_kafka_write_bench_writes_every_record(kafka_bootstrap):
    r = run_bench("kafka_write.py", "--records", "3000", "--txn-records", "500", "--repeat", "1",
                  "--no-warm-up", "--brokers", kafka_bootstrap)
    assert r["state_rps"] > 0 and r["idempotent_rps"] > 0 and r["state_vs_idempotent"] > 0
    assert r["offsets_written"]["state"] == r["offsets_written"]["idempotent"] == 3000
    if r["transactional_rps"] is None:  # a broker without transactions says why
        assert r["transactions_error"]
    else:
        assert r["transactions_error"] is None
        # 6 transactions, each with a commit marker in every partition it wrote to
        assert 3000 < r["offsets_written"]["transactional"] <= 3000 + 6 * r["partitions"]


@pytest.mark.kafka
def test_chunk_filter_bench_skips_chunks_and_keeps_the_same_messages(kafka_bootstrap):
    r = run_bench("chunk_filter.py", "--messages", "3000", "--size", "200",
                  "--brokers", kafka_bootstrap)
    for where in ("stage", "broker"):
        a, b, c = (r[where][k] for k in ("a_no_filter", "b_post_filter", "c_bloom_post_filter"))
        assert a["rows"] == 3000
        assert 0 < c["rows"] == b["rows"] < a["rows"]
        assert c["chunks_skipped_bloom"] > 0 and c["bytes_decoded"] < b["bytes_decoded"]


def test_the_chain_benchmarks_point_the_shipped_topologies_at_their_topics():
    """The harness's retarget (every benchmark of the chain uses it)."""
    import yaml

    from bench.harness.topologies import retarget

    enrich = yaml.safe_load((ROOT / "topologies" / "enrich.yaml").read_text())
    load = yaml.safe_load((ROOT / "topologies" / "load.yaml").read_text())
    retarget(enrich, "in", "mid")
    retarget(load, "mid", None)
    assert [c["CreateStream"]["objectName"] for c in enrich + load if "CreateStream" in c] == [
        "in", "mid"]
    assert [c["Query"]["insertInto"]["objectName"] for c in enrich if "Query" in c] == ["mid"]


@pytest.mark.slow
@pytest.mark.redis
def test_hwm_scale_bench_commits_and_reads_every_size_and_checks_whole_runs(redis_url,
                                                                             kafka_bootstrap):
    r = run_bench("hwm_scale.py", "--redis", redis_url, "--brokers", kafka_bootstrap,
                  "--marks", "100,2000", "--partitions", "4,16", "--touched", "16",
                  "--repeat", "2", "--run-records", "400", "--run-marks", "3000",
                  "--run-repeat", "1", "--state-sizes", "1000,20000")
    assert sorted((s["touch"], s["marks"], s["partitions"]) for s in r["sizes"]) == [
        (touch, marks, p) for touch in ("active", "cold") for marks in (100, 2000)
        for p in (4, 16)]
    for s in r["sizes"]:
        assert s["commit_ms"] > 0 and s["read_ms"] > 0 and s["bytes_per_mark"] > 0
        assert s["round_trips"] <= 1 + s["partitions"]  # the commit record, one per task
    assert all(v > 0 for ratios in r["ratios"].values() for v in ratios.values())
    assert r["run"]["records"] == 400 and r["run"]["few_s"] > 0 and r["run"]["many_s"] > 0
    aggregate, probe = r["states"].values()
    assert [s["stored"] for s in aggregate] == [1000, 20000] and aggregate[1]["ms"] > 0
    assert [s["size"] for s in probe] == [1000, 20000] and set(probe[1]) == {"size", "HGET", "ZADD"}


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_chain_bench_runs_every_row_and_checks_every_output(kafka_bootstrap, redis_url):
    # Tiny sizes: every number is start-up; the point is that every contender runs as a process,
    # its output checks, and every row is reported (quixstreams' may be skipped, saying why).
    # The Connect rows are left out here (--no-connect): the chain over a Connect server runs
    # in tests/engine/test_connect.py, and the bench's Connect variant in the batch-cost test.
    r = run_bench("chain.py", "--events", "2000", "--repeat", "1", "--empty-batches", "3",
                  "--no-connect", "--brokers", kafka_bootstrap, "--redis", redis_url,
                  timeout=900)
    assert r["checks_passed"] and r["problems"] == []
    rows = {(e["row"], e.get("events")): e for e in r["rows"]}
    assert ("connect", 2000) not in rows and ("connect_hop", None) not in rows
    for row in ("chain", "enrich", "read", "write"):
        e = rows[(row, 2000)]
        assert e["sqe_s"] > 0 and len(e["sqe_runs"]) == 1
        if row == "enrich" and r["quix"]["skipped"]:
            assert "quixstreams" in r["quix"]["skipped"] and e["other_s"] is None
            continue
        assert e["other_s"] > 0 and e["ratio"] > 0 and e["work_ratio"] > 0
    # the read's batches after its first, and the state's write run again, against the other
    for row, target in (("read_later", 0.3), ("write_again", 0.6)):
        e = rows[(row, 2000)]
        assert e["sqe_rps"] > 0 and e["other_rps"] > 0 and e["target"] == target
        assert e["ratio"] == pytest.approx(e["sqe_rps"] / e["other_rps"])
    assert rows[("chain", 2000)]["sqe_steps"][0]["load_batches"] >= 1
    assert rows[("empty_batch", None)]["empty_batches"] == 3
    assert 0 < rows[("empty_batch", None)]["value"]
    assert 0 < rows[("first_batch", None)]["value"]
    assert rows[("driver_rss", 2000)]["value"] > 0 and rows[("worker_rss", 2000)]["value"] > 0


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
@pytest.mark.connect
def test_batch_cost_bench_runs_each_variant_in_batches_of_the_size_given(kafka_bootstrap,
                                                                         redis_url,
                                                                         connect_server):
    # the variant beside the default is this tree over a Spark Connect server (--connect);
    # a variant of another config or tree (--variant NAME=PATH) runs the same way
    r = run_bench("batch_cost.py", "--records", "300", "--batches", "3", "--repeat", "1",
                  "--connect", "--remote", connect_server.url,
                  "--brokers", kafka_bootstrap, "--redis", redis_url, timeout=900)
    assert r["problems"] == []
    assert {(row["variant"], row["step"]) for row in r["rows"]} == {
        (v, s) for v in ("default", "connect") for s in ("enrich", "load")}
    for row in r["rows"]:
        assert row["cycle_s"] > 0 and row["duration_s"] > 0
        assert row["ratio_to_default"] == 1.0 or row["variant"] != "default"
    for runs in r["runs"].values():
        for step in ("enrich", "load"):
            assert runs[0][step]["batches"] == 4 and runs[0][step]["records_max"] == 300


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_latency_bench_backlog_mode_measures_sustained_throughput_exactly_once(kafka_bootstrap,
                                                                               redis_url):
    # The backlog mode only (--rates none), SQE and the plain programs over 20,000 events.
    # SQE's batches are capped so that its backlog arrives in several batches, each under 20 %
    # of it: the 10th and the 90th percentile of the arrival times are then never the same
    # batch's, and the sustained rate always has a span (the plain load writes at most 10,000
    # records a poll, under 50 %).
    r = run_bench("latency.py", "--rates", "none", "--backlog", "20000", "--systems", "sqe,plain",
                  "--sqe-args", "--conf jw.sqe.spout.kafka.maxRecordsPerBatch=3000",
                  "--brokers", kafka_bootstrap, "--redis", redis_url, timeout=900, check=False)
    assert r["problems"] == []
    assert r["rows"] == [] and r["backlog"]["events"] == 20000
    rows = {row["system"]: row for row in r["backlog"]["rows"]}
    assert set(rows) == {"sqe", "plain"}
    for system, row in rows.items():
        assert row["sent"] == row["delivered"] == 20000, system
        assert row["lost"] == row["duplicated"] == row["unknown"] == 0, system
        assert row["sustained_rate"] > 0 and row["whole_rate"] > 0, system
        assert 0 < row["sustained_events"] < 20000, system
        assert 0 < row["first_arrival_s"] <= row["last_arrival_s"], system
        assert row["send_rate"] > 0, system
    batches = rows["sqe"]["sqe_batches"]
    for step in ("enrich", "load"):
        # The backlog's batches only (the warm-up batch started before sending), capped.
        assert batches[step]["batches"] >= 7 and 0 < batches[step]["records_median"] <= 3000
        assert batches[step]["records_max"] <= 3000
    for system, row in rows.items():  # CPU over the sending and the drain, the chain's own
        assert row["cpu"]["chain_s"] > 0 and row["cpu"]["window_s"] > 0, system
        assert row["cpu"]["services_s"] > 0, system  # the broker and Redis
    assert set(r["backlog"]["ratios"]) == {"plain"}
    ratio = r["backlog"]["ratios"]["plain"]
    assert ratio == pytest.approx(rows["sqe"]["sustained_rate"] / rows["plain"]["sustained_rate"])


def test_sustained_rate_counts_the_events_between_the_10th_and_90th_percentile_arrival():
    """bench/sustained.py's figures over made-up clocks: arrivals come in batch-sized lumps."""
    from types import SimpleNamespace

    from bench.sustained import figures, ratios

    s = 10**9
    # 2 warm-up events, then 100 sent in 1 s; they arrive in 5 lumps of 20, at 2, 3, 4, 5, 6 s.
    producer = SimpleNamespace(warm=2, sent=102, begin_ns=10 * s, end_ns=11 * s)
    arrivals = {f"e{i}": 12 * s + (i - 2) // 20 * s for i in range(2, 102)} | {"e0": 1, "e1": 1}
    f = figures(producer, arrivals)
    # p10 is the 2 s lump, p90 the 6 s lump: the 80 events of the lumps after 2 s, over 4 s.
    assert f["sustained_events"] == 80 and f["sustained_rate"] == pytest.approx(20.0)
    assert f["whole_rate"] == pytest.approx(100 / 6) and f["first_arrival_s"] == 2.0
    assert f["send_rate"] == pytest.approx(100.0) and f["in_flight_at_send_end"] == 100
    assert not f["kept_up"] and f["delivered"] == 100 and f["distinct_arrival_times"] == 5
    # All in one read: no span, no sustained rate; a lost event is not delivered.
    one = figures(producer, {f"e{i}": 12 * s for i in range(2, 101)})
    assert one["sustained_rate"] is None and one["delivered"] == 99
    # Everything arrived while sending: the chain kept up (the rate is the producer's).
    fast = figures(producer, {f"e{i}": 10 * s + i * s // 200 for i in range(2, 102)})
    assert fast["kept_up"] and fast["in_flight_at_send_end"] == 0
    assert ratios([{"system": "sqe", "sustained_rate": 10.0},
                   {"system": "plain", "sustained_rate": 40.0},
                   {"system": "quix", "sustained_rate": None}]) == {"quix": None, "plain": 0.25}
    assert ratios([{"system": "plain", "sustained_rate": 40.0}]) == {}


def test_a_rate_is_held_only_when_little_is_in_flight_at_the_end_and_latency_stays_flat():
    """bench/latency.py's verdict: a chain that fell behind early has a flat, huge latency;
    what it still owes when sending ends shows it (the run of issue 45: 213,800 of 300,000)."""
    from bench.latency import held
    from bench.latency_timing import not_held

    behind = {"system": "sqe", "rate": 5000, "problems": [], "delivered": 300_000,
              "in_flight_at_end": 213_800, "grew": False, "p50_first_third_s": 36.0,
              "p50_last_third_s": 24.0}
    assert not_held(behind) == ("213,800 events (42.8 s of input) still in flight when sending "
                                "ended")
    kept = behind | {"rate": 1000, "in_flight_at_end": 2500, "p50_first_third_s": 0.4,
                     "p50_last_third_s": 0.5}
    assert not_held(kept) is None
    climbing = kept | {"rate": 2000, "grew": True, "p50_last_third_s": 2.5}
    assert not_held(climbing) == ("latency climbed: p50 0.40 s in the first third, 2.50 s in "
                                  "the last")
    assert not_held(kept | {"delivered": 0}) == "nothing delivered"
    assert held([behind, kept, climbing], "sqe") == 1000
    assert held([behind], "sqe") is None


def test_latency_figures_keep_the_warm_up_apart():
    """bench/latency.py's figures: the warm-up events are left out, and a slow first third (the
    JVM compiling as it goes) weighs on p99 but not on the p99 after it."""
    from types import SimpleNamespace

    from bench.latency_timing import latencies

    s = 10**9
    sent = [i * s // 100 for i in range(302)]  # 100 a second, 2 warm-up events first
    producer = SimpleNamespace(warm=2, sent_ns=sent, begin_ns=0, end_ns=sent[-1])
    slow = {f"e{i}": sent[i] + (3 * s if i < 102 else s // 10) for i in range(2, 302)}
    row = latencies(producer, SimpleNamespace(first=slow))
    assert row["delivered"] == 300
    assert row["p99_s"] == pytest.approx(3.0) and row["p50_first_third_s"] == pytest.approx(3.0)
    assert row["p99_after_first_third_s"] == pytest.approx(0.1)
    assert row["p50_last_third_s"] == pytest.approx(0.1) and not row["grew"]
    assert row["p99_first_minute_s"] == pytest.approx(3.0) and row["p99_after_minute_s"] is None
    minutes = [i * s // 2 for i in range(242)]  # 2 a second for two minutes, 2 warm-up events
    producer = SimpleNamespace(warm=2, sent_ns=minutes, begin_ns=0, end_ns=minutes[-1])
    cold = {f"e{i}": minutes[i] + (2 * s if minutes[i] < 60 * s else s // 5) for i in range(2, 242)}
    row = latencies(producer, SimpleNamespace(first=cold))
    assert row["p99_first_minute_s"] == pytest.approx(2.0)
    assert row["p99_after_minute_s"] == pytest.approx(0.2)


def test_the_cpu_meter_counts_a_tree_and_what_its_exited_children_spent():
    """bench/harness/cpu.py: a process and the children it starts, one of them gone before
    the mark, and a process counted alone."""
    import time

    from bench.harness.cpu import CpuMeter

    burn = "import time; t = time.process_time() + {s}; x = 0\nwhile time.process_time() < t: x += 1"
    done = "print('burnt', flush=True); time.sleep(60)"  # the window ends once both burnt
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys; "
        f"subprocess.run([sys.executable, '-c', {burn.format(s=0.6)!r}]); "
        f"exec({burn.format(s=0.4)!r}); {done}")], stdout=subprocess.PIPE, text=True)
    alone = subprocess.Popen([sys.executable, "-c", burn.format(s=0.3) + "\n" + done],
                             stdout=subprocess.PIPE, text=True)
    try:
        meter = CpuMeter({"tree": [parent.pid]}, {"alone": [alone.pid]}, interval=0.05)
        start = meter.mark()
        # a loaded machine gives the burns their CPU late: wait for them, not for a time
        assert parent.stdout is not None and parent.stdout.readline() == "burnt\n"
        assert alone.stdout is not None and alone.stdout.readline() == "burnt\n"
        time.sleep(0.2)  # a sample after both
        spent = meter.mark().minus(start)
        meter.stop()
    finally:
        parent.kill(), alone.kill()
    # started with the meter: nearly all of each burn falls in the window (a child that exits
    # loses at most its last interval); the interpreters' own start-up adds a little
    assert 0.9 <= spent["tree"] <= 1.6, spent
    assert 0.25 <= spent["alone"] <= 0.6, spent


@pytest.mark.redis
def test_the_arrival_poller_finds_fields_written_out_of_order_without_reading_the_whole_log(
        redis_url):
    """bench/latency.py's poller: SQE applies a batch's rows in steps, not in offset order, so
    a field may appear after a later one of its partition; the poller reads the gaps it passed,
    not the whole ``load_log`` (which cost the benchmark a third of a core at 5,000/s)."""
    import redis

    from bench.latency_timing import Arrivals

    client = redis.Redis.from_url(redis_url)
    arrivals = Arrivals(redis_url, 2)
    try:
        client.hset("load_log", mapping={"0:0": "e0", "0:2": "e2", "1:0": "e5"})
        arrivals._read(1)
        assert set(arrivals.first) == {"e0", "e2", "e5"} and arrivals.gaps == {"0:1"}
        client.hset("load_log", mapping={"0:1": "e1", "0:3": "e3"})
        arrivals._read(2)
        assert arrivals.first == {"e0": 1, "e2": 1, "e5": 1, "e1": 2, "e3": 2}
        assert (arrivals.gap_reads, arrivals.resyncs, arrivals.gaps) == (1, 0, set())
        client.hset("load_log", "0:9000", "ahead")  # past the chunk: read ahead in wider windows
        arrivals._read(3)
        assert arrivals.first["ahead"] == 3 and (arrivals.ahead_reads, arrivals.resyncs) == (4, 0)
        assert arrivals.next[0] == 9001 and len(arrivals.gaps) == 9000 - 4
        client.hset("load_log", "1:900000", "far")  # past every window: only the whole log has it
        arrivals._read(4)
        assert arrivals.first["far"] == 4 and arrivals.resyncs == 1
    finally:
        arrivals.stop()
        client.close()


def test_trigger_parts_splits_each_trigger_by_spark_s_event_log(tmp_path):
    """bench/trigger_parts.py over a made-up event log: a trigger's parts add up to it, the
    jobs SQE named are the batch's, the cycle is start to start."""
    from bench.trigger_parts import PROGRESS, main, medians, triggers

    def progress(batch: int, at: str, total: int, add: int, commit: int, rows: int) -> dict:
        return {"Event": PROGRESS, "progress": {
            "name": "load.Enriched", "batchId": batch, "timestamp": at,
            "durationMs": {"triggerExecution": total, "addBatch": add, "commitOffsets": commit},
            "sources": [{"numInputRows": rows}]}}

    def job(i: int, batch: int, start: int, end: int) -> list[dict]:
        return [{"Event": "SparkListenerJobStart", "Job ID": i, "Submission Time": start,
                 "Properties": {"spark.job.description":
                                f"sqe load.Enriched batch {batch}: read, run the queries"}},
                {"Event": "SparkListenerJobEnd", "Job ID": i, "Completion Time": end}]

    log = [*job(0, 7, 1000, 1100), progress(0, "2026-01-01T00:00:00.000Z", 300, 250, 20, 900),
           *job(1, 8, 2000, 2150), progress(1, "2026-01-01T00:00:00.400Z", 320, 260, 30, 1000),
           progress(2, "2026-01-01T00:00:00.800Z", 90, 40, 10, 0)]  # no records: left out
    rows = triggers(log)["load.Enriched"]
    assert rows[0] == {"records": 900, "before": 30, "jobs": 100, "driver": 150, "after": 20,
                       "trigger": 300, "cycle": 400}
    assert rows[1]["jobs"] == 150 and rows[1]["driver"] == 110
    m = medians(rows, 0)
    assert m["triggers"] == 2 and m["trigger"] == 310 and m["cycle"] == 400
    path = tmp_path / "events_1_local-1"
    path.write_text("\n".join(json.dumps(e) for e in log))
    assert main([str(tmp_path), "--skip", "0"]) == 0
    assert main([str(tmp_path / "none")]) == 1


def test_a_variant_tree_s_children_import_that_tree_s_sqe(tmp_path):
    """``python -m`` would put the working directory (this tree) before PYTHONPATH: a variant
    of another tree must not run this tree's driver beside that tree's workers."""
    from bench.harness.processes import child_env

    (tmp_path / "sqe").mkdir()
    (tmp_path / "sqe" / "__init__.py").write_text("WHERE = 'other'\n")
    env = child_env(tmp_path)
    assert env["PYTHONPATH"].split(":")[0] == str(tmp_path)
    out = subprocess.run([sys.executable, "-c", "import sqe; print(sqe.WHERE)"], env=env,
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "other"
    assert "PYTHONSAFEPATH" not in child_env()


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_hop_cost_bench_runs_the_load_step_three_ways_each_exactly_once(kafka_bootstrap,
                                                                       redis_url):
    r = run_bench("hop_cost.py", "--records", "200", "--batches", "2", "--repeat", "1",
                  "--brokers", kafka_bootstrap, "--redis", redis_url, timeout=900)
    assert (r["records"], r["batches"]) == (200, 2)
    assert set(r["variants"]) == {"topology", "exactly_once", "sink"}
    assert r["variants"]["topology"]["ratio"] == 1.0
    assert all(v["cycle_s"] > 0 and v["records_per_s"] > 0 for v in r["variants"].values())


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_join_cost_bench_runs_the_join_three_ways_each_exactly_once(kafka_bootstrap, redis_url):
    r = run_bench("join_cost.py", "--records", "200", "--batches", "2", "--repeat", "1",
                  "--brokers", kafka_bootstrap, "--redis", redis_url, timeout=900)
    assert (r["records"], r["batches"], r["joined"]) == (200, 2, 450)  # 3 of 4 of 600 clicks
    assert set(r["variants"]) == {"spark", "exactly_once", "sink"}
    assert r["variants"]["spark"]["ratio"] == 1.0
    assert all(v["cycle_s"] > 0 and v["records_per_s"] > 0 for v in r["variants"].values())


# -- the package ---------------------------------------------------------------------------------


def _imports(path: Path) -> list[tuple[str, int]]:
    """(module, level) of every import of ``path``: ``import a.b`` gives ("a.b", 0)."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, 0) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", node.level))
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_bench_modules_import_each_other_by_the_package_name_and_leave_sys_path_alone(path):
    tree = ast.parse(path.read_text())
    wrong = [f"{'.' * level}{module}" for module, level in _imports(path)
             if level or module.split(".")[0] in LOCAL_NAMES]
    assert not wrong, (f"{path.relative_to(ROOT)} imports {wrong}: write from bench import ... "
                       "(run as a file, a bare name loads a second copy of the module)")
    edits = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute)
             and n.attr == "path" and isinstance(n.value, ast.Name) and n.value.id == "sys"]
    assert not edits, f"{path.relative_to(ROOT)} touches sys.path: PYTHONPATH=. reaches the root"
    assert ast.get_docstring(tree), f"{path.relative_to(ROOT)} has no docstring"
    tests = [m for m, _ in _imports(path) if m.split(".")[0] == "tests"]
    assert not tests, (f"{path.relative_to(ROOT)} imports {tests}: what the tests and the "
                       "benchmarks share is in support/")
    if path.parent.name == "harness":
        outside = [m for m, _ in _imports(path)
                   if m.startswith("bench.") and not m.startswith("bench.harness")]
        assert not outside, f"{path.relative_to(ROOT)}: the harness imports scripts: {outside}"
        assert len(path.read_text().splitlines()) <= 400, f"{path.relative_to(ROOT)} is over 400"


def test_no_bench_module_is_named_like_a_module_it_would_hide(tmp_path):
    """A script run as a file has bench/ first on sys.path: a bench/yaml.py would be every
    script's yaml.  Nothing installed or in the standard library has a bench module's name
    (nor the package's: ``bench``)."""
    names = sorted(LOCAL_NAMES | {"bench"})
    code = ("import importlib.util, json, sys; names = json.loads(sys.argv[1]); "
            "print(json.dumps([n for n in names if n in sys.stdlib_module_names "
            "or importlib.util.find_spec(n) is not None]))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code, json.dumps(names)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [], "bench modules named like installed or standard ones"


def test_the_package_says_what_it_may_import():
    for init in (BENCH / "__init__.py", BENCH / "harness" / "__init__.py"):
        assert "May import" in (ast.get_docstring(ast.parse(init.read_text())) or ""), init


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_every_bench_module_runs_as_a_file_and_every_script_prints_its_help(path):
    """As the docs run them: ``PYTHONPATH=. python bench/<script>.py``; a module without a
    command line (a piece of one benchmark) imports and does nothing."""
    done = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True,
                          cwd=ROOT, env=bench_env(), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    if 'if __name__ == "__main__":' in path.read_text():
        assert done.stdout.startswith("usage: "), done.stdout[:500]
    else:
        assert done.stdout == ""
