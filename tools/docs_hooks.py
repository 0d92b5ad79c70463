"""MkDocs hooks of the documentation site (``mkdocs.yml`` names this file).

* Headings get GitHub's anchors, so a ``page.md#anchor`` link works the same on GitHub and
  on the site, and ``tests/test_docs.py`` checks both with one rule.
* A link from a page to a file of the repository outside ``docs/`` (a module, a topology,
  ``bench/RESULTS.md``) has no page on the site: it becomes the file's path as code, and a
  path that does not exist is a warning, which fails the strict build.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.plugins.sqe")

ROOT = Path(__file__).resolve().parents[1]
_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\((\.\./[^)\s#]+)(#[^)\s]*)?\)")
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})")


def github_slug(value: str, separator: str = "-") -> str:
    """The anchor GitHub makes of a heading's text: lower case, punctuation dropped,
    each space a hyphen."""
    text = re.sub(r"[^\w\- ]", "", value.strip().lower())
    return text.replace(" ", separator)


def on_config(config: Any) -> Any:
    config["mdx_configs"].setdefault("toc", {})["slugify"] = github_slug
    return config


def _outside(match: re.Match[str], page: Path) -> str:
    text, target = match.group(1), match.group(2)
    path = (page.parent / target).resolve()
    if not path.exists() or ROOT not in path.parents:
        log.warning("%s links %s, which is not a file of the repository", page.name, target)
    shown = path.relative_to(ROOT).as_posix() if ROOT in path.parents else target
    if path.is_dir():
        shown += "/"
    return text if text.strip("`") == shown.rstrip("/") or text == f"`{shown}`" \
        else f"{text} (`{shown}`)"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    source = Path(page.file.abs_src_path)
    lines, fence = [], None
    for line in markdown.splitlines(keepends=True):
        opening = _FENCE.match(line)
        if opening is not None:
            mark = opening.group(2)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence):
                fence = None
        elif fence is None:
            line = _LINK.sub(lambda m: _outside(m, source), line)
        lines.append(line)
    return "".join(lines)
