"""Hostile and malformed input: the shipped topologies and ``conf/local.yaml``, mutated the way
people break files (a line or key deleted, a value retyped, a key misspelt, the file cut
short, garbage bytes, wrong nesting), given to ``sqe validate``.

Whatever the mutation, validation ends with exit 0 or 2, never a traceback, and every line it
prints is located: it starts with the file it is about, then a line and column or a key
path.  The property runs in-process through :func:`sqe.cli.main.main`, the function the
command calls; a handful of fixed mutations run as real subprocesses for the exit codes and
stderr a user sees.
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings

from sqe.cli.main import main
from tests.support import ROOT
from tests.support.mutations import mutations

TOPOLOGIES = sorted((ROOT / "topologies").glob("*.yaml"))
CONFIG = ROOT / "conf" / "local.yaml"
WORKDIR = Path(tempfile.mkdtemp(prefix="sqe-mutations-"))


def _validate(argv: list[str]) -> tuple[int, str]:
    """``sqe validate`` in this process: its exit code and stderr.  Any exception escaping
    the command fails the test with its traceback."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["validate", *argv])
    return code, err.getvalue()


def _located(line: str, files: list[str]) -> bool:
    """Whether an ``error:``/``warning:`` line starts with one of ``files`` and then says
    where: ``:LINE:COLUMN:``, a section ``(SQE):``/``(Spark):``, or ``: `` and a command or key
    path."""
    body = re.sub(r"^(error|warning): ", "", line)
    return any(re.match(re.escape(f) + r"(:\d+:\d+: | \((SQE|Spark)\): |: \S)", body)
               for f in files)


def _check(code: int, err: str, files: list[str]) -> None:
    assert code in (0, 2), err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert all(line.startswith(("error: ", "warning: ")) for line in lines), err
    assert all(_located(line, files) for line in lines), err
    assert (code == 2) == any(line.startswith("error: ") for line in lines), err


@pytest.mark.parametrize("original", TOPOLOGIES, ids=[p.name for p in TOPOLOGIES])
def test_mutated_topologies_fail_with_located_lines_only(original):
    target = WORKDIR / original.name

    @settings(max_examples=100, derandomize=True, database=None)
    @given(mutations(original.read_text()))
    def check(data: bytes) -> None:
        target.write_bytes(data)
        code, err = _validate([str(target), "--config", str(CONFIG)])
        _check(code, err, [str(target)])

    check()


def test_a_mutated_config_fails_with_located_lines_only():
    target = WORKDIR / "local.yaml"
    topologies = [str(p) for p in TOPOLOGIES]

    @settings(max_examples=150, derandomize=True, database=None)
    @given(mutations(CONFIG.read_text()))
    def check(data: bytes) -> None:
        target.write_bytes(data)
        code, err = _validate([*topologies, "--config", str(target)])
        _check(code, err, [str(target), *topologies])

    check()


def _sqe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sqe.cli.main", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def _mutate(path: Path, old: str, new: str, tmp_path: Path) -> str:
    text = path.read_text()
    assert old in text
    target = tmp_path / path.name
    target.write_text(text.replace(old, new, 1))
    return str(target)


def test_the_command_exits_2_with_one_located_line_per_problem(tmp_path):
    load = ROOT / "topologies" / "load.yaml"
    topology = _mutate(load, "keyname.fields: [region]", "keyname.fields: null", tmp_path)
    out = _sqe("validate", topology)
    assert (out.returncode, out.stderr) == (2, (
        f"error: {topology}: command 2 (Query) -> insertInto -> options: "
        "jw.sqe.state.redis.keyname.fields: null is not a value; expected a list of strings (or "
        "comma-separated string); leave the key out for the default ([])\n"))

    topology = _mutate(load, "      stateType: TRANSACTIONAL\n", "      stateType: [\n", tmp_path)
    out = _sqe("validate", topology)
    assert out.returncode == 2
    assert re.fullmatch(re.escape(f"error: {topology}:") + r"\d+:\d+: not valid YAML: [^\n]+\n",
                        out.stderr), out.stderr

    config = _mutate(CONFIG, "  spark.ui.enabled: false", "  spark.ui.enabled: false\n"
                     "  spark.sql.shuffle.partition: 4", tmp_path)
    out = _sqe("validate", "topologies/hello.yaml", "--config", config)
    assert (out.returncode, out.stderr) == (0, (
        f"warning: {config} (Spark): spark.sql.shuffle.partition is not a known Spark setting; "
        "did you mean spark.sql.shuffle.partitions?\n"))

    (tmp_path / "garbage.yaml").write_bytes(CONFIG.read_bytes()[:40] + b"\xff\x00" +
                                            CONFIG.read_bytes()[40:])
    out = _sqe("validate", "topologies/hello.yaml", "--config", str(tmp_path / "garbage.yaml"))
    assert (out.returncode, out.stderr) == (2, (
        f"error: {tmp_path / 'garbage.yaml'}:1:41: not UTF-8 text: byte 0xff (invalid start "
        "byte)\n"))
