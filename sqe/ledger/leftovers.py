"""What a consumer's batches leave in the HWM store beside its marks, found and deleted.

Under the consumer's key prefix (``sqe:{<consumer>}:``, :class:`sqe.ledger.hwm.HwmStore`'s
``prefix``), a batch's writers stage Redis state rows (``stage:...``, until the commit applies
them) and its source tasks report what they read (``read:...`` and the sets ``reads:...``,
:mod:`sqe.source.read_report`).  :meth:`~sqe.ledger.hwm.HwmStore.reset` deletes both kinds;
a rebuild of lost marks (:mod:`sqe.engine.run.lost_marks`) deletes the reports
(:func:`forget_reads`): a task run again filters by the marks its report recorded, not by the
store's, and the reports of a batch tried while the store had lost its marks say it held
none.

Example::

    >>> _pattern("sqe:{load.enriched}:", "read")
    'sqe:{load.enriched}:read:*'
"""

from __future__ import annotations

import re

import redis

__all__ = ["forget_reads", "left_by_tasks"]


def _pattern(prefix: str, kind: str) -> str:
    """The SCAN pattern of the keys of ``kind`` under ``prefix`` (its glob characters
    escaped: a consumer's name may hold them)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", f"{prefix}{kind}:") + "*"


def left_by_tasks(client: redis.Redis, prefix: str, kind: str) -> list[bytes]:
    """The keys of one ``kind`` (``stage``, ``read``, ``reads``) under ``prefix``."""
    return list(client.scan_iter(match=_pattern(prefix, kind)))


def forget_reads(client: redis.Redis, prefix: str) -> int:
    """Delete what the source tasks under ``prefix`` reported reading; how many keys went."""
    keys = left_by_tasks(client, prefix, "read") + left_by_tasks(client, prefix, "reads")
    if keys:
        client.delete(*keys)
    return len(keys)
