"""The exactly-once ledger: what a consumer has committed, kept apart from what it wrote.

The high-water-mark store (:mod:`~sqe.ledger.hwm`, its Lua scripts in
:mod:`~sqe.ledger.hwm_lua`): per consumer, the highest source offset processed of each
(pid, source partition), the last committed batch id, and the batch's commit record
(:mod:`~sqe.ledger.commits`: the batch id, the source offsets it ended at and the
checkpoint that made it, which every store that fences by batch id keeps).  The source
reads the marks to drop replays; the states stage their rows in it and commit with it;
the engine holds the commit records against the checkpoint before a run reads
anything.  Both the source and the states sit above it: reading never imports writing.

May import: :mod:`sqe.errors`, :mod:`sqe.clients` (the Redis endpoint), :mod:`sqe.config`
and redis-py.
"""
