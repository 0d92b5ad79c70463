"""What SQE asks of a SparkSession that a classic session and a Spark Connect one answer
differently: the one place that tells them apart.

A classic session runs Spark's JVM inside this process (``sparkContext``, ``_jvm``,
``_jsc``); a Spark Connect session (``sc://host:port``: ``pyspark-client``, Databricks
serverless and shared compute, Spark Declarative Pipelines) talks to a server over gRPC,
and each of those attributes raises ``JVM_ATTRIBUTE_NOT_SUPPORTED``.  Everything that
needs the JVM goes through here and has an answer, or nothing to do, over Connect:

* :func:`is_connect`, :func:`session_conf` (Spark conf: ``getConf()`` or ``spark.conf``);
* :func:`describe_jobs` (job descriptions in Spark's UI: classic only) and
  :func:`give_tasks` (a local property for the tasks of the jobs started next: classic only);
* :func:`driver_directory` and :func:`python_exec` (the driver JVM's working directory and the
  executors' interpreter path, for :mod:`sqe.engine.spark.planner_python`: classic only, since a
  Connect server starts its own Python);
* :func:`default_file_system` (``fs.defaultFS``, for where a relative checkpoint is);
* :func:`optimized_once` (a frame over its own optimized plan: classic only, over Connect the
  frame as it is).
"""

from __future__ import annotations

from typing import Any

from sqe.errors import RunError

__all__ = ["default_file_system", "describe_jobs", "driver_directory", "give_tasks",
           "is_connect", "optimized_once", "python_exec", "session_conf"]


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def session_conf(spark: Any) -> list[tuple[str, str]]:
    """Every Spark conf entry the session has, as (key, value)."""
    if is_connect(spark):
        return [(str(k), str(v)) for k, v in spark.conf.getAll.items()]
    return [(str(k), str(v)) for k, v in spark.sparkContext.getConf().getAll()]


def describe_jobs(spark: Any, text: str) -> None:
    """Name the Spark jobs started next (Spark's UI and event log show the name; over Connect,
    jobs are named by the server, and this does nothing)."""
    if not is_connect(spark):
        spark.sparkContext.setJobDescription(text)


def give_tasks(spark: Any, key: str, value: str) -> None:
    """Give the tasks of the Spark jobs this thread starts next local property ``key``
    (``TaskContext.getLocalProperty``); classic sessions only: Spark Connect has no way to."""
    if is_connect(spark):
        raise RunError(f"local property {key} cannot be set over Spark Connect")
    spark.sparkContext.setLocalProperty(key, value)


def driver_directory(spark: Any) -> str | None:
    """The working directory of the driver's JVM, or None over Connect (the server's)."""
    if is_connect(spark):
        return None
    return str(spark._jvm.java.lang.System.getProperty("user.dir"))


def python_exec(spark: Any) -> str | None:
    """The interpreter path Spark starts Python workers with, or None over Connect."""
    return None if is_connect(spark) else str(spark.sparkContext.pythonExec)


def default_file_system(spark: Any) -> str:
    """The session's ``fs.defaultFS`` (``file:///`` when none is set)."""
    if is_connect(spark):
        value = spark.conf.get("spark.hadoop.fs.defaultFS", None)
    else:
        value = spark._jsc.hadoopConfiguration().get("fs.defaultFS")
    return str(value or "file:///")


def optimized_once(frame: Any) -> Any:
    """``frame`` over the logical plan Spark's optimizer makes of it (classic sessions; over
    Spark Connect, ``frame``).  A streaming query optimizes its plan again at every batch:
    given one already optimized (projections collapsed, expressions simplified), each batch's
    optimizer finds nothing to change: Spark's planning of a one-pass batch took 41-47 ms
    instead of 69-77 on the project's 2-core machine under 1,000 events/s
    (bench/results/batch-cost.md, "A trigger's fixed costs, cut")."""
    spark = frame.sparkSession
    if is_connect(spark):
        return frame
    from pyspark.sql import DataFrame

    # the optimizer itself: a streaming frame's QueryExecution refuses to be optimized outside
    # a running query
    state = spark._jsparkSession.sessionState()
    plan = state.optimizer().execute(frame._jdf.queryExecution().analyzed())
    dataset = spark._jvm.org.apache.spark.sql.classic.Dataset
    return DataFrame(dataset.ofRows(spark._jsparkSession, plan), spark)
