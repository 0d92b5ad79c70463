"""The Redis states: rows written as strings or hash fields, and aggregates merged by batch.

:mod:`~sqe.state.redis.sink` writes rows (staged in the ledger's store to commit with
the marks, or directly elsewhere); :mod:`~sqe.state.redis.layout` names the keys and
fields; :mod:`~sqe.state.redis.protocol` builds a stage's commands with Arrow;
:mod:`~sqe.state.redis.aggregates` merges Sum, Max and HyperLogLog entries, stored as
:mod:`~sqe.state.redis.aggregate_layout` says.

May import: what :mod:`sqe.state` may.
"""
