"""Reading: what a stream reads and what becomes of each record before the queries see it.

Owns the ``sqe-kafka`` data source (:mod:`~sqe.source.config`: its options and
ranges; :mod:`~sqe.source.kafka`: planning on the driver, reading on the
executors), what ``read()`` makes of fetched records (:mod:`~sqe.source.rows`:
replays dropped, chunks skipped by the HWM or the Bloom filter, decoded and
post-filtered; :mod:`~sqe.source.dead_letters`), the marks a task reads for the
pairs it meets (:mod:`~sqe.source.marks`), the replay filter itself
(:mod:`~sqe.source.replay`), Spark's own Kafka connector as an alternative
(:mod:`~sqe.source.native`), FIXED rows (:mod:`~sqe.source.fixed`) and the
deserializers that turn values into fields (:mod:`~sqe.source.deserializers`).

May import: :mod:`sqe.errors`, :mod:`sqe.wire`, :mod:`sqe.lang` (the post-filter),
:mod:`sqe.config`, and :mod:`sqe.ledger.hwm` (the marks a batch is filtered by).
"""
