"""The clocks of bench/latency.py: a producer that stamps each event's send time, and a poller
that stamps each event's first arrival in the store (``load_log``).  Both run as threads of the
benchmark process and read one clock, ``time.monotonic_ns()``.

**Send time.**  :class:`Producer` writes the sample events ``e0, e1, ...`` (``sample_events``):
first one warm-up event per source partition (:meth:`Producer.warm_up`), then, in its thread,
``rate`` events per second for ``seconds``, every 5 ms the events due by then (at 20,000/s, 100
a tick).  Each tick stamps its events with the time just before they are handed to the
producer (``Sender.send_many``, ``linger.ms`` 5): ``sent_ns[i]`` is event ``e<i>``'s.  The
largest delay of a tick behind its schedule is kept (``lag_ms``): a harness that cannot keep
the rate shows there.  At rate 0 (``bench/sustained.py``'s backlog) it sends ``events`` as fast
as the producer takes them, ``BURST`` at a time, each burst stamped the same way.

**Arrival time.**  Every writer of the chain's load step names a ``load_log`` field by the
record's position in the enriched topic, ``<partition>:<offset>``, and writes a partition's
records mostly in offset order, a batch at a time (SQE: after the HWM commit, the batch's rows in
steps of 1,000, in the staging hash's order; the plain load: one MULTI/EXEC per poll;
quixstreams: one MULTI/EXEC per partition and checkpoint).  :class:`Arrivals` therefore keeps,
per enriched partition, the next position it has not seen, and on each wake reads ``HMGET
load_log <p>:<next> .. <p>:<next+chunk-1>`` for every partition plus ``HLEN load_log`` in one
MULTI/EXEC: every value found is a new arrival, ``next`` moves past the last one found, and a
chunk found full is read again, doubled.  A nil before a found value is a gap (a transaction
marker's offset, or a row SQE has not applied yet): it is kept, and when ``HLEN`` says there are
fields it has not seen, the gaps are read (``HMGET``; ``gap_reads``).  When those do not account
for what ``HLEN`` says either (SQE applies a batch's rows in its staging hash's order, so a
partition's next field may lie past the window read), it reads ahead of each partition's next
position in windows 4x wider each time, up to ``AHEAD_MAX`` (``ahead_reads``).  The cost is the
new fields plus the nils, whatever the hash holds.  Only a field past all that makes it read the
whole hash (``resyncs``): in the 2026-11-29 runs before the read-ahead, 11 to 30 times in a
60 s run at 5,000 events/s; such a read of a hash of 250,000 fields kept the poller away from its
socket for most of a second, and every event announced meanwhile was stamped that much late (and
some found by it stamped before they were sent), the last third of SQE's run with them.

It wakes on Redis keyspace notifications: ``notify-keyspace-events`` gets ``Kh`` (restored at
the end) and a raw connection subscribes to ``__keyspace@<db>__:load_log``; every HSET of
``load_log`` publishes a message there.  The poller waits in ``select`` on that socket, takes
the time when it becomes readable, discards what it holds unparsed (one ``recv`` per wake,
however many HSETs: no Python per notification), then reads as above.  Every field found is
stamped with that time: the time the first write not yet read was announced, exact to within one
read (a millisecond or so), whatever the number of fields.  Where ``CONFIG SET`` is refused, it
reads every 10 ms instead (exact to 10 ms).  It reads every 0.25 s without a wake, too.
"""

from __future__ import annotations

import json
import select
import socket
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

import redis

from sqe.clients.redis_busy import is_busy

TICK_S = 0.005
LINGER_MS = 5
CHUNK_MIN, CHUNK_MAX = 64, 16_384
AHEAD_MAX = 65_536  # the widest read-ahead window per partition before the whole log is read
IDLE_READ_S = 0.25
BURST = 5_000  # events a send of an unthrottled producer
GROWTH = (1.5, 0.5)  # grew: p50 of the last third > 1.5 x p50 of the first third + 0.5 s
#: A rate is kept up with when the events in flight as sending ends are at most this many
#: seconds of input (a chain that fell behind early has a flat but huge latency, not a growing
#: one: only what it still owes at the end shows it).
KEPT_UP_SECONDS = 3.0


