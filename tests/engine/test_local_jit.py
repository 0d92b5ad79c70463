"""A local run's JVM starts with Java's client JIT compiler only unless the user's own JVM
options say otherwise (``sqe.engine.spark.session.LOCAL_JIT``: the reasons are there and in
docs/performance.md), beside SQE's own JVM options; ``spark-defaults.conf`` counts as the
user's (``sqe.engine.spark.launcher``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sqe.engine.spark.launcher import spark_default_set
from sqe.engine.spark.session import LOCAL_JIT
from tests.support import ROOT

_SESSION = """
import json, sys
from sqe.engine.spark.session import build_session
spark = build_session("jit-test", {"spark.sql.shuffle.partitions": "2", **json.loads(sys.argv[1])})
print(json.dumps(list(spark.sparkContext._jvm.java.lang.management.ManagementFactory
                      .getRuntimeMXBean().getInputArguments())))
"""


def _jvm_arguments(conf: dict[str, str]) -> list[str]:
    # without the suite's own JIT option (tests/conftest.py), which would pass for the default
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", _SESSION, json.dumps(conf)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.spark
def test_a_local_run_has_the_client_compiler_unless_its_java_options_are_given():
    args = _jvm_arguments({})
    assert LOCAL_JIT in args
    assert any(a.startswith("-Dlog4j2.configurationFile=") for a in args), args
    given = _jvm_arguments({"spark.driver.defaultJavaOptions": "-XX:+UseSerialGC"})
    assert "-XX:+UseSerialGC" in given and LOCAL_JIT not in given, given
    assert any(a.startswith("-Dlog4j2.configurationFile=") for a in given), given


def test_spark_defaults_conf_is_read_for_a_setting(tmp_path):
    key = "spark.driver.defaultJavaOptions"
    env = {"SPARK_CONF_DIR": str(tmp_path)}
    assert not spark_default_set(key, env)  # no file
    (tmp_path / "spark-defaults.conf").write_text(
        "# spark.driver.defaultJavaOptions -XX:+UseSerialGC\n"
        "spark.driver.defaultJavaOptionsX  -Xss4m\n")
    assert not spark_default_set(key, env)  # a comment, another key
    (tmp_path / "spark-defaults.conf").write_text(f"  {key}\t-XX:+UseSerialGC\n")
    assert spark_default_set(key, env)
    (tmp_path / "spark-defaults.conf").write_text(f"{key}=-XX:+UseSerialGC\n")
    assert spark_default_set(key, env)
