"""A process's wall clock stepped for real: libfaketime preloaded into it (and its children),
its offset read from a file at each call, so a test or the nemesis steps it forward or back
while the process runs.  The monotonic clock is left alone, as an NTP step or a VM resumed
leaves it.

Python runs with the library the ``libfaketime`` package ships (Debian's 0.9.10 fails
Python's ``time.sleep`` with EINVAL once its monotonic clock is left alone); a JVM with
Debian's multi-threaded one (``apt-get install faketime``: the package's fails Spark's launcher
with "failed to parse FAKETIME timestamp"), through wrappers of ``java`` (``JAVA_HOME``) and of
Spark's Python workers (``PYSPARK_PYTHON``) that pick each its library.

Example::

    clock = SteppedClock(tmp_path / "clock")
    subprocess.Popen(command, env={**os.environ, **clock.env()})
    clock.step(-300)   # five minutes back
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

__all__ = ["JVM_FAKETIME", "SteppedClock", "faketime_library"]

#: Debian's libfaketime for multi-threaded programs, which a JVM runs under.
JVM_FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")


def faketime_library() -> Path | None:
    """The libfaketime the ``libfaketime`` package ships, or None when it is not installed."""
    try:
        import libfaketime
    except ImportError:
        return None
    found = Path(libfaketime.__file__).parent / "vendor/libfaketime/src/libfaketime.so.1"
    return found if found.exists() else None


class SteppedClock:
    """The offset of the processes started with :meth:`env` from the real clock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.step(0)

    def step(self, seconds: float) -> None:
        """Their clock ``seconds`` from the real one from now on (0: the real clock)."""
        self.path.write_text(f"{seconds:+.0f}s\n")

    def env(self, jvm: bool = False) -> dict[str, str]:
        """The environment that makes a Python process (and its children) read this clock;
        ``jvm``: and the JVM it starts, and Spark's Python workers."""
        library = faketime_library()
        if library is None:
            raise RuntimeError("libfaketime is not installed (pip install libfaketime)")
        env = {"LD_PRELOAD": str(library), "FAKETIME_TIMESTAMP_FILE": str(self.path),
               "FAKETIME_NO_CACHE": "1", "DONT_FAKE_MONOTONIC": "1"}
        if not jvm:
            return env
        java = shutil.which("java")
        if not JVM_FAKETIME.exists() or java is None:
            raise RuntimeError(f"a JVM's clock is stepped with {JVM_FAKETIME} "
                               "(apt-get install faketime) and a java on PATH")
        home = self.path.parent / f"{self.path.name}-bin"
        java_home = Path(os.path.realpath(java)).parent.parent
        for name, lib, target in (("jdk/bin/java", JVM_FAKETIME, java_home / "bin/java"),
                                  ("python", library, Path(sys.executable))):
            script = home / name
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_text(f'#!/bin/sh\nLD_PRELOAD={lib} exec {target} "$@"\n')
            script.chmod(0o755)
        return {**env, "JAVA_HOME": str(home / "jdk"), "PYSPARK_PYTHON": str(home / "python")}
