"""Where a stream's run starts: its checkpoint held against what its stores committed.

Before a stream reads anything, :func:`plan_start` compares the stream's
checkpoint with the commit records of every store it commits to (the HWM store,
Postgres batch tables, Redis aggregates: :mod:`sqe.ledger.commits`):

* no commits, or the checkpoint at (or one batch behind) the last commit: the
  run goes on from the checkpoint; a batch the stores hold already is skipped
  (:meth:`sqe.ledger.hwm.HwmStore.admit`), and only when it ends at the same offsets;
* an empty checkpoint after ``sqe reset``: the run reads from
  ``startingOffsets``, its batch ids after the stored ones;
* an empty checkpoint with ``resume`` (``--resume-from-store``): the run reads
  from the offsets the stores recorded, its batch ids after the stored ones, so a
  lost checkpoint loses and repeats nothing;
* otherwise -- an empty or older checkpoint for a consumer whose stores hold
  commits -- :class:`CheckpointMismatch`, one paragraph naming both ways out,
  before anything is read.

A store *behind* the checkpoint is noticed by what the checkpoint says was committed
there (``sqe run``'s progress file, else Spark's commit log, see
:mod:`sqe.engine.run.start`): :func:`lost_commits` refuses to start on an
HWM store that holds fewer batches than that (a
failover to a replica that was behind, or a restart that lost acknowledged writes),
whose lost marks would let replays through, unless the operator accepts that loss
for the batch it names (``--accept-lost-marks``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqe.engine.spark.checkpoint import StreamCheckpoint
from sqe.errors import CheckpointMismatch, StoreBehind
from sqe.ledger.commits import Commit

__all__ = ["CheckpointMismatch", "Rerun", "StoreBehind", "StreamStart", "lost_commits",
           "partition_offsets", "plan_start"]

#: Formats the command (or call) that runs the topology again with some flags changed: a
#: map of flag (``--checkpoint``, ``--resume-from-store``) to value (None: a bare flag); the
#: flag ``reset`` asks for the ``sqe reset`` command of the same topology instead.
Rerun = Callable[[dict[str, str | None]], str]



@dataclass(frozen=True)
class StreamStart:
    """How a stream starts: the id its checkpoint's batch 0 has, and the offsets to read from
    when the run resumes from the stores (None: the checkpoint's, or startingOffsets)."""

    base: int = 0
    offsets: str | None = None


def partition_offsets(offsets: str) -> str:
    """Spark's offsets of a stream (``{"0": 42}``; the native connector's
    ``{"topic": {"0": 42}}``) as ``startingOffsets`` takes them: ``{"0": 42}``."""
    data = json.loads(offsets)
    if isinstance(data, dict) and len(data) == 1:
        (inner,) = data.values()
        if isinstance(inner, dict):
            data = inner
    return json.dumps(data)


def _stores(commits: Sequence[Commit]) -> str:
    names = [c.store for c in commits]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _root(stream_checkpoint: str | None) -> str | None:
    return stream_checkpoint.rsplit("/", 1)[0] if stream_checkpoint else None


def plan_start(consumer: str, checkpoint: StreamCheckpoint, commits: Sequence[Commit],
               resume: bool, rerun: Rerun) -> StreamStart:
    """How the stream of ``consumer`` starts on ``checkpoint``, given its stores' ``commits``
    (see the module docstring); ``rerun`` formats the commands the paragraph names."""
    root = _root(checkpoint.location) or checkpoint.location
    if not commits:
        if resume and not checkpoint.is_empty():
            raise CheckpointMismatch(f"--resume-from-store starts a new checkpoint from the "
                                     f"stores' records, but {checkpoint.location} holds batches "
                                     "already: give an empty --checkpoint")
        return StreamStart(checkpoint.base())
    last = max(commits, key=lambda c: c.batch_id)
    if checkpoint.is_empty():
        if last.reset and all(c.reset or c.batch_id < last.batch_id for c in commits):
            return StreamStart(last.batch_id + 1)  # startingOffsets, after the stored ids
        if resume:
            return StreamStart(last.batch_id + 1, _resume_offsets(consumer, commits, last, rerun))
        raise CheckpointMismatch(_paragraph(consumer, checkpoint, commits, last, root, rerun,
                                            "has no batch yet"))
    if resume:
        raise CheckpointMismatch(f"--resume-from-store starts a new checkpoint from the stores' "
                                 f"records, but {checkpoint.location} holds batches already: "
                                 "give an empty --checkpoint")
    done = checkpoint.last_committed()
    base = checkpoint.base()
    reached = base + done if done is not None else base - 1
    if last.batch_id > reached + 1 and not last.reset:
        raise CheckpointMismatch(_paragraph(consumer, checkpoint, commits, last, root, rerun,
                                            f"ends at batch {reached}"))
    return StreamStart(base)


def _resume_offsets(consumer: str, commits: Sequence[Commit], last: Commit, rerun: Rerun
                    ) -> str:
    behind = [c for c in commits if c.batch_id != last.batch_id and not c.reset]
    if behind:
        raise CheckpointMismatch(
            f"consumer {consumer!r}: the stores do not agree on its last batch "
            f"({', '.join(f'{c.store}: batch {c.batch_id}' for c in commits)}), so no single "
            "position resumes all of them; run once more on the checkpoint that made those "
            f"commits ({_root(last.checkpoint) or 'not recorded'}) so they catch up")
    if last.offsets is None:
        raise CheckpointMismatch(
            f"consumer {consumer!r}: {_stores(commits)} hold batch {last.batch_id} but not the "
            "source offsets it ended at (it was committed by an earlier version of sqe), so "
            "the run cannot resume from them; run on the checkpoint that made that commit"
            + (f": `{rerun({'--checkpoint': _root(last.checkpoint)})}`" if last.checkpoint
               else ""))
    return partition_offsets(last.offsets)


def _paragraph(consumer: str, checkpoint: StreamCheckpoint, commits: Sequence[Commit],
               last: Commit, root: str, rerun: Rerun, state: str) -> str:
    ended = f" (it ended at source offsets {last.offsets})" if last.offsets else ""
    made = (f", made by the run on checkpoint {last.checkpoint}"
            if last.checkpoint and last.checkpoint != checkpoint.location else "")
    fresh = root if checkpoint.is_empty() else f"{root}-resumed-{last.batch_id}"
    ways = []
    if last.offsets is not None:
        ways.append(f"resume from where the stores are, on an empty checkpoint: "
                    f"`{rerun({'--checkpoint': fresh, '--resume-from-store': None})}`")
    old = _root(last.checkpoint)
    if old and old != root:
        ways.append(f"run on the checkpoint that made those commits: "
                    f"`{rerun({'--checkpoint': old})}`")
    if not ways:  # committed by an earlier version of sqe, which recorded neither
        ways.append("start over on purpose, reading from startingOffsets and writing again "
                    f"what the states hold: `{rerun({'reset': None})}` (it shows what it "
                    "changes first)")
    return (f"checkpoint {checkpoint.location} {state}, but consumer {consumer!r} has "
            f"committed batch {last.batch_id}{ended} to {_stores(commits)}{made}; a run from "
            "this checkpoint would read again what those stores hold, or skip what they lack, "
            f"so it stops before reading anything. Either {', or '.join(ways)}.")


def lost_commits(consumer: str, store: str, held: Commit | None, recorded: int | None,
                 witness: str, accepted: int | None, rerun: Rerun) -> str | None:
    """Refuse the run of ``consumer`` (:class:`StoreBehind`) when its HWM store (``store``, for
    the message) holds an older last batch (``held``; None: none) than the last batch
    ``witness`` (the checkpoint's record, as the message names it) shows committed there
    (``recorded``): the marks of the
    batches in between are gone, and replays of their records would pass the filter.  The
    operator's ``accepted`` batch equal to ``recorded`` lets it go on: the warning to log is
    returned.  None when the store is not behind."""
    if recorded is None or (held is not None and held.batch_id >= recorded):
        return None
    has = f"holds batch {held.batch_id} as its last" if held is not None else "holds no batch"
    lost = f"after batch {held.batch_id}" if held is not None else "up to it"
    first = held.batch_id + 1 if held is not None else 0
    span = f"batch {recorded}" if first == recorded else f"batches {first} to {recorded}"
    what = (f"{consumer}: {store} {has}, but {witness} shows "
            f"batch {recorded} committed there: the store lost the commits {lost} (a failover "
            "to a replica that was behind, or a restart that lost acknowledged writes)")
    if accepted == recorded:
        return (f"warning: {what}; going on without the marks of {span} as asked, so replays "
                "of their records pass the filter once, and Redis rows staged with them are "
                "gone")
    again = rerun({"rebuild": None})
    rebuild = f", or read its marks again from the topic with `{again}`" if again else ""
    raise StoreBehind(
        f"{what}, so replays of the records of {span} would pass the replay filter, and the "
        "run stops before reading anything: restore the store from a "
        f"copy that holds batch {recorded} (its replica or its append-only file) and run "
        f"again{rebuild}, or, to go on without those marks and the Redis rows staged with them, "
        f"`{rerun({'--accept-lost-marks': str(recorded)})}` (docs/troubleshooting.md, "
        "StoreBehind)")
