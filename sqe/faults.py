"""Fault points: where a crash test (or ``sqe demo``) stops a running topology on purpose.

A real crash is caused from outside (SIGKILL of the process group); what a
test cannot cause from outside is *where* the process is when it dies.  A
fault point fixes that: when the environment names it, the code that reaches
it writes a marker file and then waits, forever, to be killed.

    SQE_FAULT=kafka-state-sent@200   # a Kafka state task, after 200 of its records reached Kafka
    SQE_FAULT=before-commit@K        # a batch (id >= K) whose states are written, before its
                                     # HWM commit
    SQE_FAULT=postgres-before-commit@K  # a Postgres state of batch >= K: rows sent, no COMMIT yet
    SQE_FAULT=before-stage@K         # a batch (id >= K) whose states are open, before its Redis
                                     # rows are staged (the per-batch way and a hop's batch)
    SQE_FAULT_MARKER=/tmp/marker     # written (point, pid) when the point is reached

With ``SQE_FAULT_ACTION=kill`` the process group kills itself with SIGKILL
at the point instead of waiting; with ``SQE_FAULT_ACTION=resume`` the
process goes on once the marker file is deleted (a test stops a server in
between), and the point fires only once per process.  Executors inherit the driver's
environment in local mode, so one variable reaches both.  Without
``SQE_FAULT`` every check is a dictionary lookup and nothing else.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from sqe.errors import OptionError, RunError

__all__ = ["FAULT_ENV", "MARKER_ENV", "ACTION_ENV", "fault_point", "armed",
           "start_with_fault", "wait_for_fault", "kill_group"]

FAULT_ENV = "SQE_FAULT"
MARKER_ENV = "SQE_FAULT_MARKER"
ACTION_ENV = "SQE_FAULT_ACTION"

POINTS = ("kafka-state-sent", "before-commit", "postgres-before-commit", "joined-before-commit",
          "before-stage")


def armed(point: str) -> int | None:
    """The count at which ``point`` fires (0 for "at once"), or None if it is not armed."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return None
    name, _, count = spec.partition("@")
    if name not in POINTS:
        raise OptionError(f"{FAULT_ENV}={spec!r}: unknown fault point {name!r}; "
                         f"known: {', '.join(POINTS)}")
    if name != point:
        return None
    return int(count) if count else 0


_fired: set[str] = set()


def fault_point(point: str, reached: int = 0) -> None:
    """Stop here if ``point`` is armed and ``reached`` is at least its count."""
    at = armed(point)
    if at is None or reached < at or point in _fired:
        return
    action = os.environ.get(ACTION_ENV, "wait")
    marker = os.environ.get(MARKER_ENV)
    if marker:
        tmp = Path(marker + f".{os.getpid()}.tmp")
        tmp.write_text(f"{point} {os.getpid()} {reached}\n")
        tmp.replace(marker)
    if action == "kill":
        os.killpg(os.getpgrp(), signal.SIGKILL)
    if action == "resume":
        _fired.add(point)
        while marker and Path(marker).exists():
            time.sleep(0.05)
        return
    while True:  # wait to be killed from outside
        time.sleep(3600)


def start_with_fault(command: Sequence[str], fault: str, marker: Path, log: Path,
                     action: str = "wait") -> subprocess.Popen:
    """Start ``command`` in a process group of its own with fault ``fault`` armed.

    Its output goes to ``log``; :func:`wait_for_fault` waits for ``marker``.
    """
    marker.unlink(missing_ok=True)
    env = {**os.environ, FAULT_ENV: fault, MARKER_ENV: str(marker), ACTION_ENV: action}
    with open(log, "w") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def wait_for_fault(proc: subprocess.Popen, marker: Path, log: Path,
                   timeout: float = 600.0) -> None:
    """Wait until ``proc`` reaches its fault point; RuntimeError if it ends or times out first."""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            tail = "\n".join(log.read_text().splitlines()[-10:])
            raise RunError(f"the process ended (exit {proc.returncode}) before its fault "
                               f"point; the end of {log}:\n{tail}")
        if time.monotonic() > deadline:
            raise RunError(f"the fault point was not reached within {timeout:.0f} s; "
                               f"see {log}")
        time.sleep(0.2)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group (a driver, its JVM and its Python workers)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(60)
