"""A run's lifecycle: the streaming queries' life and clean stop, why a query failed (one
sentence, SQE's error), where each stream starts
(agreed with its checkpoint and its stores), the checkpoint's lock, what each change to the
topology does, queries whose Python did not connect back started again, triggers and what a
batch spends outside SQE, streams planned again with learned types, and lost marks given back.

May import: :mod:`sqe.engine.spark`, :mod:`sqe.engine.batch` and the layers below the engine.
"""
