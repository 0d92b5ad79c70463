"""Where a stream's micro-batches spend their time, part by part, from Spark's own event log.

    PYTHONPATH=. .venv/bin/python bench/trigger_parts.py EVENT_LOG [EVENT_LOG ...]
        [--skip 5] [--json]

An event log is what Spark writes with ``spark.eventLog.enabled`` (a run's ``Spark:`` map, e.g.
``sqe run ... --config evlog.yaml`` with ``spark.eventLog.dir`` and ``spark.eventLog.compress:
false``): a file, or the folder Spark makes for it.  Per streaming query (``<topology>.<stream>``),
over its triggers after the first ``--skip`` (the JVM's warm-up), the medians of:

* **Spark before the batch**: the trigger's time before ``addBatch`` (the source's latest
  offsets, the offset log, planning);
* **the batch's Spark jobs**: the jobs SQE named ``sqe <consumer> batch <id>: ...`` (their
  submission to their end, added up);
* **the driver in the batch**: the rest of ``addBatch`` (admission, building what Spark runs,
  the HWM commit);
* **Spark after the batch**: ``commitOffsets`` (the commit log);
* **the trigger**, and the **cycle** (one trigger's start to the next's), with the records a
  trigger read.

Spark's streaming progress events give the trigger's parts, its job events the jobs.  Exit 1
when a file cannot be read or holds no streaming progress.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.harness.report import parser

PROGRESS = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
_JOB = re.compile(r"^sqe (\S+) batch (\d+): ")


def events(path: Path) -> Iterator[dict[str, Any]]:
    """The events of one event log (a file, or Spark's folder of them), in order."""
    files = sorted(path.glob("events_*")) if path.is_dir() else [path]
    for f in files:
        raw = f.read_bytes()
        if f.suffix in (".zstd", ".zst"):
            try:
                import zstandard
            except ImportError:
                raise SystemExit(f"{f}: a zstd-compressed event log needs the zstandard package; "
                                 "run with spark.eventLog.compress false instead") from None
            raw = zstandard.ZstdDecompressor().stream_reader(raw).read()
        for line in raw.decode("utf-8").splitlines():
            if line.strip():
                yield json.loads(line)


def _ms(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000


def triggers(log: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, float]]]:
    """Per query name, each trigger's parts in ms (keys as the module docstring says)."""
    jobs: dict[tuple[str, int], float] = {}  # (consumer, SQE's batch id) -> job ms
    started: dict[int, tuple[tuple[str, int], float]] = {}
    progress: list[dict[str, Any]] = []
    for e in log:
        kind = e.get("Event")
        if kind == "SparkListenerJobStart":
            found = _JOB.match(e.get("Properties", {}).get("spark.job.description") or "")
            if found:
                started[e["Job ID"]] = ((found[1], int(found[2])), e["Submission Time"])
        elif kind == "SparkListenerJobEnd" and e["Job ID"] in started:
            key, at = started.pop(e["Job ID"])
            jobs[key] = jobs.get(key, 0.0) + e["Completion Time"] - at
        elif kind == PROGRESS:
            progress.append(e["progress"])
    out: dict[str, list[dict[str, float]]] = {}
    by_name: dict[str, list[dict[str, Any]]] = {}
    for p in progress:
        by_name.setdefault(p["name"], []).append(p)
    for name, ps in by_name.items():
        ps.sort(key=lambda p: _ms(p["timestamp"]))
        # SQE's batch ids count from the checkpoint's base; Spark's from 0: pair them in order
        ids = sorted({b for c, b in jobs if c == name})
        offset = (ids[0] - ps[0]["batchId"]) if ids else 0
        rows = []
        for i, p in enumerate(ps):
            d = p["durationMs"]
            total, add, after = d.get("triggerExecution", 0), d.get("addBatch", 0), \
                d.get("commitOffsets", 0)
            job = jobs.get((name, p["batchId"] + offset), 0.0)
            row = {"records": float(sum(s.get("numInputRows", 0) for s in p["sources"])),
                   "before": float(total - add - after), "jobs": job,
                   "driver": max(0.0, add - job), "after": float(after), "trigger": float(total)}
            if i + 1 < len(ps):
                row["cycle"] = _ms(ps[i + 1]["timestamp"]) - _ms(p["timestamp"])
            rows.append(row)
        out[name] = rows
    return out


def medians(rows: list[dict[str, float]], skip: int) -> dict[str, float]:
    """The median of each part over the triggers after the first ``skip`` that read records."""
    kept = [r for r in rows[skip:] if r["records"] > 0]
    keys = ("records", "before", "jobs", "driver", "after", "trigger", "cycle")
    return {k: statistics.median(r[k] for r in kept if k in r) for k in keys
            if any(k in r for r in kept)} | {"triggers": float(len(kept))}


def table(result: dict[str, dict[str, float]]) -> list[str]:
    lines = [f"{'query':28} {'triggers':>8} {'records':>8} {'before':>7} {'jobs':>7} "
             f"{'driver':>7} {'after':>7} {'trigger':>8} {'cycle':>7}   (ms, medians)"]
    for name, m in result.items():
        lines.append(f"{name:28} {m['triggers']:8.0f} {m.get('records', 0):8.0f} "
                     + " ".join(f"{m.get(k, float('nan')):{w}.0f}" for k, w in
                                (("before", 7), ("jobs", 7), ("driver", 7), ("after", 7),
                                 ("trigger", 8), ("cycle", 7))))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("logs", nargs="+", type=Path, help="event log files or Spark's folders")
    ap.add_argument("--skip", type=int, default=5, help="triggers left out at the start")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    result: dict[str, dict[str, float]] = {}
    for path in args.logs:
        if not path.exists():
            print(f"{path}: no such event log", file=sys.stderr)
            return 1
        found = triggers(events(path))
        if not found:
            print(f"{path}: no streaming progress in it (was spark.eventLog.enabled on?)",
                  file=sys.stderr)
            return 1
        result |= {name: medians(rows, args.skip) for name, rows in found.items()}
    print(json.dumps(result, indent=2) if args.json else "\n".join(table(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
