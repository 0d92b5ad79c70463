"""Two (or more) writers at once: threads released together by a barrier."""

from __future__ import annotations

import threading
from collections.abc import Callable


def race(n: int, work: Callable[[int], object], timeout: float = 300.0) -> list[object]:
    """Run ``work(0)`` .. ``work(n - 1)`` in ``n`` threads released at the same moment; each
    one's result, or the exception it raised."""
    barrier = threading.Barrier(n)
    out: list[object] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = work(i)
        except Exception as exc:  # the thread's outcome, for the test to look at
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), f"a writer did not end within {timeout} s"
    return out
