"""The interpreter Spark's local Python workers run: this one, importing the installed pyspark.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on
every Python worker's ``PYTHONPATH``, then the jar of Spark's core
(``PythonUtils.sparkPythonPath`` adds ``SparkContext.jarOfObject(this)``, from the days
when pyspark travelled inside Spark's assembly jar; today's holds no Python file).
Python does not cache the bytecode of modules imported from a zip, so each worker
daemon and each worker process compiles pyspark again from source -- about 2.5 s of
CPU for what the workers import, paid several times while a local run starts, on a
2-core machine the largest part of the time to the first batch.  And at its first task
each Python process calls ``importlib.invalidate_caches()``, which reads the directory of
each zip on the path again: the core jar's 6,000 entries alone take about 17 ms, twice
(Python keeps an importer for the jar and one for its ``org`` folder).  The zips hold the
same files as the installed ``pyspark`` package next to them, whose bytecode is cached.

:func:`local_worker_python` makes a small launcher that puts a directory holding
only ``pyspark`` and ``py4j`` (links to the installed packages) in place of Spark's two zips,
leaves out the jars of the installed pyspark, and runs :data:`sys.executable`; nothing else
of the worker's path changes.  The
runner uses it for a local master as ``PYSPARK_PYTHON`` (the workers) and
``PYSPARK_DRIVER_PYTHON`` (the Python processes the driver's JVM starts: the lookup of
installed data sources, about 0.5 s less per run, and the streaming source's planner),
each when not set.  On a
cluster the workers run on other machines, where this launcher does not exist:
it is never used there.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
import tempfile
from pathlib import Path

__all__ = ["local_worker_python"]


def _package_dir(name: str) -> Path:
    module = __import__(name)
    return Path(str(module.__file__)).resolve().parent


def local_worker_python() -> str:
    """The launcher's path (made once per interpreter and pyspark), or :data:`sys.executable`
    where it cannot be made (not POSIX, a read-only temp directory)."""
    if os.name != "posix":
        return sys.executable
    links = {name: _package_dir(name) for name in ("pyspark", "py4j")}
    ident = "\0".join(["v3", sys.executable, *map(str, links.values())])
    home = Path(tempfile.gettempdir()) / (
        "sqe-worker-python-" + hashlib.blake2b(ident.encode(), digest_size=6).hexdigest())
    launcher = home / "python"
    if launcher.exists():
        return str(launcher)
    staging = home.with_name(f"{home.name}.{os.getpid()}.tmp")
    try:
        staging.mkdir(parents=True, exist_ok=True)
        for name, target in links.items():
            (staging / name).symlink_to(target, target_is_directory=True)
        path = shlex.quote(str(home))
        zips = shlex.quote(str(links["pyspark"] / "python" / "lib") + "/")
        jars = shlex.quote(str(links["pyspark"] / "jars") + "/")
        (staging / "python").write_text(
            "#!/bin/sh\n"
            "# Spark's local Python workers: pyspark and py4j from the installed packages\n"
            "# (bytecode cached) instead of Spark's zips (compiled again by every worker),\n"
            "# and not Spark's core jar (no Python in it; importlib.invalidate_caches reads\n"
            "# its 6,000 entries again in each new worker).\n"
            f"rest=$(printf '%s' \"$PYTHONPATH\" | tr ':' '\\n' | grep -v -F -e {zips} -e {jars} "
            "| paste -s -d: -)\n"
            f'PYTHONPATH={path}"${{rest:+:$rest}}" '
            f'exec {shlex.quote(sys.executable)} "$@"\n')
        (staging / "python").chmod(0o755)
        staging.rename(home)
    except FileExistsError:  # another run made it first
        _remove(staging)
    except OSError:
        _remove(staging)
        return str(launcher) if launcher.exists() else sys.executable
    return str(launcher)


def _remove(path: Path) -> None:
    if not path.exists():
        return
    for child in path.iterdir():
        child.unlink()
    path.rmdir()
