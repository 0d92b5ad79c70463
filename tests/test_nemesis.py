"""The nemesis (bench/nemesis.py): its schedule is a pure function of the seed and replays
from its file, and its short form, overlapping faults on every store and both drivers, ends
with every event once in Redis and in Postgres -- a short seed for each way to run a hop:
topology files, ``hop.exactly_once`` over Spark Connect (the server among the things killed),
the ``sqe-hop`` sink, and Declarative Pipelines."""

from __future__ import annotations

import fcntl
import tempfile
from pathlib import Path

import pytest

from support.fault_services import private_postgres_unavailable
from tests.test_bench import run_bench


def test_a_seed_draws_one_schedule_that_replays_from_its_file(tmp_path) -> None:
    from bench.nemesis_schedule import KINDS, draw, load, save

    first, again, other = draw(7, 600), draw(7, 600), draw(8, 600)
    assert first == again and first != other
    assert 20 <= len(first) <= 40 and all(20 <= f.at <= 540 for f in first)
    assert {f.kind for f in first} <= set(KINDS)
    assert [f.at for f in first] == sorted(f.at for f in first)
    save(first, tmp_path / "schedule.json")
    assert load(tmp_path / "schedule.json") == first
    assert all(f.kind != "takeover" for f in draw(3, 120))  # needs minutes to happen


def test_a_schedule_file_that_is_not_one_is_said_in_one_sentence(tmp_path) -> None:
    from bench.nemesis_schedule import Fault, load

    bad = tmp_path / "schedule.json"
    bad.write_text('[{"at": 1, "kind": "meteor", "target": "redis"}]')
    with pytest.raises(ValueError, match=r"schedule.json: unknown fault kinds \['meteor'\]"):
        load(bad)
    bad.write_text("{")
    with pytest.raises(ValueError, match="schedule.json: not a nemesis schedule"):
        load(bad)
    assert "lost-reply redis" in Fault(5.0, "lost-reply", "redis").describe()


def test_an_out_directory_that_holds_a_seed_run_before_is_refused_in_one_sentence(
        tmp_path, capsys) -> None:
    from bench.nemesis import main

    (tmp_path / "seed-5").mkdir()
    with pytest.raises(SystemExit) as ended:
        main(["--seeds", "4,5", "--out", str(tmp_path)])
    assert ended.value.code == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.endswith(f"--out: {tmp_path.resolve()} holds an earlier run of seed-5, whose "
                         "topics, tables and checkpoints a new run would mix with its own; "
                         "give a new directory")
    assert not (tmp_path / "seed-4").exists()


def test_the_checker_finds_records_out_of_order_that_no_replay_explains() -> None:
    from bench.nemesis_check import disorder
    from sqe.wire.keys import StreamMetadata

    def key(offset: int, partition: int = 0) -> bytes:
        return StreamMetadata(5, partition, offset).to_bytes()

    copies = [(0, 0, key(1)), (0, 1, key(2)), (0, 2, key(1)), (0, 3, key(2)), (0, 4, key(3)),
              (1, 0, key(0, 1)), (1, 1, key(1, 1))]  # a batch written again, another pair
    assert disorder("t", copies) == []
    swapped = [(0, 0, key(1)), (0, 1, key(3)), (0, 2, key(2))]
    assert disorder("t", swapped) == ["t/0@2: (pid 5, partition 0) offset 2 after 3"]


