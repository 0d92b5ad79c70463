"""SQE as a user gets it: the wheel built from this checkout, installed into a fresh virtualenv
that shares nothing with the test's own (no editable install, no repository on its path)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyspark

from tests.support import ROOT


def build_wheel(out: Path) -> Path:
    """The wheel of this checkout, built as ``python -m build --wheel`` builds it (one build
    at a time: each builds in the checkout's ``build/``, and test workers run side by side)."""
    with open(Path(tempfile.gettempdir()) / "sqe-wheel-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out),
                               str(ROOT)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = out.glob("sqe_spark-*.whl")
    return wheel


def user_env(**extra: str) -> dict[str, str]:
    """The test's environment without what points Python at the test's own SQE."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                        "SQE_FAULT", "PYTHONHOME")}
    env.update(extra)
    return env


@dataclass(frozen=True)
class InstalledSqe:
    """A virtualenv with the built wheel installed (with some extras)."""

    wheel: Path
    venv: Path

    def bin(self, name: str) -> Path:
        return self.venv / "bin" / name

    def run(self, *args: str, cwd: Path, timeout: float = 600, **env: str
            ) -> subprocess.CompletedProcess:
        """A command of the virtualenv (``sqe``, ``python``, ``spark-submit``...) in ``cwd``."""
        path = os.pathsep.join([str(self.venv / "bin"), os.environ.get("PATH", "")])
        return subprocess.run([str(self.bin(args[0])), *args[1:]], cwd=cwd, capture_output=True,
                              text=True, timeout=timeout, env=user_env(PATH=path, **env))


def install_wheel(wheel: Path, venv: Path, extras: str) -> InstalledSqe:
    """A new virtualenv at ``venv`` with ``wheel[extras]`` installed by pip, and the PySpark
    the tests run with (so the oldest supported one is tested where CI runs it)."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                           f"{wheel}[{extras}]", f"pyspark=={pyspark.__version__}"],
                          capture_output=True, text=True, timeout=900, env=user_env())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return InstalledSqe(wheel, venv)


def shared_install(root: Path, extras: str) -> InstalledSqe:
    """The wheel installed with ``extras`` under ``root``, built and installed by the first
    caller and reused by the others (test workers that share ``root``, one at a time)."""
    home = root / f"installed-sqe-{extras.replace(',', '-')}"
    with open(root / f"{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = home / "wheel-path"
        if not ready.exists():
            wheel = build_wheel(home / "wheel")
            install_wheel(wheel, home / "venv", extras)
            ready.write_text(str(wheel))
    return InstalledSqe(Path(ready.read_text()), home / "venv")
