"""The runs the nemesis drives: the chain's two hops, as topology files or as plain PySpark.

A :class:`Run` is a long-running ``sqe run`` of a topology copy, which the nemesis kills,
pauses and races with a second run from another host name.  A :class:`HopRun` is the same hop
of ``examples/pyspark_chain.py`` (``--way hop``: each batch written by ``hop.exactly_once``;
``--way sink``: by the ``sqe-hop`` sink): enrich (the events, a static table joined, a pandas
UDF, into a Kafka topic) and load (into the Redis hashes ``events_by_region`` and ``load_log``
and the Postgres table ``loaded_events``, as the nemesis's load topology does).  A hop keeps no
progress file: its batches are Spark's commits in its checkpoint, and where it stands is the
offsets Spark logged for the last of them.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from contextlib import suppress
from pathlib import Path
from typing import Any

import yaml

from bench.harness import ROOT
from bench.harness.processes import SqeProcess, child_env
from bench.harness.rss import tree_pids
from sqe.engine.spark.checkpoint import StreamCheckpoint
from sqe.observe.batch_report import partition_offsets
from support.clock import SteppedClock, faketime_library

#: The ways to run a hop the nemesis drives, beside ``topology`` (``sqe run``).
HOP_WAYS = ("hop", "sink", "pipeline")
OTHER_HOST = "nemesis-other-host"
#: The command a run refused for a store that lost commits prints.
REBUILD = re.compile(r"`(sqe hwm rebuild [^`]+)`")


def clock_missing() -> str | None:
    """Why a run's clock cannot be stepped here, or None when it can."""
    if faketime_library() is None:
        return "the libfaketime package is not installed (pip install libfaketime)"
    return None


class Run(SqeProcess):
    """A long-running ``sqe run`` the nemesis kills, pauses and races with a second run."""

    finishes = False  # it ends by itself once it has read what is there (an exit 0 is no news)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        #: its driver's clock (its Python process: SQE's side), which clock faults step; None
        #: unless :meth:`steppable` (the driver then runs with libfaketime preloaded)
        self.clock: SteppedClock | None = None
        self.rivals: list[tuple[subprocess.Popen[bytes], Path]] = []  # and their logs
        self.killed = False  # the nemesis ended it: its exit is no news
        self.failures, self.restart_at = 0, 0.0  # exits without a batch since; when to start

    def adopt(self, rival: subprocess.Popen[bytes], log: Path) -> None:
        """The second run goes on as this run (the first ended)."""
        self.end()
        self.process, self.log = rival, log
        self.rivals = [r for r in self.rivals if r[0] is not rival]

    def pids(self) -> list[int]:
        return tree_pids(self.process.pid) if self.process is not None else []

    def signal_all(self, number: int) -> None:
        for pid in self.pids():
            with suppress(ProcessLookupError):
                os.kill(pid, number)

    def steppable(self) -> None:
        """Start its driver with a clock that clock faults step (see :func:`clock_missing`)."""
        clocks = self.logs.parent / "clocks"
        clocks.mkdir(parents=True, exist_ok=True)
        self.clock = SteppedClock(clocks / self.name)
        self.extra_env = self.clock.env(spark=True)

    def heal_command(self, said: str) -> list[str] | None:
        """The command that gives back what a refusal (``said``) found lost: the ``sqe hwm
        rebuild`` it names, with ``--yes``; None when it names none."""
        match = REBUILD.search(said)
        if match is None:
            return None
        return [*self.command[:3], *shlex.split(match.group(1))[1:], "--yes"]

    def start_rival(self) -> subprocess.Popen[bytes]:
        """A second run on this checkpoint from another host name (its own UTS and mount
        namespaces: ``unshare``, which needs root), as a scheduler would start on another
        machine when this one looks dead."""
        self.logs.mkdir(parents=True, exist_ok=True)
        n = len(self.rivals) + 1 + sum(1 for f in self.logs.glob(f"{self.name}-rival-*"))
        hosts = self.logs / "hosts"  # the other host name resolves, as on a real host
        hosts.write_text(Path("/etc/hosts").read_text() + f"\n127.0.0.1 {OTHER_HOST}\n")
        script = f'hostname {OTHER_HOST} && mount --bind {hosts} /etc/hosts && exec "$@"'
        log = self.logs / f"{self.name}-rival-{n}.err"
        with open(log, "wb") as err:
            rival = subprocess.Popen(["unshare", "-u", "-m", "sh", "-c", script, "sh",
                                      *self.command],
                                     stdout=subprocess.DEVNULL, stderr=err,
                                     stdin=subprocess.DEVNULL, env=child_env(),
                                     cwd=ROOT, start_new_session=True)
        self.rivals.append((rival, log))
        return rival


