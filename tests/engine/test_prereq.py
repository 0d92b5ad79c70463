"""Prerequisite checks fail with one sentence that says what to do."""

from __future__ import annotations

import pytest

from sqe.cli.local_services import free_port, wait_for_kafka
from sqe.engine.spark.prereq import java_version, require_java
from sqe.errors import PrerequisiteError


def _fake_java(tmp_path, version_line: str):
    bin_dir = tmp_path / "jdk" / "bin"
    bin_dir.mkdir(parents=True)
    java = bin_dir / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return tmp_path / "jdk"


def test_this_machine_has_java_17_or_newer():
    found = java_version()
    assert found is not None and found[0] >= 17
    require_java()


@pytest.mark.parametrize("line,major", [('openjdk version "1.8.0_292"', 8),
                                        ('openjdk version "11.0.2" 2019-01-15', 11)])
def test_old_java_is_refused_with_a_sentence(tmp_path, monkeypatch, line, major):
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path, line)))
    assert java_version()[0] == major
    with pytest.raises(PrerequisiteError, match=f"Java 17\\+ is required by Spark, but .* is Java {major}"):
        require_java()


def test_missing_java_is_refused_with_a_sentence(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PrerequisiteError, match="no java was found on PATH or in JAVA_HOME"):
        require_java()


def test_a_broker_that_never_answers_is_reported():
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(PrerequisiteError, match=f"Kafka at {address} did not become ready in 2 s"):
        wait_for_kafka(address, timeout=2)


def test_a_jvm_that_exits_before_it_starts_is_one_sentence(tmp_path):
    import os
    import subprocess
    import sys

    from tests.support import ROOT

    # a java that answers -version like Java 17, then runs nothing (as a JVM that cannot
    # resolve its host name ends)
    env = dict(os.environ, JAVA_HOME=str(_fake_java(tmp_path, 'openjdk version "17.0.9"')))
    done = subprocess.run([sys.executable, "-m", "sqe.cli.main", "run",
                           str(ROOT / "topologies" / "hello.yaml"), "--once",
                           "--checkpoint", str(tmp_path / "ck")],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "error: Spark's JVM exited before it started; its own output just above says why" \
        in done.stderr
    assert "Traceback" not in done.stderr, done.stderr
