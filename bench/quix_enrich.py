"""The enrich step (topologies/enrich.yaml) as a quixstreams 3 Application with exactly-once.

    python bench/quix_enrich.py --brokers HOST:PORT --source events --sink enriched --count N
                                [--group NAME] [--idle 60]

What ``bench/chain.py`` runs against ``sqe run topologies/enrich.yaml --once``: a
``quixstreams.Application`` with ``processing_guarantee="exactly-once"`` (Kafka transactions:
the output and the consumer offsets are committed together) reads ``--source`` from the
earliest offset, keeps the events whose ``event_id`` is not null, selects ``event_id, user,
upper(region), amount, amount * 100 AS amount_cents, amount > 50 AS big_spender`` and writes
them as JSON to ``--sink``.  It stops when it has written ``--count`` records (every input
event, as the sample events all have an event_id) or when nothing new arrived for ``--idle``
seconds (``Application.run(count=..., timeout=...)``), and commits what it processed before it
exits.  quixstreams only (no SQE code): it may run in a virtualenv of its own.

The last stdout line is one JSON object (the seconds of ``run``); a failure is one
``error: ...`` line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def enriched(event: dict[str, Any]) -> dict[str, Any]:
    """enrich.yaml's select of one event (null fields left out, as Spark's to_json does)."""
    region, amount = event.get("region"), event.get("amount")
    out = {"event_id": event["event_id"], "user": event.get("user"),
           "region": region.upper() if isinstance(region, str) else region, "amount": amount,
           "amount_cents": None if amount is None else amount * 100,
           "big_spender": None if amount is None else amount > 50}
    return {k: v for k, v in out.items() if v is not None}


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
    try:
        from quixstreams import Application
    except ImportError as exc:
        print(f"error: quixstreams is not importable: {exc}", file=sys.stderr)
        return 1
    try:
        app = Application(
            broker_address=args.brokers, consumer_group=args.group,
            auto_offset_reset="earliest", processing_guarantee="exactly-once",
            loglevel="WARNING", state_dir=args.state_dir, auto_create_topics=False,
            consumer_extra_config={"receive.message.max.bytes": 200_000_000},
            producer_extra_config={"receive.message.max.bytes": 200_000_000})
        source = app.topic(args.source, value_deserializer="json")
        sink = app.topic(args.sink, value_serializer="json")
        sdf = app.dataframe(source)
        sdf = sdf.filter(lambda e: isinstance(e, dict) and e.get("event_id") is not None)
        sdf = sdf.apply(enriched)
        sdf.to_topic(sink)
        start = time.perf_counter()
        app.run(count=args.count, timeout=args.idle, collect=False)
        seconds = time.perf_counter() - start
    except Exception as exc:  # quixstreams' and librdkafka's errors, reported as one line
        text = " ".join(str(exc).split()) or type(exc).__name__
        print(f"error: {type(exc).__name__}: {text}", file=sys.stderr)
        return 1
    print(json.dumps({"seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