class HopRun(Run):
    """One hop of examples/pyspark_chain.py (``step``: enrich or load) on the nemesis's
    services (``conf``: their ``--conf`` pairs), reading ``topic``; ``remote``: over the Spark
    Connect server at that URL."""

    def __init__(self, step: str, name: str, topology: Path, topic: str, work: Path,
                 conf: list[str], way: str, events: str, enriched: str,
                 remote: str | None = None) -> None:
        super().__init__(name, topology, topic, work, conf)
        self.command = [sys.executable, str(ROOT / "examples/pyspark_chain.py"), step,
                        "--events", events, "--enriched", enriched,
                        "--checkpoint", str(self.checkpoint), *conf,
                        *(["--sink"] if way == "sink" else []),
                        *(["--remote", remote] if remote else [])]
        self.what = f"the {step} hop ({'sqe-hop sink' if way == 'sink' else 'exactly_once'})"
        self.spark: StreamCheckpoint | None = StreamCheckpoint(
            None, str(self.checkpoint / step), topic)
        self.last: int | None = None  # the last batch Spark committed, as seen

    def heal_command(self, said: str) -> list[str] | None:
        """The example's ``--rebuild-marks`` when the refusal names ``hop.rebuild_marks()``."""
        return [*self.command, "--rebuild-marks"] if "hop.rebuild_marks()" in said else None

    def new_batches(self) -> list[dict[str, Any]]:
        """The batches Spark committed since the last call (its commit log)."""
        spark = self.spark
        done = spark.last_committed() if spark is not None else None
        if spark is None or done is None or (self.last is not None and done <= self.last):
            return []
        first = 0 if self.last is None else self.last + 1
        self.last = done
        self.offsets = partition_offsets(spark.end_offsets(done)) or self.offsets
        return [{"batch": b} for b in range(first, done + 1)]


class PipelineRun(HopRun):
    """One flow of examples/pipeline (``step``: enrich or load) as a Spark Declarative Pipeline
    of its own (``sqe pipelines run``), its storage where the other ways keep their
    checkpoints and load writing the Postgres table too.  A run reads what is there and ends
    (``finishes``): it is started again at once, as a scheduler runs a triggered pipeline."""

    finishes = True

    def __init__(self, step: str, name: str, topology: Path, topic: str, work: Path,
                 conf: list[str], events: str, enriched: str, table: str) -> None:
        super().__init__(step, name, topology, topic, work, conf, "sink", events, enriched)
        spec_dir = work / "pipelines" / name
        shutil.copytree(ROOT / "examples/pipeline", spec_dir, dirs_exist_ok=True)
        spec = spec_dir / "spark-pipeline.yml"
        doc = yaml.safe_load(spec.read_text())
        pairs = (pair.partition("=") for pair in conf[1::2])  # --conf KEY=VALUE ...
        doc["storage"] = self.checkpoint.as_uri()
        doc["configuration"].update({
            "sqe.chain.config": str(ROOT / "conf/local.yaml"), "sqe.chain.events": events,
            "sqe.chain.enriched": enriched, "sqe.chain.flows": step,
            "sqe.chain.postgres_table": table,
            **{f"spark.{k}": v for k, _, v in pairs}})
        spec.write_text(yaml.safe_dump(doc))
        self.command = [sys.executable, "-m", "sqe.cli.main", "pipelines", "run", "--spec",
                        str(spec)]
        self.what = f"the {step} flow (Declarative Pipelines)"
        self.merge_stdout = True  # spark-pipelines says why a run failed on its stdout
        self.spark, self.topic_name = None, topic

    def heal_command(self, said: str) -> list[str] | None:
        """None: a pipeline's checkpoint is Declarative Pipelines', which no rebuild reads."""
        return None

    def new_batches(self) -> list[dict[str, Any]]:
        """As a hop's, once the flow's checkpoint is found in the pipeline's storage."""
        if self.spark is None:
            commits = next(self.checkpoint.rglob("commits"), None)
            if commits is not None:
                self.spark = StreamCheckpoint(None, str(commits.parent), self.topic_name)
        return super().new_batches()
