"""The Redis states: rows written as strings or hash fields, and aggregates merged by batch.

:mod:`~state.redis.sink` writes rows (staged in the ledger's store to commit with
the marks, or directly elsewhere); :mod:`~state.redis.layout` names the keys and
fields; :mod:`~state.redis.protocol` builds a stage's commands with Arrow;
:mod:`~state.redis.aggregates` merges Sum, Max and HyperLogLog entries, stored as
:mod:`~state.redis.aggregate_layout` says.

May import: what :mod:`state` may.
"""
