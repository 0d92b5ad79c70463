"""Creating the SparkSession: the one place the project builds one.

Spark's Python workers must run the same interpreter as the driver, or
they fail to import this package; :func:`build_session` sets
``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` to :data:`sys.executable` unless the
user has set them (for a local master, through the launcher of
:mod:`sqe.engine.spark.worker_python`, which spares every Python process compiling pyspark),
checks for Java 17+, and applies Spark conf from config files.  Local runs
get a small, quiet default (2 shuffle partitions, adaptive execution and UI off), and
their JVM maps Spark's classes from an archive (:mod:`sqe.engine.spark.class_archive`).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkRuntimeError
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import SparkSession

from sqe.engine.spark.checkpoint import SQE_JAR
from sqe.engine.spark.class_archive import archive_options, note_jvm
from sqe.engine.spark.connect_session import connect_session
from sqe.engine.spark.launcher import spark_default_set
from sqe.engine.spark.prereq import require_java
from sqe.engine.spark.spark_api import is_connect
from sqe.engine.spark.worker_python import local_worker_python
from sqe.errors import OptionError, RunError
from sqe.logs import LOG_LEVEL_ENV, log_level, spark_log_level
from sqe.secrets import SPARK_REDACTION_REGEX
from sqe.source.deserializers import DUPLICATE_KEYS

__all__ = ["build_session", "python_env", "quiet_failure_traces", "remote_of", "LOCAL_DEFAULTS",
           "LOCAL_JIT",
           "PLANNING_DEFAULTS", "READING_DEFAULTS", "REDACTION_DEFAULTS",
           "FAILURE_LOGGERS", "PYTHON_FAILURE_LOGGERS"]

#: Spark conf for a local session when nothing else is given.  Adaptive query execution is
#: off: with 2 shuffle partitions it has nothing to coalesce, and it re-plans every shuffle as
#: extra small jobs, 0.07 s of a micro-batch of replays only (0.42 s instead of 0.49 s a batch,
#: bench/results/throughput.md).
LOCAL_DEFAULTS: Mapping[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.adaptive.enabled": "false",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
}

#: The JIT option of a local run's JVM (its driver, which is its executor too) unless
#: ``spark.driver.defaultJavaOptions`` is set (a config's ``Spark:`` map, ``--conf``,
#: ``PYSPARK_SUBMIT_ARGS`` or ``spark-defaults.conf``): Java's client compiler only.  The
#: server compiler spends about half a core per JVM for minutes on Spark's per-batch code
#: (planning, scheduling: a little of each of thousands of methods), which runs meanwhile in a
#: slower, profiling tier; on 2 cores that doubled the chain's p99 over its first minute.
#: SQE's data path runs its records in Python and Arrow, so the server compiler's faster code
#: gains little there (bench/results/latency.md, "The client compiler by default").
LOCAL_JIT = "-XX:TieredStopAtLevel=1"
_DRIVER_DEFAULT_JAVA = "spark.driver.defaultJavaOptions"
_DRIVER_CLASS_PATH = "spark.driver.extraClassPath"

#: Spark conf set on every session unless given: the keys whose values Spark masks in plans,
#: the UI and event logs include SQE's secrets (reader options such as hwm.password and
#: kafka.sasl.password, and the HWM store's URL).
REDACTION_DEFAULTS: Mapping[str, str] = {
    "spark.redaction.regex": SPARK_REDACTION_REGEX,
    "spark.sql.redaction.options.regex": SPARK_REDACTION_REGEX,
}

#: Spark conf set on every classic session unless given (over Spark Connect it is a static
#: setting of the server, set where the server starts).  PySpark's DataFrame debugging (on by
#: default) wraps each DataFrame and function call in work of its own: it walks the Python
#: stack, tries to import IPython, and makes four more calls into the JVM (py4j) to record
#: and clear the call's origin.  SQE builds each micro-batch's plan anew, so this was a quarter of the
#: driver's time planning a batch; SQE's failures name the topology's steps themselves.
PLANNING_DEFAULTS: Mapping[str, str] = {
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # a run reports its own progress (sqe run --progress); Spark's stage bars would cut
    # into those lines, on a cluster as locally
    "spark.ui.showConsoleProgress": "false",
    # Below Int.MaxValue (64 MB by default), Spark measures the Arrow batch it sends a Python
    # worker after every row it adds, walking every vector of every struct column: a tenth of
    # a one-pass task's JVM time (a state's columns are structs).  At Int.MaxValue it skips
    # the check; a batch still holds at most spark.sql.execution.arrow.maxRecordsPerBatch rows.
    "spark.sql.execution.arrow.maxBytesPerBatch": "2147483647",
}

#: Spark conf set on every session unless given, classic or over Spark Connect: how Spark reads
#: a record.  A JSON object that repeats a key keeps the key's last value (as Python's and
#: JavaScript's readers do), where Spark's default makes the whole value unreadable; the
#: ``sqe-kafka`` source reads declared JSON fields that way (:mod:`sqe.source.json_fields`),
#: and a stream's deserializer takes the fields it read only when Spark agrees.
READING_DEFAULTS: Mapping[str, str] = {DUPLICATE_KEYS: "true"}


_LOG4J = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark: %p %c{{1}}: %m%n%ex
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
"""


