"""Formats: how records and their parts look on Kafka and in SQE's Spark frames.

Owns the 20-byte StreamMetadata key and the PID (:mod:`~sqe.wire.keys`),
MurmurHash64A one value at a time and over Arrow columns (:mod:`~sqe.wire.murmur`),
the chunk codec (:mod:`~sqe.wire.chunk.codec`, scalar; vectorised:
:mod:`~sqe.wire.chunk.arrow` reads, :mod:`~sqe.wire.chunk.pack` writes) and its
Bloom filter (:mod:`~sqe.wire.chunk.bloom`), the record headers SQE writes
(:mod:`~sqe.wire.headers`), and the columns every layer agrees on: the source
schema, the tally of counters and the carried StreamMetadata
(:mod:`~sqe.wire.columns`), and Arrow arrays built and read without pandas, for
the code that runs in Spark's Python workers (:mod:`~sqe.wire.arrays`).  Byte-exact
with the original Java SQE where SQE had the format; vectorised code stands beside
its scalar reference.

May import: :mod:`sqe.errors`, NumPy, pyarrow, crc32c and PySpark's column types;
nothing else of the project.
"""
