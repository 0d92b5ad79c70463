"""What one micro-batch of one stream did: the one declaration of a batch's counters.

:class:`BatchReport` is filled in by the batch processor, logged as one line
(:meth:`BatchReport.line`), appended to the progress file as JSON
(:meth:`BatchReport.to_json`, read back by :meth:`BatchReport.from_json`, which
checks every field against its declared type) and summed per stream by
``sqe report`` (:meth:`BatchReport.add`).  The source's counters are a
:class:`~sqe.wire.columns.Tally`.

Example::

    >>> r = BatchReport("Events", 3, records_read=10, written={"out": 10})
    >>> BatchReport.from_json(r.to_json()) == r
    True
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, get_type_hints

from sqe.errors import ProgressError
from sqe.wire.columns import Tally

__all__ = ["BatchReport", "partition_offsets"]

#: Field metadata: summed by :meth:`BatchReport.add`.
_COUNTER = {"counter": True}
#: Field metadata: may be missing from a progress line (written by an earlier version).
_OPTIONAL = {"optional": True}


@dataclass
class BatchReport:
    """What one micro-batch of one stream did."""

    stream: str
    batch_id: int
    records_read: int = field(default=0, metadata=_COUNTER)
    replays_dropped: int = field(default=0, metadata=_COUNTER)
    unparseable_keys: int = field(default=0, metadata=_COUNTER)
    unparseable_values: int = field(default=0, metadata=_COUNTER)
    written: dict[str, int] = field(default_factory=dict, metadata=_COUNTER)  # rows per state
    #: the states of ``written`` whose count is aggregate entries merged, not rows
    merged: list[str] = field(default_factory=list, metadata=_OPTIONAL)
    skipped: bool = False  # committed already: Spark re-ran a finished batch, nothing was done
    filtering: bool = field(default=False, metadata=_OPTIONAL)  # the stream filters replays
    already_written: list[str] = field(default_factory=list, metadata=_OPTIONAL)
    #: the source offsets the batch ends at, partition -> next offset (the sqe-kafka source)
    offsets: dict[str, int] = field(default_factory=dict, metadata=_OPTIONAL)
    source: Tally = field(default_factory=Tally, metadata=_COUNTER)
    warnings: dict[str, int] = field(default_factory=dict, metadata={**_COUNTER, **_OPTIONAL})
    started: float = field(default_factory=time.time)  # epoch seconds
    duration_s: float = field(default=0.0, metadata=_COUNTER)  # set when the batch is done
    #: records a hop's stateful operators dropped as later than the watermark (Spark's
    #: ``numRowsDroppedByWatermark``, known once Spark reports the batch's progress)
    late_dropped: int = field(default=0, metadata={**_COUNTER, **_OPTIONAL})

    @property
    def rows_written(self) -> int:
        """Rows written to every state (aggregate entries merged not counted)."""
        return sum(n for k, n in self.written.items() if k not in self.merged)

    @property
    def entries_merged(self) -> int:
        """Aggregate entries merged into every aggregating state."""
        return sum(n for k, n in self.written.items() if k in self.merged)

    def rate(self) -> float | None:
        """Records read per second of this batch (None before it is done)."""
        return self.records_read / self.duration_s if self.duration_s > 0 else None

    def add(self, other: BatchReport) -> None:
        """Add ``other``'s counters to these (for totals over batches)."""
        for f in fields(self):
            if not f.metadata.get("counter"):
                continue
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, dict):
                for key, n in theirs.items():
                    mine[key] = mine.get(key, 0) + n
            elif isinstance(mine, Tally):
                mine.add(theirs)
            else:
                setattr(self, f.name, mine + theirs)
        self.merged += [k for k in other.merged if k not in self.merged]

    def to_json(self) -> dict[str, Any]:
        """Every field, the source's counters as a map."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchReport:
        """A report from :meth:`to_json`'s form; a ``ValueError`` names a missing or bad field."""
        hints = get_type_hints(cls)
        missing = cls.missing(data)
        if missing:
            raise ProgressError(f"missing {', '.join(missing)}")
        values = {f.name: _checked(f.name, hints[f.name], data[f.name])
                  for f in fields(cls) if f.name in data}
        return cls(**values)

    @classmethod
    def missing(cls, data: dict[str, Any]) -> list[str]:
        """The fields :meth:`from_json` needs that ``data`` lacks."""
        return [f.name for f in fields(cls)
                if f.name not in data and not f.metadata.get("optional")]

    def line(self) -> str:
        """The log line of this batch."""
        if self.skipped:
            return (f"{self.stream} batch {self.batch_id}: already committed to the HWM store, "
                    "skipped")
        outs = ", ".join(f"{k} held this batch already" if k in self.already_written
                         else f"{n} entries merged into {k}" if k in self.merged
                         else f"{n} to {k}" for k, n in self.written.items()) or "no state written"
        replays = (f"{self.replays_dropped} replays dropped, {self.unparseable_keys} records "
                   "with keys that cannot be judged passed through, " if self.filtering else "")
        rate = self.rate()
        timing = (f" in {self.duration_s:.2f} s ({rate:,.{0 if rate >= 10 else 1}f} records/s)"
                  if rate is not None else "")
        return (f"{self.stream} batch {self.batch_id}: {self.records_read} records read, "
                f"{replays}{self.unparseable_values} values not JSON{self._source_text()}; "
                f"wrote {outs}{timing}")

    def _source_text(self) -> str:
        t = self.source
        parts = []
        if t.chunks_read:
            parts.append(f"{t.chunks_read} chunks read ({t.chunks_skipped_bloom} skipped by the "
                         f"Bloom filter, {t.chunks_skipped_hwm} by the HWM, "
                         f"{t.chunks_false_positive} false positives), {t.messages_decoded} "
                         f"messages decoded, {t.bytes_not_decoded} of "
                         f"{t.bytes_decoded + t.bytes_not_decoded} bytes not decoded")
        if t.messages_filtered:
            parts.append(f"{t.messages_filtered} messages post-filtered out")
        if t.keys_beyond_bound:
            parts.append(f"{t.keys_beyond_bound} records with keys beyond filterReplays."
                         "maxAdvance rejected")
        if t.dead_letters:
            parts.append(f"{t.dead_letters} records sent to the dead-letter topic")
        parts += [f"{n} {name.replace('_', ' ')} (NULL)" for name, n in self.warnings.items()
                  if n]
        return "".join(f", {p}" for p in parts)


