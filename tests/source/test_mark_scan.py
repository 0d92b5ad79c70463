"""The marks ``sqe hwm rebuild`` reads again from a topic's keys
(:mod:`sqe.source.kafka.mark_scan`): the vectorised fold held equal to its key-by-key
reference."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sqe.source.kafka.mark_scan import fold_marks, fold_marks_reference
from sqe.wire.keys import StreamMetadata

key = st.one_of(
    st.none(), st.binary(max_size=25),
    st.builds(lambda pid, part, off: StreamMetadata(pid, part, off).to_bytes(),
              st.integers(-2, 3), st.integers(-1, 3), st.integers(-1, 60)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(key, max_size=20), max_size=4),
       st.dictionaries(st.tuples(st.integers(-2, 3), st.integers(0, 3)), st.integers(0, 40)),
       st.integers(1, 50))
def test_keys_fold_into_marks_as_key_by_key(chunks, start, bound):
    got, want = dict(start), dict(start)
    for keys in chunks:
        assert fold_marks(got, keys, bound) == fold_marks_reference(want, keys, bound)
        assert got == want
