"""The executors' relative Python path on the driver (Spark's --archives recipe), and the
sentence for a Python worker that Spark cannot start.  The whole path runs on a real cluster
in tests/engine/test_cluster.py; these hold its parts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sqe.engine.run.failure import describe_failure, python_not_started
from sqe.engine.spark.planner_python import bridge_planner_python, relative_python
from sqe.errors import PrerequisiteError


def test_only_a_relative_path_missing_where_it_runs_needs_a_bridge(tmp_path):
    assert relative_python("./environment/bin/python", tmp_path).as_posix() == \
        "environment/bin/python"
    assert relative_python("environment/bin/python", tmp_path).as_posix() == \
        "environment/bin/python"
    assert relative_python(sys.executable, tmp_path) is None  # absolute
    assert relative_python("python3", tmp_path) is None  # looked up on PATH
    assert relative_python("../env/bin/python", tmp_path) is None  # outside: not ours to make
    (tmp_path / "environment" / "bin").mkdir(parents=True)
    (tmp_path / "environment" / "bin" / "python").touch()
    assert relative_python("./environment/bin/python", tmp_path) is None  # cluster mode


def test_the_bridge_runs_this_python_and_is_undone(tmp_path):
    undo = bridge_planner_python("./environment/bin/python", tmp_path)
    assert undo is not None
    done = subprocess.run(["./environment/bin/python", "-c",
                           "import sys, sqe; print(sys.prefix)"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == sys.prefix, done.stderr
    undo()
    assert os.listdir(tmp_path) == []


def test_a_bridge_that_cannot_be_made_is_one_sentence(tmp_path):
    (tmp_path / "environment").mkdir()  # something else of that name is there
    with pytest.raises(PrerequisiteError, match=r"PYSPARK_PYTHON is ./environment/bin/python, "
                                                r".* holds no environment/bin/python"):
        bridge_planner_python("./environment/bin/python", tmp_path)
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(PrerequisiteError, match="from a writable directory"):
            bridge_planner_python("./environment/bin/python", locked)


def test_a_python_worker_spark_cannot_start_is_one_sentence():
    jvm = ('py4j.protocol.Py4JJavaError: An error occurred while calling o93.collect.\n'
           ': org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in '
           'stage 1.0 failed 4 times, most recent failure: Lost task 0.3 (TID 4) '
           '(127.0.0.1 executor 0): java.io.IOException: Cannot run program '
           '"./environment/bin/python" (in directory "/srv/spark/work/app-1/0"): error=2, '
           'No such file or directory\n\tat java.base/java.lang.ProcessBuilder.start')
    said = python_not_started(jvm)
    assert said is not None and "\n" not in said
    assert said.startswith("Spark could not start the Python worker ./environment/bin/python "
                           "(looked for in /srv/spark/work/app-1/0: No such file or directory)")
    assert describe_failure(RuntimeError(jvm), []) == said
    assert python_not_started("java.io.IOException: Stream closed") is None
    executors = ("Lost task 0.3 in stage 1.0 (TID 4) (127.0.0.1 executor 0): java.io.IOException"
                 ': Cannot run program "./environment/bin/python": error=2, No such file or '
                 "directory")
    assert "(looked for in the executors' working directories: No such file or directory)" in \
        python_not_started(executors)
    assert "(looked for in the driver's working directory: Permission denied)" in \
        python_not_started('Cannot run program "py/bin/python": error=13, Permission denied')


@pytest.mark.parametrize("name", ["ReplicaLagError", "BadRecordError", "StateError"])
def test_a_query_failure_of_any_sqe_error_class_is_its_sentence_alone(name):
    """Over Spark Connect the failure is the JVM's text around the Python worker's traceback;
    an error of SQE's own classes is said as its sentence, without the class name."""
    jvm = ("org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
           '  File "batch.py", line 1, in commit\n'
           f"sqe.errors.{name}: load.yaml: the sentence\n\tat org.apache.spark.Foo(Foo.java:1)")
    assert describe_failure(RuntimeError(jvm), []) == "load.yaml: the sentence"
