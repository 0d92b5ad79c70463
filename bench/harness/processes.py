"""The child processes of a benchmark: ``sqe run``, the plain and quixstreams programs, the
part-scripts.  Each runs with this tree's code first on its path (:func:`child_env`), from the
repository's root, its output in files under a logs folder.

* :func:`run_process`: a command run to its end, timed from start to exit, its tree's RSS
  sampled (:mod:`bench.harness.rss`), its last stdout line read as JSON (:class:`Proc`); a
  non-zero exit is a :class:`~bench.harness.BenchError` with its last ``error:`` line.
* :class:`Background`: a long-running command in a session of its own, stopped by SIGTERM
  (``graceful``) or killed with everything under it, and asked whether it died unbidden;
  :class:`SqeProcess`, a long-running ``sqe run`` of a topology on its checkpoint (restarted
  on it), its RSS sampled, its new batches read from its progress file.
* :func:`sqe_command`, the ``sqe run`` command line; :func:`read_progress`, the batches of its
  progress file; :class:`SqeRun`, one ``sqe run`` to its end and its batches.
* :func:`last_error`, a stderr log's last sentence; :func:`quix_interpreter`, the Python that
  runs the quixstreams programs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.harness import ROOT, BenchError
from bench.harness.rss import Peaks, TreeSampler, tree_pids

LOCAL_CONFIG = ROOT / "conf" / "local.yaml"


def child_env(tree: Path | None = None) -> dict[str, str]:
    """This tree's code (or ``tree``'s) first on the children's path.  Spark's workers run what
    ``sqe run`` picks (this interpreter, through its local launcher) unless PYSPARK_PYTHON is
    set."""
    path = [str(tree or ROOT),
            *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])]
    # Without PYTHONSAFEPATH, ``python -m`` puts the working directory (this tree) before
    # PYTHONPATH, and another tree's sqe would never be imported.
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path),
            **({"PYTHONSAFEPATH": "1"} if tree is not None else {})}


@dataclass
class Proc:
    """One finished child process."""

    seconds: float  # wall clock, start to exit
    started: float  # time.time() just before it started
    out: dict[str, Any]  # its last stdout line, when JSON
    peaks: Peaks
    stderr: str


def run_process(command: list[str], what: str, logs: Path, tree: Path | None = None,
                sample: bool = True) -> Proc:
    """Run ``command`` to its end (its output into files under ``logs``), sampling its tree's
    RSS unless not ``sample``; ``tree``: a source tree whose ``sqe`` the command runs instead of
    this one's.  A non-zero exit is a BenchError naming ``what``."""
    logs.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:6]
    out_path, err_path = logs / f"{tag}.out", logs / f"{tag}.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        started = time.time()
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                   env=child_env(tree), cwd=ROOT)
        sampler = TreeSampler(process.pid) if sample else None
        try:
            code = process.wait()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            peaks = sampler.stop() if sampler is not None else Peaks()
        seconds = time.perf_counter() - start
    stdout = out_path.read_text(errors="replace")
    stderr = err_path.read_text(errors="replace")
    if code != 0:
        raise BenchError(f"{what} exited {code}: {last_error(err_path)}")
    last_line = (stdout.strip().splitlines() or [""])[-1]
    try:
        parsed = json.loads(last_line) if last_line.startswith("{") else {}
    except ValueError:
        parsed = {}
    return Proc(seconds, started, parsed, peaks, stderr)


def sqe_command(topology: Path, *mode: str, name: str, checkpoint: Path, config: bool = True,
                conf: list[str] | tuple[str, ...] = ()) -> list[str]:
    """``sqe run`` of ``topology`` in this interpreter: ``mode`` (``--once``, ``--conf`` pairs,
    ...), its ``name`` and ``checkpoint``, ``--config conf/local.yaml`` (unless not
    ``config``), then ``conf`` (the services' ``--conf`` pairs)."""
    return [sys.executable, "-m", "sqe.cli.main", "run", str(topology), *mode, "--name", name,
            "--checkpoint", str(checkpoint),
            *(["--config", str(LOCAL_CONFIG)] if config else []), *conf]


def read_progress(checkpoint: Path) -> list[dict[str, Any]]:
    """The batch entries of ``<checkpoint>/sqe-progress.jsonl`` (an unfinished line ignored)."""
    path = checkpoint / "sqe-progress.jsonl"
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


@dataclass
class SqeRun:
    """One ``sqe run`` process and the batches its progress file gained."""

    proc: Proc
    batches: list[dict[str, Any]]

    @property
    def work(self) -> float:
        return sum(b["duration_s"] for b in self.batches)

    @property
    def first_batch_s(self) -> float | None:
        """Process start to the start of its first batch."""
        return (self.batches[0]["started"] - self.proc.started) if self.batches else None

    @property
    def largest_batch(self) -> int:
        return max((b["records_read"] for b in self.batches), default=0)


