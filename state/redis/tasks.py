"""The Redis state's executor tasks: what each Spark task runs to write a batch's rows.

:func:`writer_task` sends ``_rk``/``_rf``/``_rv`` rows as SET or HSET commands to the state's
own server; :func:`stage_task` stages ``_rf``/``_rv`` rows in the hash of the HWM store their
``_stage`` column names, for the HWM commit to apply (:mod:`state.redis.sink`).  Both can
end by waiting for replicas to hold what they sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis
from redis.cluster import RedisCluster

from sqe.clients.redis_clients import kept_client
from sqe.clients.redis_endpoint import RedisEndpoint
from sqe.config.worker_task import begin_task
from sqe.errors import StateError
from sqe.ledger.replicas import held_by_replicas, primary_id, written_and_held
from sqe.wire.arrays import counts_batch, from_numpy, scalar, strings
from state.redis.layout import ACK_TTL_SECONDS
from state.redis.protocol import send_hsets

__all__ = ["STAGE_TTL_SECONDS", "stage_task", "writer_task"]

_PIPELINE_ROWS = 5_000
_STAGED = pa.schema([("stage", pa.string()), ("written", pa.int64())])

#: How long a stage of a batch that never committed survives.
STAGE_TTL_SECONDS = 86_400


def writer_task(name: str, endpoint: RedisEndpoint, datatype: str, expire_seconds: int,
                replicas: int = 0, timeout_s: float = 10.0, ack: str = "") -> Any:
    """The function each Spark task runs: ``_rk``/``_rf``/``_rv`` rows sent as SET or HSET,
    one command per row in pipelines (the scalar way; a stage goes :func:`stage_task`'s).

    With ``replicas`` (not on a Redis Cluster, whose driver-side wait stays the only one), the
    task ends once that many replicas hold its writes, on the primary it started with
    (:func:`sqe.ledger.replicas.written_and_held`, writing ``ack``): a failover between the
    tasks' writes and the batch's commit cannot promote a replica without them."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        begin_task()
        written = 0
        try:
            with kept_client(endpoint) as client:
                held = replicas > 0 and not isinstance(client, RedisCluster)
                first = primary_id(client) if held else ""
                for batch in batches:
                    keys = batch.column("_rk").to_pylist()
                    fields = batch.column("_rf").to_pylist()
                    values = batch.column("_rv").to_pylist()
                    for start in range(0, len(keys), _PIPELINE_ROWS):
                        pipe = client.pipeline(transaction=False)
                        for i in range(start, min(start + _PIPELINE_ROWS, len(keys))):
                            value = "" if values[i] is None else values[i]
                            if datatype == "HASH":
                                pipe.hset(keys[i], fields[i], value)
                            else:
                                pipe.set(keys[i], value)
                            if expire_seconds:
                                pipe.expire(keys[i], expire_seconds)
                        pipe.execute()
                    written += batch.num_rows
                if held:
                    written_and_held(client, first, ack, replicas, timeout_s, ACK_TTL_SECONDS,
                                     f"Redis state {name} at {endpoint.display}")
        except redis.RedisError as exc:
            raise StateError(f"Redis state {name}: {endpoint.describe_error(exc)}; the batch "
                             "fails and is written again when it is retried") from None
        yield counts_batch(written=written)

    return write


def stage_task(names: str, store: RedisEndpoint, replicas: int = 0,
               timeout_s: float = 10.0) -> Any:
    """The function each Spark task runs to stage rows: each row's ``_rf``/``_rv`` pair into the
    hash its ``_stage`` names, as a few long HSETs per hash built by Arrow
    (:mod:`state.redis.protocol`), each followed by the hash's EXPIRE; one count row per
    hash.  Every stage key of a batch carries its consumer's hash tag, so one connection (one
    Cluster node) takes them all.

    With ``replicas`` (the HWM store's), the task ends with ``WAIT`` on that same connection:
    it succeeds only once that many replicas hold its rows, else raises
    :class:`~sqe.errors.ReplicaLagError`.  Without it, a failover between the staging and the
    commit would promote a replica without the rows, and the commit there would count the
    batch done with nothing to apply.  The connection is the one the rows went through, so a
    primary that died after taking them fails the task rather than answering for another.
    """

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        begin_task()
        staged: dict[str, int] = {}
        try:
            with kept_client(store) as client:
                pool: Any = None
                connection: Any = None
                try:
                    for batch in batches:
                        column = batch.column("_stage")
                        keys = pc.unique(column).to_pylist()
                        if keys and connection is None:
                            node = (client.get_redis_connection(client.get_node_from_key(keys[0]))
                                    if isinstance(client, RedisCluster) else client)
                            pool = node.connection_pool
                            connection = pool.get_connection()
                        for key in keys:
                            rows = batch if len(keys) == 1 else batch.filter(
                                pc.equal(column, scalar(key, column.type)))
                            staged[key] = staged.get(key, 0) + send_hsets(
                                connection, key.encode(), rows.column("_rf"), rows.column("_rv"),
                                STAGE_TTL_SECONDS)
                    if replicas > 0 and connection is not None:
                        held_by_replicas(connection, replicas, timeout_s,
                                         f"{names} (staged in the HWM store)")
                except BaseException:
                    if connection is not None:
                        connection.disconnect()  # replies may be left unread on it
                    raise
                finally:
                    if pool is not None:
                        pool.release(connection)
        except redis.RedisError as exc:
            raise StateError(f"{names} (staged in the HWM store): {store.describe_error(exc)}; "
                             "the batch fails and is written again when it is retried") from None
        yield pa.RecordBatch.from_arrays([strings(list(staged)), from_numpy(  # not from_pydict:
            np.array(list(staged.values()), dtype=np.int64))], schema=_STAGED)  # no pandas

    return write
