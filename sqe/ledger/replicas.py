"""Waiting for a Redis primary's replicas to hold a batch's writes before the batch counts.

Redis replicates asynchronously: a write the primary acknowledged may be missing on
the replica that a failover promotes.  :func:`wait_for_replicas` writes one small key
on a connection to the primary after the batch's writes, then sends ``WAIT`` on that
same connection: Redis replicates in order, so a replica that acknowledges this write
holds everything the primary took before it, the batch's writes from every task
included, as long as the primary is still the one the tasks wrote to.  A failover between
the tasks' writes and that wait would promote a replica without them, and the wait would
then be answered by the new primary: so a task that stages rows waits too, on the
connection it wrote them through (:func:`held_by_replicas`), and a primary that died after
taking them fails the task; a task that writes a state directly, through a pool, waits once
its writes are sent and fails when the primary is not the one it started with
(:func:`written_and_held`).  Fewer acknowledgements than asked within the timeout is a
:class:`~sqe.errors.ReplicaLagError`: the batch does not count, Spark runs it again,
and the stores' batch-id records make the second run write nothing twice.

>>> wait_for_replicas(client, "sqe:{load.Events}:ack", 7, replicas=1, timeout_s=10,
...                   ttl_s=86400, what="HWM store at redis://h:6379/0: batch 7 of load.Events")
"""

from __future__ import annotations

from typing import Any

from sqe.errors import ReplicaLagError, StateError

__all__ = ["held_by_replicas", "primary_id", "wait_for_replicas", "written_and_held"]


def wait_for_replicas(client: Any, ack_key: str, batch_id: int, replicas: int,
                      timeout_s: float, ttl_s: int | None, what: str) -> None:
    """Return once ``replicas`` replicas hold what the primary of ``client`` holds (``ack_key``
    set to ``batch_id`` last, expiring after ``ttl_s`` seconds), else raise
    :class:`ReplicaLagError` after ``timeout_s``; ``what`` opens its sentence (the store and
    the batch).  With ``replicas`` 0 it returns at once.  For a Redis Cluster client the wait
    is on the node that holds ``ack_key``."""
    if replicas <= 0:
        return
    if hasattr(client, "get_node_from_key"):  # a Cluster: the node that holds the key
        client = client.get_redis_connection(client.get_node_from_key(ack_key))
    acked, _ = _ack_and_wait(client, ack_key, int(batch_id), replicas, timeout_s, ttl_s)
    if acked < replicas:
        raise ReplicaLagError(
            f"{what} is committed on the primary, but {acked} of the {replicas} replica(s) "
            f"that must hold it acknowledged it within {timeout_s:g} s, so it does not count as "
            "done (a failover now could lose it); the run stops, and its next run finishes the "
            "batch without writing it twice once the replicas catch up (INFO replication on "
            "the primary shows them)")


def held_by_replicas(connection: Any, replicas: int, timeout_s: float, what: str) -> None:
    """Return once ``replicas`` replicas hold every write sent through ``connection`` (a
    redis-py ``Connection``, taken from its pool for the writes: ``WAIT`` counts the writes of
    the connection it is sent on), else raise :class:`ReplicaLagError` after ``timeout_s``;
    ``what`` opens its sentence.  A task that stages rows ends with it, so a failover after the
    task cannot promote a replica without them."""
    if replicas <= 0:
        return
    connection.send_command("WAIT", replicas, int(timeout_s * 1000))
    _enough(int(connection.read_response()), replicas, timeout_s, what)


def primary_id(client: Any) -> str:
    """The ``run_id`` of the server ``client`` writes to now: what :func:`written_and_held`
    compares, to see a failover in the middle of a task's writes."""
    return str(client.info("server")["run_id"])


def written_and_held(client: Any, first: str, ack_key: str, replicas: int, timeout_s: float,
                     ttl_s: int, what: str) -> None:
    """Return once ``replicas`` replicas hold what a task wrote through ``client``'s pool since
    :func:`primary_id` returned ``first``: a write of ``ack_key`` and ``WAIT`` on one
    connection, with the server's ``run_id`` read on it.  A different ``run_id`` is a failover
    during the task (its first writes may be on a server that is gone): a
    :class:`~sqe.errors.StateError`, and the batch is written again; too few replicas, a
    :class:`ReplicaLagError`."""
    acked, primary = _ack_and_wait(client, ack_key, 1, replicas, timeout_s, ttl_s,
                                   with_primary=True)
    if primary != first:
        raise StateError(f"{what}: the Redis primary changed while the task wrote (a "
                         "failover), so its first writes may be on a server that is gone; the "
                         "batch fails, and is written again when it is retried")
    _enough(acked, replicas, timeout_s, what)


def _ack_and_wait(client: Any, ack_key: str, value: int, replicas: int, timeout_s: float,
                  ttl_s: int | None, with_primary: bool = False) -> tuple[int, str | None]:
    """``ack_key`` written, then ``WAIT`` on the same connection (one pipeline): the replicas
    that acknowledged, and with ``with_primary`` the ``run_id`` of the server that answered."""
    pipe = client.pipeline(transaction=False)
    if with_primary:
        pipe.info("server")
    pipe.set(ack_key, value, ex=ttl_s or None)
    pipe.execute_command("WAIT", replicas, int(timeout_s * 1000))
    replies = pipe.execute()
    return int(replies[-1]), str(replies[0]["run_id"]) if with_primary else None


def _enough(acked: int, replicas: int, timeout_s: float, what: str) -> None:
    if acked < replicas:
        raise ReplicaLagError(
            f"{what}: {acked} of the {replicas} replica(s) that must hold the batch's rows "
            f"acknowledged them within {timeout_s:g} s, so the batch does not count (a failover "
            "now could lose them); the batch fails, and is written again when it is retried "
            "once the replicas catch up (INFO replication on the primary shows them)")
