"""``sqe status``: how far behind a topology's run is, and what its stores hold.

For a topology (the same file, ``--config``, ``--conf`` and ``--name`` as its
``sqe run``) and its checkpoint, per stream:

* per topic partition, the end offset, the offset the run has committed (the end
  of its checkpoint's last batch; on an empty checkpoint, of the stores' last
  commit) and the backlog between them;
* per (pid, source partition), the high-water marks updated last, each with its
  age and the TTL it has left, and how many are live;
* every store it commits to, named by its address without secrets, with the
  batch and offsets it recorded;
* the last batches of the progress file;
* whether a run holds the checkpoint now (PID, host, since, last heartbeat).

It reads files and asks the brokers and stores; it takes no lock, so it works
while the run runs.  A part that cannot be read (a store or the brokers away)
is said in its place and the exit code is 1; ``--json`` prints the same for scripts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import Any, TypeVar

import redis

from sqe import api
from sqe.cli.live import duration_text
from sqe.config.plan import TopologyPlan
from sqe.config.settings import load_config, parse_conf_pairs
from sqe.engine.batch.pipeline import StreamStores, stream_source, stream_stores
from sqe.engine.run.lock import CheckpointLock
from sqe.engine.spark.checkpoint import CheckpointFiles, StreamCheckpoint, default_checkpoint
from sqe.errors import SqeError
from sqe.lang.topology import CreateStream
from sqe.ledger.commits import Commit
from sqe.observe.batch_report import BatchReport, partition_offsets
from sqe.observe.progress import ProgressError, progress_path, read_progress
from sqe.source.kafka.lag import LagReader, PartitionLag, total_backlog
from state.sink import Sink

__all__ = ["RunStatus", "StreamStatus", "gather", "status"]

T = TypeVar("T")


@dataclass
class StreamStatus:
    """What ``sqe status`` tells of one stream."""

    stream: str
    consumer: str
    topic: str | None  # None: not a Kafka stream read by the sqe-kafka source
    brokers: str | None
    checkpoint_batch: int | None = None  # its last committed batch, as the stores count it
    committed_from: str | None = None  # where the committed offsets come from
    partitions: list[PartitionLag] = field(default_factory=list)
    marks: list[tuple[int, int, int, float]] = field(default_factory=list)  # pid, part, off, age
    marks_live: int | None = None
    hwm_store: str | None = None
    ttl: int | None = None
    stores: list[dict[str, Any]] = field(default_factory=list)
    batches: list[BatchReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The stream as ``--json`` prints it."""
        return {
            "stream": self.stream, "consumer": self.consumer, "topic": self.topic,
            "brokers": self.brokers, "checkpoint_batch": self.checkpoint_batch,
            "committed_from": self.committed_from,
            "partitions": [p.to_json() for p in self.partitions],
            "backlog": total_backlog(self.partitions) if self.partitions else None,
            "hwm_store": self.hwm_store, "hwm_ttl_seconds": self.ttl,
            "marks_live": self.marks_live,
            "marks": [{"pid": pid, "partition": part, "offset": off, "age_seconds": round(age, 3),
                       "ttl_left_seconds": round(max(0.0, (self.ttl or 0) - age), 3)}
                      for pid, part, off, age in self.marks],
            "stores": self.stores,
            "last_batches": [b.to_json() for b in self.batches],
            "problems": self.problems,
        }


@dataclass
class RunStatus:
    """What ``sqe status`` tells of a topology's run."""

    topology: str
    path: str
    checkpoint: str
    running: dict[str, Any] | None
    streams: list[StreamStatus]

    @property
    def problems(self) -> list[str]:
        """What could not be read, one sentence each."""
        return [p for s in self.streams for p in s.problems]

    def to_json(self) -> dict[str, Any]:
        """The whole status as ``--json`` prints it."""
        return {"topology": self.topology, "file": self.path, "checkpoint": self.checkpoint,
                "running": self.running, "streams": [s.to_json() for s in self.streams]}

    def lines(self) -> list[str]:
        """The status as text."""
        out = [f"topology {self.topology} ({self.path}), checkpoint {self.checkpoint}: "
               + _running_text(self.running)]
        for s in self.streams:
            out += _stream_lines(s)
        return out


