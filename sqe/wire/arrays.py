"""Arrow arrays made from Python and NumPy values, and read back into NumPy, without pandas.

pyarrow imports pandas, where it is installed, the first time ``pa.array``,
``pa.scalar``, ``Array.to_numpy`` or a compute function given a Python scalar runs: some
0.6 s and 45-50 MB in every Spark Python worker, for nothing SQE uses.  The code that runs
in the workers (the sources' rows, the chunk codec, the states' writers) builds and reads its
arrays here instead, from buffers, which is as fast or faster and keeps the worker small.
Each function names the pyarrow call it stands for; ``tests/wire/test_arrays.py`` holds
them equal over generated values and checks that a worker's path leaves pandas unimported.

Example::

    >>> binaries([b"a", None, b"bc"]).to_pylist()
    [b'a', None, b'bc']
    >>> to_numpy(from_numpy(np.array([3, 1], dtype=np.int32))).tolist()
    [3, 1]
    >>> to_numpy(booleans(np.array([True, False]))).tolist()
    [True, False]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import pyarrow as pa

from sqe.errors import WireError

_INT32_MAX = 2**31 - 1


def _bitmap(valid: np.ndarray | None) -> pa.Buffer | None:
    if valid is None or valid.all():
        return None
    return pa.py_buffer(np.packbits(np.asarray(valid, dtype=bool), bitorder="little"))


def booleans(mask: np.ndarray, valid: np.ndarray | None = None) -> pa.BooleanArray:
    """``pa.array(mask)`` for a NumPy bool array (NULL where ``valid`` is False)."""
    mask = np.asarray(mask, dtype=bool)
    bits = pa.py_buffer(np.packbits(mask, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), len(mask), [_bitmap(valid), bits])


def from_numpy(values: np.ndarray, type: pa.DataType | None = None,
               valid: np.ndarray | None = None) -> pa.Array:
    """``pa.array(values, type, mask=~valid)`` for a 1-D NumPy array of numbers or bools.

    ``type`` defaults to the array's own; a given one must have its width (a timestamp or a
    date over int64, say).
    """
    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        return booleans(values, valid)
    if type is None:
        type = pa.from_numpy_dtype(values.dtype)
    if type.bit_width != values.dtype.itemsize * 8:
        raise WireError(f"{values.dtype} values cannot make an Arrow {type} array")
    return pa.Array.from_buffers(type, len(values), [_bitmap(valid), pa.py_buffer(values)])


def binaries(values: Sequence[bytes | None], type: pa.DataType | None = None) -> pa.Array:
    """``pa.array(values, type)`` for ``bytes`` (``type`` binary, the default) or UTF-8
    bytes (``type`` string).  More than 2 GiB in all falls back to ``pa.array`` itself.
    """
    type = type or pa.binary()
    n = len(values)
    try:
        lengths = np.fromiter(map(len, cast(Sequence[bytes], values)), dtype=np.int64, count=n)
        valid = None
        data = b"".join(values)  # type: ignore[arg-type]
    except TypeError:  # a None among them
        valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
        lengths = np.fromiter((0 if v is None else len(v) for v in values), np.int64, n)
        data = b"".join(v for v in values if v is not None)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > _INT32_MAX:
        return pa.array(values, type)
    return pa.Array.from_buffers(type, n, [_bitmap(valid), pa.py_buffer(offsets.astype(np.int32)),
                                           pa.py_buffer(data)])


def packed(data: bytes | memoryview, ends: Sequence[int], valid: np.ndarray | None = None
           ) -> pa.Array:
    """``pa.array(values, pa.binary())`` for values written one after the other into ``data``,
    value ``i`` ending at ``ends[i]`` (NULL where ``valid`` is False: an empty value)."""
    n = len(ends)
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = ends
    if n and offsets[-1] > _INT32_MAX:
        starts = offsets[:-1].tolist()
        raw = bytes(data)
        return pa.array([raw[a:b] if valid is None or valid[i] else None
                         for i, (a, b) in enumerate(zip(starts, ends, strict=True))], pa.binary())
    return pa.Array.from_buffers(pa.binary(), n, [_bitmap(valid),
                                                  pa.py_buffer(offsets.astype(np.int32)),
                                                  pa.py_buffer(data)])


def value_offsets(values: pa.Array) -> np.ndarray:
    """Where each value of a binary (or string) array starts in its data buffer, and where the
    last ends: ``len(values) + 1`` offsets as int64 (``Array.offsets`` without the copy)."""
    n = len(values)
    large = pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type)
    if values.buffers()[1] is None:
        return np.zeros(n + 1, dtype=np.int64)
    return np.frombuffer(values.buffers()[1], dtype=np.int64 if large else np.int32)[
        values.offset:values.offset + n + 1].astype(np.int64)


def present(values: pa.Array) -> np.ndarray:
    """True where ``values`` holds a value, False where it is NULL."""
    if values.null_count == 0:
        return np.ones(len(values), dtype=bool)
    return to_numpy(values.is_valid())


def strings(values: Sequence[str | None]) -> pa.StringArray:
    """``pa.array(values, pa.string())``."""
    return binaries([None if v is None else v.encode("utf-8") for v in values], pa.string())


def repeated(text: str, n: int) -> pa.StringArray:
    """``pa.array([text] * n, pa.string())`` without the list."""
    raw = text.encode("utf-8")
    if len(raw) * n > _INT32_MAX:
        return pa.array([text] * n, pa.string())
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(raw * n)])


def inferred(values: Sequence[str | bool | int | float]) -> pa.Array:
    """``pa.array(values)`` for constants of one kind: text, or numbers (bools, ints, floats;
    ints and floats together are doubles).  Anything else falls back to ``pa.array``."""
    if values and all(isinstance(v, str) for v in values):
        return strings(values)  # type: ignore[arg-type]
    numbers = np.array(values)
    if len(values) and numbers.dtype.kind in "biuf":
        return from_numpy(numbers)
    return pa.array(values)


def scalar(value: bytes | str | bool | int | float | None,
           type: pa.DataType | None = None) -> pa.Scalar:
    """``pa.scalar(value, type)``; without ``type``, the type ``pa.scalar`` infers."""
    if value is None:
        return pa.nulls(1, type or pa.null())[0]
    if type is None:
        return binaries([value])[0] if isinstance(value, bytes) else inferred([value])[0]
    if isinstance(value, bytes):
        return binaries([value], type)[0]
    if isinstance(value, str):
        return binaries([value.encode("utf-8")], type)[0]
    if isinstance(value, bool):
        return booleans(np.array([value]))[0]
    return from_numpy(np.array([value], dtype=_empty(type).dtype), type)[0]


def to_numpy(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``array.to_numpy(zero_copy_only=False)`` for numbers or bools without NULLs.

    Numbers come back as a read-only view of the Arrow buffer; bools as a new array.
    """
    if isinstance(array, pa.ChunkedArray):
        parts = [to_numpy(chunk) for chunk in array.chunks]
        return np.concatenate(parts) if parts else _empty(array.type)
    if array.null_count:
        raise WireError(f"an Arrow {array.type} array with {array.null_count} NULLs has no "
                         "NumPy twin here: fill the NULLs first")
    n, start = len(array), array.offset
    data = array.buffers()[1]
    if pa.types.is_boolean(array.type):
        if n == 0:
            return np.zeros(0, dtype=bool)
        bits = np.frombuffer(data, dtype=np.uint8)
        return np.unpackbits(bits, count=start + n, bitorder="little")[start:].astype(bool)
    dtype = _empty(array.type).dtype
    if n == 0:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(data, dtype=dtype, count=n, offset=start * dtype.itemsize)


_DTYPES = {
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "float": np.float32, "double": np.float64, "bool": np.bool_,
}


def _empty(type: pa.DataType) -> np.ndarray:
    if str(type) in _DTYPES:
        return np.zeros(0, dtype=_DTYPES[str(type)])
    raise WireError(f"Arrow {type} arrays have no NumPy twin here")


def counts_batch(**counts: int) -> pa.RecordBatch:
    """``pa.RecordBatch.from_pydict({name: [count], ...})``: a task's one row of int64 counts."""
    return pa.RecordBatch.from_arrays(
        [from_numpy(np.array([c], dtype=np.int64)) for c in counts.values()], names=list(counts))
