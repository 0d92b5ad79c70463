"""A process's wall clock stepped for real: libfaketime preloaded into it (and its children),
its offset read from a file at each call, so a test or the nemesis steps it forward or back
while the process runs.  The monotonic clock is left alone, as an NTP step or a VM resumed
leaves it.

The library is the one the ``libfaketime`` package ships (Debian's 0.9.10 fails Python's
``time.sleep`` with EINVAL once its monotonic clock is left alone).

Example::

    clock = SteppedClock(tmp_path / "clock")
    subprocess.Popen(command, env={**os.environ, **clock.env()})
    clock.step(-300)   # five minutes back
"""

from __future__ import annotations

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

    def env(self) -> dict[str, str]:
        """The environment that makes a process (and its children) read this clock."""
        library = faketime_library()
        if library is None:
            raise RuntimeError("libfaketime is not installed (pip install libfaketime)")
        return {"LD_PRELOAD": str(library), "FAKETIME_TIMESTAMP_FILE": str(self.path),
                "FAKETIME_NO_CACHE": "1", "DONT_FAKE_MONOTONIC": "1"}
