"""The Kafka state: a query's output written to a topic from the executors.

:mod:`~state.kafka.config` is what a query's Kafka state is configured with;
:mod:`~state.kafka.sink` writes (keys, values, filter-value headers or chunks,
through a partitioner), with the executors' task in :mod:`~state.kafka.produce`;
:mod:`~state.kafka.layout` is how its records are laid out
over the topic's partitions, which its stream keeps while a reader may be behind.

May import: what :mod:`state` may.
"""
