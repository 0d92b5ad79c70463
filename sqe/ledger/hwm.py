"""The high-water-mark store in Redis: per-consumer HWMs and the last committed batch.

One consumer (a topology's stream) owns these keys, with one hash tag (one Cluster slot):

* ``sqe:{<consumer>}:hwm``   hash ``"<pid>:<partition>" -> highest source offset``
* ``sqe:{<consumer>}:age``   sorted set ``"<pid>:<partition>"`` scored by its last update
  (server ms): the index the commit expires marks from, oldest first (older stores kept the
  times in a hash, ``sqe:{<consumer>}:ts``, which the first commit moves into the index)
* ``sqe:{<consumer>}:batch`` the last committed batch id
* ``sqe:{<consumer>}:commit`` hash: the source ``offsets`` that batch ended at, the
  ``checkpoint`` that committed it, and ``reset`` (1 after :meth:`HwmStore.reset`);
  see :mod:`sqe.ledger.commits`
* ``sqe:{<consumer>}:stage:<batch>:<writer>:<n>`` rows of a Redis state staged
  for batch ``<batch>`` (see :mod:`state.redis.sink`), until the commit applies them;
  ``<writer>`` is a hash of the run that stages them, so two runs of one consumer never
  share a stage, even on one checkpoint, and a batch run again in the same run rewrites
  its own; ``sqe:{<consumer>}:stages`` registers them by batch, and a commit deletes the
  ones of its batch or before that are not its own (:mod:`sqe.ledger.stages`)
* ``sqe:{<consumer>}:ack`` the batch id last written after a commit, for ``WAIT``
* ``sqe:{<consumer>}:apply`` hash: the ``batch`` whose staged rows are being applied, and
  ``s:<stage key>`` -> its datatype and expiry, for each stage still to apply
* ``sqe:{<consumer>}:applied`` the last batch whose rows are all applied

:meth:`HwmStore.commit` runs one Lua script that, atomically, refuses a batch
id lower than the stored one, or equal to it with other source offsets
(:class:`StaleBatchError` naming the commit it found: a stale or duplicate
writer is fenced, loudly, and its stages are deleted), skips a batch id equal
to it (Spark re-ran a committed batch), and otherwise sets each HWM to the max of old and new,
stamps the update time, drops at most 1,000 entries older than the TTL (found
by the time index, so a commit costs what it touches, not what is stored) and
records the batch id with its commit record.  Staged Redis state rows are committed with them:
the same script records their stages as the batch's rows to apply (and keeps them from
expiring), so the rows, the HWMs and the batch id are committed together or not at all; the
rows then reach the states' keys in steps of at most :data:`APPLY_ROWS`
(:meth:`HwmStore.finish_applying`), each applying and deleting its rows atomically, so that
no step holds the server from its other clients for long, however big the batch.  A commit
left applying (the process died) is finished by the next commit, the next batch's start or
the next run's, before anything else; a state's reader sees a batch's rows arrive in those
steps, and one that needs whole batches reads while ``sqe:{<consumer>}:apply`` does not exist
(``WATCH`` it, read, ``EXEC``).  Behind a primary with
replicas, a commit counts once ``replicas`` of them hold it (:meth:`HwmStore.replicated`,
``WAIT``), so a failover cannot take back a batch that Spark's checkpoint counts as done.
A batch reads only what it touches: :meth:`HwmStore.admit` reads the commit record alone,
and each source task the marks of the (pid, partition) pairs its records name with
:meth:`HwmStore.marks` (one script call; a mark older than the TTL reads as none).
:meth:`HwmStore.load` reads everything, for ``sqe hwm show``.
Offsets are compared as decimal strings inside Lua (Lua numbers are doubles: int64 above
2**53 would round).  Times come from the Redis server's clock, so skewed writers agree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import redis

from sqe.clients.redis_endpoint import RedisEndpoint
from sqe.errors import ArgumentError, StaleBatchError, StateError, StoreBehind
from sqe.ledger.commits import Commit
from sqe.ledger.hwm_lua import APPLY, COMMIT, LAST, LOAD, MARKS
from sqe.ledger.leftovers import forget_reads, left_by_tasks
from sqe.ledger.replicas import wait_for_replicas
from sqe.ledger.retry import Failed, asked
from sqe.ledger.stages import Stage, Stages

__all__ = ["APPLY_ROWS", "HwmSnapshot", "HwmStore", "Stage", "StaleBatchError", "consumer_tag"]

#: The most staged rows one step of :meth:`HwmStore.finish_applying` applies: about 10 ms of
#: the server's time (a step holds every other client of that Redis while it runs).
APPLY_ROWS = 1000

# The commit script's refusal: its code and the commit it found (JSON).
_REFUSED = re.compile(r"(SQE_STALE|SQE_OTHER|SQE_BEHIND) (\{.*\})", re.S)


@dataclass(frozen=True)
class HwmSnapshot:
    """What a consumer has committed: its last batch (or None) and live HWMs."""

    commit: Commit | None
    hwm: dict[tuple[int, int], int]

    @property
    def batch_id(self) -> int | None:
        """The last committed batch id, or None."""
        return self.commit.batch_id if self.commit is not None else None


def _text(raw: Sequence[bytes | str]) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else v for v in raw]


def _pairs_of(mapping: Mapping[bytes | str, bytes | str]) -> list[tuple[str, str]]:
    return list(zip(_text(list(mapping)), _text(list(mapping.values())), strict=True))


def _pair(field: str) -> tuple[int, int]:
    """``"<pid>:<partition>"`` as ``(pid, partition)``."""
    pid, part = field.split(":")
    return int(pid), int(part)


def consumer_tag(consumer: str) -> str:
    """The hash tag of ``consumer``'s keys (one Redis Cluster slot holds them all)."""
    if not consumer:
        raise ArgumentError("the HWM store needs a non-empty consumer name")
    return consumer.replace("{", "(").replace("}", ")")


