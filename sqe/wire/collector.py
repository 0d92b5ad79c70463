"""Python's cyclic garbage collector paused around one batch's work.

A batch turned into (or made of) many Python objects at once — a consume call's messages, a
batch of decoded Protobuf messages, the rows of an encode — sets the collector off again and
again for objects reference counting frees anyway; :func:`paused` keeps it waiting for the
work and gives it back as it was.

    >>> import gc
    >>> with paused():
    ...     gc.isenabled()
    False
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused"]


@contextmanager
def paused() -> Iterator[None]:
    """The collector disabled inside, enabled again after if it was before."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
