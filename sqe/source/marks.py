"""The high-water marks one source task filters by: read for the pairs it meets, when it meets them.

A task reads one Kafka partition's offset range.  Its records name a handful of
(pid, source partition) pairs -- with SQE's partitioner, the upstream partitions
that map to this destination partition -- however many marks the consumer's
store holds.  :class:`TaskMarks` asks the store for the marks of the pairs a
fetched slice names that it has not asked for yet (one round trip,
:meth:`sqe.ledger.hwm.HwmStore.marks`), so a task costs what it touches: usually one
round trip, a second only when a later slice of a large range names new pairs.

``start`` holds the marks as the batch began (the ``maxAdvance`` guard measures
from them); ``now`` the same pairs after the records kept so far (the replay
filter moves them).  No batch commits between the two reads of one batch (the
commit is the batch's last step, fenced by its id), so every task and every
re-run of a task sees the same marks.  A mark that outlives its TTL while a
batch runs may be seen by one task and not by a later one; the TTL is the
moment a mark is forgotten, whichever task reads it.

Example::

    >>> import numpy as np
    >>> marks = TaskMarks.given({(7, 0): 41, (8, 1): 9})
    >>> marks.meet(np.array([7, 7]), np.array([0, 0]), np.array([True, True]))
    >>> marks.start, marks.round_trips
    ({(7, 0): 41}, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from pyspark.sql import functions as F

from sqe.clients.redis_clients import kept_client
from sqe.ledger.hwm import HwmStore
from sqe.ledger.retry import answered
from sqe.source.replay import pair_groups

if TYPE_CHECKING:  # the Kafka source's package imports this module
    from sqe.source.kafka.config import SourceConfig

__all__ = ["Pair", "TaskMarks", "frame_marks", "read_marks", "with_store"]

Pair = tuple[int, int]
T = TypeVar("T")
Fetch = Callable[[list[Pair]], Mapping[Pair, int]]


class TaskMarks:
    """The marks of the (pid, partition) pairs one task has met, read once per pair."""

    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self.asked: set[Pair] = set()
        self.start: dict[Pair, int] = {}
        self.now: dict[Pair, int] = {}
        self.round_trips = 0

    @classmethod
    def given(cls, marks: Mapping[Pair, int]) -> TaskMarks:
        """Marks read from ``marks`` instead of a store (tests, or marks already in hand)."""
        return cls(lambda pairs: {p: marks[p] for p in pairs if p in marks})

    @classmethod
    def from_store(cls, cfg: SourceConfig, recorded: Mapping[Pair, int | None] | None = None
                   ) -> TaskMarks:
        """Marks read from the HWM store of ``cfg``'s consumer, through the client this
        worker process keeps for it (:func:`sqe.clients.redis_clients.kept_client`);
        ``recorded``: the marks a run of this task before filtered by (None: the store had
        none), taken instead of the store's for the pairs they name."""
        known = dict(recorded or {})

        def fetch(pairs: list[Pair]) -> Mapping[Pair, int]:
            got = {p: mark for p in pairs if (mark := known.get(p)) is not None}
            rest = [p for p in pairs if p not in known]
            if rest:
                got.update(with_store(cfg, lambda store: read_marks(
                    store, rest, cfg.stream.hwm_commit_retry)))
            return got

        return cls(fetch)

    def started(self) -> dict[Pair, int | None]:
        """The mark of each pair asked for as the task began (None: the store had none)."""
        return {pair: self.start.get(pair) for pair in self.asked}

    def advanced(self) -> dict[Pair, int]:
        """The pairs the records kept moved past their start, and where to."""
        return {pair: offset for pair, offset in self.now.items()
                if offset > self.start.get(pair, offset - 1)}

    def meet(self, pid: np.ndarray, part: np.ndarray, named: np.ndarray) -> None:
        """Read the marks of the pairs the ``named`` records (keys that decode) name and that
        were not asked for yet (one round trip, none when every pair was asked for already).
        A loop over distinct pairs only."""
        rows = np.flatnonzero(named)
        if rows.size == 0:
            return
        pairs, _ = pair_groups(pid[rows], part[rows])
        self.ask((int(p), int(q)) for p, q in pairs)

    def ask(self, pairs: Iterable[Pair]) -> None:
        """Read the marks of ``pairs`` not asked for yet, in one round trip."""
        new = [pair for pair in pairs if pair not in self.asked]
        if not new:
            return
        got = self._fetch(new)
        self.round_trips += 1
        self.asked.update(new)
        self.start.update(got)
        for pair, offset in got.items():
            self.now.setdefault(pair, offset)


def with_store(cfg: SourceConfig, call: Callable[[HwmStore], T]) -> T:
    """``call`` on the HWM store of ``cfg``'s consumer, through the client this worker process
    keeps for it (:func:`sqe.clients.redis_clients.kept_client`)."""
    endpoint = cfg.stream.hwm_store
    with kept_client(endpoint) as client:
        return call(HwmStore(client, str(cfg.hwm_consumer), cfg.stream.hwm_ttl, endpoint))


def frame_marks(rows: Any, store: HwmStore) -> dict[Pair, int]:
    """The marks of the (pid, partition) pairs the DataFrame ``rows`` names, for Spark's own
    Kafka connector (whose tasks SQE does not run): the pairs are collected, then read in one
    round trip."""
    pairs = (rows.where(F.col("_pid").isNotNull())
             .select("_pid", "_source_partition").distinct().collect())
    return read_marks(store, [(int(r[0]), int(r[1])) for r in pairs])


def read_marks(store: HwmStore, pairs: Iterable[Pair], retry_s: float = 0.0
               ) -> dict[Pair, int]:
    """``store.marks(pairs)``, sent again through a connection that drops for up to
    ``retry_s`` seconds (:func:`~sqe.ledger.retry.asked`); a Redis error is one sentence
    naming the consumer and the store (never its password)."""
    pairs_asked = list(pairs)
    return answered(store, lambda: store.marks(pairs_asked), f"consumer {store.consumer}",
                    "reading high-water marks",
                    f"cannot read the high-water marks of consumer {store.consumer}", retry_s)
