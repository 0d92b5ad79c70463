"""A process's wall clock stepped for real: libfaketime preloaded into it (and its children),
its offset read from a file at each call, so a test or the nemesis steps it forward or back
while the process runs.  The monotonic clock is left alone, as an NTP step or a VM resumed
leaves it.

The library is the one the ``libfaketime`` package ships (Debian's 0.9.10 fails Python's
``time.sleep`` with EINVAL once its monotonic clock is left alone).  A Python driver of Spark
is stepped alone: the JVM it starts runs through a wrapper of ``java`` (``JAVA_HOME``) without
the library, so Spark's JVM and its Python workers keep the real clock (under libfaketime a
JVM runs some fifteen times slower: a batch of 1,000 records took 142 s instead of 6 s).

Example::

    clock = SteppedClock(tmp_path / "clock")
    subprocess.Popen(command, env={**os.environ, **clock.env()})
    clock.step(-300)   # five minutes back
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["SteppedClock", "faketime_library"]


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

    def env(self, spark: bool = False) -> dict[str, str]:
        """The environment that makes a Python process (and its children) read this clock;
        ``spark``: but not the JVM it starts (see the module docstring)."""
        library = faketime_library()
        if library is None:
            raise RuntimeError("libfaketime is not installed (pip install libfaketime)")
        env = {"LD_PRELOAD": str(library), "FAKETIME_TIMESTAMP_FILE": str(self.path),
               "FAKETIME_CACHE_DURATION": "1", "DONT_FAKE_MONOTONIC": "1"}
        java = shutil.which("java")
        if not spark or java is None:
            return env
        home = self.path.parent / f"{self.path.name}-jdk"
        (home / "bin").mkdir(parents=True, exist_ok=True)
        script = home / "bin" / "java"
        script.write_text(f'#!/bin/sh\nexec env -u LD_PRELOAD {os.path.realpath(java)} "$@"\n')
        script.chmod(0o755)
        return {**env, "JAVA_HOME": str(home)}
