"""``sqe demo``: the exactly-once chain end to end, with a real crash, on embedded services.

1. start a local Kafka-protocol broker and redis-server on free ports
   (:mod:`sqe.cli.local_services`; nothing else on the machine is touched);
2. write sample events to ``events``;
3. run the shipped ``enrich.yaml`` and SIGKILL it in the middle of its batch,
   after part of its output reached ``enriched`` (fault point
   ``kafka-state-sent``, :mod:`sqe.faults`), then run it again: the re-run
   batch writes those records a second time, so ``enriched`` holds replays;
4. run the shipped ``load.yaml``, which drops the replays by their
   high-water marks and commits its Redis states atomically with them;
5. report: records produced, replays in the middle topic, replays dropped,
   records in the final store and duplicates there (from ``load_log``, the
   audit hash with one field per loaded ``enriched`` record), and the
   checkpoints whose progress files ``sqe report`` reads.

Each step is a real ``sqe run`` process, as an operator would start it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import redis
from confluent_kafka.admin import AdminClient, NewTopic

from sqe.cli.local_services import service_conf, start_local_kafka, start_local_redis
from sqe.cli.sample_events import produce_events
from sqe.clients.kafka import read_all
from sqe.errors import RunError
from sqe.faults import kill_group, start_with_fault, wait_for_fault

__all__ = ["DemoReport", "run_demo", "shipped_file"]

def shipped_file(relative: str) -> Path:
    """A file the package ships (``topologies/enrich.yaml``, ``conf/local.yaml``: the
    repository's, which the installed package carries as data)."""
    path = Path(str(resources.files("sqe").joinpath(relative)))  # installed: sqe/topologies
    if not path.is_file():  # run from a checkout: the repository's own folder beside sqe/
        path = Path(str(resources.files("sqe"))).resolve().parent / relative
    if not path.is_file():
        raise RunError(f"{relative} is missing from the installed sqe package at "
                       f"{path.parent}; reinstall sqe-spark")
    return path


@dataclass(frozen=True)
class DemoReport:
    """What the demo counted."""

    produced: int
    enriched_records: int
    replays_in_middle_topic: int
    replays_dropped: int
    records_in_store: int
    duplicates_in_store: int
    checkpoints: tuple[Path, ...] = ()  # of enrich and load: their progress files (sqe report)

    def lines(self) -> list[str]:
        """The report as printed."""
        return [
            f"records produced to events:            {self.produced}",
            f"records in enriched (after the crash): {self.enriched_records}",
            f"replays present in enriched:           {self.replays_in_middle_topic}",
            f"replays dropped by load:               {self.replays_dropped}",
            f"records in the final store:            {self.records_in_store}",
            f"duplicates in the final store:         {self.duplicates_in_store}",
        ]


def _count_enriched(brokers: str) -> tuple[int, int]:
    """(records, distinct StreamMetadata keys) in topic ``enriched``."""
    keys = [m.key() for m in read_all(brokers, "enriched")]
    return len(keys), len(set(keys))


def run_demo(events: int = 5000, workdir: str | Path | None = None,
             say: Callable[[str], None] = print) -> DemoReport:
    """Run the demo (see the module docstring) and return its report."""
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="sqe-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    say(f"sqe demo: working in {work}")
    services = []
    try:
        kafka = start_local_kafka(work / "kafka")
        services.append(kafka)
        rds = start_local_redis(work / "redis")
        services.append(rds)
        say(f"started a Kafka-protocol broker on {kafka.address} and redis-server on "
            f"{rds.address}")
        redis_url = f"{rds.address}/0"
        produce_events(kafka.address, "events", events, partitions=3)
        admin = AdminClient({"bootstrap.servers": kafka.address, "log_level": 2})
        admin.create_topics([NewTopic("enriched", 3, 1, config={"retention.ms": "-1"})]
                            )["enriched"].result(30)
        say(f"wrote {events} sample events to topic events")

        def command(name: str) -> list[str]:
            return [sys.executable, "-m", "sqe.cli.main", "run",
                    str(shipped_file(f"topologies/{name}.yaml")), "--once",
                    "--checkpoint", str(work / "checkpoints" / name),
                    "--config", str(shipped_file("conf/local.yaml")),
                    *service_conf(kafka.address, redis_url)]

        def run(name: str) -> str:
            done = subprocess.run(command(name), capture_output=True, text=True)
            (work / f"{name}.log").write_text(done.stderr + done.stdout)
            if done.returncode != 0:
                tail = "\n".join(done.stderr.splitlines()[-5:])
                raise RunError(f"sqe run {name} failed (exit {done.returncode}); the end of "
                               f"{work / f'{name}.log'}:\n{tail}")
            return done.stderr

        crash_after = max(1, events // 20)
        marker, log = work / "enrich.crash", work / "enrich-crashed.log"
        proc = start_with_fault(command("enrich"), f"kafka-state-sent@{crash_after}", marker, log)
        wait_for_fault(proc, marker, log)
        kill_group(proc)
        sent, _ = _count_enriched(kafka.address)
        say(f"enrich: SIGKILLed mid-batch after {sent} of its records reached enriched")
        run("enrich")
        records, distinct = _count_enriched(kafka.address)
        say(f"enrich: restarted; its batch ran again, so enriched holds {records} records for "
            f"{distinct} events")
        load_log = run("load")
        dropped = sum(int(n) for n in re.findall(r"(\d+) replays dropped", load_log))
        say(f"load: dropped {dropped} replays by their high-water marks")
        client = redis.Redis.from_url(redis_url)
        try:
            audit = client.hgetall("load_log")
        finally:
            client.close()
        per_event = Counter(audit.values())
        return DemoReport(events, records, records - distinct, dropped, len(per_event),
                          sum(n - 1 for n in per_event.values()),
                          tuple(work / "checkpoints" / name for name in ("enrich", "load")))
    finally:
        for service in reversed(services):
            service.stop()