def _log4j_options(level: str) -> str:
    """The driver's JVM options that make log4j start at ``level`` (Spark's defaults print
    WARN lines while the JVM starts, before any session could change its level)."""
    path = Path(tempfile.gettempdir()) / f"sqe-log4j2-v4-{level.lower()}.properties"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_LOG4J.format(level=level))
        tmp.replace(path)
    return f"-Dlog4j2.configurationFile={path.as_uri()}"


def python_env(local: bool, environ: Mapping[str, str]) -> dict[str, str]:
    """The interpreter settings to add to ``environ``: ``PYSPARK_PYTHON`` (the executors'
    Python workers) and ``PYSPARK_DRIVER_PYTHON`` (the Python processes the driver's JVM starts:
    the lookup of installed data sources, the streaming source's planner), each unless set.
    For a local master both run the launcher of :mod:`sqe.engine.spark.worker_python` (made only
    when used), elsewhere this interpreter."""
    names = [n for n in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON") if n not in environ]
    if not names:
        return {}
    python = local_worker_python() if local else sys.executable
    return {name: python for name in names}


def remote_of(remote: str | None, conf: Mapping[str, str] | None) -> str | None:
    """The Spark Connect server a run asks for: ``remote`` (``--remote``), else
    ``SPARK_REMOTE``, else a config file's ``spark.remote``; None: a classic session."""
    return remote or os.environ.get("SPARK_REMOTE") or (conf or {}).get("spark.remote") or None


def build_session(
    app_name: str = "sqe",
    conf: Mapping[str, str] | None = None,
    master: str | None = None,
    origins: Mapping[str, str] | None = None,
    remote: str | None = None,
) -> SparkSession:
    """Get or create the SparkSession with the project's interpreter for Python workers.

    ``master`` defaults to ``local[*]`` when no master is configured (not under
    ``spark-submit``); ``conf`` (e.g. a config file's ``Spark:`` map) wins over
    :data:`LOCAL_DEFAULTS`.  Spark logs at the level of :mod:`sqe.logs` (errors only
    by default), from the start of a local JVM on.  A value Spark refuses (``abc`` for
    ``spark.sql.shuffle.partitions``) is an :class:`~sqe.errors.OptionError` naming the
    setting and where it came from (``origins``: key -> e.g. ``conf/local.yaml (Spark)``).
    With a Spark Connect server (:func:`remote_of`: ``sc://host:port``), the session is a
    Connect client's (:func:`~sqe.engine.spark.connect_session.connect_session`): no JVM, no Java.
    """
    server = remote_of(remote, conf)
    if server is not None:
        return connect_session(server, app_name, {**READING_DEFAULTS, **(conf or {})},
                               origins or {})
    require_java()
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # launched by spark-submit
    chosen = master or (conf or {}).get("spark.master")  # a config file's Spark: map may
    local = not submitted and (chosen is None or chosen.startswith("local"))
    os.environ.update(python_env(local, os.environ))
    builder = SparkSession.builder.appName(app_name)
    if chosen:
        builder = builder.master(chosen)
    elif not submitted:
        builder = builder.master("local[*]")
        for key, value in LOCAL_DEFAULTS.items():
            builder = builder.config(key, value)
    given = {**REDACTION_DEFAULTS, **PLANNING_DEFAULTS, **READING_DEFAULTS,
             f"spark.executorEnv.{LOG_LEVEL_ENV}": log_level(),
             **(conf or {})}
    if not submitted:  # the JVM starts here: it can start quiet, and from the class archive
        if local:  # SQE's JVM classes (sqe.engine.spark.checkpoint's file manager)
            given[_DRIVER_CLASS_PATH] = os.pathsep.join(
                p for p in (given.get(_DRIVER_CLASS_PATH, ""), str(SQE_JAR)) if p)
        java = given.get("spark.driver.extraJavaOptions", "")
        archive = (archive_options(class_path=given[_DRIVER_CLASS_PATH])
                   if local and _jvm_not_started() else "")
        given["spark.driver.extraJavaOptions"] = " ".join(
            o for o in (_log4j_options(spark_log_level()), archive, java) if o)
        if local and not _set_elsewhere(_DRIVER_DEFAULT_JAVA, given, os.environ):
            given[_DRIVER_DEFAULT_JAVA] = LOCAL_JIT
    for key, value in given.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
        classic = getattr(session, "_jsparkSession", None)
        if classic is not None:
            classic.sessionState()  # the SQL settings are read here: one Spark refuses fails now
    except (Py4JJavaError, CapturedException) as exc:
        refused = _refused_setting(exc, origins or {})
        if refused is None:
            raise
        raise OptionError(refused) from None
    except PySparkRuntimeError as exc:
        if exc.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        raise RunError("Spark's JVM exited before it started; its own output just above says "
                       "why (for example a host name it cannot resolve, or a Java it cannot "
                       "run)") from None
    session.sparkContext.setLogLevel(spark_log_level())
    note_jvm(session)
    return session


def _set_elsewhere(key: str, given: Mapping[str, str], env: Mapping[str, str]) -> bool:
    """Whether Spark setting ``key`` is in ``given``, in ``PYSPARK_SUBMIT_ARGS`` or in the
    ``spark-defaults.conf`` Spark's launcher reads."""
    return key in given or key in env.get("PYSPARK_SUBMIT_ARGS", "") \
        or spark_default_set(key, env)


def _jvm_not_started() -> bool:
    from pyspark import SparkContext

    return SparkContext._gateway is None


def _refused_setting(exc: Exception, origins: Mapping[str, str]) -> str | None:
    """The sentence for a Spark setting whose value Spark refused (its INVALID_CONF_VALUE
    error, anywhere in the JVM exception's causes), or ``None`` for another failure."""
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    while java is not None:
        if java.getClass().getName() == "org.apache.spark.SparkIllegalArgumentException" \
                and str(java.getCondition()).startswith("INVALID_CONF_VALUE"):
            params = java.getMessageParameters()
            name, value = str(params.get("confName")), str(params.get("confValue"))
            text = re.sub(r"^\[[A-Z_.]+\] |\s*SQLSTATE: \w+$", "", str(java.getMessage()))
            reason = text.split(" is invalid. ", 1)[-1].rstrip(".")
            return (f"{origins.get(name, 'Spark conf')}: {name} = {value!r}: Spark refuses it "
                    f"({reason[:1].lower() + reason[1:]})")
        java = java.getCause()
    return None


#: JVM loggers that print the stack trace of a failure the runner reports in one sentence:
#: the query that stops, the task and the task set that failed.
FAILURE_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
    "org.apache.spark.sql.execution.streaming.MicroBatchExecution",
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
)


#: PySpark's loggers that print an analysis error with the JVM's stack trace as one JSON line.
PYTHON_FAILURE_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def quiet_failure_traces(spark: SparkSession) -> None:
    """Silence the JVM and py4j loggers that repeat a failure as a stack trace.

    ``sqe run`` reports every failure as one sentence (``describe_failure``);
    its ``--verbose`` keeps these traces for debugging.
    """
    jvm = None if is_connect(spark) else spark.sparkContext._jvm
    if jvm is None:  # a Spark Connect session: no JVM loggers in this process
        return
    configurator = jvm.org.apache.logging.log4j.core.config.Configurator
    off = jvm.org.apache.logging.log4j.Level.OFF
    for name in FAILURE_LOGGERS:
        configurator.setLevel(name, off)
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    for name in PYTHON_FAILURE_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 10)
