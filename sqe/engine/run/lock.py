"""Which process runs on a checkpoint: one run at a time holds it.

A run creates ``sqe-run.lock`` at its checkpoint's root, atomically (it fails
when the file is there), holding the host, the PID, when the run started and a
heartbeat it refreshes every :data:`HEARTBEAT_SECONDS`.  A second run on the same
checkpoint refuses at once, in one sentence naming the holder.  A lock whose
holder is gone -- a PID that no longer runs on this host, or, from another host, a
heartbeat older than :data:`STALE_SECONDS` that then does not beat for
:data:`WATCH_SECONDS` of this host's monotonic clock -- is taken over: deleted and created
again atomically, so of two runs taking it over only one gets it.  The watch is what clocks
cannot fool: a holder whose clock stepped back (an NTP step, a VM resumed), or a run on a host
whose clock is ahead, sees an old heartbeat, but a holder that beats is alive, and is not
taken over.

A run that was paused or cut off past :data:`STALE_SECONDS` (a long GC pause, a VM
frozen, a network partition from the checkpoint's file system) may find at its next
heartbeat that another run took its lock over.  It does not write the lock back: it
notes the taker in :attr:`CheckpointLock.taken_over`, and the run stops at once, so
that one run at a time writes the checkpoint (what the stopped run had in flight is
fenced by the batch ids its commits carry).

Example::

    >>> lock = CheckpointLock(files)                     # doctest: +SKIP
    >>> lock.acquire()                                    # RunError when another run holds it
    >>> lock.release()
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from datetime import datetime, timezone
from typing import Any

from sqe.engine.spark.checkpoint import CheckpointFiles
from sqe.errors import RunError

log = logging.getLogger("sqe")

__all__ = ["HEARTBEAT_SECONDS", "LOCK_FILE", "STALE_SECONDS", "WATCH_SECONDS", "CheckpointLock"]

LOCK_FILE = "sqe-run.lock"
#: How often the holder refreshes its heartbeat.
HEARTBEAT_SECONDS = 10.0
#: A heartbeat this old from another host means its run may be gone ...
STALE_SECONDS = 60.0
#: ... when it then does not beat for this long (this host's monotonic clock).
WATCH_SECONDS = 3 * HEARTBEAT_SECONDS


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as another user
        return True
    return True


class CheckpointLock:
    """The lock of one checkpoint, held by this process from :meth:`acquire` to
    :meth:`release`."""

    def __init__(self, files: CheckpointFiles) -> None:
        self.files = files
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.since = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._beats = 0  # heartbeats written: the lock changes with each, whatever the clock
        #: Set by the heartbeat when another run holds the lock now: who, as a sentence.
        self.taken_over: str | None = None

    def _content(self) -> str:
        return json.dumps({"host": self.host, "pid": self.pid, "since": self.since,
                           "heartbeat": time.time(), "beat": self._beats})

    def _holder(self) -> dict[str, Any] | None:
        text = self.files.read(LOCK_FILE)
        if text is None:
            return None
        try:
            data = json.loads(text)
            return data if isinstance(data, dict) else {}
        except ValueError:
            return {}  # a lock file cut short: its writer died while writing it

    def _gone(self, holder: dict[str, Any], watch: bool = False) -> bool:
        """Whether ``holder``'s run is gone (see the module docstring); ``watch``: a heartbeat
        that looks stale is watched for :data:`WATCH_SECONDS` first (else the clocks say)."""
        if not holder:
            return True
        if holder.get("host") == self.host:
            return not _alive(int(holder.get("pid", 0)))
        if time.time() - float(holder.get("heartbeat", 0)) <= STALE_SECONDS:
            return False
        return not watch or self._silent(holder)

    def _silent(self, holder: dict[str, Any]) -> bool:
        """Whether the lock stays as ``holder`` wrote it for :data:`WATCH_SECONDS` (or is
        released meanwhile); False as soon as it beats or another run holds it."""
        deadline = time.monotonic() + WATCH_SECONDS
        while time.monotonic() < deadline:
            self._stop.wait(min(1.0, max(0.0, deadline - time.monotonic())))
            now = self._holder()
            if now != holder:
                return now is None
        return True

    def held_by(self) -> dict[str, Any] | None:
        """The lock's content (host, pid, since, heartbeat) while its run runs, else None."""
        holder = self._holder()
        return None if holder is None or self._gone(holder) else holder

    def holder(self) -> str | None:
        """Who holds the checkpoint now, as a sentence, or None when nobody (still) does."""
        holder = self.held_by()
        return None if holder is None else self._in_use(holder)

    def _in_use(self, holder: dict[str, Any], why: str = "") -> str:
        """The refusal naming ``holder``'s run (``why``: what this run saw of it)."""
        return (f"checkpoint {self.files.location} is in use by the run of PID "
                f"{holder.get('pid')} on {holder.get('host')} since {holder.get('since')}{why}; "
                "one run at a time may use a checkpoint: stop that run first, or give this "
                "one another --checkpoint")

    def acquire(self) -> None:
        """Hold the checkpoint, or raise :class:`RunError` naming the run that holds it."""
        for _ in range(3):
            if self.files.create(LOCK_FILE, self._content()):
                self._start_heartbeat()
                return
            holder = self._holder()
            if holder is None:
                continue  # released meanwhile
            if not self._gone(holder, watch=True):
                raise RunError(self.holder() or self._beating(holder))
            self.files.delete(LOCK_FILE)  # its holder is gone: take it over
        raise RunError(f"checkpoint {self.files.location}: another run took its lock over at "
                       "the same time; try again")

    def _beating(self, holder: dict[str, Any]) -> str:
        """The refusal for a holder whose heartbeat looked stale by this host's clock but
        beat while watched: the hosts' clocks differ."""
        behind = time.time() - float(holder.get("heartbeat", 0))
        return self._in_use(holder, f": its heartbeat reads {behind:.0f} s behind this host's "
                            "clock, but it beats, so the two hosts' clocks differ (see that "
                            "both follow NTP)")

    def _ours(self, holder: dict[str, Any] | None) -> bool:
        mine = (self.host, self.pid, self.since)
        return holder is not None and \
            (holder.get("host"), holder.get("pid"), holder.get("since")) == mine

    def renew(self) -> bool:
        """Refresh the heartbeat; False, with :attr:`taken_over` set, when another run holds
        the lock now (it took it over while this one was stalled)."""
        holder = self._holder()
        if holder is not None and not self._ours(holder):
            self.taken_over = (
                f"checkpoint {self.files.location}: the run of PID {holder.get('pid')} on "
                f"{holder.get('host')} took it over at {holder.get('since')}, while this run "
                f"(PID {self.pid} on {self.host}) was stalled past {STALE_SECONDS:.0f} s "
                "without a heartbeat (paused, or cut off from the checkpoint); this run "
                "stops, so that one run writes the checkpoint, and the other goes on from "
                "the last committed batch")
            return False
        self._beats += 1
        if holder is None:
            self.files.create(LOCK_FILE, self._content())  # deleted by hand: held again
        else:
            self.files.write(LOCK_FILE, self._content())
        return True

    def _start_heartbeat(self) -> None:
        def beat() -> None:
            failing = False
            while not self._stop.wait(HEARTBEAT_SECONDS):
                try:
                    if not self.renew():
                        return
                except RunError as exc:  # a full disk: said once, tried again each beat
                    if not failing:
                        log.warning(f"warning: {exc} (the lock's heartbeat is tried again "
                                    f"every {HEARTBEAT_SECONDS:.0f} s)")
                    failing = True
                    continue
                if failing:
                    log.warning(f"checkpoint {self.files.location}: the lock's heartbeat is "
                                "written again")
                failing = False

        self._beat = threading.Thread(target=beat, name="sqe-lock-heartbeat", daemon=True)
        self._beat.start()

    def release(self) -> None:
        """Give the checkpoint up (only if this process still holds it)."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
        holder = self._holder()
        if self._ours(holder):
            self.files.delete(LOCK_FILE)
