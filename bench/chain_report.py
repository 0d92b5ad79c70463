"""The report of bench/chain.py: its rows, each a pair of contenders (:data:`CONTENDERS`), and
their targets (:func:`target`); the summary of its runs (:func:`summarize`, the JSON object's
``rows``) and the table it prints (:func:`table`)."""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, field
from typing import Any

from bench.harness.report import columns, median, ratio
from bench.harness.rss import MB

CONTENDERS = {"chain": ("sqe", "plain"), "enrich": ("sqe", "quix"),
              "read": ("spark-read", "raw-read"), "write": ("state-write", "idempotent-write"),
              "connect": ("sqe-connect", "sqe")}
LABELS = {"chain": "chain: enrich + load vs plain program",
          "enrich": "enrich vs quixstreams exactly-once",
          "read": "Spark read (sqe-kafka) vs raw consumer",
          "write": "Kafka state write vs idempotent producer",
          "connect": "chain over Spark Connect vs classic",
          "read_later": "Spark read, its batches after the first, vs raw",
          "write_again": "Kafka state write run again vs idempotent"}
OTHER = {"chain": "plain", "enrich": "quix EOS", "read": "raw", "write": "idempotent",
         "connect": "classic"}
#: a read or write row's SQE side once warm (:func:`_steady`), and the row it is of
STEADY = {"read_later": "read", "write_again": "write"}
EMPTY_TARGET_S = 0.3
WORKER_TARGET_MB = 300.0


def target(row: str, events: int) -> float | None:
    """The lowest acceptable ratio SQE / other of ``row`` at ``events`` (None: no target)."""
    if row == "chain":
        return 0.5 if events >= 1_000_000 else 0.25 if events >= 200_000 else None
    if row == "enrich":
        return 1.0 if events >= 1_000_000 else None
    if row == "read_later":
        return 0.3
    if row == "write_again":
        return 0.6
    return 0.8  # read, write, connect


@dataclass
class Run:
    """One measured run of one contender: whole-process seconds and its own clock's."""

    seconds: float
    work: float
    extra: dict[str, Any] = field(default_factory=dict)


def summarize(args: argparse.Namespace, runs: dict[str, dict[int, dict[str, list[Run]]]],
              costs: dict[int, list[dict[str, Any]]], empty: dict[str, dict[str, Any]],
              problems: list[str]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for row, contenders in CONTENDERS.items():
        if row == "connect" and not args.connect:
            continue
        for n in args.events:
            a, b = (runs[row][n][c] for c in contenders)
            sqe_s, other_s = median([r.seconds for r in a]), median([r.seconds for r in b])
            sqe_w, other_w = median([r.work for r in a]), median([r.work for r in b])
            want = target(row, n)
            entry: dict[str, Any] = {
                "row": row, "events": n, "other": OTHER[row],
                "sqe_s": sqe_s, "other_s": other_s,
                "sqe_rps": ratio(n, sqe_s), "other_rps": ratio(n, other_s),
                "ratio": ratio(other_s, sqe_s), "work_ratio": ratio(other_w, sqe_w),
                "sqe_runs": [r.seconds for r in a], "other_runs": [r.seconds for r in b],
                "sqe_work_runs": [r.work for r in a], "other_work_runs": [r.work for r in b],
                "target": want, "skipped": None}
            if row == "chain":
                entry["sqe_steps"] = [r.extra for r in a]
                entry["other_steps"] = [r.extra for r in b]
            entry["met"] = (entry["ratio"] >= want) if want and entry["ratio"] else None
            rows.append(entry)
    for row, of in STEADY.items():
        for n in args.events:
            a, b = (runs[of][n][c] for c in CONTENDERS[of])
            rows.append(_steady(row, n, a, b))
    if "classic" in empty:
        classic = empty["classic"]
        rows.append({"row": "empty_batch", "value": classic["cycle_s"], "unit": "s",
                     "target": EMPTY_TARGET_S, "met": classic["cycle_s"] <= EMPTY_TARGET_S,
                     **{f"empty_{k}": v for k, v in classic.items()}})
    if "connect" in empty:
        over = empty["connect"]
        hop = over["cycle_s"] - empty["classic"]["cycle_s"] if "classic" in empty else None
        rows.append({"row": "connect_hop", "value": hop, "unit": "s", "target": None,
                     "met": None, **{f"empty_{k}": v for k, v in over.items()}})
    all_costs = [c for n in args.events for c in costs[n]]
    first = [t for c in all_costs for t in c["first_batch_s"]]
    if first:
        rows.append({"row": "first_batch", "value": statistics.median(first), "unit": "s",
                     "target": None, "met": None, "runs": first})
    idle = [c["idle_run_s"] for c in all_costs if "idle_run_s" in c]
    if idle:
        rows.append({"row": "idle_run", "value": idle[0], "unit": "s", "target": None,
                     "met": None})
    for n in args.events:
        if not costs[n]:
            continue
        peaks = [c["load_peaks"] for c in costs[n]]
        batch = max(c["load_batch_records"] for c in costs[n])
        driver = max(p.driver for p in peaks) / MB
        worker = max(p.worker for p in peaks) / MB
        per_m = worker * 1_000_000 / batch if batch else None
        rows.append({"row": "driver_rss", "events": n, "value": driver, "unit": "MB",
                     "target": None, "met": None, "jvm_mb": max(p.jvm for p in peaks) / MB,
                     "tree_mb": max(p.tree for p in peaks) / MB,
                     "samples": [p.samples for p in peaks]})
        judged = batch >= 1_000_000 and per_m is not None
        rows.append({"row": "worker_rss", "events": n, "value": worker, "unit": "MB",
                     "per_million_mb": per_m, "batch_records": batch,
                     "workers_mb": max(p.workers for p in peaks) / MB,
                     "target": WORKER_TARGET_MB if judged else None,
                     "met": (per_m <= WORKER_TARGET_MB) if judged and per_m is not None else None})
    return {"events": args.events, "repeat": args.repeat, "empty_batches": args.empty_batches,
            "rows": rows, "problems": problems, "checks_passed": not problems}


def _steady(row: str, n: int, a: list[Run], b: list[Run]) -> dict[str, Any]:
    """A read or write row once SQE's side runs warm: the Spark read's batches after its first
    (their rows at their rate), the Kafka state's write run again; against the other's work."""
    if row == "read_later":
        rates = [r.extra["later_rows"] / r.extra["later_seconds"] for r in a
                 if r.extra.get("later_seconds")]
    else:
        rates = [n / r.extra["again_seconds"] for r in a if r.extra.get("again_seconds")]
    sqe_rps, other_rps = median(rates), median([n / r.work for r in b if r.work])
    want = target(row, n)
    got = ratio(sqe_rps, other_rps)
    return {"row": row, "events": n, "other": OTHER[STEADY[row]],
            "sqe_s": n / sqe_rps if sqe_rps else None, "other_s": n / other_rps if other_rps
            else None, "sqe_rps": sqe_rps, "other_rps": other_rps, "ratio": got,
            "work_ratio": None, "target": want, "skipped": None,
            "met": (got >= want) if want and got else None}


def _fmt_s(seconds: float | None, events: int) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.1f} s ({events / seconds:,.0f}/s)"