class HwmStore:
    """High-water marks and the committed batch id of one consumer, in Redis."""

    def __init__(self, client: redis.Redis, consumer: str, ttl_seconds: int,
                 endpoint: RedisEndpoint | None = None, replicas: int = 0,
                 replica_timeout: float = 10.0, commit_retry_s: float = 0.0) -> None:
        if ttl_seconds < 1:
            raise ArgumentError(f"HWM ttl must be at least 1 second, got {ttl_seconds}")
        tag = consumer_tag(consumer)
        self.client = client
        self.consumer = consumer
        self.ttl_seconds = ttl_seconds
        self.endpoint = endpoint  # where ``client`` connects (None: not known)
        self.url = endpoint.display if endpoint else None  # for messages: never a password
        self.keys = [f"sqe:{{{tag}}}:hwm", f"sqe:{{{tag}}}:ts", f"sqe:{{{tag}}}:batch",
                     f"sqe:{{{tag}}}:commit", f"sqe:{{{tag}}}:age"]
        self.prefix = f"sqe:{{{tag}}}:"  # of every key of the consumer's
        self._ack = f"sqe:{{{tag}}}:ack"  # written after a commit, for WAIT (see replicated)
        #: the stages a commit left to apply, and the last batch whose rows are all applied
        self.apply_keys = [f"sqe:{{{tag}}}:apply", f"sqe:{{{tag}}}:applied"]
        #: the stages of Redis state rows, and their register (:mod:`sqe.ledger.stages`)
        self.stages = Stages(client, self.prefix, self.apply_keys[0])
        self.replicas, self.replica_timeout = replicas, replica_timeout
        #: seconds a commit whose connection drops is sent again (sqe.engine.batch.commit)
        self.commit_retry_s = commit_retry_s
        self._same: dict[str, bool] = {}  # same_database's answers, by the other's address
        self._commit = client.register_script(COMMIT)
        self._load = client.register_script(LOAD)
        self._last = client.register_script(LAST)
        self._apply = client.register_script(APPLY)

    @classmethod
    def from_url(cls, url: str | RedisEndpoint, consumer: str, ttl_seconds: int,
                 replicas: int = 0, replica_timeout: float = 10.0,
                 commit_retry_s: float = 0.0) -> HwmStore:
        """A store on the Redis at ``url`` (a URL, or an endpoint with credentials and TLS),
        whose commits count once ``replicas`` replicas have them (:meth:`replicated`), and
        are sent again for ``commit_retry_s`` seconds when their connection drops."""
        endpoint = url if isinstance(url, RedisEndpoint) else RedisEndpoint(url)
        return cls(endpoint.connect(), consumer, ttl_seconds, endpoint, replicas,
                   replica_timeout, commit_retry_s)

    def load(self) -> HwmSnapshot:
        """The committed batch id and every HWM updated within the TTL, read atomically.

        Reads the whole store: for ``sqe hwm show`` and tests.  A batch reads only what it
        touches (:meth:`last_commit`, :meth:`marks`).
        """
        raw = _text(self._load(keys=self.keys, args=[self.ttl_seconds]))
        hwm = {_pair(field): int(offset) for field, offset in zip(raw[4::2], raw[5::2],
                                                                   strict=True)}
        return HwmSnapshot(self._commit_record(raw[:4]), hwm)

    def last_commit(self) -> Commit | None:
        """The last committed batch and its commit record (None: nothing committed yet)."""
        return self._commit_record(_text(self._last(keys=self.keys, args=[])))

    def _commit_record(self, raw: Sequence[str]) -> Commit | None:
        batch, offsets, checkpoint, reset = raw
        return Commit(self.describe(), int(batch), offsets or None, checkpoint or None,
                      reset == "1") if batch else None

    def marks(self, pairs: Iterable[tuple[int, int]]) -> dict[tuple[int, int], int]:
        """The live marks of ``pairs`` ((pid, partition)), in one round trip; a pair without a
        mark, or with one older than the TTL, is left out.  Costs what is asked, not what is
        stored."""
        fields = sorted({f"{int(pid)}:{int(part)}" for pid, part in pairs})
        if not fields:
            return {}
        # EVAL, not EVALSHA: one round trip even on a server that has not seen the script
        got = self.client.eval(MARKS, len(self.keys), *self.keys, self.ttl_seconds, *fields)
        return {_pair(field): int(offset) for field, offset in zip(fields, got, strict=True)
                if offset is not None}

    def recent(self, limit: int) -> tuple[list[tuple[tuple[int, int], int, float]], int]:
        """The ``limit`` live marks updated last, newest first, as ((pid, partition), offset,
        seconds since the update by the server's clock), and how many live marks there are
        (for ``sqe status``: costs what it shows, plus a count)."""
        now_s, now_us = self.client.time()
        now = now_s * 1000 + now_us // 1000
        oldest = now - self.ttl_seconds * 1000
        hwm, ts, _, _, age = self.keys
        if self.client.exists(ts):  # the old layout, before its first commit
            times = {k: float(v) for k, v in _pairs_of(self.client.hgetall(ts)) if
                     float(v) >= oldest}
            live = len(times)
            newest = sorted(times.items(), key=lambda kv: -kv[1])[:limit]
        else:
            live = int(self.client.zcount(age, oldest, "+inf"))
            ranked = cast(list[tuple[bytes | str, float]], self.client.zrevrangebyscore(
                age, "+inf", oldest, start=0, num=limit, withscores=True) if limit else [])
            newest = [(_text([k])[0], float(v)) for k, v in ranked]
        offsets = self.client.hmget(hwm, [k for k, _ in newest]) if newest else []
        out = [(_pair(k), int(o), max(0.0, (now - t) / 1000)) for (k, t), o
               in zip(newest, offsets, strict=True) if o is not None]
        return out, live

    def count(self) -> int:
        """How many marks the store holds (expired ones not yet removed included)."""
        return int(self.client.hlen(self.keys[0]))

    def describe(self) -> str:
        """This store in messages: ``HWM store at redis://host:port/db``."""
        return f"HWM store at {self.url}" if self.url else "HWM store"

    def commit(self, batch_id: int, updates: Mapping[tuple[int, int], int],
               stages: Sequence[Stage] = (), offsets: str | None = None,
               checkpoint: str | None = None, apply: bool = True, seen: int | None = None
               ) -> bool:
        """Commit batch ``batch_id`` with new marks; ``False`` if it was already committed.

        The rows of ``stages`` are committed in the same atomic step (and the
        stages deleted either way), and the batch's end ``offsets`` and
        ``checkpoint`` are recorded with it; they are applied before this returns, or, with
        ``apply`` False, by the caller's :meth:`finish_applying` (a later commit and the next
        admission apply them first, should it not).  Raises :class:`StaleBatchError` when a
        higher batch id is committed, or this one ending at other ``offsets``; nothing is
        applied then, and the stages are gone.  A store short of batch ``seen`` (the writer saw
        it committed) raises :class:`StoreBehind`, atomically with the commit it refuses.
        """
        args: list[str | int] = [self.ttl_seconds, int(batch_id), len(stages), offsets or "",
                                 checkpoint or "", "" if seen is None else int(seen)]
        for stage in stages:
            args += [stage.datatype, int(stage.expire_seconds)]
        for (pid, part), offset in updates.items():
            args += [f"{int(pid)}:{int(part)}", str(int(offset))]
        keys = [*self.keys, *self.apply_keys, self.stages.register,
                *(stage.key for stage in stages)]
        try:
            try:
                done = bool(self._commit(keys=keys, args=args))
            except redis.ResponseError as exc:
                if "SQE_PENDING" not in str(exc):
                    raise
                self.finish_applying()  # rows of the last commit first, then this one
                done = bool(self._commit(keys=keys, args=args))
        except redis.ResponseError as exc:
            refused = _REFUSED.search(str(exc))
            if refused is None:
                raise
            found = json.loads(refused.group(2))
            if refused.group(1) == "SQE_BEHIND":
                raise StoreBehind.since(self.describe(), self.consumer, int(found["batch"])
                                        if found["batch"] else None, int(seen or 0),
                                        batch_id) from None
            committed = Commit(self.describe(), int(found["batch"]), found["offsets"] or None,
                               found["checkpoint"] or None)
            if refused.group(1) != "SQE_OTHER" or not committed.same_batch(batch_id, offsets):
                raise self._stale(batch_id, committed, offsets) from None
            done = False  # the same offsets, spaced otherwise: Spark re-ran the batch
        self.replicated(batch_id)
        if done and stages and apply:
            self.finish_applying([stage.key for stage in stages])
        return done

    def finish_applying(self, stages: Sequence[str] | None = None) -> None:
        """Apply the rows a commit left to apply (``stages``: its stage keys, when known), at
        most :data:`APPLY_ROWS` in each atomic step, so no step holds the server long and a
        crash between two applies nothing twice (the next commit, or a run's start, goes on).
        """
        if stages is None:
            stages = [f[2:] for f in _text(list(self.client.hgetall(self.apply_keys[0])))
                      if f.startswith("s:")]
        for stage in stages:
            while int(self._apply(keys=[*self.apply_keys, stage], args=[APPLY_ROWS])) > 0:
                pass

    def replicated(self, batch_id: int) -> None:
        """Return once :attr:`replicas` replicas hold what the primary holds of this consumer
        (its commit of ``batch_id`` included): Redis replicates asynchronously, and a replica
        promoted without a commit that Spark's checkpoint counts as done would lose the batch.

        A write after the commit, then ``WAIT`` on the same connection: a replica that
        acknowledges the write has everything the primary wrote before it.  Raises
        :class:`ReplicaLagError` when fewer acknowledge within :attr:`replica_timeout`.
        """
        wait_for_replicas(self.client, self._ack, batch_id, self.replicas, self.replica_timeout,
                          self.ttl_seconds, f"{self.describe()}: batch {batch_id} of "
                          f"{self.consumer}")

    def admit(self, batch_id: int, offsets: str | None = None, seen: int | None = None) -> bool:
        """Whether batch ``batch_id`` is still to be processed (``False``: it is committed).

        The check :meth:`commit` makes atomically, made before the batch does
        any work, reading only the commit record: a batch id lower than the
        committed one raises :class:`StaleBatchError`, and so does the committed
        batch id with other end ``offsets`` (another checkpoint's batch of the same number);
        a store short of batch ``seen`` (committed there before) raises :class:`StoreBehind`.
        """
        self.finish_applying()  # what a run that stopped mid-way left
        commit = self.last_commit()
        StoreBehind.unless_holding(self.describe(), self.consumer,
                                   commit.batch_id if commit else None, seen, batch_id)
        if commit is not None:
            if commit.same_batch(batch_id, offsets):
                self.replicated(batch_id)  # the run that committed it may have stopped waiting
                return False
            if batch_id <= commit.batch_id:
                raise self._stale(batch_id, commit, offsets)
        return True

    def _stale(self, batch_id: int, commit: Commit, offsets: str | None = None
               ) -> StaleBatchError:
        return StaleBatchError.behind(self.describe(), self.consumer, batch_id, commit.batch_id,
                                      commit.checkpoint, offsets if batch_id == commit.batch_id
                                      else None, commit.offsets)

    def describe_error(self, exc: BaseException) -> str:
        """A client error as one sentence naming this store's Redis (never its password)."""
        return self.endpoint.describe_error(exc) if self.endpoint else str(exc)

    def stage_key(self, batch_id: int, writer: str | None, index: int) -> str:
        """The key that stages the rows of this consumer's ``index``-th state in a batch
        that ``writer`` (one run's, :func:`sqe.ledger.stages.new_writer`) writes."""
        return self.stages.key(batch_id, writer, index)

    def drop_stages(self, batch_id: int, writer: str | None, count: int) -> int:
        """Delete what ``writer`` staged for batch ``batch_id`` in its first ``count`` stages
        (a writer refused as stale leaves nothing staged); returns how many stages there
        were."""
        return self.stages.drop([self.stage_key(batch_id, writer, i) for i in range(count)])

    def same_database(self, other: str | RedisEndpoint) -> bool:
        """True when ``other`` names this store's Redis server and database.

        Compared by the server's ``run_id`` and the database index, so
        ``localhost`` and ``127.0.0.1`` (or two DNS names) agree.  A store on a
        Redis Cluster shares no database with anything: one script there can
        only touch keys of one slot.
        """
        other = other if isinstance(other, RedisEndpoint) else RedisEndpoint(other)
        if self.endpoint is None or "cluster" in (self.endpoint.kind, other.kind):
            return False
        if self.endpoint.database != other.database:
            return False
        known = self._same.get(other.display)
        if known is None:  # asked once per store: a run keeps its store between batches

            def compare() -> bool:
                client = other.connect()
                try:
                    return bool(self.client.info("server")["run_id"]
                                == client.info("server")["run_id"])
                finally:
                    client.close()

            try:  # a failover or a lost reply here is sent again, as every request is
                known = asked(self, compare, f"consumer {self.consumer}",
                              f"the comparison of its server with {other.display}'s")[0]
            except Failed as exc:
                raise StateError(f"{self.describe()}: consumer {self.consumer}: cannot tell "
                                 f"whether {other.display} is its server: {exc}") from None
            self._same[other.display] = known
        return known

    def reset(self) -> int:
        """Forget this consumer's HWMs and the offsets it committed, keeping its batch id.

        Returns the number of marks and stages deleted; what its source tasks reported
        reading (:mod:`sqe.source.read_report`) goes too.  The next run with a new
        checkpoint starts where its source's ``startingOffsets`` say, with batch ids
        after the committed one (so no id a state has seen comes again), and filters
        nothing it has not seen since.
        """
        stages = left_by_tasks(self.client, self.prefix, "stage")
        marks = int(self.client.hlen(self.keys[0]))
        self.finish_applying()  # a committed batch's rows stay committed
        self.client.delete(self.keys[0], self.keys[1], self.keys[4], self._ack,
                           self.stages.register, *stages)
        forget_reads(self.client, self.prefix)
        if self.client.exists(self.keys[2]):
            self.client.hset(self.keys[3], mapping={"offsets": "", "reset": "1"})
        return marks + len(stages)
