"""``sqe hwm rebuild``: an HWM store that lost its marks given them back from the topic.

For each stream of the topology (or those named with ``--stream``) whose HWM store holds less
than its checkpoint's last batch, it reads the marks again from the stream's topic up to that
batch's end (:mod:`sqe.engine.run.lost_marks`), shows what it found, asks (``--yes`` for
scripts), and commits them to the store as that batch.  It refuses while a run holds the
checkpoint.
"""

from __future__ import annotations

import argparse

from sqe import api
from sqe.cli.reset import confirmed
from sqe.config.settings import load_config, parse_conf_pairs
from sqe.engine.batch.pipeline import stream_source, stream_stores
from sqe.engine.run.lock import CheckpointLock
from sqe.engine.run.lost_marks import find_lost_marks
from sqe.engine.spark.checkpoint import CheckpointFiles, StreamCheckpoint, default_checkpoint
from sqe.errors import RunError

__all__ = ["rebuild"]


def rebuild(args: argparse.Namespace) -> int:
    """``sqe hwm rebuild TOPOLOGY``: see the module docstring; returns the exit code."""
    plan = api.validate(args.topology, config=[load_config(c) for c in args.config],
                        conf=parse_conf_pairs(args.conf), name=args.name)
    topology = plan.topology
    root = args.checkpoint or default_checkpoint(topology.name)
    running = CheckpointLock(CheckpointFiles(None, root)).held_by()
    if running is not None:
        raise RunError(f"checkpoint {root} is held by a run ({running}); stop it before "
                       "rebuilding its consumers' marks")
    streams = [s for s in topology.streams if not args.stream or s.streamName in args.stream]
    todo = []
    for stream in streams:
        stores = stream_stores(plan, topology.name, stream)
        source = stream_source(plan, topology.name, stream)
        if not stores.filtering or source is None:
            continue
        found = find_lost_marks(stores, source, StreamCheckpoint(None,
                                                                 f"{root}/{stream.streamName}"))
        print(found if isinstance(found, str) else found.describe(source.topic))
        if not isinstance(found, str):
            todo.append(found)
    if not todo:
        return 0
    if not confirmed(args.yes, "Commit these marks?", "sqe hwm rebuild commits the marks "
                     "above to the HWM store"):
        return 1
    for lost in todo:
        print(f"{lost.stores.consumer}: {lost.commit()}")
    return 0
