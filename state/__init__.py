"""States: where topologies write.

Per DESIGN.md section 4 this package holds one module per destination: the
Kafka state (keyed, partitioned, chunked writes), the Redis state and the
high-water-mark store, and the Postgres state.  The ``stateName`` values a
topology may use are validated by :mod:`sqe.lang.topology`
(KAFKA, REDIS, POSTGRES, CONSOLE).
"""

__all__: list[str] = []
