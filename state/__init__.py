"""States: where topologies write (the top-level package ``state``, a folder at the
repository's top as the project's card lays it out).

:mod:`~state.sink` holds the protocol every state implements and
:mod:`~state.registry` the states by ``stateName``; each backend is one
sub-package: :mod:`~state.kafka` (keyed, partitioned, chunked writes and the layout
they keep), :mod:`~state.redis` (rows, aggregates merged into Redis, the commands a
stage is written with) and :mod:`~state.postgres` (rows and the batch table, in one
transaction); :mod:`~state.console` prints.  A state commits with the consumer's
ledger (:mod:`sqe.ledger`: the high-water marks and the batch id), which the states sit
above.

May import: :mod:`sqe.errors`, :mod:`sqe.faults`, :mod:`sqe.secrets`, :mod:`sqe.wire`,
:mod:`sqe.clients`, :mod:`sqe.config`,
:mod:`sqe.lang.expressions` (the expression model of a state's options),
:mod:`sqe.ledger` and :mod:`partitioners`; never the query compiler, the sources or the
runner.
"""
