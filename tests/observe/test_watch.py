"""Watching a run: backlog per partition, Prometheus metrics scraped during a run, live progress."""

from __future__ import annotations

import io
import json
import logging
import re
import threading
import time
import urllib.request

import pytest

from sqe.cli.live import LiveProgress, StreamProgress
from sqe.cli.local_services import free_port
from sqe.config.plan import plan_topology
from sqe.engine.run.runner import run_topology
from sqe.errors import PrerequisiteError, RunStopped
from sqe.lang.topology import load_topology
from sqe.observe.batch_report import BatchReport
from sqe.observe.metrics import PrometheusWatcher
from sqe.observe.watch import RunWatcher, StreamView, Watchers
from sqe.source.kafka.config import SourceConfig
from sqe.source.kafka.lag import LagReader, PartitionLag
from sqe.wire.keys import StreamMetadata
from tests.support.kafka_io import filtered_copy, produce

PID = 4242


def _key(offset: int, partition: int) -> bytes:
    return StreamMetadata(PID, partition, offset).to_bytes()


def _series(text: str, name: str) -> dict[str, float]:
    """The samples of series ``name`` in a scrape: labels text -> value."""
    found = {}
    for m in re.finditer(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.M):
        found[m.group(1)] = float(m.group(2))
    return found


@pytest.mark.kafka
def test_the_lag_of_a_topic_counts_from_what_was_committed_or_where_a_run_starts(
        kafka_bootstrap, kafka_topic):
    topic = kafka_topic(2, "lag")
    produce(kafka_bootstrap, topic, [(None, b"x", p) for p in (0, 0, 0, 1, 1)])
    from sqe.config.settings import Settings
    from sqe.config.views import StreamSettings

    settings = Settings.defaults().overlay({"jw.sqe.spout.kafka.brokers": kafka_bootstrap}, "test")
    reader = LagReader(SourceConfig(topic, StreamSettings(settings)))
    try:
        fresh = reader.lag(None)
        part = reader.lag({"0": 2})
    finally:
        reader.close()
    assert [(x.partition, x.end, x.committed, x.backlog) for x in fresh] == [
        (0, 3, None, 3), (1, 2, None, 2)]
    assert [(x.partition, x.committed, x.backlog) for x in part] == [(0, 2, 1), (1, None, 2)]


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_metrics_scraped_during_a_run_count_its_batches_and_its_backlog(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    source, dest = kafka_topic(2, "in"), kafka_topic(2, "out")
    # 150 records per partition and 10 replays: 310 records in batches of at most 100
    records = [(_key(o, p), b"%d" % o, p) for p in (0, 1) for o in range(150)]
    records += [(_key(o, 0), b"again", 0) for o in range(10)]
    produce(kafka_bootstrap, source, records)
    conf = {"jw.sqe.spout.kafka.brokers": kafka_bootstrap,
            "jw.sqe.state.kafka.brokers": kafka_bootstrap,
            "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url}
    plan = plan_topology(load_topology(filtered_copy(tmp_path / "t.yaml", source, dest, 100)),
                         conf=conf)
    port = free_port()
    metrics = PrometheusWatcher(port, "127.0.0.1")
    stop, scrapes = threading.Event(), []

    def scrape() -> None:  # while the run runs, until it has read everything and says so
        deadline = time.monotonic() + 240
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                              timeout=5).read().decode()
            except OSError:
                time.sleep(0.2)
                continue
            scrapes.append(text)
            backlog = _series(text, "sqe_backlog_records")
            read = _series(text, "sqe_records_read_total")
            if sum(read.values()) == 310 and len(backlog) == 2 and not any(backlog.values()):
                stop.set()
            time.sleep(0.3)

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    with pytest.raises(RunStopped):
        run_topology(plan, spark, "watched", tmp_path / "ck", "runtime", runtime=240,
                     stop=stop, watchers=[metrics])
    scraper.join(10)
    last = scrapes[-1]
    labels = 'stream="In",topology="watched"'
    assert _series(last, "sqe_records_read_total") == {labels: 310.0}
    assert _series(last, "sqe_replays_dropped_total") == {labels: 10.0}
    assert _series(last, "sqe_rows_written_total") == {f'state="{dest}",{labels}': 300.0}
    batches = _series(last, "sqe_batches_total")[f'outcome="committed",{labels}']
    assert batches >= 4  # at most 100 records a batch
    assert _series(last, "sqe_batch_duration_seconds_count") == {labels: batches}
    assert _series(last, "sqe_last_batch_id") == {labels: batches - 1}
    ends = _series(last, "sqe_end_offset")
    assert ends == {f'partition="0",stream="In",topic="{source}",topology="watched"': 160.0,
                    f'partition="1",stream="In",topic="{source}",topology="watched"': 150.0}
    assert _series(last, "sqe_committed_offset") == ends
    # scraped while it ran: an earlier scrape saw the records not read yet
    assert any(sum(_series(t, "sqe_backlog_records").values()) > 0 for t in scrapes[:-1])
    with pytest.raises(OSError):  # the endpoint ends with the run
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_a_metrics_port_in_use_is_one_sentence():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PrerequisiteError, match=rf"--metrics-port {port}: the port is in use"):
            PrometheusWatcher(port, "127.0.0.1").serve()


