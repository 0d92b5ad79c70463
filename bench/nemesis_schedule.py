"""The nemesis's fault schedule: drawn from a seed, printed, and read back to replay a run.

A :class:`Fault` is one thing done to the chain at ``at`` seconds into the input, for
``hold`` seconds where it lasts (a pause, a store away, a blackhole), on a ``target``:

==================  ==================  ====================================================
kind                target              what happens
==================  ==================  ====================================================
``kill``            enrich, load        SIGKILL of the run's process group; restarted
                                        after ``hold`` s on its checkpoint
``pause``           enrich, load        SIGSTOP of the run's processes, SIGCONT after ``hold``
``takeover``        enrich, load        SIGSTOP for ``hold`` s (past the checkpoint lock's
                                        stale heartbeat and the rival's watch of it);
                                        meanwhile a second run on the same checkpoint from
                                        another host name; then SIGCONT
``restart``         kafka, postgres     the server stopped (the broker by SIGTERM: the pip
                                        broker loses acknowledged records to a SIGKILL,
                                        which Kafka does not; Postgres ``pg_ctl -m
                                        immediate``), started again after ``hold`` s; the
                                        broker with ``lagging``: without its producers'
                                        state (their sequence numbers), as from a snapshot
                                        that lacks it
``failover``        redis               the primary SIGKILLed, its replica promoted by the
                                        Sentinel (``lagging``: the replica cut off first)
``lose-worker``     cluster             with ``--cluster``: a worker of load's standalone
                                        cluster SIGKILLed with its executor, another
                                        started after ``hold`` s
``cut``             kafka, redis,       every connection through the store's proxy closed
                    postgres
``lost-reply``      kafka, redis,       the next commit request (Produce, EVALSHA, COMMIT)
                    postgres            runs; its reply is dropped and the connection closed
``blackhole``       kafka, redis,       nothing passes the proxy either way for ``hold`` s
                    postgres
``delay``           kafka, redis,       every chunk through the proxy waits ``latency`` s,
                    postgres            for ``hold`` s
``forget``          hwm                 the HWM store loses the consumers' marks and commit
                                        records (as a store of its own restarted empty; with
                                        ``lagging``: restored from a copy ``hold`` s older)
``disk-full``       checkpoint          the filesystem of both runs' checkpoints (a tmpfs
                                        of its own) filled up for ``hold`` s
``server-kill``     connect             with ``--connect``: the Spark Connect server the
                                        hops run on SIGKILLed (its queries with it), started
                                        again on its port after ``hold`` s
``clock``           enrich, load        the clock of the run's driver (its Python process:
                                        libfaketime) stepped ``step`` s forward or back for
                                        ``hold`` s, then set right (an NTP step, a VM
                                        resumed); its JVM keeps the real clock
==================  ==================  ====================================================

Faults are drawn at random times, so they overlap: a kill of load during a Redis failover,
a broker restart during a blackhole of Postgres.  :func:`draw` is a pure function of its
arguments; ``--schedule FILE`` replays a printed schedule exactly.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

DRIVERS = ("enrich", "load")
STORES = ("kafka", "redis", "postgres")
#: kind -> (targets, weight, shortest and longest hold in seconds)
KINDS: dict[str, tuple[tuple[str, ...], int, float, float]] = {
    "kill": (DRIVERS, 4, 1.0, 10.0),
    "pause": (DRIVERS, 2, 2.0, 20.0),
    "takeover": (DRIVERS, 1, 110.0, 130.0),
    "restart": (("kafka", "postgres"), 2, 1.0, 15.0),
    "failover": (("redis",), 2, 0.0, 0.0),
    "lose-worker": (("cluster",), 2, 5.0, 30.0),
    "cut": (STORES, 3, 0.0, 0.0),
    "lost-reply": (STORES, 3, 0.0, 0.0),
    "blackhole": (STORES, 2, 1.0, 8.0),
    "delay": (STORES, 2, 5.0, 20.0),
    "forget": (("hwm",), 2, 5.0, 30.0),
    "disk-full": (("checkpoint",), 2, 5.0, 30.0),
    "clock": (DRIVERS, 2, 20.0, 90.0),
    "server-kill": (("connect",), 3, 1.0, 10.0),
}
#: The kinds drawn unless ``--kinds`` says otherwise: all but ``clock``, whose libfaketime
#: fakes what the driver reads but not the kernel's timed waits, so the Kafka client's waits
#: in a stepped driver time out ("Failed to get metadata: Local: Timed out" after 120 s with
#: the clock 5 minutes back): an artifact of the tool, which a step of the host's clock does
#: not make the same way.  The lock, the part of SQE that decides by clocks, is tested with
#: stepped processes (tests/engine/test_lock.py).
DEFAULT_KINDS = tuple(k for k in KINDS if k != "clock")


@dataclass(frozen=True)
class Fault:
    """One fault of a schedule (see the module docstring)."""

    at: float
    kind: str
    target: str
    hold: float = 0.0
    #: failover: the replica cut off first; forget: an older copy; restart kafka: the broker
    #: back without its producers' state
    lagging: bool = False
    latency: float = 0.0  # delay: seconds added to each chunk
    step: float = 0.0  # clock: seconds the clock is stepped by (forward > 0, back < 0)

    def describe(self) -> str:
        extra = {"failover": " with the replica behind" if self.lagging else "",
                 "restart": " without its producers' state" if self.lagging else "",
                 "delay": f" of {self.latency * 1000:.0f} ms",
                 "forget": f" back to a copy {self.hold:.1f} s older" if self.lagging
                 else ", restarted empty",
                 "clock": f" stepped {self.step / 60:+.1f} min"}.get(self.kind, "")
        held = f" for {self.hold:.1f} s" if self.hold and self.kind != "forget" else ""
        return f"{self.at:7.1f} s  {self.kind} {self.target}{extra}{held}"


def draw(seed: int, seconds: float, every: float = 20.0,
         kinds: tuple[str, ...] = tuple(KINDS)) -> list[Fault]:
    """About one fault per ``every`` seconds of ``seconds`` of input, of ``kinds``, from
    ``seed``; none in the first 20 s (the runs start) or in the last 10 % (the chain must
    still make progress before the input ends).  A takeover needs a run of over 4 minutes."""
    rng = random.Random(seed)
    usable = [k for k in kinds if k != "takeover" or seconds >= 240]
    if not usable:
        return []
    weights = [KINDS[k][1] for k in usable]
    start, end = 20.0, max(25.0, seconds * 0.9)
    count = max(1, round((end - start) / every))
    faults = []
    for _ in range(count):
        kind = rng.choices(usable, weights)[0]
        targets, _, low, high = KINDS[kind]
        at, target = round(rng.uniform(start, end), 1), rng.choice(targets)
        faults.append(Fault(at=at, kind=kind, target=target,
                            hold=round(rng.uniform(low, high), 1),
                            lagging=kind in ("failover", "forget") and rng.random() < 0.5
                            or (kind, target) == ("restart", "kafka") and _coin(seed, at),
                            latency=round(rng.uniform(0.05, 0.5), 2) if kind == "delay" else 0.0,
                            step=round(rng.choice((-1, 1)) * rng.uniform(120, 600))
                            if kind == "clock" else 0.0))
    return sorted(faults, key=lambda f: f.at)


def _coin(seed: int, at: float) -> bool:
    """Heads or tails for the fault at ``at`` of ``seed``'s schedule, from a generator of its
    own: drawing it from the schedule's would change every later fault of the seeds drawn
    before it was added."""
    return random.Random(f"{seed}:{at}").random() < 0.5


def save(faults: list[Fault], path: Path) -> None:
    path.write_text(json.dumps([asdict(f) for f in faults], indent=1))


def load(path: Path) -> list[Fault]:
    """A schedule :func:`save` wrote (the nemesis's ``schedule.json``)."""
    try:
        rows = json.loads(path.read_text())
        faults = [Fault(**row) for row in rows]
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"{path}: not a nemesis schedule ({exc})") from None
    unknown = [f.kind for f in faults if f.kind not in KINDS]
    if unknown:
        raise ValueError(f"{path}: unknown fault kinds {sorted(set(unknown))}; known: "
                         f"{', '.join(KINDS)}")
    return sorted(faults, key=lambda f: f.at)
