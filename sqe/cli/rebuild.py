"""``sqe hwm rebuild``: an HWM store that lost its marks given them back from the topic.

When the HWM store of a topology's consumer lost commits (restarted empty, restored from an
older snapshot, a failover to a replica that was behind), the next run refuses to start: the
replays of the lost batches' records would pass the filter.  The marks are a function of what
the consumer read, and its checkpoint says where its last finished batch ended, so they can be
read again: for each stream (or those named with ``--stream``) whose store holds less than its
checkpoint's last batch, ``sqe hwm rebuild`` reads the record keys of the stream's topic from
the first offset each partition retains up to that batch's end
(:func:`~sqe.source.kafka.mark_scan.scan_marks`), shows what it found, asks (``--yes`` for
scripts), and commits them to the store as that batch, with its end offsets and checkpoint.
The next run starts as if nothing had been lost, but for what the store kept beside the marks:
the rows of Redis states staged there for those batches are gone (the Postgres and Kafka
states hold theirs).  It refuses while a run holds the checkpoint.
"""

from __future__ import annotations

import argparse

from sqe import api
from sqe.cli.reset import confirmed
from sqe.config.settings import load_config, parse_conf_pairs
from sqe.engine.checkpoint import CheckpointFiles, StreamCheckpoint, default_checkpoint
from sqe.engine.lock import CheckpointLock
from sqe.engine.pipeline import stream_source, stream_stores
from sqe.errors import RunError
from sqe.observe.batch_report import partition_offsets
from sqe.source.kafka.mark_scan import scan_marks

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
        ck = StreamCheckpoint(None, f"{root}/{stream.streamName}")
        batch, ended = ck.last_batch() or (None, None)
        if batch is None or ended is None:
            print(f"{stores.consumer}: checkpoint {ck.location} has no finished batch; "
                  "nothing to rebuild")
            continue
        held = stores.hwm_commit()
        if held is not None and held.batch_id >= batch:
            print(f"{stores.consumer}: its HWM store holds batch {held.batch_id}, the "
                  f"checkpoint's last is {batch}; nothing to rebuild")
            continue
        ends = {int(p): int(o) for p, o in partition_offsets(ended).items()}
        marks, read, beyond = scan_marks(source, ends)
        has = f"holds batch {held.batch_id}" if held is not None else "holds no batch"
        print(f"{stores.consumer}: its HWM store {has}, the checkpoint's last is batch {batch} "
              f"(ended at offsets {ended}); {read} records of {source.topic} read up to it give "
              f"{len(marks)} high-water mark(s)"
              + (f" ({beyond} keys beyond maxAdvance moved none)" if beyond else ""))
        todo.append((stores, ck, batch, ended, marks))
    if not todo:
        return 0
    if not confirmed(args.yes, "Commit these marks?", "sqe hwm rebuild commits the marks "
                     "above to the HWM store"):
        return 1
    for stores, ck, batch, ended, marks in todo:
        store = stores.hwm_store()
        assert store is not None  # a filtering stream's
        try:
            store.commit(batch, marks, offsets=ended, checkpoint=ck.location)
        finally:
            store.client.close()
        print(f"{stores.consumer}: committed batch {batch} with {len(marks)} high-water mark(s)")
    return 0
