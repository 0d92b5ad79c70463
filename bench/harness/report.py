"""What a benchmark says: the options every one takes (:func:`parser`, :func:`service_options`,
:func:`parse_list`), its progress (:func:`say`), its report's tables and figures
(:func:`columns`, :func:`num`, :func:`median`, :func:`ratio`, :func:`per_item`), and its
last lines
(:func:`finish`: the report, the problems as ``error: ...`` lines, the JSON object last, and
the exit code)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any


def say(text: str) -> None:
    """A line of progress, flushed at once (the runs take minutes)."""
    print(text, flush=True)


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser described by the first paragraph of a script's docstring."""
    return argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])


def service_options(ap: argparse.ArgumentParser, kafka: bool = True, redis: bool = True) -> None:
    """``--brokers`` and ``--redis``: the services given, else started for the run."""
    if kafka:
        ap.add_argument("--brokers", help="a Kafka broker; default: start the local pip broker")
    if redis:
        ap.add_argument("--redis", help="a Redis URL with a database to flush; default: start "
                                        "redis-server")


def parse_list(text: str, number: Callable[[str], Any], option: str, what: str, least: str
               ) -> list[Any]:
    """``option``'s comma-separated numbers (``_`` allowed), each over 0; an ArgumentTypeError
    says ``option`` takes ``what`` separated by commas, or takes ``least``."""
    try:
        values = [number(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{option} takes {what} separated by commas, got "
                                         f"{text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"{option} takes {least}")
    return values


def per_item(work: Callable[[], object], repeat: int, n: int) -> float:
    """Seconds per item of ``work`` over ``n`` items: the median of ``repeat`` rounds after
    one left out (the warm-up)."""
    times = []
    for _ in range(repeat + 1):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) / n


def num(v: float | None, fmt: str = ".3f") -> str:
    """``v`` formatted, or ``-``."""
    return "-" if v is None else format(v, fmt)


def median(values: Iterable[float]) -> float | None:
    """The median, or None of nothing."""
    found = list(values)
    return statistics.median(found) if found else None


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing (or 0)."""
    return a / b if a and b else None


def columns(cells: Sequence[tuple[str, ...]], left: Iterable[int] = (0,)) -> list[str]:
    """A report table: the columns ``left`` left-aligned, the others right-aligned, two spaces
    apart."""
    lefts = set(left)
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    return ["  ".join(t.ljust(w) if i in lefts else t.rjust(w) for i, (t, w) in
                      enumerate(zip(c, widths, strict=True))) for c in cells]


def finish(lines: list[str], problems: list[str], as_json: Any = None) -> int:
    """Print a benchmark's report ``lines``, its ``problems`` as ``error: ...`` lines on
    stderr and, given ``as_json``, that object as one JSON line last; the exit code (1 with
    problems)."""
    print("\n".join(lines))
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if as_json is not None:
        print(json.dumps(as_json))
    return 1 if problems else 0
