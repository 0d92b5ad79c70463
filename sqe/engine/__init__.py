"""Running a planned topology on Spark Structured Streaming.

Owns what runs per stream (:mod:`~sqe.engine.pipeline`: the source, the pid, the
queries and their sinks), the ``foreachBatch`` body of one micro-batch
(:mod:`~sqe.engine.batch`: admission, then one pass, :mod:`~sqe.engine.one_pass`, or the
per-batch way, :mod:`~sqe.engine.per_batch`: replay accounting, queries, sinks, the HWM
commit), the
streaming queries' life (:mod:`~sqe.engine.runner`), and the
SparkSession (:mod:`~sqe.engine.session`, :mod:`~sqe.engine.prereq`).  States are
written only through the sink protocol of :mod:`state.sink`.

What a batch did and who is told is :mod:`sqe.observe`'s: the engine reports there.

May import: every layer below it (:mod:`sqe.wire`, :mod:`sqe.clients`, :mod:`sqe.lang`,
:mod:`sqe.config`, :mod:`state`, :mod:`sqe.source`, :mod:`sqe.observe`); never :mod:`sqe.api` or
:mod:`sqe.cli`.
"""
