"""``sqe pipelines``: Spark Declarative Pipelines' ``spark-pipelines``, able to run SQE.

``sqe pipelines run --spec spark-pipeline.yml`` is ``spark-pipelines run --spec
spark-pipeline.yml`` with one difference: its client takes the metrics the Spark Connect
server sends beside a pipeline's events.  pyspark 4.3's client stops the run at the first
such response (``[UNKNOWN_RESPONSE] Unknown response: Plan observed(__python_accumulator__
...)``), and every Python data source -- SQE's ``sqe-kafka`` source and ``sqe-hop`` sink among
them -- sends one: apache/spark#58435 (SPARK-59135) fixes it upstream.  The entry script,
:mod:`sqe.cli.pipelines_entry`, applies that fix where the installed pyspark lacks it, then
runs pyspark's own pipelines command line, on the JVM that ``spark-pipelines`` starts
(``org.apache.spark.deploy.SparkPipelines``).  Before a run it removes the temporary files a
checkpoint write that failed left in the pipeline's storage, when that is on this machine
(:mod:`sqe.engine.spark.failed_writes`: with them a flow whose first batch failed on a full disk
never starts again).  A spec's ``storage`` path is read relative to the spec's directory
(:func:`storage_uri`: pyspark 4.3's server takes only a URI).  On a local master the
pipeline's Python processes run the launcher of :mod:`sqe.engine.spark.worker_python`, which
imports the installed pyspark instead of compiling Spark's ``pyspark.zip`` again in each.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml

from sqe.engine.spark.failed_writes import clear_failed_writes
from sqe.engine.spark.session import python_env
from sqe.errors import PrerequisiteError

__all__ = ["add_parser", "pipeline_storage", "spark_pipelines_command", "storage_uri"]

#: The names spark-pipelines looks for in a directory and its parents, without ``--spec``.
SPEC_NAMES = ("spark-pipeline.yaml", "spark-pipeline.yml")


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
           **python_env(_local_master(args), os.environ)}
    entry = Path(__file__).with_name("pipelines_entry.py")
    return ([str(home / "bin" / "spark-class"), "org.apache.spark.deploy.SparkPipelines",
             str(entry), *args], env)


def _local_master(args: list[str]) -> bool:
    """Whether ``spark-pipelines ARGS`` runs on a local master (its default, or ``--master
    local[...]``), whose Python processes all run on this machine."""
    master = _option(args, "--master")
    return master is None or master.startswith("local")


def _option(args: list[str], name: str) -> str | None:
    """The value spark-pipelines' ``ARGS`` give option ``name`` (``--name VALUE`` or
    ``--name=VALUE``), or None."""
    value = next((a.removeprefix(f"{name}=") for a in args if a.startswith(f"{name}=")), None)
    if name in args[:-1]:
        value = args[args.index(name) + 1]
    return value


def pipeline_storage(args: list[str], cwd: Path) -> Path | None:
    """The directory on this machine of the storage of the pipeline that ``spark-pipelines
    ARGS`` runs from ``cwd`` (its ``--spec``, else the spec it finds in ``cwd`` or a parent);
    None for storage elsewhere (another file system's URI) or no spec to read, which
    spark-pipelines then says itself."""
    given = _option(args, "--spec")
    spec = Path(given) if given is not None else next(
        (d / name for d in (cwd, *cwd.parents) for name in SPEC_NAMES if (d / name).is_file()),
        None)
    if spec is None or not (cwd / spec).is_file():
        return None
    try:
        doc = yaml.safe_load((cwd / spec).read_text(encoding="utf-8"))
    except (OSError, UnicodeError, yaml.YAMLError):
        return None  # spark-pipelines refuses the spec in its own words
    storage = doc.get("storage") if isinstance(doc, dict) else None
    if not isinstance(storage, str):
        return None
    parts = urlsplit(storage_uri(storage, cwd / spec))
    return Path(unquote(parts.path)) if parts.scheme == "file" else None


def storage_uri(storage: str, spec: Path) -> str:
    """A spec's ``storage`` as the pipeline's server takes it: a URI as it is, a path (which
    pyspark 4.3's server refuses, ``PIPELINE_STORAGE_ROOT_INVALID``: "must be an absolute
    path with a URI scheme") as the ``file:`` URI of that directory, a relative one relative
    to the directory of ``spec``, the file that names it, as its ``libraries`` are."""
    if urlsplit(storage).scheme:
        return storage
    return (spec.parent / storage).resolve().as_uri()


def _run(args: argparse.Namespace) -> int:
    import importlib.util

    import pyspark

    if importlib.util.find_spec("pyspark.pipelines") is None:
        raise PrerequisiteError(f"sqe pipelines runs Spark Declarative Pipelines, which came in "
                                f"pyspark 4.1; this is pyspark {pyspark.__version__}")
    storage = pipeline_storage(list(args.args), Path.cwd()) if args.args[:1] == ["run"] else None
    removed = clear_failed_writes(storage) if storage is not None else []
    if removed:
        print(f"sqe pipelines: removed {len(removed)} temporary file(s) that checkpoint writes "
              f"which failed (a full disk, say) left under {storage}; a flow whose first batch "
              "failed that way would not start with them there", file=sys.stderr)
    command, env = spark_pipelines_command(list(args.args))
    os.execve(command[0], command, env)  # the pipeline's process from here on
    return 1  # not reached
