"""The problems found in a topology file, said the way every message of SQE is.

Each problem is one located line, ``FILE: command N (Kind) -> path: why``, and
:func:`in_file_order` puts a file's problems in file order (by command, as
:meth:`~sqe.lang.topology.Topology.label` names them; the checks' own order within one).

A command of a topology file is validated by a pydantic model
(:mod:`sqe.lang.topology`); each of its errors becomes one located line:
:func:`describe_error` gives the path inside the command and the sentence, with
lists numbered from 1 (``select -> expression 2``) and the fields a map may have
when a key is unknown.  What a command that failed still tells the checks after it:
:func:`known_keys_only` (the command without its unknown keys, when that is all
that is wrong) and :func:`stream_names` (the streams it names).

    >>> location(("select", "expressions", 1, "sql"))
    ['select', 'expression 2', 'sql']
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

__all__ = ["describe_error", "in_file_order", "known_keys_only", "location", "stream_names",
           "what"]

#: A list's name in pydantic's locations -> what one of its items is called in messages.
_ITEMS = {"expressions": "expression", "fields": "field"}


def location(loc: Sequence[Any]) -> list[str]:
    """Pydantic's location as the messages say it: ``select -> expression 1`` (1-based, as
    commands, arguments and rows are) for ``select -> expressions -> 0``; an index right after
    another (a list in a list) is ``item N`` of its own: ``values item 1 -> item 3``."""
    out: list[str] = []
    after_index = False
    for i, part in enumerate(loc):
        if part == "[key]":  # pydantic's mark after a map key that is wrong
            continue
        if i + 1 < len(loc) and loc[i + 1] == "[key]":
            out.append(f"key {part}")
        elif isinstance(part, int) and not isinstance(part, bool):
            if out and not after_index:
                name = out.pop()
                out.append(f"{_ITEMS.get(name, name + ' item')} {part + 1}")
            else:
                out.append(f"item {part + 1}")
            after_index = True
            continue
        else:
            out.append("from" if part == "from_" else str(part))
        after_index = False
    return out


def describe_error(err: dict[str, Any], model: type[BaseModel]) -> tuple[list[str], str]:
    """The path inside the command and the sentence of one of pydantic's errors of ``model``."""
    loc = location(err["loc"])
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "sqe_expression":
        return loc + ctx.get("subpath", []), ctx["message"]
    if kind == "literal_error":
        expected = ctx.get("expected", "").replace("'", "").replace(" or ", ", ")
        return loc, f"expected one of {expected}"
    if kind == "missing":
        return loc, "is required"
    if kind == "extra_forbidden":
        return loc, "is not a known field" + _known_fields(model, loc)
    texts = {
        "string_type": "expected a string",
        "list_type": "expected a list",
        "dict_type": "expected a map of key: value",
        "model_type": "expected a map",
        "too_short": "must not be empty",
        "string_too_short": "must not be empty",
    }
    return loc, texts.get(kind, err["msg"])


def _known_fields(model: type[BaseModel], loc: list[str]) -> str:
    for part in loc[:-1]:
        info = model.model_fields.get(part if part != "from" else "from_")
        inner = getattr(info, "annotation", None) if info else None
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            model = inner
        else:
            return ""
    names = [f.alias or n for n, f in model.model_fields.items()]
    return f" (expected {', '.join(names)})"


def what(value: Any) -> str:
    """What a YAML/JSON value is, in a message: ``a map``, ``a string``, ..."""
    names = {dict: "a map", str: "a string", bool: "a boolean", int: "a number",
             float: "a number"}
    return names.get(type(value), f"a {type(value).__name__}")


def stream_names(kind: str, body: Any) -> tuple[str | None, str | None]:
    """The stream a command that did not load would define (a CreateStream's ``streamName``,
    a Query's ``insertInto -> objectName``), so that the commands reading it are not told it
    is missing, and the stream it reads (a Query's ``from -> objectName``); None for a name
    its body does not give."""
    def name(value: Any, key: str) -> str | None:
        found = value.get(key) if isinstance(value, dict) else None
        return found if isinstance(found, str) and found else None

    if kind == "CreateStream":
        return name(body, "streamName"), None
    if kind == "Query" and isinstance(body, dict):
        return name(body.get("insertInto"), "objectName"), name(body.get("from"), "objectName")
    return None, None


def known_keys_only(body: Any, errors: Sequence[Mapping[str, Any]]) -> Any:
    """``body`` without the unknown keys pydantic found, when they are all that is wrong with
    it (each is reported; the rest of the command can still be checked); None otherwise."""
    if not errors or any(err["type"] != "extra_forbidden" for err in errors):
        return None
    trimmed = copy.deepcopy(body)
    for err in errors:
        *inner, key = err["loc"]
        node = trimmed
        for part in inner:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return None
        node.pop(key, None)
    return trimmed


def in_file_order(path: str, problems: Iterable[str]) -> list[str]:
    """``problems`` of the file ``path`` in file order: by the command each names (as
    :meth:`Topology.label` does), those naming none (the file's own, ``--conf``'s) first.  The
    order is stable, so a command's problems keep the order of the checks that found them;
    a problem said twice is kept once."""
    numbered = re.compile(re.escape(f"{path}: command ") + r"(\d+)\b")

    def number(problem: str) -> int:
        found = numbered.match(problem)
        return int(found.group(1)) if found else 0

    return sorted(dict.fromkeys(problems), key=number)
