"""Two Redis servers behind fault proxies, one the other's replica, watched by a Sentinel.

:class:`ProxiedRedisPair` starts ``redis-server`` twice (AOF on, every write on disk before
the reply), each behind its own :class:`~support.fault_proxy.FaultProxy`, and makes
every address anyone learns a proxy's: each server announces its proxy's port to the
other (``replica-announce-port``), the replica replicates through the primary's proxy, and
the Sentinel watches the primary through it, so the Sentinel names proxies to clients before
and after any number of failovers.  A fault on a proxy is then a fault of the network
between that server and everyone: SQE, its replica and the Sentinel.

:meth:`~ProxiedRedisPair.fail_over` kills the primary (SIGKILL), optionally with the replica
behind (paused, its link cut, so the last writes never reach it), waits for the Sentinel to
promote the replica and starts the killed server again as the new primary's replica.  Every
process is stopped by its PID.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from sqe.cli.local_services import LocalService, free_port
from support.fault_proxy import FaultProxy
from support.secured_redis import start_redis, start_sentinel

SERVICE = "sqe-nemesis"
#: When the Sentinel takes a silent primary for down (see support/replicated_redis.py).
DOWN_AFTER_MS = 5000
_PERSISTENT = ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]


@dataclass
class Node:
    """One server: its directory, its own port, the proxy in front of it and its process."""

    name: str
    directory: Path
    port: int
    proxy: FaultProxy
    service: LocalService | None = None

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self, primary: Node | None) -> None:
        args = [*_PERSISTENT, "--replica-announce-ip", "127.0.0.1",
                "--replica-announce-port", str(self.proxy.port)]
        if primary is not None:
            args += ["--replicaof", "127.0.0.1", str(primary.proxy.port)]
        self.service, _ = start_redis(self.directory, args, {}, port=self.port)

    def signal(self, number: int) -> None:
        if self.service is not None and self.service.process.poll() is None:
            os.kill(self.service.process.pid, number)


class ProxiedRedisPair:
    """The pair and its Sentinel; ``url`` reaches the primary through the Sentinel."""

    def __init__(self, directory: Path) -> None:
        self.nodes: list[Node] = []
        for name in ("a", "b"):
            port = free_port()
            self.nodes.append(Node(name, directory / name, port,
                                   FaultProxy(("127.0.0.1", port))))
        self.nodes[0].start(None)
        self.nodes[1].start(self.nodes[0])
        self.sentinel, self.sentinel_port = start_sentinel(
            directory / "sentinel", self.nodes[0].proxy.port, SERVICE, DOWN_AFTER_MS)
        self.url = f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{SERVICE}/0"
        self.failovers = 0
        self.wait_replica_online(self.nodes[0])

    def _ask_sentinel(self, *args: str) -> object:
        sentinel = redis.Redis(host="127.0.0.1", port=self.sentinel_port, socket_timeout=5)
        try:
            return sentinel.execute_command("SENTINEL", *args)
        finally:
            sentinel.close()

    def primary(self) -> Node:
        """The server the Sentinel names as the primary now."""
        addr = self._ask_sentinel("get-master-addr-by-name", SERVICE)
        port = int(addr[1])  # type: ignore[index]
        return next(n for n in self.nodes if n.proxy.port == port)

    def other(self, node: Node) -> Node:
        return self.nodes[1] if node is self.nodes[0] else self.nodes[0]

    def client(self) -> redis.Redis:
        """A client of the primary, through the Sentinel's answer (its proxy)."""
        node = self.primary()
        return redis.Redis(host="127.0.0.1", port=node.proxy.port, socket_timeout=10)

    def wait_replica_online(self, primary: Node, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                state = primary.client().info("replication").get("slave0", {}).get("state")
            except redis.RedisError:
                state = None
            if state == "online":
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis {primary.name}'s replica did not come online")
            time.sleep(0.2)

    def fail_over(self, lagging: bool, timeout: float = 90.0) -> float:
        """Kill the primary (with its replica cut off first when ``lagging``), wait for the
        Sentinel to promote the replica, restart the killed server as its replica; the
        seconds until the promoted server took writes."""
        old = self.primary()
        new = self.other(old)
        began = time.monotonic()
        if lagging:
            new.signal(signal.SIGSTOP)
            try:
                old.client().execute_command("CLIENT", "KILL", "TYPE", "replica")
            except redis.RedisError:
                pass  # the link is down already
        old.signal(signal.SIGKILL)
        if old.service is not None:
            old.service.process.wait(10)
        if lagging:
            new.signal(signal.SIGCONT)
        deadline = began + timeout
        while True:
            try:
                promoted = self.primary() is new and \
                    new.client().info("replication")["role"] == "master"
            except (redis.RedisError, StopIteration):
                promoted = False
            if promoted:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Sentinel did not promote redis {new.name}: "
                                   f"{self.sentinel.log_tail()}")
            time.sleep(0.2)
        healed = time.monotonic() - began
        old.start(new)
        self.failovers += 1
        self.wait_replica_online(new)
        return healed

    def stop(self) -> None:
        for node in self.nodes:
            node.signal(signal.SIGCONT)
            if node.service is not None:
                node.service.stop()
            node.proxy.stop()
        self.sentinel.stop()