def test_a_watcher_that_fails_is_a_warning_once_and_the_others_go_on(caplog):
    class Broken(RunWatcher):
        def batch_done(self, report):
            raise KeyError("oops")

    class Count(RunWatcher):
        n = 0

        def batch_done(self, report):
            self.n += 1

    count = Count()
    hub = Watchers([Broken(), count])
    with caplog.at_level(logging.WARNING, logger="sqe"):
        for i in range(3):
            hub.batch_done(BatchReport("In", i))
    assert count.n == 3
    warned = [r.getMessage() for r in caplog.records]
    assert warned == ["warning: Broken stopped watching the run: batch_done failed with "
                      "KeyError: 'oops'"]


def _report(batch: int, records: int, replays: int, started: float, seconds: float
            ) -> BatchReport:
    return BatchReport("In", batch, records_read=records, replays_dropped=replays,
                       started=started, duration_s=seconds, offsets={"0": 1})


def test_progress_rate_and_time_to_go_come_from_the_batches_and_the_backlog():
    p = StreamProgress("In")
    assert p.text() == "In: 0 records in 0 batches, 0 dropped as replays"
    p.add(_report(0, 1000, 10, 100.0, 1.0))
    p.add(_report(1, 3000, 0, 101.0, 1.0))
    p.behind = 8000
    assert p.rate() == 2000.0 and p.eta() == 4.0
    assert p.text() == ("In: 4,000 records in 2 batches, 2,000 records/s, 10 dropped as replays; "
                        "8,000 behind, about 4 s to go")
    p.behind = 0
    assert p.text().endswith("; 0 behind")


def test_progress_off_a_terminal_is_a_plain_line_per_batch(caplog):
    live = LiveProgress(io.StringIO(), terminal=False)
    live.started([StreamView("t", "In", "t.In", "events", None)])
    live.backlog("In", [PartitionLag("events", 0, 5000, None, 0)])
    with caplog.at_level(logging.INFO, logger="sqe"):
        live.batch_done(_report(0, 1000, 3, 100.0, 0.5))
    live.ended()
    assert [r.getMessage() for r in caplog.records] == [
        "In: 1,000 records in 1 batch, 2,000 records/s, 3 dropped as replays; 4,000 behind, "
        "about 2 s to go"]


def test_progress_on_a_terminal_updates_a_line_per_stream_and_logs_print_above_it(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # a terminal wide enough for the whole line
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    logger = logging.getLogger("sqe")
    logger.addHandler(handler)
    try:
        live = LiveProgress(out, terminal=True)
        live.started([StreamView("t", "In", "t.In", "events", None),
                      StreamView("t", "Other", "t.Other", None, None)])
        live.backlog("In", [PartitionLag("events", 0, 5000, None, 0)])
        logger.warning("In batch 0: 1000 records read")
        live.batch_done(_report(0, 1000, 3, 100.0, 0.5))
        live.ended()
        assert handler.stream is out  # given back when the display ends
    finally:
        logger.removeHandler(handler)
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.getvalue())
    assert "In batch 0: 1000 records read" in text
    assert "Other" in text and "waiting for its first batch" in text
    assert "1,000 records in 1 batch, 2,000 records/s, 3 dropped as replays; 4,000 behind" in text


def test_the_progress_file_keeps_each_batch_end_offsets():
    r = BatchReport("In", 3, offsets={"0": 42, "1": 7})
    assert BatchReport.from_json(json.loads(json.dumps(r.to_json()))).offsets == {"0": 42, "1": 7}
    old = {k: v for k, v in r.to_json().items() if k != "offsets"}  # an earlier version's line
    assert BatchReport.from_json(old).offsets == {}


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_a_run_until_stopped_keeps_only_its_last_batch_reports(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, monkeypatch):
    import gc
    import weakref

    import sqe.engine.run.runner as runner

    monkeypatch.setattr(runner, "KEPT_REPORTS", 2)
    source, dest = kafka_topic(2, "in"), kafka_topic(2, "out")
    produce(kafka_bootstrap, source, [(_key(o, p), b"%d" % o, p) for p in (0, 1)
                                      for o in range(150)])
    conf = {"jw.sqe.spout.kafka.brokers": kafka_bootstrap,
            "jw.sqe.state.kafka.brokers": kafka_bootstrap,
            "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url}
    plan = plan_topology(load_topology(filtered_copy(tmp_path / "t.yaml", source, dest, 50)),
                         conf=conf)
    stop, seen, kept = threading.Event(), [], []

    class Reports(RunWatcher):
        def batch_done(self, report: BatchReport) -> None:
            seen.append(weakref.ref(report))
            if len(seen) == 5:  # the run keeps the last 2 (this one and the one before)
                gc.collect()
                kept.extend(ref() is not None for ref in seen[:2])
                stop.set()

    with pytest.raises(RunStopped):
        run_topology(plan, spark, "kept", tmp_path / "ck", "forever", stop=stop,
                     watchers=[Reports()])
    assert kept == [False, False]  # the first reports were let go while the run ran
