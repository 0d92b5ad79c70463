"""The shipped ``conf/low-latency.yaml`` reaches the JVM: a local run's driver starts with Java's
client JIT compiler only, beside SQE's own JVM options (the config's reasons are in its
comments and in docs/performance.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support import ROOT

_SESSION = """
import json, sys
from sqe.config.settings import load_config
from sqe.engine.session import build_session
spark = build_session("low-latency-test", {**load_config(sys.argv[1]).spark,
                                           "spark.sql.shuffle.partitions": "2"})
print(json.dumps(list(spark.sparkContext._jvm.java.lang.management.ManagementFactory
                      .getRuntimeMXBean().getInputArguments())))
"""


@pytest.mark.spark
def test_the_low_latency_config_gives_the_driver_the_client_compiler_beside_sqes_options():
    # without the suite's own JIT option (tests/conftest.py), which would pass for the config
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", _SESSION, str(ROOT / "conf/low-latency.yaml")],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    args = json.loads(done.stdout.strip().splitlines()[-1])
    assert "-XX:TieredStopAtLevel=1" in args
    assert any(a.startswith("-Dlog4j2.configurationFile=") for a in args), args
