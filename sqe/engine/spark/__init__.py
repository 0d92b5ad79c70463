"""Spark's plumbing: the session (classic or Spark Connect) and what SQE asks of it, the
machine's prerequisites (Java 17), the local driver JVM's class-data archive and what Spark's
launcher reads, the Python interpreters that plan and run SQE's source, the checkpoint
directory (what Spark keeps there, what SQE adds, the JVM file manager of a local one, whose
classes are in ``java/``), and a Python stream writer given Arrow on every PySpark release.

May import: :mod:`sqe.errors`, :mod:`sqe.version`, :mod:`sqe.logs`, :mod:`sqe.secrets`,
:mod:`sqe.config`, :mod:`sqe.wire`, :mod:`sqe.clients`, :mod:`sqe.source` (which libraries its
deserializers need); PySpark.  Never the batches or a run's lifecycle.
"""
