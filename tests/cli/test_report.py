"""Progress files and ``sqe report``: the format of sqe/observe/progress.py (round trip, a crash's
unfinished last line, corrupt lines), and a chunked, Bloom-filtered topology run twice over one
checkpoint (real broker, Redis, Spark) whose progress file, table, JSON and plot are checked
against the batch reports."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from sqe.cli.main import main
from sqe.cli.report import summary_table
from sqe.config.plan import plan_topology
from sqe.engine.run.runner import run_topology
from sqe.lang.topology import load_topology
from sqe.observe.batch_report import BatchReport
from sqe.observe.progress import PROGRESS_FILE, ProgressError, ProgressLog, read_progress
from sqe.wire.columns import Tally
from sqe.wire.keys import StreamMetadata
from tests.engine.test_run_chunks import _write, _writer
from tests.support.kafka_io import produce

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _report(batch_id: int, records: int = 10, **source: int) -> BatchReport:
    report = BatchReport("Events", batch_id, records_read=records, replays_dropped=1,
                         unparseable_keys=2, unparseable_values=3, written={"out": records - 1},
                         filtering=True, source=Tally(**source), warnings={"unparseable_dates": 4})
    report.duration_s = 0.5 + batch_id
    return report


def _log(path: Path, *reports: BatchReport, topology: str = "t") -> ProgressLog:
    log = ProgressLog(path, topology)
    for r in reports:
        log.append(r)
    return log


# --- the progress file format ------------------------------------------------------------


def test_entries_round_trip_every_counter(tmp_path):
    path = tmp_path / PROGRESS_FILE
    reports = [_report(0, chunks_read=9, chunks_skipped_bloom=7, bytes_decoded=123),
               _report(1, 20, chunks_false_positive=1)]
    log = _log(path, *reports)
    progress = read_progress(path)
    assert not progress.truncated and len(progress.entries) == 2
    for entry, report in zip(progress.entries, reports, strict=True):
        assert (entry.run, entry.topology, entry.report) == (log.run, "t", report)
    assert len(path.read_text().splitlines()) == 2


def test_an_unfinished_last_line_is_ignored_and_cut_off_by_the_next_run(tmp_path):
    path = tmp_path / PROGRESS_FILE
    _log(path, _report(0), _report(1))
    whole = path.read_bytes()
    path.write_bytes(whole + whole.splitlines(keepends=True)[1][:37])  # a crash mid-write
    progress = read_progress(path)
    assert progress.truncated and [e.report.batch_id for e in progress.entries] == [0, 1]

    _log(path, _report(2))  # a restarted run continues the file on a line of its own
    progress = read_progress(path)
    assert not progress.truncated and [e.report.batch_id for e in progress.entries] == [0, 1, 2]
    assert path.read_bytes().startswith(whole)


def test_a_bad_line_that_is_not_the_unfinished_last_one_names_the_file_and_line(tmp_path):
    path = tmp_path / PROGRESS_FILE
    _log(path, _report(0), _report(1))
    first, second = path.read_text().splitlines(keepends=True)
    for bad, reason in [("{not json\n", "not a batch entry of sqe run: Expecting property name"),
                        ('{"format": 1, "run": "r"}\n', "missing topology, stream, batch_id"),
                        (second.replace('"records_read":10', '"records_read":"10"'),
                         "records_read is not an integer"),
                        (second.replace('"format":1', '"format":7'), "format 7 is not 1")]:
        path.write_text(first + bad + second)
        with pytest.raises(ProgressError, match=rf"^{path}, line 2: .*{reason}"):
            read_progress(path)
    path.write_text(first + second + "garbage\n")  # complete, so not a crash's unfinished line
    with pytest.raises(ProgressError, match=rf"^{path}, line 3: "):
        read_progress(path)


def test_missing_or_empty_progress_file_is_one_sentence_and_exit_2(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: {tmp_path / 'nowhere' / PROGRESS_FILE}: no progress file")
    (tmp_path / PROGRESS_FILE).write_text("")
    assert main(["report", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"error: {tmp_path / PROGRESS_FILE}: the progress file "
                                       "holds no batch yet\n")


def test_plot_without_matplotlib_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    _log(tmp_path / PROGRESS_FILE, _report(0))
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    assert main(["report", str(tmp_path), "--plot", str(tmp_path / "p.png")]) == 1
    out = capsys.readouterr()
    assert out.out == "" and not (tmp_path / "p.png").exists()
    assert out.err.count("\n") == 1 and "pip install 'sqe-spark[plot]'" in out.err


def test_a_one_batch_run_is_plotted_as_labelled_bars_on_integer_batch_ids(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.patches import Rectangle

    from sqe.cli.report import figure

    path = tmp_path / "ck" / PROGRESS_FILE
    path.parent.mkdir()
    report = _report(3, 1234, chunks_skipped_bloom=7)
    _log(path, report)
    fig = figure([read_progress(path)])
    axes = fig.get_axes()
    expected = [("Records in", 1234, "1,234"), ("Replays dropped", 1, "1"),
                ("Bloom chunks skipped", 7, "7"), ("Batch duration", 3.5, "3.50")]
    assert [ax.get_title() for ax in axes] == [title for title, _, _ in expected]
    for ax, (title, value, label) in zip(axes, expected, strict=True):
        bars = [p for p in ax.patches if isinstance(p, Rectangle)]
        assert len(bars) == 1, title  # a bar, not a lone dot of a one-point line
        bar = bars[0]
        assert bar.get_visible() and bar.get_width() >= 0.2, title
        assert bar.get_x() < 3 < bar.get_x() + bar.get_width(), title  # centred on batch 3
        assert bar.get_height() == pytest.approx(value), title
        assert ax.get_ylim()[1] > value, title  # the bar and its label fit
        assert label in [t.get_text() for t in ax.texts], title
        assert not any(line.get_xdata().size for line in ax.lines), title
    ticks = axes[-1].get_xticks()
    lo, hi = axes[-1].get_xlim()
    assert list(ticks[(ticks >= lo) & (ticks <= hi)]) == [3]  # integer batch ids only

    _log(path, *[_report(i) for i in range(4, 40)])  # many batches: a line again, no labels
    fig = figure([read_progress(path)])
    for ax in fig.get_axes():
        assert not ax.patches and not ax.texts
        assert [line.get_xdata().size for line in ax.lines] == [37]
    lo, hi = fig.get_axes()[-1].get_xlim()
    ticks = fig.get_axes()[-1].get_xticks()
    assert all(t == int(t) for t in ticks[(ticks >= lo) & (ticks <= hi)])

    png = tmp_path / "one.png"
    assert main(["report", str(path.parent), "--plot", str(png)]) == 0
    assert png.read_bytes().startswith(PNG_SIGNATURE)


def test_aggregate_entries_merged_are_counted_apart_from_rows(tmp_path):
    a = BatchReport("S", 0, records_read=10, written={"out": 10, "totals": 3}, merged=["totals"])
    b = BatchReport("S", 1, records_read=4, written={"out": 4, "totals": 2}, merged=["totals"])
    assert (a.rows_written, a.entries_merged) == (10, 3)
    assert "3 entries merged into totals" in a.line() and "10 to out" in a.line()
    total = BatchReport("S", 0)
    total.add(a)
    total.add(b)
    assert (total.rows_written, total.entries_merged, total.merged) == (14, 5, ["totals"])
    path = tmp_path / PROGRESS_FILE
    _log(path, a, b)
    table = {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line.strip()) for line in
                                                summary_table([read_progress(path)])
                                                .splitlines())}
    assert table["entries merged into totals"] == ["5"] and table["rows written to out"] == ["14"]


def test_the_batch_line_has_the_rate():
    assert _report(1, 3000).line().endswith("wrote 2999 to out in 1.50 s (2,000 records/s)")
    assert "records/s" not in BatchReport("S", 0, records_read=5).line()  # not done yet


# --- a chunked, Bloom-filtered topology run twice over one checkpoint --------------------

REGIONS = [f"region-{i}" for i in range(50)]


def _events(first: int, n: int) -> list[tuple[bytes, bytes, int]]:
    return [(StreamMetadata(41, 0, i).to_bytes(),
             json.dumps({"id": i, "region": REGIONS[(i * 7) % 50]}).encode(), 0)
            for i in range(first, first + n)]


def _reader(tmp_path: Path, chunked: str, dest: str) -> Path:
    return _write(tmp_path, "reader", [
        {"CreateStream": {"streamName": "Chunked", "objectName": chunked, "spoutName": "KAFKA",
                          "deserializer": "json",
                          "options": {"jw.sqe.spout.kafka.chunks": True,
                                      "jw.sqe.spout.kafka.filterReplays": True,
                                      "jw.sqe.spout.kafka.filterValues": ["region-7"],
                                      "jw.sqe.spout.kafka.maxRecordsPerBatch": 5}}},
        {"Query": {"insertInto": {"objectName": dest, "stateName": "KAFKA", "fields": ["id"],
                                  "options": {"jw.sqe.state.kafka.keytype": "StreamMetadata"}},
                   "select": {"expressions": ["id"]}, "from": {"objectName": "Chunked"}}},
    ])


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_two_runs_append_to_the_progress_file_and_sqe_report_sums_them(
        spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path, capsys):
    source, chunked, dest = kafka_topic(1, "events"), kafka_topic(1, "chunked"), kafka_topic(1)
    conf = {"jw.sqe.spout.kafka.brokers": kafka_bootstrap,
            "jw.sqe.state.kafka.brokers": kafka_bootstrap,
            "jw.sqe.spout.kafka.filterReplays.redis.url": redis_url}
    writer = plan_topology(load_topology(_writer(tmp_path, source, chunked)), conf=conf)
    reader = plan_topology(load_topology(_reader(tmp_path, chunked, dest)), conf=conf)
    ck_w, ck_r = tmp_path / "ck-writer", tmp_path / "ck-reader"

    runs = []
    for first, n in ((0, 200), (200, 100)):  # 10 chunks, then 5 more
        produce(kafka_bootstrap, source, _events(first, n))
        run_topology(writer, spark, "writer", ck_w, "once")
        runs.append(run_topology(reader, spark, "reader", ck_r, "once"))
    reports = [r for run in runs for r in run]
    assert [len(run) for run in runs] == [2, 1]  # maxRecordsPerBatch 5 of 10, then 5 chunks
    assert sum(r.source.chunks_skipped_bloom for r in reports) > 0

    progress = read_progress(ck_r / PROGRESS_FILE)
    assert len({e.run for e in progress.entries}) == 2
    assert len(progress.entries) == len(reports)
    for entry, report in zip(progress.entries, reports, strict=True):
        assert (entry.topology, entry.report) == ("reader", report)
        assert report.stream == "Chunked" and report.duration_s > 0
        assert "records/s)" in report.line()
    assert [e.report.batch_id for e in progress.entries] == [0, 1, 2]  # the second run continued

    total = Tally()
    for r in reports:
        total.add(r.source)
    records = sum(r.records_read for r in reports)
    assert main(["report", str(ck_r)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{ck_r / PROGRESS_FILE}: 3 batch entries" and out[2].strip() == "reader.Chunked"
    table = {cells[0]: cells[1:] for cells in (re.split(r"\s{2,}", line) for line in out[3:])}
    assert table["runs"] == ["2"] and table["batches"] == ["3"]
    assert table["records in"] == [f"{records:,}"]
    assert table["chunks read"] == [f"{total.chunks_read:,}"] == ["15"]
    assert table["chunks skipped (Bloom)"] == [f"{total.chunks_skipped_bloom:,}"]
    assert table["bytes decoded"] == [f"{total.bytes_decoded:,}"]
    assert table[f"rows written to {dest}"] == [str(sum(r.written[dest] for r in reports))]

    assert main(["report", str(ck_r), str(ck_w), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    by_name = {s["consumer"]: s for s in summary["streams"]}
    assert set(by_name) == {"reader.Chunked", "writer.Events"}
    s = by_name["reader.Chunked"]
    assert (s["runs"], s["batches"], s["records_read"]) == (2, 3, records)
    assert (s["chunks_read"], s["chunks_skipped_bloom"], s["chunks_false_positive"],
            s["bytes_decoded"]) == (total.chunks_read, total.chunks_skipped_bloom,
                                    total.chunks_false_positive, total.bytes_decoded)
    assert s["duration_s"] == pytest.approx(sum(r.duration_s for r in reports))
    assert s["records_per_s"] == pytest.approx(records / s["duration_s"])
    assert by_name["writer.Events"]["records_read"] == 300
    assert by_name["writer.Events"]["written"] == {chunked: 15}  # Kafka records: chunks

    png = tmp_path / "report.png"
    assert main(["report", str(ck_r), str(ck_w), "--plot", str(png)]) == 0
    assert f"plot written to {png}" in capsys.readouterr().out
    data = png.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000
    from matplotlib.image import imread

    assert imread(png).shape[:2] == (900, 800)