def test_a_hop_run_tells_its_batches_and_offsets_by_sparks_checkpoint(tmp_path) -> None:
    from bench.nemesis_runs import HopRun
    from tests.support import ROOT

    run = HopRun("load", "nemesis_load_1", ROOT / "topologies/load.yaml", "enriched", tmp_path,
                 ["--conf", "jw.sqe.spout.kafka.brokers=127.0.0.1:9"], "sink", "ev", "enriched")
    assert run.command[2:4] == ["load", "--events"] and run.command[-1] == "--sink"
    assert run.new_batches() == []  # no batch yet
    spark = tmp_path / "checkpoints" / "nemesis_load_1" / "load"
    for folder in ("offsets", "commits"):
        (spark / folder).mkdir(parents=True)
    for batch, offsets in ((0, '{"enriched":{"0":5,"1":3}}'), (1, '{"enriched":{"0":9,"1":4}}')):
        (spark / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{offsets}\n')
        (spark / "commits" / str(batch)).write_text("v1\n{}\n")
    assert run.new_batches() == [{"batch": 0}, {"batch": 1}]
    assert run.offsets == {"0": 9, "1": 4} and run.new_batches() == []
    said = "error: ... or read its marks again from the topic with `hop.rebuild_marks() ..."
    assert run.heal_command(said) == [*run.command, "--rebuild-marks"]
    assert run.heal_command("error: another refusal") is None


def test_a_pipeline_run_is_one_flow_of_the_example_pipeline_and_finds_its_checkpoint(
        tmp_path) -> None:
    import yaml

    from bench.nemesis_runs import PipelineRun
    from tests.support import ROOT

    run = PipelineRun("load", "nemesis_load_2", ROOT / "topologies/load.yaml", "enriched",
                      tmp_path, ["--conf", "jw.sqe.state.postgres.dsn=postgresql://h/db"],
                      "ev", "enriched", "loaded_events")
    spec = yaml.safe_load((tmp_path / "pipelines/nemesis_load_2/spark-pipeline.yml").read_text())
    assert spec["storage"] == (tmp_path / "checkpoints/nemesis_load_2").as_uri()
    assert {k: spec["configuration"][k] for k in ("sqe.chain.flows", "sqe.chain.postgres_table",
                                                  "spark.jw.sqe.state.postgres.dsn")} == {
        "sqe.chain.flows": "load", "sqe.chain.postgres_table": "loaded_events",
        "spark.jw.sqe.state.postgres.dsn": "postgresql://h/db"}
    assert run.command[3:6] == ["pipelines", "run", "--spec"] and run.finishes
    assert run.new_batches() == [] and run.heal_command("hop.rebuild_marks()") is None
    flow = tmp_path / "checkpoints/nemesis_load_2/_checkpoints/redis_states/load_enriched/0"
    for folder in ("offsets", "commits"):
        (flow / folder).mkdir(parents=True)
    (flow / "offsets" / "0").write_text('v1\n{}\n{"enriched":{"0":7}}\n')
    (flow / "commits" / "0").write_text("v1\n{}\n")
    assert run.new_batches() == [{"batch": 0}] and run.offsets == {"0": 7}


def test_a_runs_memory_trend_is_fitted_within_each_start_past_its_warm_up() -> None:
    """bench/harness/trend.py over made-up samples: a run that grows 2 MB a minute, killed and
    started again (its RSS drops to where it began), has a slope of 2 MB/min, not the drop's;
    the first minute of each start is left out."""
    from bench.harness.trend import memory_trend

    def rows(start: int, since: float, begin: float, end: float) -> list[dict[str, object]]:
        return [{"t": t, "start": start, "since": since,
                 "rss_mb": {"tree": 500 + 2 * (t - since) / 60 + (900 if t - since < 60 else 0),
                            "driver": 100.0, "jvm": 300.0, "workers": 100.0}}
                for t in range(int(begin), int(end), 30)]

    samples = rows(1, 0, 30, 1200) + rows(2, 1200, 1230, 2400)
    trend = memory_trend(samples, 2400)
    assert trend["slope_mb_per_min"]["tree"] == pytest.approx(2.0)
    assert trend["slope_mb_per_min"]["driver"] == pytest.approx(0.0)
    assert trend["rss_start_mb"] == pytest.approx(502.0) and trend["rss_peak_mb"] > 1400
    assert trend["rss_end_mb"] == pytest.approx(500 + 2 * 1170 / 60)
    assert memory_trend([], 600)["slope_mb_per_min"]["tree"] is None


def test_a_memory_log_samples_every_run_on_time_and_keeps_the_samples_in_a_file(
        tmp_path) -> None:
    import json
    from types import SimpleNamespace

    from bench.harness.rss import MB, Peaks
    from bench.harness.trend import MemoryLog

    runs = {name: SimpleNamespace(starts=1, since=100.0, peaks=lambda: Peaks(tree=600 * MB))
            for name in ("enrich", "load")}
    log = MemoryLog(runs, tmp_path / "memory.jsonl", 30.0)
    for t in (0.5, 29.0, 30.5, 31.0, 59.0, 61.0, 95.0):
        log.sample(t, 100.0)
    lines = [json.loads(line) for line in (tmp_path / "memory.jsonl").read_text().splitlines()]
    assert [(r["run"], r["t"]) for r in lines] == [
        ("enrich", 30.5), ("load", 30.5), ("enrich", 61.0), ("load", 61.0),
        ("enrich", 95.0), ("load", 95.0)]
    assert lines[0]["since"] == 0.0 and lines[0]["rss_mb"]["tree"] == 600.0
    assert log.trends()["load"]["rss_end_mb"] == 600.0


def test_a_trees_pss_counts_the_pages_a_forked_child_shares_once() -> None:
    """A process that touched 200 MB forks a child that only sleeps: the RSS of the two sums
    to twice the pages they hold, their PSS to once (bench/harness/rss.py's tree_pss), which is
    why a Spark tree's memory trend is judged by its PSS."""
    import os
    import time

    from bench.harness.rss import MB, proc_table, tree_pss

    held = bytearray(200 * MB)
    for i in range(0, len(held), 4096):
        held[i] = 1
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # holds the same pages until the parent has measured
        os.close(write)
        os.read(read, 1)
        os._exit(0)
    try:
        time.sleep(0.5)
        table = proc_table()
        rss = sum(table[pid][2] for pid in (os.getpid(), child))
        pss = tree_pss(os.getpid())
        assert rss > 400 * MB
        assert 200 * MB < pss < rss - 150 * MB
    finally:
        os.write(write, b"x")
        os.waitpid(child, 0)
    del held


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
@pytest.mark.postgres
@pytest.mark.parametrize("way", [
    pytest.param(["--way", "topology", "--seed", "11"], id="topology"),
    pytest.param(["--way", "hop", "--connect", "--seed", "12"], id="hop-connect"),
    pytest.param(["--way", "sink", "--seed", "11"], id="sink"),
    pytest.param(["--way", "pipeline", "--seed", "13"], id="pipeline"),
])
def test_the_short_nemesis_loses_and_doubles_nothing(tmp_path, way: list[str]) -> None:
    why = private_postgres_unavailable()
    if why:
        pytest.skip(f"the nemesis restarts a Postgres of its own: {why}")
    # one short nemesis at a time across the test workers: each starts a broker, a Redis pair
    # with its Sentinel, a Postgres and two Spark drivers (a pipeline's with a Connect server
    # each), and side by side on a small machine they starve each other's Python workers
    with open(Path(tempfile.gettempdir()) / "sqe-short-nemesis.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results = run_bench("nemesis.py", *way, "--minutes", "1.2", "--rate", "100",
                            "--every", "6", "--out", str(tmp_path), timeout=1200, check=False)
    assert [r["way"].split()[0] for r in results] == [way[1]], results
    for r in results:
        assert r["drained"], r
        assert r["faults"] and all(f["error"] is None for f in r["faults"]), r["faults"]
        for store, found in r["stores"].items():
            # unseen: acknowledged input events that the broker's own topic lost, if any
            assert found == {"lost": 0, "duplicated": 0, "unknown": 0,
                             "unseen": r["broker_lost"]}, (r["seed"], store, r)
        assert r["out_of_order"] == [] and 0 < r["acked"] - r["broker_lost"] <= r["events"], r
        assert all(m["rss_peak_mb"] > 0 for m in r["memory"].values()), r["memory"]
        assert r["events"] > 0