def _running_text(running: dict[str, Any] | None) -> str:
    if running is None:
        return "no run holds it now"
    beat = running.get("heartbeat")
    ago = f", last heartbeat {duration_text(time.time() - float(beat))} ago" if beat else ""
    return (f"running, PID {running.get('pid')} on {running.get('host')} since "
            f"{running.get('since')}{ago}")


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["    " + "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]


def _stream_lines(s: StreamStatus) -> list[str]:
    where = f", topic {s.topic} on {s.brokers}" if s.topic else ""
    out = ["", f"stream {s.stream}, consumer {s.consumer}{where}"]
    done = "no batch committed yet" if s.checkpoint_batch is None else \
        f"batch {s.checkpoint_batch} committed"
    out.append(f"  checkpoint: {done}")
    if s.partitions:
        out.append(f"  partitions (committed: {s.committed_from}):")
        out += _table([["partition", "end offset", "committed", "backlog"]] + [
            [str(p.partition), str(p.end), "-" if p.committed is None else str(p.committed),
             str(p.backlog)] for p in s.partitions])
        out.append(f"  backlog: {total_backlog(s.partitions):,} records")
    if s.hwm_store is not None and s.marks_live is not None:
        shown = f", the {len(s.marks)} updated last:" if s.marks else ""
        out.append(f"  high-water marks in the {s.hwm_store} (TTL {s.ttl} s): "
                   f"{s.marks_live} live{shown}")
        if s.marks:
            out += _table([["pid", "partition", "offset", "age", "TTL left"]] + [
                [str(pid), str(part), str(off), duration_text(age),
                 duration_text(max(0.0, (s.ttl or 0) - age))]
                for pid, part, off, age in s.marks])
    if s.stores:
        out.append("  stores:")
        out += [f"    {_store_text(st)}" for st in s.stores]
    if s.batches:
        out.append("  last batches:")
        out += [f"    batch {b.batch_id}, {_when(b.started)}: {b.line().split(': ', 1)[1]}"
                for b in s.batches]
    out += [f"  cannot tell: {p}" for p in s.problems]
    return out


def _store_text(st: dict[str, Any]) -> str:
    where = f" ({st['where']})" if st.get("where") else ""
    if st.get("batch") is None:
        kept = st.get("note") or "no batch recorded yet"
        return f"{st['store']}{where}: {kept}"
    ended = f", ended at offsets {st['offsets']}" if st.get("offsets") else ""
    reset = " (reset: its offsets forgotten)" if st.get("reset") else ""
    return f"{st['store']}{where}: batch {st['batch']}{ended}{reset}"


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _attempt(problems: list[str], what: str, action: Callable[[], T]) -> T | None:
    """``action()``, or None with the reason it failed added to ``problems``."""
    try:
        return action()
    except (SqeError, redis.RedisError, OSError) as exc:
        problems.append(f"{what}: {exc}")
        return None


def _stores(s: StreamStatus, stores: StreamStores, marks: int) -> list[dict[str, int] | None]:
    """Fill in the stores' records and the HWM store's marks; returns the stores' offsets."""
    found: list[dict[str, int] | None] = []
    hwm = _attempt(s.problems, "the HWM store", stores.hwm_store) if stores.filtering else None
    if hwm is not None:
        s.hwm_store, s.ttl = hwm.describe(), hwm.ttl_seconds
        commit, recent = None, None
        try:
            commit, recent = hwm.last_commit(), hwm.recent(marks)
        except redis.RedisError as exc:
            s.problems.append(f"the HWM store of {stores.consumer}: {hwm.describe_error(exc)}")
        finally:
            hwm.client.close()
        if recent is not None:
            s.marks = [(pid, part, off, age) for (pid, part), off, age in recent[0]]
            s.marks_live = recent[1]
        s.stores.append(_commit_json(hwm.describe(), None, commit))
        found.append(_offsets(commit))
    for sink in stores.sinks:
        commit = _attempt(s.problems, sink.describe(), partial(sink.committed, stores.consumer))
        entry = _commit_json(sink.describe(), sink.where(), commit)
        if commit is None and type(sink).committed is Sink.committed:
            entry["note"] = "keeps no record of batches (its writes are idempotent, or " \
                "replays the next hop drops)"
        s.stores.append(entry)
        found.append(_offsets(commit))
    return found


def _commit_json(name: str, where: str | None, commit: Commit | None) -> dict[str, Any]:
    if commit is None:
        return {"store": name, "where": where, "batch": None}
    return {"store": name, "where": where, "batch": commit.batch_id, "offsets": commit.offsets,
            "reset": commit.reset}


def _offsets(commit: Commit | None) -> dict[str, int] | None:
    if commit is None or not commit.offsets or commit.reset:
        return None
    return partition_offsets(commit.offsets) or None


def _checkpoint_end(ck: StreamCheckpoint) -> tuple[int, dict[str, int] | None] | None:
    """The checkpoint's last committed batch, as the stores count it, and the offsets it ended
    at (None: no batch committed yet)."""
    last = ck.last_batch()
    return None if last is None else (last[0], partition_offsets(last[1]) or None)


def _stream(plan: TopologyPlan, name: str, stream: CreateStream, root: str, marks: int,
            batches: list[BatchReport]) -> StreamStatus:
    settings = plan.streams[stream.streamName]
    source = stream_source(plan, name, stream)
    s = StreamStatus(stream.streamName, f"{name}.{stream.streamName}",
                     source.topic if source else None, settings.bootstrap if source else None,
                     batches=batches)
    committed: dict[str, int] | None = None
    ended = _attempt(s.problems, "the checkpoint", partial(
        _checkpoint_end, StreamCheckpoint(None, f"{root}/{stream.streamName}")))
    if ended is not None:
        s.checkpoint_batch, committed = ended
        s.committed_from = f"checkpoint batch {s.checkpoint_batch}"
    stored = _stores(s, stream_stores(plan, name, stream), marks)
    if committed is None:
        committed = next((o for o in stored if o), None)
        s.committed_from = "the stores' last commit" if committed else \
            "nothing yet: a run starts at startingOffsets"
    if source is not None:
        reader = LagReader(source)
        try:
            lags = _attempt(s.problems, f"the offsets of topic {source.topic}",
                            partial(reader.lag, committed))
        finally:
            reader.close()
        s.partitions = lags or []
    return s


def _last_batches(root: str, count: int) -> tuple[dict[str, list[BatchReport]], str | None]:
    where = progress_path(root)
    if where is None or count <= 0:
        return {}, None
    try:
        progress = read_progress(where)
    except ProgressError as exc:
        return {}, None if not where.exists() or "holds no batch" in str(exc) else str(exc)
    by_stream: dict[str, list[BatchReport]] = {}
    for entry in progress.entries:
        by_stream.setdefault(entry.report.stream, []).append(entry.report)
    return {k: v[-count:] for k, v in by_stream.items()}, None


def gather(plan: TopologyPlan, checkpoint: str, batches: int = 5, marks: int = 10) -> RunStatus:
    """The status of ``plan``'s run on ``checkpoint`` (a local directory)."""
    topology = plan.topology
    root = os.path.abspath(checkpoint) if "://" not in checkpoint else checkpoint
    running = CheckpointLock(CheckpointFiles(None, root)).held_by()
    last, problem = _last_batches(root, batches)
    streams = [_stream(plan, topology.name, st, root, marks, last.get(st.streamName, []))
               for st in topology.streams]
    if problem and streams:
        streams[0].problems.append(f"the progress file: {problem}")
    return RunStatus(topology.name, topology.path, root, running, streams)


def status(args: argparse.Namespace) -> int:
    """``sqe status TOPOLOGY``: see the module docstring; returns the exit code."""
    plan = api.validate(args.topology, config=[load_config(c) for c in args.config],
                        conf=parse_conf_pairs(args.conf), name=args.name)
    checkpoint = args.checkpoint or default_checkpoint(plan.topology.name)
    if "://" in checkpoint and not checkpoint.startswith("file:"):
        print(f"error: checkpoint {checkpoint} is not on this machine; sqe status reads a "
              "local checkpoint (run it where the checkpoint is, or on a copy)", file=sys.stderr)
        return 2
    result = gather(plan, checkpoint, args.batches, args.marks)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print("\n".join(result.lines()))
    return 1 if result.problems else 0
