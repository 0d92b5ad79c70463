"""CPU time of process trees and of single processes, read from ``/proc``: what a system's
processes (a step's driver, its JVM and Spark's Python workers under it; a plain program;
a quixstreams Application) and the shared services (the broker, Redis) spent over a window.

:class:`CpuMeter` samples in a thread every ``interval`` seconds: each process of each tree
(found by parent pid from its root, as :mod:`bench.harness.rss` walks them) and each named
process, its user + system time (``/proc/<pid>/stat`` fields 14 and 15).  A process is known
by its pid and start time, so a reused pid is another process.  A process that exits between
two samples (a Python worker Spark retires) loses at most its last ``interval`` of CPU, which
:meth:`CpuMeter.mark` and :meth:`CpuMeter.since` cannot see; the bench's windows are tens of
seconds, the interval half a second.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from dataclasses import dataclass, field

__all__ = ["CpuMeter", "CpuMark", "service_pids"]

HZ = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, start time in ticks, user + system ticks) of ``pid``, or None (gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return int(fields[1]), int(fields[19]), int(fields[11]) + int(fields[12])


def _table() -> dict[int, tuple[int, int, int]]:
    """Every process's :func:`_stat`."""
    table = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (s := _stat(int(entry.name))) is not None:
            table[int(entry.name)] = s
    return table


def service_pids(*ports: int) -> list[int]:
    """The pids of the broker (``noida-db``) and Redis processes serving ``ports`` (found by the
    port in their command lines, as the harness starts them)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if ("noida-db" in cmd or "redis-server" in cmd) and any(
                f" {p} " in f" {cmd} " or f":{p} " in f"{cmd} " for p in ports):
            found.append(int(entry.name))
    return found


@dataclass
class CpuMark:
    """The CPU seconds each label had spent at one moment."""

    seconds: dict[str, float] = field(default_factory=dict)

    def minus(self, earlier: CpuMark) -> dict[str, float]:
        """CPU seconds per label between ``earlier`` and this mark."""
        return {k: round(v - earlier.seconds.get(k, 0.0), 3) for k, v in self.seconds.items()}


class CpuMeter:
    """CPU seconds per label: ``trees`` (label -> root pid: the root and every process under
    it) and ``single`` (label -> pids: those processes alone), sampled every ``interval`` s."""

    def __init__(self, trees: dict[str, list[int]], single: dict[str, list[int]] | None = None,
                 interval: float = 0.5) -> None:
        self.trees, self.single = trees, single or {}
        self.interval = interval
        self._ticks: dict[tuple[int, int], tuple[str, int]] = {}  # (pid, start) -> label, ticks
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cpu-meter")
        self._thread.start()

    def _sample(self) -> None:
        table = _table()
        children: dict[int, list[int]] = defaultdict(list)
        for pid, (ppid, _, _) in table.items():
            children[ppid].append(pid)
        seen: dict[tuple[int, int], tuple[str, int]] = {}
        for label, roots in self.trees.items():
            found = [r for r in roots if r in table]
            for pid in found:  # grows while walked
                found += children.get(pid, [])
            for pid in found:
                seen[(pid, table[pid][1])] = (label, table[pid][2])
        for label, pids in self.single.items():
            for pid in pids:
                if pid in table:
                    seen[(pid, table[pid][1])] = (label, table[pid][2])
        with self._lock:
            self._ticks.update(seen)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def mark(self) -> CpuMark:
        """The CPU seconds per label so far (sampled now)."""
        self._sample()
        with self._lock:
            total: dict[str, float] = {label: 0.0 for label in [*self.trees, *self.single]}
            for label, ticks in self._ticks.values():
                total[label] += ticks / HZ
        return CpuMark(total)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
