"""The launcher of Spark's local Python processes (sqe.engine.spark.worker_python), run for real."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyspark

from sqe.engine.spark.worker_python import local_worker_python


def test_the_launcher_imports_the_installed_pyspark_instead_of_sparks_zips(tmp_path):
    launcher = local_worker_python()
    assert launcher != sys.executable and local_worker_python() == launcher  # made once
    zips = Path(pyspark.__file__).resolve().parent / "python" / "lib"
    path = ":".join(str(z) for z in sorted(zips.glob("*.zip")))  # as Spark sets it
    assert path, "the installed pyspark carries no zip: nothing to test"
    core = sorted((zips.parent.parent / "jars").glob("spark-core_*.jar"))  # Spark adds it
    assert core, "the installed pyspark carries no core jar: nothing to test"
    mine = tmp_path / "user.zip"  # anything else on the path stays, in its place
    out = subprocess.run([launcher, "-c", "import sys, pyspark, py4j; print(sys.executable); "
                          "print(pyspark.__file__); print(py4j.__file__); "
                          "print(','.join(p for p in sys.path if p.endswith(('.zip', '.jar'))))"],
                         env={"PYTHONPATH": f"{path}:{core[0]}:{mine}"}, capture_output=True,
                         text=True, check=True)
    executable, spark_file, py4j_file, on_path = out.stdout.split("\n")[:4]
    assert executable == sys.executable
    assert Path(spark_file).resolve() == Path(pyspark.__file__).resolve()
    assert ".zip" not in spark_file and ".zip" not in py4j_file
    # Spark's zips and its core jar are off the path (a new worker's
    # importlib.invalidate_caches reads each zip on it again); the user's stays
    assert str(mine) in on_path.split(",")
    assert not [p for p in on_path.split(",") if p.startswith(str(zips.parent.parent))]


def test_a_local_session_runs_every_python_process_through_the_launcher_unless_told():
    from sqe.engine.spark.session import python_env

    launcher = local_worker_python()
    assert python_env(True, {}) == {"PYSPARK_PYTHON": launcher,
                                    "PYSPARK_DRIVER_PYTHON": launcher}
    assert python_env(False, {}) == {"PYSPARK_PYTHON": sys.executable,
                                     "PYSPARK_DRIVER_PYTHON": sys.executable}
    assert python_env(True, {"PYSPARK_PYTHON": "/opt/py"}) == {"PYSPARK_DRIVER_PYTHON": launcher}
    assert python_env(True, {"PYSPARK_PYTHON": "/a", "PYSPARK_DRIVER_PYTHON": "/b"}) == {}