def partition_offsets(text: str | None) -> dict[str, int]:
    """The end offsets of a batch as Spark's checkpoint holds them, when they are one topic's:
    ``{"<partition>": <next offset>}`` (``sqe-kafka``'s), or the same under the topic (a hop's
    source's, Spark's Kafka source's); ``{}`` for other sources'.

        >>> partition_offsets('{"0": 42, "1": 7}'), partition_offsets('{"t": {"0": 1}}')
        ({'0': 42, '1': 7}, {'0': 1})
    """
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return {}
    if isinstance(data, dict) and len(data) == 1 and isinstance(next(iter(data.values())), dict):
        data = next(iter(data.values()))
    if not isinstance(data, dict) or not all(k.isdigit() and _is_int(v) for k, v in data.items()):
        return {}
    return dict(data)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_counts(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and _is_int(v)
                                           for k, v in value.items())


def _tally(value: dict[str, int]) -> Tally:
    known = {f.name for f in fields(Tally)}
    return Tally(**{k: v for k, v in value.items() if k in known})


#: Per field type of :class:`BatchReport`: the check of a JSON value, what it should have
#: been (for the error), and the conversion.
_TYPES: list[tuple[Any, Callable[[Any], bool], str, Callable[[Any], Any]]] = [
    (str, lambda v: isinstance(v, str), "a string", str),
    (int, _is_int, "an integer", int),
    (bool, lambda v: isinstance(v, bool), "true or false", bool),
    (float, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0,
     "a number of seconds", float),
    (dict[str, int], _is_counts, "a map of counts", dict),
    (list[str], lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
     "a list of strings", list),
    (Tally, _is_counts, "a map of counts", _tally),
]


def _checked(name: str, hint: Any, value: Any) -> Any:
    """``value`` if it has the type ``hint`` of field ``name``, else a ``ValueError`` saying so."""
    for kind, ok, what, convert in _TYPES:
        if kind == hint:
            if not ok(value):
                raise ProgressError(f"{name} is not {what}")
            return convert(value)
    raise TypeError(f"BatchReport field {name} has a type the progress file cannot hold: {hint}")
