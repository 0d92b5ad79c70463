"""Reading: what a stream reads and what becomes of each record before the queries see it.

Shaped like :mod:`state`: one sub-package or module per kind of source, and what they share
beside them. The Kafka source (:mod:`~sqe.source.kafka`: the ``sqe-kafka`` data source, its
offsets, its rows, its lag, and Spark's own connector as the alternative), FIXED rows
(:mod:`~sqe.source.fixed`); shared: the replay filter (:mod:`~sqe.source.replay`), the marks
a task reads for the pairs it meets (:mod:`~sqe.source.marks`), the deserializers that turn
values into fields (:mod:`~sqe.source.deserializers`), dead letters
(:mod:`~sqe.source.dead_letters`) and the planner process's quiet end
(:mod:`~sqe.source.hang_up`).

May import: :mod:`sqe.errors`, :mod:`sqe.secrets`, :mod:`sqe.wire`, :mod:`sqe.clients`,
:mod:`sqe.lang` (the post-filter), :mod:`sqe.config`, and :mod:`sqe.ledger.hwm` (the marks a
batch is filtered by).
"""
