"""Did you mean: the closest subcommand or flag when one on the command line is mistyped.

argparse answers ``sqe rn`` with the list of commands and ``sqe run t.yaml --checkpiont x``
with "unrecognized arguments"; :class:`SuggestingParser` (the class of every parser and
sub-parser of ``sqe``) adds the closest name to an invalid choice, and
:func:`parse_or_suggest` to a flag the chosen command does not have:

    sqe: error: argument COMMAND: invalid choice: 'rn' (did you mean 'run'? choose from ...)
    sqe run: error: unrecognized arguments: --checkpiont x (did you mean --checkpoint?)
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Sequence
from typing import NoReturn

__all__ = ["SuggestingParser", "parse_or_suggest"]

_INVALID = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")


def _closest(word: str, names: Sequence[str]) -> str | None:
    found = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    return found[0] if found else None


class SuggestingParser(argparse.ArgumentParser):
    """An argument parser whose "invalid choice" error names the closest choice."""

    def error(self, message: str) -> NoReturn:
        bad = _INVALID.search(message)
        if bad is not None:
            choices = re.findall(r"'([^']*)'", bad.group(2))
            near = _closest(bad.group(1), choices)
            if near is not None:
                message = (f"{message[:bad.start()]}invalid choice: {bad.group(1)!r} (did you "
                           f"mean {near!r}? choose from {bad.group(2)})")
        super().error(message)


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace
            ) -> argparse.ArgumentParser:
    """The innermost sub-parser that ``args`` went through (``sqe hwm show``: show's)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(args, action.dest, None)
            if name in action.choices:
                return _chosen(action.choices[name], args)
    return parser


def parse_or_suggest(parser: argparse.ArgumentParser, argv: Sequence[str] | None
                     ) -> argparse.Namespace:
    """``parser.parse_args(argv)``, with the closest flag of the chosen command named when
    an argument is not one of its flags."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        chosen = _chosen(parser, args)
        flags = [s for a in chosen._actions for s in a.option_strings if s.startswith("--")]
        pairs = [(word, hit) for word in extra if word.startswith("-")
                 for hit in [_closest(word.split("=", 1)[0], flags)] if hit is not None]
        near = [hit if len(pairs) == 1 else f"{hit} for {word}" for word, hit in pairs]
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        chosen.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    return args
