"""Running a planned topology on Spark Structured Streaming, in three sub-packages by concern.

* :mod:`sqe.engine.spark`, Spark's plumbing: the SparkSession, classic or Spark Connect
  (:mod:`~sqe.engine.spark.session`, :mod:`~sqe.engine.spark.connect_session`), what SQE asks
  of either (:mod:`~sqe.engine.spark.spark_api`), the machine's prerequisites, the local JVM's
  class archive, the Python that plans and runs SQE's source, the checkpoint directory Spark
  keeps and SQE adds to (:mod:`~sqe.engine.spark.checkpoint`), and the stream writer given
  Arrow on each PySpark release.
* :mod:`sqe.engine.batch`, a micro-batch's execution: what runs per stream
  (:mod:`~sqe.engine.batch.pipeline`), the ``foreachBatch`` body
  (:mod:`~sqe.engine.batch.processor`), the ways a batch is written (the one pass, the
  per-batch way, a hop's function, the ``sqe-hop`` sink) and the HWM commit they end with
  (:mod:`~sqe.engine.batch.commit`).
* :mod:`sqe.engine.run`, a run's lifecycle: the streaming queries' life and clean stop
  (:mod:`~sqe.engine.run.runner`), where each stream starts (start, recovery), the
  checkpoint's lock, changes to the topology, queries started again, triggers, re-planning.

States are written only through the sink protocol of :mod:`state.sink`; what a batch did and
who is told is :mod:`sqe.observe`'s: the engine reports there.

May import: every layer below it (:mod:`sqe.wire`, :mod:`sqe.clients`, :mod:`sqe.lang`,
:mod:`sqe.config`, :mod:`state`, :mod:`sqe.source`, :mod:`sqe.observe`); never :mod:`sqe.api` or
:mod:`sqe.cli`.  Inside, ``spark`` is the bottom, ``batch`` may import ``spark``, and ``run``
both.
"""
