"""Creating the SparkSession: the one place the project builds one.

Spark's Python workers must run the same interpreter as the driver, or
they fail to import this package; :func:`build_session` sets
``PYSPARK_PYTHON`` (and the driver's) to :data:`sys.executable` unless the
user has set them, checks for Java 17+, and applies Spark conf from config
files.  Local runs get a small, quiet default (2 shuffle partitions, UI off).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from sqe.config.secrets import SPARK_REDACTION_REGEX
from sqe.engine.prereq import require_java

__all__ = ["build_session", "quiet_failure_traces", "LOCAL_DEFAULTS", "REDACTION_DEFAULTS",
           "FAILURE_LOGGERS"]

#: Spark conf for a local session when nothing else is given.
LOCAL_DEFAULTS: Mapping[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
}

#: Spark conf set on every session unless given: the keys whose values Spark masks in plans,
#: the UI and event logs include SQE's secrets (reader options such as hwm.password and
#: kafka.sasl.password, and the HWM store's URL).
REDACTION_DEFAULTS: Mapping[str, str] = {
    "spark.redaction.regex": SPARK_REDACTION_REGEX,
    "spark.sql.redaction.options.regex": SPARK_REDACTION_REGEX,
}


def build_session(
    app_name: str = "sqe",
    conf: Mapping[str, str] | None = None,
    master: str | None = None,
) -> SparkSession:
    """Get or create the SparkSession with the project's interpreter for Python workers.

    ``master`` defaults to ``local[*]`` when no master is configured (not under
    ``spark-submit``); ``conf`` (e.g. a config file's ``Spark:`` map) wins over
    :data:`LOCAL_DEFAULTS`.
    """
    require_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # launched by spark-submit
    if master:
        builder = builder.master(master)
    elif not submitted:
        builder = builder.master("local[*]")
        for key, value in LOCAL_DEFAULTS.items():
            builder = builder.config(key, value)
    for key, value in {**REDACTION_DEFAULTS, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


#: JVM loggers that print the stack trace of a failure the runner reports in one sentence:
#: the query that stops, the task and the task set that failed.
FAILURE_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
    "org.apache.spark.sql.execution.streaming.MicroBatchExecution",
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
)


def quiet_failure_traces(spark: SparkSession) -> None:
    """Silence the JVM and py4j loggers that repeat a failure as a stack trace.

    ``sqe run`` reports every failure as one sentence (``describe_failure``);
    its ``--verbose`` keeps these traces for debugging.
    """
    jvm = spark.sparkContext._jvm
    if jvm is None:  # a Spark Connect session: no JVM loggers here
        return
    configurator = jvm.org.apache.logging.log4j.core.config.Configurator
    off = jvm.org.apache.logging.log4j.Level.OFF
    for name in FAILURE_LOGGERS:
        configurator.setLevel(name, off)
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
