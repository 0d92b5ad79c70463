"""YAML and JSON documents read into Python values, a syntax error told as one located line.

Topology files, config files and option values written inline (``[[a, 1]]``,
``{sql: ...}``) are all read here.  A document that does not parse raises
:class:`SyntaxProblem`, which knows the 1-based line and column of the problem and says it
as one plain sentence, the way compilers do::

    topologies/t.yaml:4:9: not valid YAML: could not find expected ':' (while scanning a
    simple key at line 3, column 5)

Bytes that are not UTF-8 text are a :class:`SyntaxProblem` at the first such byte.  The
callers turn it into their own error (:class:`~sqe.errors.TopologyError`,
:class:`~sqe.errors.OptionError`), with :meth:`SyntaxProblem.located`.

    >>> try:
    ...     load_yaml("a: b: c")
    ... except SyntaxProblem as exc:
    ...     print(exc.located("t.yaml"))
    t.yaml:1:5: not valid YAML: mapping values are not allowed here
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.reader import ReaderError

__all__ = ["SyntaxProblem", "load_json", "load_text", "load_yaml", "read_text"]


class SyntaxProblem(ValueError):
    """Text that is not a YAML or JSON document: where (1-based line and column), and why."""

    def __init__(self, line: int, column: int, problem: str) -> None:
        self.line, self.column, self.problem = line, column, problem
        super().__init__(f"{line}:{column}: {problem}")

    def located(self, source: str) -> str:
        """``SOURCE:LINE:COLUMN: problem``, one line."""
        return f"{source}:{self.line}:{self.column}: {self.problem}"


def _position(text: str, index: int) -> tuple[int, int]:
    """The 1-based line and column of character ``index`` of ``text``."""
    before = text[:index]
    return before.count("\n") + 1, index - (before.rfind("\n") + 1) + 1


#: PyYAML's names of tokens, as a message says them.
_TOKENS = {
    "'<stream end>'": "the end of the text", "<stream end>": "the end of the text",
    "'<document end>'": "the end of the document", "'<document start>'": "a new document (---)",
    "<block end>": "the end of the indented block", "'<block end>'": "the end of the indented block",
    "'<block mapping start>'": "the start of a map", "'<block sequence start>'":
    "the start of a list", "'<scalar>'": "a value", "'?'": "a key", "'-'": "a list item (-)",
}


def _plain(text: str) -> str:
    """PyYAML's wording with its internal names of tokens made plain."""
    for token, plain in _TOKENS.items():
        text = text.replace(token, plain)
    return text


#: How deeply maps and lists may nest in a document: deeper ones are refused where they get
#: too deep, before a reader that recurses (PyYAML's composer, the checks after it) would
#: run out of stack.
MAX_DEPTH = 200


def _too_deep(what: str) -> str:
    return f"not valid {what}: maps and lists nest deeper than {MAX_DEPTH} levels"


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, whose scalars that do not convert (``!!int 0xZZ``, the date
    ``2020-13-45``) are errors at their place rather than bare Python exceptions, and whose
    maps and lists nest at most :data:`MAX_DEPTH` levels."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self._depth >= MAX_DEPTH:
            raise ComposerError(None, None, f"maps and lists nest deeper than {MAX_DEPTH} "
                                "levels", self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, KeyError, AttributeError) as exc:  # a scalar's converter refused it
            shown = node.value if isinstance(node.value, str) else node.tag
            why = f" ({exc})" if type(exc) is ValueError else ""
            raise ConstructorError(None, None, f"{shown!r} is not {_tag_name(node.tag)}{why}",
                                   node.start_mark) from None


#: What a scalar of a YAML tag must be, for messages.
_TAGS = {"int": "an integer", "float": "a number", "bool": "a boolean (true or false)",
         "timestamp": "a date (YYYY-MM-DD) or a timestamp", "binary": "base64 data"}


def _tag_name(tag: str) -> str:
    name = tag.rsplit(":", 1)[-1]
    return _TAGS.get(name, f"a {name}")


def load_yaml(text: str, what: str = "YAML") -> Any:
    """The value of a YAML document (PyYAML's safe loader); a :class:`SyntaxProblem` if it does
    not parse.  ``what`` names the document in the message (``YAML``, ``YAML/JSON``)."""
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        problem = _plain(exc.problem or exc.context or "it does not parse")
        if exc.context and exc.problem:
            where = exc.context_mark
            at = (f" at line {where.line + 1}, column {where.column + 1}"
                  if where is not None and where is not mark else "")
            context = _plain(exc.context)
            problem = (f"{context}{at}, {problem}" if problem.startswith("but ")
                       else f"{problem} ({context}{at})")
        raise SyntaxProblem(line, column, f"not valid {what}: {problem}") from None
    except ReaderError as exc:
        line, column = _position(text, exc.position)
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise SyntaxProblem(line, column, f"not valid {what}: the control character "
                            f"U+{code:04X} is not allowed in YAML") from None
    except yaml.YAMLError as exc:  # PyYAML's other errors carry no place
        raise SyntaxProblem(1, 1, f"not valid {what}: {exc}") from None
    except RecursionError:
        raise SyntaxProblem(1, 1, f"not valid {what}: it is nested too deeply to read") from None


def load_json(text: str) -> Any:
    """The value of a JSON document; a :class:`SyntaxProblem` if it does not parse."""
    deep = _json_too_deep(text)
    if deep is not None:
        line, column = _position(text, deep)
        raise SyntaxProblem(line, column, _too_deep("JSON"))
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        message = exc.msg[:1].lower() + exc.msg[1:]
        raise SyntaxProblem(exc.lineno, exc.colno, f"not valid JSON: {message}") from None
    except ValueError as exc:  # a number past Python's digit limit
        raise SyntaxProblem(1, 1, f"not valid JSON: {exc}") from None
    except RecursionError:
        raise SyntaxProblem(1, 1, "not valid JSON: it is nested too deeply to read") from None


def _json_too_deep(text: str) -> int | None:
    """The offset of the first ``[`` or ``{`` of ``text`` nested deeper than
    :data:`MAX_DEPTH`, strings skipped; ``None`` when there is none."""
    depth, in_string, escaped = 0, False, False
    for i, ch in enumerate(text):
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return i
        elif ch in "]}":
            depth -= 1
    return None


def read_text(path: Path) -> str:
    """The UTF-8 text of a file; bytes that are not UTF-8 are a :class:`SyntaxProblem` at the
    first of them.  A file that cannot be read raises :class:`OSError`."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[:exc.start].decode("utf-8")
        line, column = _position(before, len(before))
        raise SyntaxProblem(line, column, f"not UTF-8 text: byte 0x{data[exc.start]:02x} "
                            f"({exc.reason})") from None


def load_text(path: Path) -> Any:
    """The value of a YAML file, or of a JSON file by its ``.json`` suffix."""
    text = read_text(path)
    return load_json(text) if path.suffix.lower() == ".json" else load_yaml(text)
