"""How long a batch's commit holds the state's Redis from its other clients.

    PYTHONPATH=. .venv/bin/python bench/commit_hold.py [--rows 600000] [--redis URL]
        [--tree DIR] [--json]

A Redis state in the HWM store's database stages a batch's rows in the store, and the batch's
commit puts them into the state's keys.  This stages ``--rows`` rows of a HASH state (50 keys)
as the executors do (long HSETs), then commits them with :meth:`sqe.ledger.hwm.HwmStore.commit`
while another client sends ``PING`` in a loop, one at a time, and reports: the commit's
duration, the longest a ``PING`` waited, how many waited over 100 ms, and how many Redis
refused with ``BUSY`` (a script past ``busy-reply-threshold``).  ``--tree`` runs the ``sqe``
package of another source tree (an earlier commit: ``git worktree add DIR REV``) for the same
measure, so the two can be compared in one run.  A redis-server is started unless ``--redis``
is given (that database is flushed).  Exit 1 when the state differs from what was staged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import redis

from bench.harness import BENCH, ROOT
from bench.harness.report import parser, service_options
from bench.harness.services import redis_database, with_services

_KEYS = 50


def measure(url: str, rows: int) -> dict[str, Any]:
    """Stage ``rows`` rows, commit them while a client pings: the figures of the docstring."""
    from sqe.ledger.hwm import HwmStore, Stage

    store = HwmStore.from_url(url, "hold.Bench", ttl_seconds=3600)
    client = redis.Redis.from_url(url)
    client.flushdb()
    key = store.stage_key(0, "/ck/bench", 0)
    fields = {}
    for i in range(rows):
        fields[f"{len(str(i % _KEYS)) + 1}:k{i % _KEYS}f{i}".encode()] = str(i).encode()
        if len(fields) == 50_000:
            client.hset(key, mapping=fields)
            fields = {}
    if fields:
        client.hset(key, mapping=fields)
    pings: list[float] = []
    busy = 0
    done = threading.Event()

    def ping() -> None:
        nonlocal busy
        other = redis.Redis.from_url(url)
        while not done.is_set():
            start = time.perf_counter()
            try:
                other.ping()
            except redis.ResponseError as exc:
                if str(exc).startswith("BUSY"):
                    busy += 1
                    continue
                raise
            pings.append(time.perf_counter() - start)
        other.close()

    pinger = threading.Thread(target=ping, daemon=True)
    pinger.start()
    time.sleep(0.2)
    start = time.perf_counter()
    store.commit(0, {(1, 0): 1}, [Stage(key, "HASH")], '{"0": 1}', "/ck/bench")
    took = time.perf_counter() - start
    time.sleep(0.2)
    done.set()
    pinger.join()
    held = sum(client.hlen(f"k{i}") for i in range(_KEYS))
    client.close()
    store.client.close()
    return {"rows": rows, "commit_s": took, "ping_max_s": max(pings), "pings": len(pings),
            "pings_over_100ms": sum(1 for p in pings if p > 0.1), "busy_replies": busy,
            "rows_in_state": held}


def in_tree(tree: Path, url: str, rows: int) -> dict[str, Any]:
    """:func:`measure` of this file run by another source tree's ``sqe`` package (its tree
    first on the path, the working directory not on it)."""
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}", "PYTHONSAFEPATH": "1"}
    code = ("import json, runpy; "
            f"measure = runpy.run_path({str(BENCH / 'commit_hold.py')!r})['measure']; "
            f"print(json.dumps(measure({url!r}, {rows})))")
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--rows", type=int, default=600_000, help="rows the batch stages")
    service_options(ap, kafka=False)
    ap.add_argument("--tree", type=Path, help="run another source tree's sqe package")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    def body(stack: ExitStack, work: Path) -> dict[str, Any]:
        url = redis_database(stack, work, args.redis, flush=False)  # measure() flushes it
        return in_tree(args.tree, url, args.rows) if args.tree is not None else \
            measure(url, args.rows)

    result = with_services(body)
    if result is None:
        return 1
    result["tree"] = str(args.tree) if args.tree else "this tree"
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['tree']}: {result['rows']:,} staged rows committed in "
              f"{result['commit_s']:.2f} s; another client's PING waited at most "
              f"{result['ping_max_s'] * 1000:.0f} ms ({result['pings_over_100ms']} of "
              f"{result['pings']:,} over 100 ms, {result['busy_replies']} BUSY replies)")
    if result["rows_in_state"] != result["rows"]:
        print(f"the state holds {result['rows_in_state']:,} rows, not {result['rows']:,}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
