"""A local run's checkpoint files are written by SQE's own checkpoint file manager
(``sqe/engine/spark/java/LocalCheckpointFileManager.java``, in ``sqe-spark.jar`` on the driver's
class path): no ``chmod`` process per file, where Spark's FileSystem manager starts one for
each new file without Hadoop's native library.  And the committed jar is what its sources
make."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from sqe.engine.spark.checkpoint import SQE_JAR
from tests.support import ROOT

_WRITE = """
import json, sys
from sqe.engine.spark.checkpoint import FILE_MANAGER_SETTING, use_file_system_manager
from sqe.engine.spark.session import build_session
spark = build_session("manager-test", {"spark.sql.shuffle.partitions": "2"})
chosen = use_file_system_manager(spark, sys.argv[1])
jvm = spark._jvm
Path = jvm.org.apache.hadoop.fs.Path
written = {}
for name in (chosen, "org.apache.spark.sql.execution.streaming.checkpointing."
                     "FileSystemBasedCheckpointFileManager"):
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    conf.set(FILE_MANAGER_SETTING, name)
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager \\
        .create(Path(sys.argv[1]), conf)
    target = Path(sys.argv[1] + "/" + name.rsplit(".", 1)[1])
    out = manager.createAtomic(target, False)
    out.write(bytearray(b'{"batch": 1}'))
    out.close()
    written[name] = manager.getClass().getName()
print(json.dumps({"chosen": chosen, "written": written}))
"""


@pytest.mark.spark
def test_a_local_run_writes_its_checkpoint_files_without_a_chmod_process(tmp_path):
    # a chmod first on PATH that notes each call before doing its work
    bin_dir, calls = tmp_path / "bin", tmp_path / "chmod-calls"
    bin_dir.mkdir()
    chmod = bin_dir / "chmod"
    chmod.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {shutil.which("chmod")} "$@"\n')
    chmod.chmod(0o755)
    ck = tmp_path / "ck"
    ck.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
    env |= {"PYTHONPATH": str(ROOT), "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"}
    done = subprocess.run([sys.executable, "-c", _WRITE, str(ck)], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["chosen"] == "sqe.spark.LocalCheckpointFileManager"
    assert said["written"][said["chosen"]] == said["chosen"]
    for name in ("LocalCheckpointFileManager", "FileSystemBasedCheckpointFileManager"):
        assert (ck / name).read_bytes() == b'{"batch": 1}', name
    noted = calls.read_text().splitlines() if calls.exists() else []
    # Spark's manager ran chmod for its file; SQE's for none
    assert any("FileSystemBasedCheckpointFileManager" in line for line in noted), noted
    assert not any("LocalCheckpointFileManager" in line for line in noted), noted


def test_the_committed_jar_is_what_its_sources_make():
    javac = shutil.which("javac")
    if javac is None:
        pytest.skip("no javac (a JDK) to build sqe-spark.jar with")
    from tools import build_jar

    if build_jar.built_by() != build_jar.javac_version():
        pytest.skip(f"the jar was built by {build_jar.built_by()}, this JDK's is "
                    f"{build_jar.javac_version()}: their bytes may differ")
    assert build_jar.build() == SQE_JAR.read_bytes(), "run tools/build_jar.py"
