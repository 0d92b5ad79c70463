"""What the bench's part-scripts share: the processes that bench/chain.py and bench/latency.py
start (``plain_chain.py``, ``plain_latency.py``, ``chain_parts.py``, ``quix_enrich.py``,
``quix_chain.py``), some of them in a virtualenv of their own, so the standard library only.

* :func:`keeps` and :func:`enriched`: the where and the select of ``topologies/enrich.yaml``
  on one decoded event, and :func:`load_fields`, what ``topologies/load.yaml`` writes of one
  enriched row, as the plain programs and the quixstreams apps apply them.
* :func:`run_part`: a part-script's last lines: its work's JSON object as the last stdout line
  and exit code 0, or its failure as one ``error: ...`` line on stderr and exit code 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def keeps(event: Any) -> bool:
    """enrich.yaml's where: an object whose ``event_id`` is not null."""
    return isinstance(event, dict) and event.get("event_id") is not None


def enriched(event: dict[str, Any]) -> dict[str, Any]:
    """enrich.yaml's select of one event (null fields left out, as Spark's to_json does)."""
    region, amount = event.get("region"), event.get("amount")
    out = {"event_id": event["event_id"], "user": event.get("user"),
           "region": region.upper() if isinstance(region, str) else region, "amount": amount,
           "amount_cents": None if amount is None else amount * 100,
           "big_spender": None if amount is None else amount > 50}
    return {k: v for k, v in out.items() if v is not None}


def load_fields(row: Any) -> tuple[str, str, str]:
    """load.yaml's fields of one decoded enriched row: region, event_id and amount_cents as
    text (``""`` for a null, and for every field of a row that is not an object)."""
    if not isinstance(row, dict):
        return "", "", ""
    region, event_id, cents = row.get("region"), row.get("event_id"), row.get("amount_cents")
    return ("" if region is None else str(region), "" if event_id is None else str(event_id),
            "" if cents is None else str(cents))


def run_part(work: Callable[[], dict[str, Any] | None],
             errors: tuple[type[BaseException], ...], named: bool = False) -> int:
    """Run ``work`` and print its result as one JSON line (nothing for None): exit code 0.

    One of ``errors`` is printed as one ``error: ...`` line on stderr (``named``: the
    exception's class name first and its text folded onto one line, for libraries whose
    messages span lines): exit code 1.
    """
    try:
        result = work()
    except errors as exc:
        if named:
            text = " ".join(str(exc).split()) or type(exc).__name__
            print(f"error: {type(exc).__name__}: {text}", file=sys.stderr)
        else:
            print(f"error: {exc}", file=sys.stderr)
        return 1
    if result is not None:
        print(json.dumps(result))
    return 0
