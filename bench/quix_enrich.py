"""The enrich step (topologies/enrich.yaml) as a quixstreams 3 Application with exactly-once.

    PYTHONPATH=. python bench/quix_enrich.py --brokers HOST:PORT --source events --sink enriched
        --count N [--group NAME] [--idle 60]

What ``bench/chain.py`` runs against ``sqe run topologies/enrich.yaml --once``: a
``quixstreams.Application`` with ``processing_guarantee="exactly-once"`` (Kafka transactions:
the output and the consumer offsets are committed together) reads ``--source`` from the
earliest offset, keeps the events whose ``event_id`` is not null, selects ``event_id, user,
upper(region), amount, amount * 100 AS amount_cents, amount > 50 AS big_spender`` and writes
them as JSON to ``--sink``.  It stops when it has written ``--count`` records (every input
event, as the sample events all have an event_id) or when nothing new arrived for ``--idle``
seconds (``Application.run(count=..., timeout=...)``), and commits what it processed before it
exits.  quixstreams only (no SQE code): it may run in a virtualenv of its own.

The Application (:func:`application`), the enrich dataframe (:func:`enrich_into`) and the
error report (:func:`run_quix`) serve ``bench/quix_chain.py``'s long-running steps too.

The last stdout line is one JSON object (the seconds of ``run``); a failure is one
``error: ...`` line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.part_script import enriched, keeps, run_part

CLIENT = {"receive.message.max.bytes": 200_000_000}  # the pip broker ignores fetch limits


def application(brokers: str, group: str, state_dir: str | None,
                commit_interval: float | None = None) -> Any:
    """An exactly-once ``quixstreams.Application`` of consumer group ``group`` that reads from
    the earliest offset and creates no topic; ``commit_interval`` None: quixstreams' default."""
    from quixstreams import Application

    interval = {} if commit_interval is None else {"commit_interval": commit_interval}
    return Application(
        broker_address=brokers, consumer_group=group, auto_offset_reset="earliest",
        processing_guarantee="exactly-once", loglevel="WARNING", state_dir=state_dir,
        auto_create_topics=False, consumer_extra_config=CLIENT, producer_extra_config=CLIENT,
        **interval)


def enrich_into(app: Any, source: str, sink: str) -> None:
    """enrich.yaml's where and select on ``app``, from ``source`` to ``sink`` (JSON values)."""
    sdf = app.dataframe(app.topic(source, value_deserializer="json"))
    sdf = sdf.filter(keeps)
    sdf = sdf.apply(enriched)
    sdf.to_topic(app.topic(sink, value_serializer="json"))


def run_quix(work: Callable[[], dict[str, Any] | None]) -> int:
    """:func:`bench.part_script.run_part` for a quixstreams step: quixstreams must be importable,
    and any error (quixstreams' and librdkafka's) is reported as one line with its class."""
    try:
        import quixstreams  # noqa: F401
    except ImportError as exc:
        print(f"error: quixstreams is not importable: {exc}", file=sys.stderr)
        return 1
    return run_part(work, (Exception,), named=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--count", type=int, required=True, help="stop after this many outputs")
    ap.add_argument("--group", default="quix-enrich")
    ap.add_argument("--idle", type=float, default=60.0,
                    help="stop when nothing new arrived for this many seconds")
    ap.add_argument("--state-dir", default=None, help="quixstreams' state directory")
    args = ap.parse_args(argv)

    def work() -> dict[str, Any]:
        app = application(args.brokers, args.group, args.state_dir)
        enrich_into(app, args.source, args.sink)
        start = time.perf_counter()
        app.run(count=args.count, timeout=args.idle, collect=False)
        return {"seconds": time.perf_counter() - start}

    return run_quix(work)


if __name__ == "__main__":
    sys.exit(main())
