"""``sqe pipelines``: Spark Declarative Pipelines' ``spark-pipelines``, able to run SQE.

``sqe pipelines run --spec spark-pipeline.yml`` is ``spark-pipelines run --spec
spark-pipeline.yml`` with one difference: its client takes the metrics the Spark Connect
server sends beside a pipeline's events.  pyspark 4.3's client stops the run at the first
such response (``[UNKNOWN_RESPONSE] Unknown response: Plan observed(__python_accumulator__
...)``), and every Python data source -- SQE's ``sqe-kafka`` source and ``sqe-hop`` sink among
them -- sends one: apache/spark#58435 (SPARK-59135) fixes it upstream.  The entry script,
:mod:`sqe.cli.pipelines_entry`, applies that fix where the installed pyspark lacks it, then
runs pyspark's own pipelines command line, on the JVM that ``spark-pipelines`` starts
(``org.apache.spark.deploy.SparkPipelines``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from sqe.errors import PrerequisiteError

__all__ = ["add_parser", "spark_pipelines_command"]


def add_parser(sub: Any) -> None:
    """``sqe pipelines ARGS...``: the arguments are spark-pipelines' own."""
    p = sub.add_parser("pipelines", help="run a Spark Declarative Pipeline (spark-pipelines, "
                       "with the fix its client needs for SQE's Python data sources)")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="spark-pipelines' arguments, e.g. run --spec spark-pipeline.yml")
    p.set_defaults(func=_run)


def spark_pipelines_command(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that run ``spark-pipelines ARGS`` through SQE's
    entry script."""
    import pyspark

    home = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent).resolve()
    lib = home / "python" / "lib"
    zips = sorted(str(z) for z in lib.glob("py4j-*-src.zip"))
    path = os.pathsep.join([*zips, str(home / "python"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "SPARK_HOME": str(home), "PYTHONPATH": path.rstrip(os.pathsep),
           "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    entry = Path(__file__).with_name("pipelines_entry.py")
    return ([str(home / "bin" / "spark-class"), "org.apache.spark.deploy.SparkPipelines",
             str(entry), *args], env)


def _run(args: argparse.Namespace) -> int:
    import importlib.util

    import pyspark

    if importlib.util.find_spec("pyspark.pipelines") is None:
        raise PrerequisiteError(f"sqe pipelines runs Spark Declarative Pipelines, which came in "
                                f"pyspark 4.1; this is pyspark {pyspark.__version__}")
    command, env = spark_pipelines_command(list(args.args))
    os.execve(command[0], command, env)  # the pipeline's process from here on
    return 1  # not reached