class Producer(threading.Thread):
    """Writes warm-up events, then ``rate`` sample events per second for ``seconds``, or, with
    ``rate`` 0, ``events`` sample events as fast as the producer takes them."""

    def __init__(self, brokers: str, topic: str, rate: float, seconds: float,
                 partitions: int, events: int | None = None) -> None:
        from sqe.cli.sample_events import sample_events
        from sqe.clients.kafka import Sender, producer_conf

        super().__init__(daemon=True)
        self.topic, self.rate, self.partitions = topic, rate, partitions
        self.total = int(rate * seconds) if rate else int(events or 0)
        self.sender = Sender.start(producer_conf(brokers, {"log_level": 2,
                                                           "linger.ms": LINGER_MS}), "latency")
        self.events = sample_events(10**12)  # one sequence: e0, e1, ... as expected_store's
        self.sent_ns: list[int] = []  # per event index, warm-up events included
        self.warm = 0
        self.begin_ns = self.end_ns = self.lag_ns = 0
        self.halt = threading.Event()
        self.error: str | None = None

    @property
    def sent(self) -> int:
        return len(self.sent_ns)

    def _send(self, n: int, partitions: list[int]) -> int:
        values = [json.dumps(next(self.events)).encode() for _ in range(n)]
        t = time.monotonic_ns()
        self.sender.send_many(self.topic, values, [None] * n, partitions)
        self.sent_ns.extend([t] * n)
        self.sender.producer.poll(0)
        return t

    def warm_up(self) -> None:
        """One event per source partition, flushed (not timed)."""
        self._send(self.partitions, list(range(self.partitions)))
        self.warm = self.partitions
        if self.sender.producer.flush(30):
            raise ConnectionError(f"the warm-up events to {self.topic} were not acknowledged")

    def run(self) -> None:
        try:
            start = self.begin_ns = time.monotonic_ns()
            done = 0
            while done < self.total and not self.halt.is_set():
                if not self.rate:  # unthrottled: the next burst at once
                    n = min(BURST, self.total - done)
                    self._send(n, [-1] * n)
                    done += n
                    continue
                due = min(self.total, int((time.monotonic_ns() - start) * self.rate / 1e9))
                if due > done:
                    t = self._send(due - done, [-1] * (due - done))
                    self.lag_ns = max(self.lag_ns, t - start - int((done + 1) * 1e9 / self.rate))
                    done = due
                self.halt.wait(TICK_S)
            self.end_ns = time.monotonic_ns()
            problem = self.sender.finish(60)
            self.error = f"the producer: {problem}" if problem else None
        except Exception as exc:  # reported as one sentence
            self.error = f"the producer failed: {exc}"


