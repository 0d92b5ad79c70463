"""Where a stream starts: agreed with its checkpoint and its stores before its query starts.

:func:`prepare_stream` applies what the stores' last commit left to apply, holds the
checkpoint against what the stores committed (:func:`~sqe.engine.run.recovery.plan_start`: a
checkpoint behind them starts from their offsets only when asked, one ahead of the HWM store is
said), and pins batch 0 to the offsets it first started at, so a batch run again reads what it
read the first time.  ``sqe run`` prepares each stream so (:mod:`sqe.engine.run.runner`), and so
does a hop of plain PySpark code (:class:`sqe.hop.Hop`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqe.config.plan import TopologyPlan
from sqe.engine.batch.pipeline import StreamPipeline
from sqe.engine.run.recovery import Rerun, lost_commits, plan_start
from sqe.engine.spark.checkpoint import StreamCheckpoint
from sqe.errors import ProgressError
from sqe.ledger.commits import Commit
from sqe.observe.progress import last_report, progress_path

__all__ = ["PreparedStream", "default_rerun", "prepare_stream"]

log = logging.getLogger("sqe")


def default_rerun(plan: TopologyPlan) -> Rerun:
    """How a refusal names the commands that recover (``sqe reset`` for the topology, or the
    same run with other arguments)."""
    def hint(flags: dict[str, str | None]) -> str:
        if "rebuild" in flags:  # a hop of plain PySpark has no topology file to name
            return "hop.rebuild_marks() before hop.read(spark)" \
                if plan.topology.path.startswith("hop ") else \
                f"sqe hwm rebuild {plan.topology.path} --name {plan.topology.name}"
        if "reset" in flags:
            return f"sqe reset {plan.topology.path} --name {plan.topology.name}"
        return "the same run with " + ", ".join(
            f"{k.lstrip('-').replace('-', '_')}="
            f"{'True' if v is None else v if v.isdigit() else repr(v)}"
            for k, v in flags.items())

    return hint


@dataclass
class PreparedStream:
    """One stream of a run: its pipeline, checkpoint and the id its batch 0 has."""

    pipeline: StreamPipeline
    checkpoint: StreamCheckpoint
    base: int


def prepare_stream(p: StreamPipeline, checkpoint: StreamCheckpoint, resume: bool,
                   rerun: Rerun, accept_lost: int | None = None) -> PreparedStream:
    """Stream ``p`` ready to start on ``checkpoint``: what failed checkpoint writes left there
    removed (:mod:`sqe.engine.spark.failed_writes`), what its stores left applied, its start
    agreed with them (:func:`~sqe.engine.run.recovery.plan_start`), its HWM store not behind the
    checkpoint unless the operator accepts losing the marks up to batch ``accept_lost``
    (:func:`~sqe.engine.run.recovery.lost_commits`), and its batch 0 pinned to the offsets it
    first started at."""
    removed = checkpoint.files.clear_failed_writes()  # else a failed first batch stops it
    if removed:
        log.warning(f"{p.consumer}: removed {len(removed)} temporary file(s) that checkpoint "
                    f"writes which failed (a full disk, say) left in {checkpoint.location}")
    p.stores.finish_applying()
    commits = p.stores.committed()
    start = plan_start(p.consumer, checkpoint, commits, resume, rerun)
    if p.filtering:
        _check_hwm_store(p, checkpoint, commits, accept_lost, rerun)
    if start.base != checkpoint.base():
        checkpoint.set_base(start.base)
    if start.offsets is not None:
        log.info(f"{p.consumer}: resuming from what its stores committed: batch {start.base} "
                 f"reads from offsets {start.offsets}")
        p = p.starting_at(start.offsets)
    if p.source is not None:  # batch 0 starts where it started, however often it runs
        pinned = checkpoint.start_offsets()
        if checkpoint.is_empty():
            pinned = start.offsets or p.initial_offsets()
            if pinned is not None:
                checkpoint.set_start_offsets(pinned)
        if pinned is not None and pinned != start.offsets:
            p = p.starting_at(pinned, checkpoint.start_file)
    return PreparedStream(p, checkpoint, start.base)


def _check_hwm_store(p: StreamPipeline, checkpoint: StreamCheckpoint, commits: list[Commit],
                     accept_lost: int | None, rerun: Rerun) -> None:
    """Refuse to start when the HWM store holds fewer batches than the checkpoint shows it
    committed, unless that loss is accepted (then say so;
    :func:`~sqe.engine.run.recovery.lost_commits`).  The witness is the progress file of ``sqe
    run``'s checkpoint; where there is none (a hop of plain PySpark, a checkpoint off the local
    file system), Spark's commit log: a batch Spark counts as done was committed to the HWM
    store first."""
    store = f"the HWM store at {p.settings.hwm_store.display}"
    recorded, witness = _progress_witness(p, checkpoint)
    last = checkpoint.last_batch() if recorded is None else None
    if last is not None:
        recorded = last[0]
        witness = f"Spark's commit log of the checkpoint ({checkpoint.location}/commits)"
    held = next((c for c in commits if c.store.startswith("HWM store")), None)
    lost = lost_commits(p.consumer, store, held, recorded, witness, accept_lost, rerun)
    if lost is not None:
        log.warning(lost)


def _progress_witness(p: StreamPipeline, checkpoint: StreamCheckpoint
                      ) -> tuple[int | None, str]:
    """The last batch the checkpoint's progress file shows committed to the HWM store, and
    the file as a refusal names it; None when there is no such file or record (a file that
    cannot be read is warned of)."""
    root = checkpoint.location.rsplit("/", 1)[0]
    where = progress_path(root)
    if where is None:
        return None, ""
    try:
        last = last_report(where, lambda r: r.stream == p.stream.streamName and r.filtering)
    except ProgressError as exc:
        log.warning(f"warning: {p.consumer}: cannot check the HWM store at "
                    f"{p.settings.hwm_store.display} against the progress file: {exc}")
        return None, ""
    return (last.batch_id if last else None), f"the checkpoint's progress file ({where})"
