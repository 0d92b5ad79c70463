"""``sqe reset``: forget what a topology's consumers committed, in every store, on purpose.

Read from the topology and its config, for each stream (or the ones named with
``--stream``): the HWM store's marks and committed offsets, and each Postgres and
Redis aggregate state's record of the consumer's last batch.  It shows what each
store holds, asks before it changes anything (``--yes`` for scripts), and keeps
the batch ids: the next run on a new, empty checkpoint reads from
``startingOffsets`` with batch ids after the stored ones, so no id a state has
seen comes again.  What that run reads again is written again: that is what a
reset is for (to rebuild states from an emptied start, or after deleting a
checkpoint on purpose).  To continue exactly where the stores are, a run does not
need a reset: ``sqe run ... --resume-from-store``.
"""

from __future__ import annotations

import argparse
import sys

from sqe import api
from sqe.config.settings import load_config, parse_conf_pairs
from sqe.engine.batch.pipeline import StreamStores, stream_stores
from sqe.errors import OptionError
from sqe.ledger.commits import Commit

__all__ = ["confirmed", "reset"]


def _held(stores: StreamStores) -> tuple[list[Commit], int | None]:
    return stores.committed(), stores.marks()


def _describe(stores: StreamStores, commits: list[Commit], marks: int | None) -> list[str]:
    lines = [f"consumer {stores.consumer}:"]
    for c in commits:
        ended = f"ended at offsets {c.offsets}" if c.offsets else "its offsets not recorded"
        lines.append(f"  {c.store}: batch {c.batch_id}, {ended}"
                     + (" (reset already)" if c.reset else ""))
    if marks:
        lines.append(f"  {marks} high-water mark(s) in the HWM store")
    return lines


def reset(args: argparse.Namespace) -> int:
    """``sqe reset TOPOLOGY``: see the module docstring; returns the exit code."""
    plan = api.validate(args.topology, config=[load_config(c) for c in args.config],
                        conf=parse_conf_pairs(args.conf), name=args.name)
    topology = plan.topology
    names = [s.streamName for s in topology.streams]
    unknown = [s for s in args.stream if s not in names]
    if unknown:
        print(f"error: {topology.path}: no stream named {', '.join(unknown)} (streams: "
              f"{', '.join(names)})", file=sys.stderr)
        return 2
    chosen = [stream_stores(plan, topology.name, s) for s in topology.streams
              if not args.stream or s.streamName in args.stream]
    held = [(stores, *_held(stores)) for stores in chosen]
    held = [(stores, commits, marks) for stores, commits, marks in held if commits or marks]
    if not held:
        print(f"{topology.name}: no store holds anything of its consumers; nothing to reset")
        return 0
    for stores, commits, marks in held:
        print("\n".join(_describe(stores, commits, marks)))
    last = max(c.batch_id for _, commits, _ in held for c in commits) if any(
        commits for _, commits, _ in held) else None
    after = f", its batches numbered after {last}" if last is not None else ""
    print(f"A reset forgets these marks and offsets (batch ids are kept). The next run on a "
          f"new, empty checkpoint reads from startingOffsets{after}, and writes again to the "
          "states whatever it reads again.")
    if not confirmed(args.yes, "Reset?", "sqe reset changes the stores above"):
        return 1
    for stores, _, _ in held:
        stores.reset()
    print(f"reset {', '.join(stores.consumer for stores, _, _ in held)}")
    return 0


def confirmed(yes: bool, question: str, changes: str) -> bool:
    """Whether the operator agrees to a change (``yes``: agreed beforehand); off a terminal,
    without ``yes``, a :class:`~sqe.errors.OptionError` saying ``changes``."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise OptionError(f"{changes}; confirm with --yes when not at a terminal")
    if input(f"{question} [y/N] ").strip().lower() in ("y", "yes"):
        return True
    print("nothing changed")
    return False
