"""What a record decoder gives for a batch of values (:class:`Decoded`), how it asks for a
writer's schema (:data:`Writer`), and the value-at-a-time reading every decoder is held equal
to (:func:`decode_reference`), for :mod:`sqe.wire.avro` and :mod:`sqe.wire.protobuf` alike.

    >>> Decoded(pa.array([None]), {0: "why"}).bad
    {0: 'why'}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from sqe.errors import SchemaError
from sqe.wire.framing import HEADER_BYTES, OK, header_reference, problem_text

__all__ = ["Decoded", "ValueDecoder", "Writer", "decode_reference"]

#: A writer schema by id: ``(schema type, schema text)``, or None when the registry has no
#: such id.
Writer = Callable[[int], "tuple[str, str] | None"]


@dataclass(frozen=True)
class Decoded:
    """A batch's values decoded: one struct per value (NULL for a NULL value or a bad one),
    and why each bad value could not be read, by its position."""

    values: pa.Array
    bad: dict[int, str]


class ValueDecoder(Protocol):
    """What :func:`decode_reference` asks of a decoder."""

    writers: Writer | None

    @property
    def plain(self) -> Any:
        """The writer of a value without the wire format's header (no registry)."""

    def writer(self, schema_id: int) -> Any:
        """The writer of ``schema_id``'s values, or why they cannot be read (a str)."""

    def one(self, payload: memoryview, writer: Any, schema_id: int | None) -> Any:
        """One value's record; a bad value raises :class:`SchemaError` with the reason."""


def decode_reference(decoder: ValueDecoder, values: list[bytes | None]
                     ) -> tuple[list[Any], dict[int, str]]:
    """A decoder's ``decode`` a value at a time, in plain Python: the records (as Python
    values) and the reasons of the bad ones."""
    records: list[Any] = []
    bad: dict[int, str] = {}
    for i, value in enumerate(values):
        records.append(None)
        if value is None:
            continue
        if decoder.writers is None:
            sid, writer, payload = None, decoder.plain, value
        else:
            sid, problem = header_reference(value)
            if problem != OK:
                bad[i] = problem_text(value, problem)
                continue
            writer, payload = decoder.writer(sid), value[HEADER_BYTES:]
        if isinstance(writer, str):
            bad[i] = writer
            continue
        try:
            records[i] = decoder.one(memoryview(payload), writer, sid)
        except SchemaError as exc:
            bad[i] = str(exc)
    return records, bad