def _met(flag: bool | None) -> str:
    return "-" if flag is None else "yes" if flag else "NO"


def table(r: dict[str, Any]) -> list[str]:
    """The human-readable report."""
    cells = [("row", "events", "SQE", "other", "ratio", "work", "target", "met")]
    for e in r["rows"]:
        row, n = e["row"], e.get("events")
        if row in CONTENDERS or row in STEADY:
            other = "-"
            if row == "enrich" and r["quix"]["skipped"]:
                other = "skipped (no quixstreams)"
            elif e["other_s"] is not None:
                other = f"{e['other']} {_fmt_s(e['other_s'], n)}"
            cells.append((LABELS[row], f"{n:,}", _fmt_s(e["sqe_s"], n), other,
                          f"{e['ratio']:.2f}" if e["ratio"] else "-",
                          f"{e['work_ratio']:.2f}" if e["work_ratio"] else "-",
                          f">= {e['target']:g}x" if e["target"] else "-", _met(e["met"])))
        elif row == "empty_batch":
            cells.append(("empty micro-batch (load.yaml, replays only)", "",
                          f"{e['value']:.2f} s per batch",
                          f"({e['empty_duration_s']:.2f} s in foreachBatch)", "", "",
                          f"<= {EMPTY_TARGET_S:g} s", _met(e["met"])))
        elif row == "connect_hop":
            hop = "-" if e["value"] is None else f"{e['value']:+.2f} s per batch"
            cells.append(("Spark Connect hop (empty micro-batch over Connect - classic)", "",
                          hop, f"({e['empty_cycle_s']:.2f} s per batch over Connect)", "", "",
                          "-", "-"))
        elif row == "first_batch":
            cells.append(("time to the first batch (sqe run start)", "", f"{e['value']:.1f} s",
                          "", "", "", "-", "-"))
        elif row == "idle_run":
            cells.append(("sqe run --once with nothing new", "", f"{e['value']:.1f} s", "", "",
                          "", "-", "-"))
        elif row == "driver_rss":
            cells.append(("peak RSS, load step: Python driver", f"{n:,}", f"{e['value']:,.0f} MB",
                          f"(JVM {e['jvm_mb']:,.0f} MB)", "", "", "-", "-"))
        elif row == "worker_rss":
            per = (f"{e['per_million_mb']:,.0f} MB per 1M records in a batch"
                   if e["per_million_mb"] else "-")
            cells.append(("peak RSS, load step: one Python worker", f"{n:,}",
                          f"{e['value']:,.0f} MB", per, "", "",
                          f"<= {WORKER_TARGET_MB:g} MB" if e["target"] else "-", _met(e["met"])))
    lines = [f"whole processes, median of {r['repeat']}; ratio: SQE / other (the other's time "
             "over SQE's, higher is better); work: the same over each one's own clock of its "
             "work, without start-up:"]
    lines += ["  " + line for line in columns(cells, left=(0, 3))]
    if r["quix"]["skipped"]:
        lines.append(f"enrich vs quixstreams skipped: {r['quix']['skipped']}")
    return lines
