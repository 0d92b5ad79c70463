"""The chain of topologies/enrich.yaml and load.yaml as two quixstreams 3 exactly-once apps.

    PYTHONPATH=. python bench/quix_chain.py enrich --brokers HOST:PORT --source events
        --sink enriched [--group NAME] [--commit-interval 5] [--state-dir DIR]
    PYTHONPATH=. python bench/quix_chain.py load --brokers HOST:PORT --source enriched
        --redis redis://HOST:PORT/DB [--group NAME] [--commit-interval 5] [--state-dir DIR]

What ``bench/latency.py`` runs against long-running ``sqe run`` processes; each step an
``Application(processing_guarantee="exactly-once")`` that runs until SIGTERM or SIGINT (it
then commits what it processed and exits):

* ``enrich``: ``bench/quix_enrich.py``'s transform (``event_id IS NOT NULL``, ``upper(region)``,
  ``amount_cents``, ``big_spender``) from ``--source`` to ``--sink`` in Kafka transactions, one
  per checkpoint (every ``--commit-interval`` seconds): its output is visible to the next
  step's ``read_committed`` consumer only when the transaction commits;
* ``load``: reads ``--sink``'s topic (read_committed, as exactly-once consumers do) into a
  ``BatchingSink`` that, at each checkpoint and before the offsets are committed in the
  transaction, writes ``HSET <region> <event_id> <amount_cents>`` and
  ``HSET load_log <partition>:<offset> <event_id>`` per record, one MULTI/EXEC per partition's
  batch.  quixstreams' sinks are at least once; the fields are named by the record's position,
  so a batch written again after a crash rewrites the same fields: exactly once in Redis.

The Application, the enrich dataframe and the error report are ``bench/quix_enrich.py``'s.
quixstreams and redis-py only (no SQE code): run it with a virtualenv of its own
(``python -m venv /tmp/quix && /tmp/quix/bin/pip install 'quixstreams>=3,<4' redis``).
A failure is one ``error: ...`` line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bench.part_script import load_fields
from bench.quix_enrich import application, enrich_into, run_quix


def redis_sink(url: str) -> Any:
    """A quixstreams ``BatchingSink`` writing what load.yaml writes (see the docstring)."""
    import redis
    from quixstreams.sinks import BatchingSink, SinkBatch

    class RedisLoad(BatchingSink):
        def setup(self) -> None:
            self.client = redis.Redis.from_url(url)
            self.client.ping()

        def write(self, batch: SinkBatch) -> None:
            pipe = self.client.pipeline(transaction=True)
            for item in batch:
                region, event_id, cents = load_fields(item.value)
                pipe.hset(region, event_id, cents)
                pipe.hset("load_log", f"{batch.partition}:{item.offset}", event_id)
            pipe.execute()

    return RedisLoad()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = ap.add_subparsers(dest="step", required=True)
    steps = {"enrich": sub.add_parser("enrich", help="events -> enriched, until stopped"),
             "load": sub.add_parser("load", help="enriched -> Redis, until stopped")}
    for step, p in steps.items():
        p.add_argument("--brokers", required=True)
        p.add_argument("--source", required=True)
        p.add_argument("--group", default=f"quix-latency-{step}")
        p.add_argument("--commit-interval", type=float, default=5.0,
                       help="seconds between checkpoints (transactions); quixstreams' default 5")
        p.add_argument("--state-dir", default=None, help="quixstreams' state directory")
    steps["enrich"].add_argument("--sink", required=True)
    steps["load"].add_argument("--redis", required=True, help="redis://HOST:PORT/DB")
    args = ap.parse_args(argv)

    def work() -> None:
        app = application(args.brokers, args.group, args.state_dir, args.commit_interval)
        if args.step == "enrich":
            enrich_into(app, args.source, args.sink)
        else:
            app.dataframe(app.topic(args.source, value_deserializer="json")).sink(
                redis_sink(args.redis))
        app.run()

    return run_quix(work)


if __name__ == "__main__":
    sys.exit(main())
