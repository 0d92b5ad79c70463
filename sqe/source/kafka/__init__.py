"""The ``sqe-kafka`` source: SQE's Kafka reader for Spark, a Python data source that needs no JVM
connector.

Owns its options and the offset ranges of one task (:mod:`~sqe.source.kafka.config`), where
each micro-batch begins and ends (:mod:`~sqe.source.kafka.offsets`), planning on the driver and
reading on the executors (:mod:`~sqe.source.kafka.source`), what ``read()`` makes of fetched
records (:mod:`~sqe.source.kafka.rows`), a stream's lag (:mod:`~sqe.source.kafka.lag`), and
Spark's own Kafka connector as the alternative (:mod:`~sqe.source.kafka.native`).

    spark.dataSource.register(KafkaSource)
    spark.readStream.format("sqe-kafka").options(**opts).load()

May import what :mod:`sqe.source` may.
"""

from sqe.source.kafka.source import KafkaSource, KafkaStreamReader, read_range

__all__ = ["KafkaSource", "KafkaStreamReader", "read_range"]
