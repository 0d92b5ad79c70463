"""Processes and ports on this machine, for ``sqe services``: is a port free, who holds it, does a
recorded process still run, and stopping one by PID.

Linux answers these from ``/proc``: a listening socket's inode from ``/proc/net/tcp`` and
``tcp6``, then the ``/proc/<pid>/fd`` entry that links to ``socket:[inode]``; a process's start
time from ``/proc/<pid>/stat`` (so a PID the kernel gave to another process since is not taken
for the one recorded).  Elsewhere a port's owner is "another process" and a PID is alive when
``kill(pid, 0)`` says so.

    >>> port_is_free(0)
    True
"""

from __future__ import annotations

import errno
import ipaddress
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Holder", "alive", "port_holder", "port_is_free", "start_time", "terminate",
           "wait_gone"]

_PROC = Path("/proc")
_LISTEN = "0A"


@dataclass(frozen=True)
class Holder:
    """The process that listens on a port: its PID and name, when they can be read."""

    pid: int | None = None
    name: str | None = None

    def __str__(self) -> str:
        if self.pid is None:
            return "another process"
        return f"{self.name or 'a process'} (pid {self.pid})"


def port_is_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:``port`` without ``localhost`` clients
    reaching another one on [::1]:``port`` (port 0: always)."""
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do
            try:
                probe.bind((host, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return False  # no IPv6 on this machine (EADDRNOTAVAIL...): nothing there
    return True


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1])
    address = ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
    return address.ipv4_mapped or address


def _listening_inodes(port: int) -> list[int]:
    """Inodes of the sockets listening on ``port`` on a loopback or wildcard address."""
    inodes = []
    for table in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            host, _, hex_port = fields[1].partition(":")
            if fields[3] != _LISTEN or int(hex_port, 16) != port:
                continue
            address = _address(host)
            if (address.is_loopback or address.is_unspecified) and int(fields[9]):
                inodes.append(int(fields[9]))
    return inodes


def _pids() -> list[int]:
    try:
        return sorted(int(p.name) for p in _PROC.iterdir() if p.name.isdigit())
    except OSError:
        return []


def _holding(pid: int, links: set[str]) -> bool:
    try:
        return any(os.readlink(fd) in links for fd in (_PROC / str(pid) / "fd").iterdir())
    except OSError:  # another user's process, or gone meanwhile
        return False


def port_holder(port: int) -> Holder:
    """The process listening on 127.0.0.1 or [::1] (or every address) at ``port``."""
    links = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not links:
        return Holder()
    for pid in _pids():
        if _holding(pid, links):
            try:
                name = (_PROC / str(pid) / "comm").read_text().strip()
            except OSError:
                name = None
            return Holder(pid, name)
    return Holder()


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the process name, or ``None``."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), ``None`` when unknown or not running."""
    fields = _stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def alive(pid: int, started: int | None = None) -> bool:
    """Whether ``pid`` runs (a zombie does not) and, given ``started``, is the process that
    started then rather than a later one the PID was reused for."""
    if pid <= 0:
        return False
    if _PROC.joinpath("self").exists():
        fields = _stat(pid)
        if fields is None or fields[0] in ("Z", "X"):
            return False
        return started is None or start_time(pid) == started
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_gone(pid: int, started: int | None, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``pid`` to end; whether it did."""
    deadline = time.monotonic() + timeout
    while alive(pid, started):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def terminate(pid: int, started: int | None, timeout: float = 10.0) -> bool:
    """SIGTERM ``pid`` (the recorded process only), SIGKILL after ``timeout`` seconds; whether it
    was running."""
    if not alive(pid, started):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
        if not wait_gone(pid, started, timeout):
            os.kill(pid, signal.SIGKILL)
            wait_gone(pid, started, timeout)
    except ProcessLookupError:
        pass
    return True
