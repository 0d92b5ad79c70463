"""The generated parts of the docs: the CLI reference (from ``sqe``'s parser), the options
table (from the option registry) and the upgrade notes (``CHANGELOG.md``, its links made
relative to ``docs/``), written between markers in ``docs/cli.md``, ``docs/options.md`` and
``docs/upgrading.md``.

    python tools/docs_reference.py          # rewrite them
    python tools/docs_reference.py --check  # exit 1 when a page differs from the code

``tests/test_docs_site.py`` holds the pages equal to what this writes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of every sub-command, depth first, in the parser's order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, child in action.choices.items():
                yield name, helps.get(name, ""), child
                for sub_name, sub_help, grandchild in _subcommands(child):
                    yield f"{name} {sub_name}", sub_help, grandchild


def _cell(text: str) -> str:
    text = " ".join(text.split()).replace("|", "\\|").replace("*", "\\*")
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _argument(action: argparse.Action) -> str:
    if not action.option_strings:
        name = action.metavar or action.dest
        return f"`{name}`" + (" ..." if action.nargs in ("+", "*") else "")
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{flags}`"
    value = action.metavar or (f"{{{','.join(map(str, action.choices))}}}" if action.choices
                               else action.dest.upper())
    return f"`{flags} {value}`"


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, [], argparse.SUPPRESS) \
            or not action.option_strings:
        return ""
    return f"`{action.default}`"


def cli_markdown() -> str:
    """A section per ``sqe`` command: what it does, its usage line and a table of its
    arguments with their help and default."""
    from sqe.cli.main import _parser

    root = _parser()
    out: list[str] = []
    for name, text, parser in _subcommands(root):
        if text.startswith("replaced by"):
            continue
        parser.prog = f"sqe {name}"
        usage = " ".join(parser.format_usage().removeprefix("usage: ").split())
        out += [f"### `sqe {name}`", "", f"{text[:1].upper()}{text[1:]}.", "", "```",
                usage, "```", ""]
        rows = [a for a in parser._actions
                if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)
                and not isinstance(a, argparse._SubParsersAction)]
        if rows:
            out += ["| argument | what it does | default |", "| --- | --- | --- |"]
            out += [f"| {_argument(a)} | {_cell(a.help or '')} | {_default(a)} |" for a in rows]
            out.append("")
    return "\n".join(out)


def options_markdown() -> str:
    """``sqe options --markdown``: the options table from the registry."""
    from sqe.cli.main import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["options", "--markdown"])
    if code != 0:
        raise SystemExit(f"sqe options --markdown exited {code}")
    return buffer.getvalue()


def changelog_markdown() -> str:
    """CHANGELOG.md below its title, its links made relative to docs/ (the upgrade notes)."""
    text = (DOCS.parent / "CHANGELOG.md").read_text()
    body = text[text.index("\n## "):].lstrip("\n")

    def link(match: re.Match[str]) -> str:
        target = match.group(1)
        if re.match(r"[a-z]+:|#", target):
            return match.group(0)
        return "](" + (target[len("docs/"):] if target.startswith("docs/") else "../" + target) + ")"

    return re.sub(r"\]\(([^)]+)\)", link, body)


#: page -> (marker name, generator)
GENERATED = {"cli.md": ("cli-reference", cli_markdown),
             "options.md": ("options-table", options_markdown),
             "upgrading.md": ("changelog", changelog_markdown)}


def _block(marker: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {marker}:start -->\n)(.*?)(<!-- {marker}:end -->)", re.S)


def documented(page: str) -> str:
    """What ``page`` holds between its markers now."""
    marker, _ = GENERATED[page]
    found = _block(marker).search((DOCS / page).read_text())
    if found is None:
        raise SystemExit(f"docs/{page} has no <!-- {marker}:start/end --> markers")
    return found.group(2)


def generated(page: str) -> str:
    """What the code says ``page`` should hold between its markers."""
    _, make = GENERATED[page]
    text = make()
    return text if text.endswith("\n") else text + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only say which pages differ")
    args = ap.parse_args(argv)
    stale = []
    for page, (marker, _) in GENERATED.items():
        new = generated(page)
        if documented(page) == new:
            continue
        stale.append(page)
        if not args.check:
            path = DOCS / page
            found = _block(marker).search(path.read_text())
            assert found is not None  # documented() found the markers
            text = path.read_text()
            path.write_text(text[:found.start(2)] + new + text[found.end(2):])
    for page in stale:
        print(f"docs/{page}: {'differs from the code' if args.check else 'rewritten'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
