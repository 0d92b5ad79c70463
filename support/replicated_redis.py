"""A Redis primary with a replica and a Sentinel, as real processes, for failover tests.

:class:`ReplicatedRedis` starts ``redis-server`` (AOF on) as the primary, a second one with
``--replicaof`` it, and ``redis-server --sentinel`` watching them with a short down-after
time; the tests pause the replica (SIGSTOP) or cut it off, kill the primary (SIGKILL), and
wait for the Sentinel to promote the replica.  Every process is stopped by PID at the end.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import redis

from sqe.cli.local_services import LocalService
from support.secured_redis import start_redis, start_sentinel

SERVICE = "sqe-primary"
#: When the Sentinel takes a silent primary for down.  Not less: on a busy machine a replica
#: just promoted (and just resumed from SIGSTOP) can take over a second to answer, and the
#: Sentinel then fails over a second time, to the old primary before it has resynced.
DOWN_AFTER_MS = 5000
_PERSISTENT = ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]


class ReplicatedRedis:
    """A primary, its replica and a Sentinel; ``url`` reaches the primary through it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.primary, self.primary_port = start_redis(directory / "primary", _PERSISTENT, {})
        self.replica, self.replica_port = start_redis(
            directory / "replica", [*_PERSISTENT, "--replicaof", "127.0.0.1",
                                    str(self.primary_port)], {})
        self.sentinel, self.sentinel_port = start_sentinel(directory / "sentinel",
                                                           self.primary_port, SERVICE,
                                                           DOWN_AFTER_MS)
        self.url = f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{SERVICE}/0"
        self.processes: list[LocalService] = [self.primary, self.replica, self.sentinel]
        self.wait_in_sync()

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def wait_in_sync(self, timeout: float = 30.0) -> None:
        """Until the replica is connected and the Sentinel knows it."""
        deadline = time.monotonic() + timeout
        sentinel = self.client(self.sentinel_port)
        try:
            while True:
                info = self.client(self.primary_port).info("replication")
                known = sentinel.execute_command("SENTINEL", "replicas", SERVICE)
                if info.get("slave0", {}).get("state") == "online" and known:
                    return
                assert time.monotonic() < deadline, f"the replica did not connect: {info}"
                time.sleep(0.2)
        finally:
            sentinel.close()

    def pause_replica(self) -> None:
        os.kill(self.replica.process.pid, signal.SIGSTOP)

    def cut_replica(self) -> None:
        """Pause the replica and close its link on the primary's side, so nothing the primary
        writes from now on reaches it, not even through its socket's buffers."""
        self.pause_replica()
        primary = self.client(self.primary_port)
        try:
            assert primary.execute_command("CLIENT", "KILL", "TYPE", "replica") >= 1
        finally:
            primary.close()

    def resume_replica(self) -> None:
        os.kill(self.replica.process.pid, signal.SIGCONT)

    def kill_primary(self) -> None:
        self.primary.process.send_signal(signal.SIGKILL)
        self.primary.process.wait(10)

    def wait_promoted(self, timeout: float = 60.0) -> None:
        """Until the Sentinel names the replica as the primary to every client and the replica
        says so."""
        deadline = time.monotonic() + timeout
        sentinel = self.client(self.sentinel_port)
        try:
            while True:
                addr = sentinel.execute_command("SENTINEL", "get-master-addr-by-name", SERVICE)
                # SENTINEL MASTER (what redis-py asks) names the new primary only once the
                # failover ends; get-master-addr-by-name does as soon as it is promoted
                master = sentinel.execute_command("SENTINEL", "MASTER", SERVICE)
                listed = master.get(b"port")
                if addr and int(addr[1]) == self.replica_port and listed is not None \
                        and int(listed) == self.replica_port and \
                        self.client(self.replica_port).info("replication")["role"] == "master":
                    return
                assert time.monotonic() < deadline, (
                    f"the Sentinel did not promote the replica: {self.sentinel.log_tail()}")
                time.sleep(0.2)
        finally:
            sentinel.close()

    def switch_over(self) -> None:
        """A failover the operator asks for (``SENTINEL FAILOVER``): the replica promoted, the
        primary kept running and made its replica."""
        sentinel = self.client(self.sentinel_port)
        try:
            sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)
        finally:
            sentinel.close()
        self.wait_promoted()

    def restart_old_primary_as_replica(self) -> None:
        """The killed primary back, as a replica of the promoted one (what the Sentinel
        would make of it), so commits that wait for a replica can count again."""
        self.primary, _ = start_redis(
            self.directory / "primary", [*_PERSISTENT, "--replicaof", "127.0.0.1",
                                         str(self.replica_port)], {}, port=self.primary_port)
        self.processes.append(self.primary)
        deadline = time.monotonic() + 30
        while self.client(self.replica_port).info("replication").get(
                "slave0", {}).get("state") != "online":
            assert time.monotonic() < deadline, "the old primary did not rejoin as a replica"
            time.sleep(0.2)

    def stop(self) -> None:
        if self.replica.process.poll() is None:
            self.resume_replica()
        for process in self.processes:
            process.stop()
