"""Sustained throughput once warm: bench/latency.py's backlog mode (``--backlog N``).

For every system, one after the other on the same broker and Redis,
:func:`bench.latency_chain.chain_run` starts the chain enrich -> load and warms it up exactly as for a
rate run (start-up is not counted), then the producer sends N sample events as fast as it can
(``Producer`` at rate 0, in bursts of 5,000, each stamped at its send) and the arrivals poller
stamps each event's first arrival in ``load_log`` (bench/latency_timing.py).  The chain gets
``--backlog-timeout`` seconds for the sending and as many again for every event to arrive
(default ``--drain-timeout`` + 1 s per 1,000 events: a chain slower than 1,000 events/s fails),
then the same exactly-once checks as a rate run: no event lost or duplicated, the store exactly
what the events give.

Per system (arrival times of the N events, sorted; t0 the first send):

* **sustained events/s**: the events that arrived after the 10th percentile of the arrival
  times up to the 90th, over that span: the chain's rate once its backlog is there and before
  its tail, batch-sized lumps included (a batch's rows arrive at one time, so the events at the
  10th percentile itself, done before the span, are not counted).  None when the middle 80 %
  arrived in one read (give a larger backlog).  When the 90th percentile came before the last
  send, the chain kept up with the producer: the figure is then the producer's rate, a lower
  bound of the chain's (``kept_up``, ``>=`` in the report);
* the whole backlog's rate, delivered / (last arrival - t0), start of the flow included;
* the producer's rate, N / its sending time, and the events not arrived when it ended;
* time to the first arrival (first arrival - t0);
* for ``sqe``, per step, the batches that started once sending began: count, median records
  and median duration.

Then SQE's sustained rate over quix's, quix-tuned's and plain's, from the same invocation
(higher is better for SQE; None where either side has no figure).

The producer and the poller run in the benchmark's process on the chain's machine: while the
producer sends (the first seconds of a backlog of millions) it takes CPU from the chain, and a
poller that falls behind stamps arrivals late (``poller_wakes`` and ``distinct_arrival_times``
say how often it read).  A sustained rate near ``send_rate`` measures the producer as much as
the chain.
"""

from __future__ import annotations

import argparse
from bisect import bisect_right
from typing import Any

from bench.harness.report import columns, num, ratio
from bench.harness.topics import PARTITIONS
from bench.latency_chain import Bench, chain_run, cpu_per_million, sqe_batches
from bench.latency_timing import Producer, quantile

OTHERS = ("quix", "quix-tuned", "plain")
NS = 1e9


def backlog_timeout(events: int, args: argparse.Namespace) -> float:
    """``--backlog-timeout``, else ``--drain-timeout`` + 1 s per 1,000 events."""
    given: float | None = args.backlog_timeout
    return given if given is not None else args.drain_timeout + events / 1000


def figures(producer: Producer, arrivals: dict[str, int]) -> dict[str, Any]:
    """The throughput figures of the backlog (the warm-up events left out); ``arrivals``: event
    id -> first arrival (monotonic ns)."""
    n, t0, end = producer.sent - producer.warm, producer.begin_ns, producer.end_ns
    times = sorted(t for i in range(producer.warm, producer.sent)
                   if (t := arrivals.get(f"e{i}")) is not None)
    sending = (end - t0) / NS if end > t0 else None
    got: dict[str, Any] = {"delivered": len(times), "send_rate": n / sending if sending else None}
    if not times:
        return got
    t10, t90 = quantile(times, 0.1), quantile(times, 0.9)
    window = bisect_right(times, t90) - bisect_right(times, t10)
    return got | {
        "sustained_rate": window * NS / (t90 - t10) if t90 > t10 else None,
        "sustained_window_s": (t90 - t10) / NS, "sustained_events": window,
        "whole_rate": len(times) * NS / (times[-1] - t0) if times[-1] > t0 else None,
        "first_arrival_s": (times[0] - t0) / NS, "last_arrival_s": (times[-1] - t0) / NS,
        "in_flight_at_send_end": n - bisect_right(times, end),
        "kept_up": t90 <= end, "distinct_arrival_times": len(set(times))}


def backlog_row(system: str, events: int, timeout: float, b: Bench) -> dict[str, Any]:
    """One system over a backlog of ``events``: its row (``problems`` empty when all is well)."""
    run = chain_run(system, f"backlog of {events:,}", {"backlog": events},
                    lambda topic: Producer(b.brokers, topic, 0, 0, PARTITIONS, events=events),
                    timeout, timeout, b)
    row = run.row | figures(run.producer, run.arrivals.first)
    if system == "sqe":
        row["sqe_batches"] = sqe_batches(run.steps, since=run.sending_began)
    return row


def ratios(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """SQE's sustained rate over each other system's that ran (None where one is missing)."""
    rate = {r["system"]: r.get("sustained_rate") for r in rows}
    if "sqe" not in rate:
        return {}
    sqe = rate["sqe"]
    return {o: ratio(sqe, rate[o]) for o in OTHERS if o in rate}


def run_backlog(systems: list[str], events: int, b: Bench) -> dict[str, Any]:
    """Every system over a backlog of ``events``: the ``backlog`` part of latency.json."""
    timeout = backlog_timeout(events, b.args)
    rows = []
    for system in systems:
        rows.append(r := backlog_row(system, events, timeout, b))
        b.say(f"  {system} backlog: delivered {r.get('delivered', 0):,} of {r['sent']:,}, "
              f"sustained {num(r.get('sustained_rate'), ',.0f')}/s"
              + "".join(f"; error: {p}" for p in r["problems"]))
    return {"events": events, "timeout_s": timeout, "rows": rows, "ratios": ratios(rows)}


def report(backlog: dict[str, Any]) -> list[str]:
    """The backlog's lines of bench/latency.py's report."""
    cells = [("system", "backlog", "delivered", "sustained/s", "whole/s", "sent/s",
              "first arrival s", "in flight at send end", "lost", "duplicated", "CPU s/1M/hop",
              "services CPU s/1M")]
    for r in backlog["rows"]:
        rate = num(r.get("sustained_rate"), ",.0f")
        cpu = cpu_per_million(r, r.get("delivered", 0)) or {}
        cells.append((r["system"], f"{r['backlog']:,}", f"{r.get('delivered', 0):,}",
                      (">=" if r.get("kept_up") else "") + rate,
                      num(r.get("whole_rate"), ",.0f"), num(r.get("send_rate"), ",.0f"),
                      num(r.get("first_arrival_s"), ".2f"),
                      f"{r.get('in_flight_at_send_end', 0):,}", f"{r['lost']:,}",
                      f"{r['duplicated']:,}", num(cpu.get("chain_per_hop_s"), ".1f"),
                      num(cpu.get("services_s"), ".1f")))
    lines = columns(cells)
    for r in backlog["rows"]:
        for step, s in r.get("sqe_batches", {}).items():
            lines.append(f"sqe backlog, {step}: {s['batches']} batches once sending began, median "
                         f"{num(s['records_median'], ',.0f')} records in "
                         f"{num(s['duration_s_median'], '.2f')} s, largest "
                         f"{s['records_max']:,} records")
        if r.get("kept_up"):
            lines.append(f"{r['system']} backlog: the chain kept up with the producer (90 % "
                         "arrived before the last send): its sustained rate is at least that")
    if backlog["ratios"]:
        lines.append("SQE's sustained rate over (higher is better for SQE): " + "; ".join(
            f"{o} {num(v, '.2f')}{'x' if v is not None else ''}"
            for o, v in backlog["ratios"].items()))
    return lines