class Arrivals(threading.Thread):
    """The first arrival time of every event id in ``load_log`` (see the module docstring)."""

    def __init__(self, url: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.first: dict[str, int] = {}  # event id -> monotonic ns
        self.fields: set[str] = set()
        self.duplicates = self.wakes = self.resyncs = self.gap_reads = self.busy = 0
        self.ahead_reads = 0
        self.gaps: set[str] = set()  # fields passed as nils: not written yet, or never
        self.next, self.chunk = [0] * partitions, [CHUNK_MIN] * partitions
        self.halt = threading.Event()
        self.error: str | None = None
        self.old_flags: str | None = None
        self.conn: Any = None
        self.sock: socket.socket | None = None
        self.mode = "polling every 10 ms"  # what wakes the poller, for the report
        try:
            self.old_flags = str(self.client.config_get("notify-keyspace-events")
                                 .get("notify-keyspace-events", ""))
            self.client.config_set("notify-keyspace-events", self.old_flags + "Kh")
        except redis.ResponseError:
            self.old_flags = None
            return
        pool = self.client.connection_pool
        self.conn = pool.connection_class(**pool.connection_kwargs)
        self.conn.connect()
        self.conn.send_command("SUBSCRIBE",
                               f"__keyspace@{pool.connection_kwargs.get('db', 0)}__:load_log")
        self.sock = self.conn._sock
        assert self.sock is not None
        self.sock.settimeout(10)
        self.sock.recv(1 << 16)  # the confirmation (a push reply under RESP3), unparsed
        self.sock.setblocking(False)
        self.mode = "keyspace notifications"

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                try:
                    if self.sock is None:
                        time.sleep(0.01)
                    elif select.select([self.sock], [], [], IDLE_READ_S)[0]:
                        t = time.monotonic_ns()
                        self.wakes += 1
                        self._drain()
                        self._read(t)
                        continue
                    self._read(time.monotonic_ns())
                except redis.ResponseError as exc:
                    if not is_busy(exc):
                        raise
                    # a commit script is applying a large batch (longer than Redis's
                    # lua-time-limit); its rows appear when it ends: ask again
                    self.busy += 1
                    time.sleep(0.01)
        except (redis.RedisError, OSError) as exc:
            self.error = f"the arrival poller: {exc}"

    def _drain(self) -> None:
        assert self.sock is not None
        while True:
            try:
                if not self.sock.recv(1 << 16):
                    # Redis closes a subscriber that falls over its output buffer limit (a
                    # backlog of millions of HSETs): poll every 10 ms from here on
                    self.sock, self.mode = None, "keyspace notifications, then polling"
                    return
            except BlockingIOError:
                return

    def _arrive(self, field: str, event_id: str, t: int) -> None:
        self.fields.add(field)
        if event_id in self.first:
            self.duplicates += 1
        else:
            self.first[event_id] = t

    def _scan(self, t: int, widths: list[int], adapt: bool, gaps: bool = False
              ) -> tuple[int, bool]:
        """One MULTI/EXEC, so one snapshot of the log: ``HLEN load_log``, the gaps (``gaps``)
        and, per partition ``p``, the ``widths[p]`` fields from ``next[p]``; every value found
        arrives at ``t``, the nils before a partition's last one become gaps.  Returns HLEN and
        whether some partition's window was found full to its end."""
        pipe = self.client.pipeline(transaction=True)
        pipe.hlen("load_log")
        passed = sorted(self.gaps) if gaps else []
        if passed:
            self.gap_reads += 1
            pipe.hmget("load_log", passed)
        for p, (start, n) in enumerate(zip(self.next, widths, strict=True)):
            pipe.hmget("load_log", [f"{p}:{o}" for o in range(start, start + n)])
        size, *chunks = pipe.execute()
        if passed:
            for field, value in zip(passed, chunks.pop(0), strict=True):
                if isinstance(value, bytes):
                    self.gaps.discard(field)
                    self._arrive(field, value.decode(), t)
        full = False
        for p, values in enumerate(chunks):
            found = [i for i, v in enumerate(values) if v is not None]
            for i in found:
                self._arrive(f"{p}:{self.next[p] + i}", values[i].decode(), t)
            if found:
                self.gaps.update(f"{p}:{self.next[p] + i}" for i in range(found[-1])
                                 if values[i] is None)
                self.next[p] += found[-1] + 1
                full = full or found[-1] == len(values) - 1
            if adapt:
                self.chunk[p] = min(CHUNK_MAX, max(CHUNK_MIN, 2 * len(found)))
        return int(size), full

    def _read(self, t: int) -> None:
        while True:
            size, full = self._scan(t, self.chunk, adapt=True)
            if not full:
                break
        # HLEN counts fields not seen: they are gaps filled since, or lie past a partition's
        # window (SQE applies a batch's rows in its staging hash's order, not by offset).  Read
        # the gaps and a window past every partition's next position in one snapshot, the
        # window 4x wider each time: whatever a snapshot leaves unaccounted lies further ahead
        width = CHUNK_MIN
        while size > len(self.fields) and width <= AHEAD_MAX:
            self.ahead_reads += width > CHUNK_MIN
            size, _ = self._scan(t, [width] * len(self.next), adapt=False, gaps=True)
            width *= 4
        if size > len(self.fields):
            self.resyncs += 1
            for raw, value in self.client.hscan_iter("load_log", count=10_000):
                field = raw.decode()
                if field not in self.fields:
                    self.gaps.discard(field)
                    self._arrive(field, value.decode(), t)
                    p, _, o = field.partition(":")
                    if p.isdigit() and o.isdigit() and int(p) < len(self.next):
                        self.next[int(p)] = max(self.next[int(p)], int(o) + 1)

    def stop(self) -> None:
        self.halt.set()
        if self.is_alive():
            self.join()
        if self.conn is not None:
            self.conn.disconnect()
        if self.old_flags is not None:
            self.client.config_set("notify-keyspace-events", self.old_flags)
        self.client.close()


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


#: Where a run's first minute ends: the events sent in it are the cold start's
#: (``p99_first_minute_s``), the later ones the warm chain's (``p99_after_minute_s``).
WARM_NS = 60 * 10**9


def latencies(producer: Producer, arrivals: Arrivals) -> dict[str, Any]:
    """The latency figures of the timed events (the warm-up ones left out)."""
    first, sent = arrivals.first, producer.sent_ns
    timed = [(i, first.get(f"e{i}")) for i in range(producer.warm, len(sent))]
    lat = [(t - sent[i]) / 1e9 for i, t in timed if t is not None]
    got = [t for _, t in timed if t is not None]
    if not lat:
        return {"delivered": 0}
    third = max(1, len(lat) // 3)
    early, late = statistics.median(lat[:third]), statistics.median(lat[-third:])
    warm = lat[third:] or lat  # once the first third is past: the JVM's and the caches' warm-up
    by_second: dict[int, list[float]] = {}
    for (i, t) in timed:
        if t is not None:
            by_second.setdefault((sent[i] - producer.begin_ns) // 10**9, []).append(
                (t - sent[i]) / 1e9)
    minute = [(sent[i] - producer.begin_ns) < WARM_NS for i, t in timed if t is not None]
    first_minute = [x for x, early_on in zip(lat, minute, strict=True) if early_on]
    after_minute = [x for x, early_on in zip(lat, minute, strict=True) if not early_on]
    return {"delivered": len(lat), "p50_s": quantile(lat, 0.5), "p99_s": quantile(lat, 0.99),
            "p99_first_minute_s": quantile(first_minute, 0.99) if first_minute else None,
            "p99_after_minute_s": quantile(after_minute, 0.99) if after_minute else None,
            "max_s": max(lat), "mean_s": statistics.fmean(lat),
            "p50_first_third_s": early, "p50_last_third_s": late,
            "p99_after_first_third_s": quantile(warm, 0.99),
            "grew": late > GROWTH[0] * early + GROWTH[1],
            "in_flight_at_end": sum(1 for t in got if t > producer.end_ns),
            "drain_s": max(0.0, (max(got) - producer.end_ns) / 1e9),
            "p50_by_second_s": [round(statistics.median(v), 4)
                                for _, v in sorted(by_second.items())],
            "p99_by_second_s": [round(quantile(v, 0.99), 4)
                                for _, v in sorted(by_second.items())]}


def not_held(row: dict[str, Any]) -> str | None:
    """Why a rate run's ``row`` (rate, sent, and the :func:`latencies`) does not show its system
    holding the rate, in a few words; None when it held it: every timed event delivered, the
    events in flight when sending ended at most :data:`KEPT_UP_SECONDS` of input, and the
    latency not climbing over the run (``grew``)."""
    if not row.get("delivered"):
        return "nothing delivered"
    owed = row.get("in_flight_at_end", 0)
    if owed > row["rate"] * KEPT_UP_SECONDS:
        return (f"{owed:,} events ({owed / row['rate']:.1f} s of input) still in flight when "
                "sending ended")
    if row.get("grew"):
        return (f"latency climbed: p50 {row['p50_first_third_s']:.2f} s in the first third, "
                f"{row['p50_last_third_s']:.2f} s in the last")
    return None
