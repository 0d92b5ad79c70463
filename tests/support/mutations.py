"""Mutations of YAML files for property tests: the mistakes people make when editing them.

:func:`mutations` draws one mutation of a file's text as a Hypothesis strategy of bytes:
a line or a key (with its block) deleted, a value retyped (string, number, list, map,
null, boolean), a key misspelt, the file truncated, garbage bytes or characters
inserted, or the nesting made wrong (a line indented or dedented, a value wrapped in a
list or a map).
"""

from __future__ import annotations

import re

from hypothesis import strategies as st

__all__ = ["mutations"]

#: ``key: value`` on one line (a list item's key too), with the key and value as groups.
_KEY_VALUE = re.compile(r"^(?P<lead>\s*(?:- )?)(?P<key>[^#:\s][^:]*?):(?P<value>\s.*)?$")

#: Values a retyped value becomes: every YAML type, and strings that look like others.
RETYPED = ["x", "'42'", "42", "-1", "3.5", "[1, a]", "[]", "{a: 1}", "{}", "null", "~", "true",
           "false", "''", "[[1, 2]]", "{a: {b: c}}", "'{sql: x'", "'[1,'", "0x1F", ".inf",
           "2020-01-01", "!!binary aGk=", "'${NO_SUCH_VAR}'", "&a x", "*a", "[a, {b: c}]"]

#: What garbage insertions are made of: YAML's indicators, control and invalid bytes.
GARBAGE = [b"\x00", b"\xff", b"\xc3", b"\t", b"\r", b":", b"- ", b"[", b"]", b"{", b"}", b'"',
           b"'", b"&", b"*", b"!", b"%", b"@", b"`", b"|", b">", b"#", b"? ", b"\xef\xbb\xbf",
           b"\x1b[31m", "é".encode(), b"\\", b",", b"---\n", b"...\n", b"\n  ", b"\x85"]


def _lines(text: str) -> list[str]:
    return text.split("\n")


def _key_lines(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if _KEY_VALUE.match(line)]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


@st.composite
def _delete_line(draw: st.DrawFn, text: str) -> str:
    lines = _lines(text)
    i = draw(st.integers(0, len(lines) - 1))
    return "\n".join(lines[:i] + lines[i + 1:])


@st.composite
def _delete_key(draw: st.DrawFn, text: str) -> str:
    lines = _lines(text)
    keys = _key_lines(lines)
    i = draw(st.sampled_from(keys))
    end = i + 1
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > _indent(lines[i])):
        end += 1
    return "\n".join(lines[:i] + lines[end:])


def _key_line(draw: st.DrawFn, text: str) -> tuple[list[str], int, re.Match[str]]:
    """The lines of ``text``, one line holding a ``key: value`` and its match."""
    lines = _lines(text)
    i = draw(st.sampled_from(_key_lines(lines)))
    found = _KEY_VALUE.match(lines[i])
    assert found is not None
    return lines, i, found


@st.composite
def _retype(draw: st.DrawFn, text: str) -> str:
    lines, i, found = _key_line(draw, text)
    lines[i] = f"{found['lead']}{found['key']}: {draw(st.sampled_from(RETYPED))}"
    return "\n".join(lines)


@st.composite
def _misspell(draw: st.DrawFn, text: str) -> str:
    lines, i, found = _key_line(draw, text)
    key = found["key"]
    at = draw(st.integers(0, len(key) - 1))
    how = draw(st.sampled_from(["drop", "double", "swap", "case", "letter"]))
    if how == "drop":
        key = key[:at] + key[at + 1:]
    elif how == "double":
        key = key[:at] + key[at] + key[at:]
    elif how == "swap" and at + 1 < len(key):
        key = key[:at] + key[at + 1] + key[at] + key[at + 2:]
    elif how == "case":
        key = key[:at] + key[at].swapcase() + key[at + 1:]
    else:
        key = key[:at] + draw(st.sampled_from("aeisxz._")) + key[at + 1:]
    lines[i] = f"{found['lead']}{key}:{found['value'] or ''}"
    return "\n".join(lines)


@st.composite
def _renest(draw: st.DrawFn, text: str) -> str:
    lines = _lines(text)
    how = draw(st.sampled_from(["indent", "dedent", "wrap-list", "wrap-map"]))
    if how in ("indent", "dedent"):
        i = draw(st.integers(0, len(lines) - 1))
        lines[i] = ("  " + lines[i]) if how == "indent" else lines[i][2:]
        return "\n".join(lines)
    i = draw(st.sampled_from(_key_lines(lines)))
    found = _KEY_VALUE.match(lines[i])
    assert found is not None
    value = (found["value"] or "").strip() or "null"
    wrapped = f"[{value}]" if how == "wrap-list" else f"{{{found['key'].strip()}: {value}}}"
    lines[i] = f"{found['lead']}{found['key']}: {wrapped}"
    return "\n".join(lines)


def _as_bytes(text: str) -> bytes:
    return text.encode("utf-8")


@st.composite
def _truncate(draw: st.DrawFn, data: bytes) -> bytes:
    return data[:draw(st.integers(0, len(data)))]


@st.composite
def _garbage(draw: st.DrawFn, data: bytes) -> bytes:
    at = draw(st.integers(0, len(data)))
    junk = b"".join(draw(st.lists(st.sampled_from(GARBAGE), min_size=1, max_size=3)))
    return data[:at] + junk + data[at:]


def mutations(text: str) -> st.SearchStrategy[bytes]:
    """One mutation of ``text`` (a YAML file), as the bytes of the mutated file."""
    data = _as_bytes(text)
    edits = st.one_of(_delete_line(text), _delete_key(text), _retype(text), _misspell(text),
                      _renest(text))
    return st.one_of(edits.map(_as_bytes), _truncate(data), _garbage(data))
