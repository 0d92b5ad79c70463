"""The topology language: SQE's command model and expressions, and what they compile to.

Owns loading and checking topology files in SQE's command model
(:mod:`~sqe.lang.topology`: ``Set``, ``CreateStream``, ``Query``), reading YAML and JSON
documents with syntax errors told as one located line (:mod:`~sqe.lang.documents`), the catalogue of
SQE functions (:mod:`~sqe.lang.functions`), expression trees
(:mod:`~sqe.lang.expressions`), Spark SQL strings and type names read without Spark
(:mod:`~sqe.lang.sql`, :mod:`~sqe.lang.spark_types`), the fields each query reads
(:mod:`~sqe.lang.references`), and their compilation: to Spark Columns and query
DataFrames (:mod:`~sqe.lang.spark_functions`, :mod:`~sqe.lang.compiler`), and to
Arrow filters for the source's post-filter (:mod:`~sqe.lang.post_filter`).  Option
values are not resolved here (:mod:`sqe.config` does that).

May import: :mod:`sqe.errors`, :mod:`sqe.wire`, pydantic, PyYAML, pyarrow, PySpark,
sqlglot (driver side only: :mod:`~sqe.lang.sql` and the modules that import it).
"""
