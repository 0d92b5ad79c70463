"""Checks of option values beyond their type, one function per kind of value: each returns
what is wrong with a value as a phrase, or ``None`` when it is good (``Option.check``).

    >>> check_brokers(["kafka-1:9092", "nohost"])
    "broker 'nohost' is not host:port (e.g. kafka-1:9092)"
    >>> check_interval(2.5) is None
    True
"""

from __future__ import annotations

import re

from partitioners import resolve
from sqe.clients.redis_endpoint import check_url
from sqe.lang.documents import SyntaxProblem, load_json
from sqe.lang.spark_types import type_problem

__all__ = ["check_bloom_size", "check_brokers", "check_declared_fields", "check_interval",
           "check_partitioner", "check_starting_offsets", "check_state_redis_url"]


def check_partitioner(name: str) -> str | None:
    try:
        resolve(name)
    except ValueError as exc:
        return str(exc)
    return None


def check_starting_offsets(text: str) -> str | None:
    if text.strip().lower() in ("earliest", "latest"):
        return None
    expected = 'expected earliest, latest or JSON like {"0": 42}'
    try:
        given = load_json(text)
    except SyntaxProblem as exc:
        return f"{expected} ({exc.problem}, at column {exc.column})"
    if not isinstance(given, dict):
        return f"{expected} (not a JSON object)"
    for partition, offset in given.items():
        if not partition.strip().isdigit():
            return f"{expected} (partition {partition!r} is not a partition number)"
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            return f"{expected} (partition {partition}: offset {offset!r} is not an offset >= 0)"
    return None


#: ``[protocol://]host:port`` of one broker; the host a name, an IPv4 or a [bracketed] IPv6.
_BROKER = re.compile(r"^(?:[A-Za-z][A-Za-z0-9_+.-]*://)?(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.%\w]+\])"
                     r":(\d{1,5})$")


def check_brokers(brokers: list[str]) -> str | None:
    for entry in brokers:
        found = _BROKER.match(entry)
        if found is None or not 0 < int(found.group(1)) < 65536:
            return f"broker {entry!r} is not host:port (e.g. kafka-1:9092)"
    return None


def check_declared_fields(fields: dict[str, str | None]) -> str | None:
    for name, spark_type in fields.items():
        problem = type_problem(spark_type) if spark_type is not None else None
        if problem:
            return f"field {name}: {problem}"
    return None


def check_interval(seconds: float) -> str | None:
    return None if 0 <= seconds <= 86_400 else "expected 0 to 86400 seconds"


def check_bloom_size(size: int) -> str | None:
    return None if 16 <= size <= 255 else "expected 16..255 bytes"


def check_state_redis_url(url: str) -> str | None:
    if url.lower().split("://", 1)[0].endswith("+cluster"):
        return ("the Redis state writes keys of every slot from one script, so it needs one "
                "server (redis://, rediss://, unix:// or a Sentinel URL), not a Cluster")
    return check_url(url)