def last_error(log: Path) -> str:
    """The last ``error:`` line of a stderr ``log`` (without the prefix), else its last line."""
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    last = ([x for x in lines if x.startswith("error:")] or lines or ["(no output)"])[-1]
    return last.removeprefix("error: ")


class Background:
    """A long-running ``command`` in a session (process group) of its own, its stderr in
    ``<logs>/<name>-<start>.err`` (and its stdout in ``.out``, when ``keep_stdout``)."""

    def __init__(self, name: str, command: list[str], logs: Path, grace: float = 60.0,
                 keep_stdout: bool = True) -> None:
        self.name, self.command, self.logs = name, command, logs
        self.grace, self.keep_stdout = grace, keep_stdout
        self.what = name  # how its exits are told
        self.extra_env: dict[str, str] = {}  # set over child_env() for its process
        self.merge_stdout = False  # its stdout into its stderr's log (where it says why)
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.log = logs / f"{name}-0.err"  # the running process's stderr

    def start(self, now: float = 0.0) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.log = self.logs / f"{self.name}-{self.starts}.err"
        stdout = self.log.with_suffix(".out") if self.keep_stdout else Path(os.devnull)
        with open(self.log, "wb") as err, open(stdout, "wb") as out:
            self.process = subprocess.Popen(self.command,
                                            stdout=err if self.merge_stdout else out, stderr=err,
                                            stdin=subprocess.DEVNULL,
                                            env={**child_env(), **self.extra_env}, cwd=ROOT,
                                            start_new_session=True)

    def end(self, graceful: bool = False) -> int | None:
        """SIGTERM when ``graceful`` (it may finish what it is at, ``grace`` seconds at most),
        then SIGKILL to its group and to everything under it; its exit code."""
        if self.process is None:
            return None
        pids = tree_pids(self.process.pid)
        code: int | None = None
        with suppress(ProcessLookupError, subprocess.TimeoutExpired):
            if graceful:
                self.process.send_signal(signal.SIGTERM)
                code = self.process.wait(self.grace)
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        code = self.process.wait() if code is None else code
        self.process = None
        self.ended()
        return code

    def ended(self) -> None:
        """Called once the process is gone (a subclass lets go of what watched it)."""

    def died(self) -> str | None:
        """Why it ended unbidden (its exit code, its last error line), or None."""
        if self.process is None or self.process.poll() is None:
            return None
        said = last_error(self.log)
        return f"{self.what} exited {self.end()}: {said}"


class SqeProcess(Background):
    """A long-running ``sqe run`` of a topology copy (``--progress off``), restarted on the same
    checkpoint, its tree's RSS sampled every ``rss_every`` seconds (None: not sampled)."""

    def __init__(self, name: str, topology: Path, topic: str, work: Path, conf: list[str],
                 rss_every: float | None = 1.0) -> None:
        checkpoint = work / "checkpoints" / name
        super().__init__(name, sqe_command(topology, "--progress", "off", name=name,
                                           checkpoint=checkpoint, conf=conf),
                         work / "logs", grace=90.0, keep_stdout=False)
        self.what, self.topic, self.checkpoint = f"sqe run {name}", topic, checkpoint
        stream = next(c["CreateStream"] for c in yaml.safe_load(topology.read_text())
                      if "CreateStream" in c)
        self.hwm_key = f"sqe:{{{name}.{stream['streamName']}}}:hwm"
        self.rss_every = rss_every
        self.sampler: TreeSampler | None = None
        self.since, self.seen = 0.0, 0
        self.offsets: dict[str, int] = {}

    def start(self, now: float = 0.0) -> None:
        super().start(now)
        assert self.process is not None
        if self.rss_every is not None:
            self.sampler = TreeSampler(self.process.pid, interval=self.rss_every)
        self.since = now

    def ended(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        self.sampler = None

    def peaks(self) -> Peaks:
        """The peak RSS since the last call."""
        return self.sampler.take() if self.sampler is not None else Peaks()

    def new_batches(self) -> list[dict[str, Any]]:
        """The progress file's batch lines written since the last call."""
        batches = read_progress(self.checkpoint)[self.seen:]
        self.seen += len(batches)
        for b in batches:
            self.offsets = b.get("offsets") or self.offsets
        return batches


def quix_interpreter(python: str | None) -> tuple[str | None, str]:
    """(the interpreter that runs quix_enrich.py, quixstreams' version), or (None, why not)."""
    python = python or sys.executable
    try:
        done = subprocess.run([python, "-c", "import quixstreams; print(quixstreams.__version__)"],
                              capture_output=True, text=True, timeout=120, check=False)
    except OSError as exc:
        return None, f"cannot run {python}: {exc}"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, (f"quixstreams is not importable by {python} ({why}); install it with "
                      "pip install 'sqe-spark[bench]' or give --quix-python")
    return python, done.stdout.strip()
