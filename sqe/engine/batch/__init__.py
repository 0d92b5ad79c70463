"""A micro-batch's execution: what runs for each stream (its source, pid, queries and sinks),
its streaming DataFrame, the batch protocol the ways implement (read, filter, write,
commit), the ``foreachBatch`` body (admission, then the way the batch is
written), the ways themselves (the one pass planned once per run, the per-batch way, a hop's
own function, the ``sqe-hop`` sink), bad and late records, the hops a join reads, the keys of
rows no single record stands behind, and the HWM commit every way ends with.

May import: :mod:`sqe.engine.spark` and the layers below the engine; never a run's lifecycle
(:mod:`sqe.engine.run`), which starts the queries these batches belong to.
"""
