"""States: where topologies write, and the high-water-mark store.

One module per state, each a :class:`~state.sink.Sink` (:mod:`state.sink` holds
the protocol every state implements, :mod:`state.registry` the states by
``stateName``): the Kafka state (keyed, partitioned, chunked writes), the Redis
state and aggregates merged into Redis, the Postgres state, the console.
:mod:`state.hwm` is the Redis store of high-water marks and committed batch ids
that the sinks commit with (its Lua in :mod:`state.hwm_lua`).

May import: :mod:`sqe.errors`, :mod:`sqe.faults`, :mod:`sqe.wire`, :mod:`sqe.config`,
:mod:`sqe.lang.expressions` (the expression model of a state's options) and
:mod:`partitioners`; never the query compiler, the sources or the runner.
"""
