"""Chunks: messages of one source partition packed into one Kafka record, with a Bloom filter.

:mod:`~sqe.wire.chunk.codec` is the format, one chunk at a time (the scalar reference);
:mod:`~sqe.wire.chunk.pack` packs a task's rows into chunks and
:mod:`~sqe.wire.chunk.arrow` decodes fetched chunks into Arrow columns, both vectorised;
:mod:`~sqe.wire.chunk.bloom` is the filter in a chunk's header.

May import: what :mod:`sqe.wire` may.
"""
