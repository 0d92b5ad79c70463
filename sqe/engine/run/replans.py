"""Streams planned again in a run for the JSON field types their batches learned
(:mod:`sqe.engine.batch.learned_types`).

A stream's :class:`~sqe.engine.batch.processor.BatchProcessor` sets
:attr:`~sqe.engine.batch.processor.BatchProcessor.replan` when a batch learned types its plan does not
read.  :meth:`Replans.check` then plans the stream with them while its query still runs,
stops the query between two batches and starts the new one from the same checkpoint (a batch
the old query began and did not finish is read again and written once: its commit decides).
A stream planned again :data:`REPLANS` times in one run (its types keep changing) is run the
per-batch way for the rest of the run.  A run of what is there now (``sqe run --once``) is not
planned again: its next run starts planned with the types its batches learned.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from sqe.engine.batch.pipeline import StreamPipeline
from sqe.engine.batch.processor import BatchProcessor
from sqe.engine.run.query_starts import QueryStarts
from sqe.engine.run.start import PreparedStream

__all__ = ["REPLANS", "Launch", "Replans", "fresh_states"]

log = logging.getLogger("sqe")

#: How often a stream is planned again in a run before its batches infer their types each on
#: its own.
REPLANS = 4
#: How long a replan waits for the batch being written to end before it tries again later.
_IDLE_WAIT_S = 5.0

#: Makes a stream's processor and what starts its query: (stream, pipeline, learning).
Launch = Callable[[PreparedStream, StreamPipeline, bool],
                  tuple[BatchProcessor, str, Callable[[], Any]]]


def fresh_states(p: StreamPipeline, built: Sequence[StreamPipeline]) -> StreamPipeline:
    """Stream ``p`` with the states of the same stream of ``built`` (pipelines made anew from
    its topology): a state a batch used holds clients a new plan's tasks cannot carry."""
    [again] = [b for b in built if b.stream.streamName == p.stream.streamName]
    return replace(p, steps=again.steps)


class Replans:
    """The run's streams that learn their types, planned again when their batches ask."""

    def __init__(self, launch: Launch, streams: Sequence[PreparedStream],
                 processors: list[BatchProcessor], starts: QueryStarts,
                 fresh: Callable[[StreamPipeline], StreamPipeline]) -> None:
        self._launch = launch
        self._fresh = fresh  # the pipeline with states not yet used (their clients unmade)
        self._streams = streams
        self._processors = processors  # kept up to date in place, as starts.queries
        self._starts = starts
        self._counts = [0] * len(streams)

    def check(self) -> None:
        """Plan again each stream whose batches asked for it."""
        for i, proc in enumerate(self._processors):
            if proc.replan is not None:
                self._replan(i, proc, proc.replan)

    def _replan(self, i: int, proc: BatchProcessor, types: dict[str, str]) -> None:
        query = self._starts.queries[i]
        if not query.isActive:  # done (``once``): the next run starts with the types
            proc.replan = None
            return
        began = time.monotonic()
        self._counts[i] += 1
        again = self._counts[i] < REPLANS
        consumer = proc.p.consumer
        if not again:
            log.warning(f"warning: {consumer}: the types of its JSON fields changed {REPLANS} "
                        "times in this run; its batches infer them each on its own for the rest "
                        "of the run (declare them in jw.sqe.spout.fields to plan it once)")
        base = self._fresh(self._streams[i].pipeline)  # the new plan's tasks carry its states
        new, _, starter = self._launch(self._streams[i], base.with_learned(types) if again
                                       else base, again)
        if not proc.wait_idle(_IDLE_WAIT_S):  # a long batch: planned again after it
            self._counts[i] -= 1
            return
        stopped = time.monotonic()
        query.stop()
        proc.close()
        self._processors[i] = new
        self._starts.restart(i, starter)
        log.info(f"{consumer}: planned again in {time.monotonic() - began:.1f} s (its query "
                 f"stopped for {time.monotonic() - stopped:.1f} s of it)")
