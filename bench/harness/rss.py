"""The memory of a process tree, read from ``/proc``: every process's parent, name and RSS
(:func:`proc_table`), a process and everything under it (:func:`tree_pids`), and the peak RSS
of a tree by kind of process, sampled in a thread (:class:`TreeSampler`: the Python driver,
the JVM, and Spark's Python workers under it), and its proportional set size when taken
(:func:`tree_pss`: RSS counts the pages Spark's forked Python workers share with their daemon
once in each; PSS splits them, so a tree's sum is what it holds)."""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from dataclasses import dataclass

MB = 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Peaks:
    """Peak RSS (bytes) of a process tree, by kind of process."""

    driver: int = 0  # the root process
    jvm: int = 0  # the java processes under it
    worker: int = 0  # the largest Python process under the JVM
    workers: int = 0  # all Python processes under the JVM together
    tree: int = 0  # everything
    pss: int = 0  # everything's proportional set size when taken (not a peak)
    samples: int = 0

    def mb(self) -> dict[str, float]:
        return {k: round(getattr(self, k) / MB, 1) for k in ("driver", "jvm", "worker", "workers",
                                                             "tree", "pss")}


def proc_table() -> dict[int, tuple[int, str, int]]:
    """pid -> (parent pid, command name, RSS bytes) of every process, from /proc."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError:
            continue
        head, _, rest = text.rpartition(")")
        fields = rest.split()
        comm = head.partition("(")[2]
        table[int(entry.name)] = (int(fields[1]), comm, int(fields[21]) * PAGE)
    return table


def tree_pids(root: int) -> list[int]:
    """``root`` and every process under it (Spark's Python daemon leaves the root's group)."""
    table, children = proc_table(), defaultdict[int, list[int]](list)
    for pid, (ppid, _, _) in table.items():
        children[ppid].append(pid)
    found = [root] if root in table else []
    for pid in found:  # grows while walked
        found += children.get(pid, [])
    return found


def tree_pss(root: int) -> int:
    """The proportional set size (bytes) of ``root`` and everything under it, from each
    process's ``/proc/<pid>/smaps_rollup`` (tens of milliseconds for a JVM: read it seldom)."""
    total = 0
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                rollup = f.read()
        except OSError:  # gone meanwhile
            continue
        for line in rollup.splitlines():
            if line.startswith(b"Pss:"):
                total += int(line.split()[1]) * 1024
                break
    return total


class TreeSampler:
    """Samples the RSS of a process tree every ``interval`` seconds in a thread."""

    def __init__(self, root: int, interval: float = 0.2) -> None:
        self.root, self.interval = root, interval
        self.peaks = Peaks()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        table = proc_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        if self.root not in table:
            return
        p = self.peaks
        tree = jvm = workers = worker = 0
        stack = [(self.root, False)]
        while stack:
            pid, under_jvm = stack.pop()
            _, comm, rss = table[pid]
            tree += rss
            is_jvm = comm.startswith("java")
            if is_jvm:
                jvm += rss
            elif under_jvm and comm.startswith("python"):
                workers += rss
                worker = max(worker, rss)
            stack += [(c, under_jvm or is_jvm) for c in children.get(pid, []) if c in table]
        p.driver = max(p.driver, table[self.root][2])
        p.jvm, p.workers = max(p.jvm, jvm), max(p.workers, workers)
        p.worker, p.tree = max(p.worker, worker), max(p.tree, tree)
        p.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def stop(self) -> Peaks:
        self._stop.set()
        self._thread.join()
        return self.peaks

    def take(self) -> Peaks:
        """The peaks since the last call (or the start), the sampling going on, with the
        tree's PSS now."""
        peaks, self.peaks = self.peaks, Peaks()
        peaks.pss = tree_pss(self.root)
        return peaks
