"""The user documentation agrees with the code: the options table is the registry's, the
examples are what the code prints and writes, and every link leads somewhere in the
repository."""

from __future__ import annotations

import math
import re
import shlex
import textwrap
from pathlib import Path

import pytest
import tomllib

from sqe.cli.main import main
from tests.support import ROOT
from tools import docs_reference
from tools.docs_hooks import github_slug
from tools.docs_reference import GENERATED

README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: The Markdown a user reads: the README and the pages under docs/.
MARKDOWN = [README, *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", sorted(GENERATED))
def test_generated_docs_are_the_code(page):
    """docs/options.md's table is the registry's and docs/cli.md's reference the parser's."""
    documented, made = docs_reference.documented(page), docs_reference.generated(page)
    missing = [line for line in made.splitlines() if line not in documented.splitlines()]
    stale = [line for line in documented.splitlines() if line not in made.splitlines()]
    assert documented == made, (
        f"docs/{page} differs from the code; run `python tools/docs_reference.py`.\n"
        f"missing: {missing}\nstale: {stale}")


def test_options_table_rows_have_four_columns():
    # A | inside a cell (an enum) is escaped.
    for line in docs_reference.generated("options.md").splitlines():
        cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
        assert len(cells) == 4, f"options table row with {len(cells)} columns: {line}"


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_name_only_existing_files(page):
    named = re.findall(r"`((?:topologies|conf|bench|docker|deploy|docs|tests|sqe|state|partitioners|tools)/"
                       r"[\w./-]*[\w/])`", page.read_text())
    missing = sorted(path for path in set(named) if "<" not in path and not (ROOT / path).exists())
    assert not missing, f"{page.relative_to(ROOT)} names files that do not exist: {missing}"


def test_pages_name_only_existing_commands():
    from sqe.cli.main import _parser

    known = set(_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    for page in MARKDOWN:
        used = set(re.findall(r"(?:^|`|^\$ )sqe ([a-z][\w-]*)", page.read_text(), re.M))
        assert used <= known, (f"{page.relative_to(ROOT)} uses unknown sqe commands: "
                               f"{sorted(used - known)}")


def _python_blocks(page: Path) -> list[str]:
    """The page's Python blocks, each as it runs (one inside a list item is indented)."""
    return [textwrap.dedent(block)
            for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.S)]


@pytest.mark.spark
def test_python_blocks_of_the_readme_and_the_api_page_run_as_written(spark, tmp_path,
                                                                     monkeypatch, capsys):
    pages = {README: _python_blocks(README), DOCS / "api.md": _python_blocks(DOCS / "api.md")}
    assert [len(blocks) for blocks in pages.values()] == [1, 3], \
        "the Python examples of README.md or docs/api.md moved"
    for page, blocks in pages.items():  # each page as a reader runs it: in a fresh directory
        work = tmp_path / page.stem
        work.mkdir()
        for name in ("topologies", "conf"):
            (work / name).symlink_to(README.parent / name)
        monkeypatch.chdir(work)  # the blocks name files relative to the repository
        namespace: dict = {}
        for block in blocks:
            exec(compile(block, str(page.relative_to(ROOT)), "exec"), namespace)
        assert (work / "checkpoints" / "hello" / "sqe-progress.jsonl").is_file()
    assert (tmp_path / "api" / "checkpoints" / "hello-again" / "sqe-progress.jsonl").is_file()
    out = capsys.readouterr().out.splitlines()
    assert out.count("3 2") == 2
    assert any(line.startswith("Greetings batch 0: 3 records read") for line in out)
    assert ("--conf: unknown option jw.sqe.spout.kafka.filterReplay; did you mean "
            "jw.sqe.spout.kafka.filterReplays?") in out


def test_ci_runs_the_readme_test_command():
    command = re.search(r"```sh\n(python3 -m venv .venv && [^\n]*pytest[^\n]*)\n```",
                        README.read_text())
    assert command, "README.md lost its test command"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert command.group(1) in ci, ".ci/run does not run the README's test command as written"


#: What names a file a user of the repository does not have: the developers' design notes,
#: the folder beside the checkout they live in, or an absolute path of the machine that
#: wrote the text.
_OUTSIDE = re.compile(r"DESIGN\.md|\.\./shared\b|(?<![\w.~-])/work(?:/|\b)")


def _shipped() -> list[Path]:
    """The files a user of the repository reads: its Markdown, the example topologies and
    configs, the docker stack, the Kubernetes files and every module (docstrings and
    messages)."""
    return [*MARKDOWN, *ROOT.glob("topologies/*"), *ROOT.glob("conf/*"), *ROOT.glob("docker/*"),
            *ROOT.glob("deploy/kubernetes/*"),
            *(p for pkg in ("sqe", "state", "partitioners") for p in (ROOT / pkg).rglob("*.py"))]


def test_nothing_shipped_points_outside_the_repository():
    bad = {f"{p.relative_to(ROOT)}:{n}": found.group(0) for p in _shipped()
           for n, line in enumerate(p.read_text().splitlines(), 1)
           if (found := _OUTSIDE.search(line))}
    assert not bad, f"these name files a user of the repository does not have: {bad}"


def test_shipped_files_name_existing_docs_pages():
    for path in _shipped():
        for page in re.findall(r"\bdocs/[\w.-]+\.md\b", path.read_text()):
            assert (ROOT / page).is_file(), f"{path.relative_to(ROOT)} names {page}, which does " \
                                             "not exist"


def _numbered_prose(text: str) -> list[tuple[int, str]]:
    """The lines of Markdown ``text`` outside fenced code blocks, each with its number (from
    1): a ``# comment`` in a YAML block is no heading, a ``[x](y)`` in a shell block no link."""
    lines, fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        opening = re.match(r"\s*(`{3,}|~{3,})", line)
        if opening is None:
            if fence is None:
                lines.append((number, line))
        elif fence is None:
            fence = opening.group(1)
        elif opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
            fence = None
    return lines


def _prose(text: str) -> list[str]:
    """The lines of Markdown ``text`` outside fenced code blocks."""
    return [line for _, line in _numbered_prose(text)]


def _slug(heading: str) -> str:
    """The anchor GitHub makes of a heading: its text (links as their text, no markup),
    lower case, punctuation dropped, spaces as hyphens."""
    return github_slug(re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading))


def _anchors(page: Path) -> set[str]:
    """Every ``#anchor`` the headings of ``page`` make (a repeated heading gets -1, -2, ...)."""
    made: set[str] = set()
    for line in _prose(page.read_text()):
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = base = _slug(heading.group(1))
            n = 0
            while slug in made:
                n += 1
                slug = f"{base}-{n}"
            made.add(slug)
    return made


def _links(page: Path) -> list[str]:
    """The targets of the Markdown links of ``page`` (inline and reference definitions)."""
    found = []
    for line in _prose(page.read_text()):
        line = re.sub(r"(`+).*?\1", "", line)  # inline code: no link
        found += re.findall(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", line)
        found += re.findall(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", line)
    return found


def _broken_links(page: Path) -> list[str]:
    """The links of ``page`` that lead to no file of the repository, or to no heading of it."""
    broken = []
    for link in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", link, re.I):  # https:, mailto: ...: not ours
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if ROOT not in (target, *target.parents) or not target.exists():
            broken.append(f"{link}: no such file in the repository")
        elif anchor and (target.suffix != ".md" or anchor not in _anchors(target)):
            broken.append(f"{link}: no heading of {target.relative_to(ROOT)} makes #{anchor}")
    return broken


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_links_lead_to_files_and_headings_of_the_repository(page):
    assert page == README or _links(page), f"{page.relative_to(ROOT)} links nothing"
    broken = _broken_links(page)
    assert not broken, f"{page.relative_to(ROOT)} has broken links: {broken}"


# The benchmark results: bench/RESULTS.md is an index of one file per topic under
# bench/results/, and each run there says when, on what and beside what it ran.

RESULTS_INDEX = ROOT / "bench" / "RESULTS.md"
RESULTS = sorted((ROOT / "bench" / "results").glob("*.md"))
#: What a run's section states, each as its value or as the line saying it is not recorded:
#: a date; the commit it ran on (a hash, since "commit" alone is also the HWM commit's word);
#: the machine's state (quiet, busy, what ran beside it, its load average).
_RUN_STATES = {
    "a date (YYYY-MM-DD)": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "the commit it ran on, or `commit: not recorded`": re.compile(
        r"`[0-9a-f]{7,40}`|commit: not recorded"),
    "the machine's state, or `machine state: not recorded`": re.compile(
        r"load average|quiet|nothing else|busy|shared|idle|noisy|beside|"
        r"machine state: not recorded", re.I),
}


def _run_sections(page: Path) -> list[tuple[str, str]]:
    """The runs of a results file: each ``## `` section outside code blocks as (heading, its
    text, heading and ``### `` parts included, lines joined by spaces). A ``### `` heading is a
    part of the run above it; one before any ``## `` is a run of its own."""
    sections: list[tuple[str, list[str]]] = []
    for line in _prose(page.read_text()):
        if line.startswith("## ") or (line.startswith("### ") and not sections):
            sections.append((line, [line]))
        elif sections:
            sections[-1][1].append(line)
    return [(heading, " ".join(lines)) for heading, lines in sections]


def test_the_results_index_links_every_topic_file():
    assert len(RESULTS) >= 10, "bench/results/ lost its topic files"
    linked = {(RESULTS_INDEX.parent / link.partition("#")[0]).resolve()
              for link in _links(RESULTS_INDEX)}
    unlinked = [p.name for p in RESULTS if p.resolve() not in linked]
    assert not unlinked, f"bench/RESULTS.md does not link these topic files: {unlinked}"


@pytest.mark.parametrize("page", RESULTS, ids=lambda p: p.name)
def test_every_run_in_the_results_states_its_date_commit_and_machine(page):
    runs = _run_sections(page)
    assert runs, f"bench/results/{page.name} has no run"
    missing = [f"{heading!r} does not state {what}" for heading, text in runs
               for what, found in _RUN_STATES.items() if not found.search(text)]
    assert not missing, f"bench/results/{page.name}:\n" + "\n".join(missing)


@pytest.mark.parametrize("page", [RESULTS_INDEX, *RESULTS], ids=lambda p: p.name)
def test_links_of_the_results_lead_to_files_and_headings(page):
    broken = _broken_links(page)
    assert not broken, f"{page.relative_to(ROOT)} has broken links: {broken}"


def test_heading_anchors_are_githubs():
    assert _slug("Chunks and Bloom filters: reading a subset of a topic") == \
        "chunks-and-bloom-filters-reading-a-subset-of-a-topic"
    assert _slug("The `sqe` command") == "the-sqe-command"
    assert _slug("What Spark's re-runs do") == "what-sparks-re-runs-do"
    assert _slug("Recovery: checkpoints and stores") == "recovery-checkpoints-and-stores"
    assert {"preconditions", "forged-and-corrupt-keys"} <= _anchors(DOCS / "exactly-once.md")
    assert "writer-the-kafka-state-of-enrichyaml-chunked-with-the-region-as-filter-value" \
        not in _anchors(DOCS / "bloom-chunks.md"), "a comment inside a code block is no heading"


def test_readme_links_every_docs_page():
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    assert {"index.md", "architecture.md", "bloom-chunks.md", "exactly-once.md",
            "wire-format.md"} <= set(pages), f"docs/ lost pages: {pages}"
    linked = {link.partition("#")[0] for link in _links(README)}
    missing = [name for name in pages if f"docs/{name}" not in linked]
    assert not missing, f"README.md does not link these docs/ pages: {missing}"
    index = {link.partition("#")[0] for link in _links(DOCS / "index.md")}
    unlisted = [name for name in pages if name != "index.md" and name not in index]
    assert not unlisted, f"docs/index.md, the index, does not list: {unlisted}"


def test_the_install_table_names_every_extra():
    """docs/deploy.md's table of extras has a row for each extra a user installs (those of
    `all`, and `all`), and says what the others (the developers') are."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    users = {e for r in extras["all"] for e in re.findall(r"\[(.*)\]", r)[0].split(",")}
    section = (DOCS / "deploy.md").read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `([\w-]+)` \|", section, re.M))
    assert rows == users | {"all"}, f"the table's extras {sorted(rows)}, the package's " \
                                    f"{sorted(users | {'all'})}"
    for extra in set(extras) - rows:
        assert f"`{extra}`" in section, f"docs/deploy.md's Install does not say what {extra} is"


def _console_examples(page: Path) -> list[tuple[str, list[str]]]:
    """``$ command`` and the lines it prints, from the ``console`` blocks of ``page``."""
    examples: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", page.read_text(), re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                examples.append((line[2:], []))
            else:
                assert examples, f"{page.relative_to(ROOT)}: output before any command: {line}"
                examples[-1][1].append(line)
    return examples


def test_docs_sqe_keys_examples_print_what_is_shown(capsys):
    examples = [(command, out) for page in DOCS.glob("*.md")
                for command, out in _console_examples(page) if command.startswith("sqe keys ")]
    assert len(examples) >= 6, "docs/wire-format.md lost its sqe keys examples"
    for command, shown in examples:
        status = main(shlex.split(command)[1:])
        printed = capsys.readouterr()
        assert (printed.out + printed.err).splitlines() == shown, f"$ {command}"
        failed = any(line.startswith("error:") for line in shown)
        assert status == (2 if failed else 0), f"$ {command} exits {status}"


def test_wire_format_chunk_example_is_what_the_codec_writes():
    from sqe.wire.chunk.bloom import value_bits
    from sqe.wire.chunk.codec import Message, decode_chunk, encode_chunk
    from sqe.wire.keys import StreamMetadata

    text = (DOCS / "wire-format.md").read_text()
    key = StreamMetadata(1234567890123, 0, 101).to_bytes()
    assert f"{key[:8].hex()} {key[8:12].hex()} {key[12:].hex()}" in text, "the example's key"
    block = re.search(r"<!-- chunk-example -->\n```\n(.*?)```", text, re.S)
    assert block, "docs/wire-format.md lost its chunk example"
    hexes = [re.match(r"((?:[0-9a-f]{2} )*[0-9a-f]{2})(?:\s{2,}|$)", line)
             for line in block.group(1).splitlines()]
    assert all(hexes), "every line of the example starts with its bytes"
    shown = bytes.fromhex("".join(h.group(1) for h in hexes if h))
    messages = [Message(100, "EU", b'{"a":1}'), Message(101, None, None)]
    assert shown == encode_chunk(messages, 100, 16, "none", key)
    assert decode_chunk(shown, key) == messages
    prose = " ".join(text.split())
    assert f"The record value is {len(shown)} bytes" in prose
    low, high = sorted(value_bits("EU", 16))
    assert f"bits 0, {low} and {high}" in prose and f"Bits {low} and {high} are" in prose


def test_bloom_false_positive_table_is_the_formula():
    text = (DOCS / "bloom-chunks.md").read_text()
    header = re.search(r"^\| distinct values per chunk \|(.*)\|$", text, re.M)
    assert header, "docs/bloom-chunks.md lost its false-positive table"
    sizes = [int(cell.split()[0]) for cell in header.group(1).split("|")]
    rows = re.findall(r"^\| (\d+) \|((?: [\d.]+ % \|)+)$", text, re.M)
    assert len(rows) >= 5
    for n, cells in rows:
        shown = [cell.strip() for cell in cells.strip(" |").split("|")]
        rates = [f"{100 * (1 - math.exp(-2 * int(n) / (8 * s - 1))) ** 2:.1f} %" for s in sizes]
        assert shown == rates, f"{n} values: {shown} != {rates}"


# The measured figures the pages state are those of docs/performance.md's table.

PERFORMANCE = DOCS / "performance.md"
#: The pages whose figures are checked: what a user reads, but the upgrade notes, which
#: are the changelog's history.
FIGURE_PAGES = [page for page in MARKDOWN if page.name != "upgrading.md"]
#: A number as the pages write it (35,263 or 0.600), or a range of two (0.22-0.27 s).
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_RANGE = rf"({_NUMBER})(?:[-–]({_NUMBER}))?"
#: What counts as a measured figure, narrowly, each kind with its unit last:
#: * a rate: a number before records/s, events/s, msgs/s or keys/s;
#: * a ratio: a number before "x" (or "times") and quixstreams, the plain programs, the
#:   classic chain or "as fast";
#: * a memory: bytes, KB, MB or GB with "per" later in its clause (174 bytes per mark);
#: * a time: s or ms in a sentence that names p50, p99, a median, latency, a cycle,
#:   Spark's floor or an empty micro-batch (_TIMED).
_FIGURES = (
    re.compile(rf"{_RANGE} ?((?:records|events|msgs|messages|keys)/s)\b"),
    re.compile(rf"{_RANGE}(x| times) (?=(?:of |the speed of )?"
               r"(?:quixstreams|the plain|plain|the classic|as fast))"),
    re.compile(rf"{_RANGE} ?(bytes|KB|MB|GB)\b(?=[^.;]*\bper\b)"),
)
_TIME = re.compile(rf"{_RANGE} ?(ms|s)\b")
_TIMED = re.compile(r"\b(?:p50|p99|median|latency|late|cycles?|floor|empty (?:micro-)?batch)\b",
                    re.I)
#: A number right after or before one of these words is a setting, a default or an aim,
#: not a figure: "for 60 s", "the timeout is 120 s", "commit_interval 0.5 s", "<= 0.3 s",
#: "a 5 s commit interval".
_SETTING_BEFORE = re.compile(r"(?:interval|\b(?:defaults?|timeout|ttl|retry|aim|for|every|within)"
                             r"|<=|>=)(?:\W+(?:is|of|a|an|the))?\W*$", re.I)
_SETTING_AFTER = re.compile(r"^\W*(?:by default|default|commit interval|interval|timeout)", re.I)
#: Every number with a unit in the table's first two columns: the figures it holds.
_HELD = re.compile(rf"{_RANGE} ?(records/s|events/s|msgs/s|messages/s|keys/s|x|times|bytes|"
                   r"KB|MB|GB|ms|s)(?![\w/])")


def _figures_table() -> tuple[range, list[list[str]]]:
    """The line numbers of docs/performance.md's table under "Current figures" (from 1),
    and the cells of its rows (the header and the rule left out)."""
    lines = PERFORMANCE.read_text().splitlines()
    heading = lines.index("## Current figures")
    first = next(n for n in range(heading, len(lines)) if lines[n].startswith("|"))
    end = next(n for n in range(first, len(lines)) if not lines[n].startswith("|"))
    rows = [[cell.strip() for cell in line.strip().strip("|").split(" | ")]
            for line in lines[first + 2:end]]
    return range(first + 1, end + 1), rows


def _figure(number: str, unit: str) -> tuple[str, str]:
    return number, "x" if unit.strip() == "times" else unit


def _held() -> set[tuple[str, str]]:
    """Every (number, unit) that the figures table holds in its figure and value columns."""
    return {_figure(number, found.group(3)) for row in _figures_table()[1]
            for found in _HELD.finditer(" | ".join(row[:2]))
            for number in found.group(1, 2) if number}


def _unquoted(code: re.Match[str]) -> str:
    """An inline code span as the figures check reads it, as long as it was: one word
    (`commit_interval`) as that word, anything longer blank, since a log line or a command
    shown in it is an example, not a figure."""
    ticks, inside = code.group(1), code.group(2)
    kept = inside if re.fullmatch(r"[\w./-]+", inside) else " " * len(inside)
    return " " * len(ticks) + kept + " " * len(ticks)


def _blocks(text: str, skip: range) -> list[tuple[list[tuple[int, int]], str]]:
    """The paragraphs of Markdown ``text`` outside fenced code blocks and the lines in
    ``skip``: each its text, inline code read by _unquoted, and where each of its lines
    starts in it (offset, line number). A heading, a list item and a table row start a
    block of their own."""
    blocks: list[tuple[list[tuple[int, int]], str]] = []
    for number, line in _numbered_prose(text):
        line = line.strip()
        if number in skip or not line:
            blocks.append(([], ""))
        elif re.match(r"#|\||[*-] |\d+\. ", line) or not blocks or not blocks[-1][1]:
            blocks.append(([(0, number)], line))
        else:
            starts, block = blocks[-1]
            blocks[-1] = ([*starts, (len(block) + 1, number)], f"{block} {line}")
    return [(starts, re.sub(r"(`+)(.+?)\1", _unquoted, block)) for starts, block in blocks
            if block]


def _stated_figures(page: Path) -> list[tuple[int, tuple[str, str]]]:
    """The measured figures ``page`` states, each with its line, as (number, unit); a range
    as its two numbers. docs/performance.md's table is the figures, not a statement of them."""
    skip = _figures_table()[0] if page == PERFORMANCE else range(0)
    stated = []
    for starts, block in _blocks(page.read_text(), skip):
        for sentence in re.finditer(r"\S.*?(?:[.!?](?=\s|$)|$)", block):
            text = sentence.group(0)
            kinds = [*_FIGURES, *([_TIME] if _TIMED.search(text) else [])]
            for found in (found for kind in kinds for found in kind.finditer(text)):
                if _SETTING_BEFORE.search(text[:found.start()]) or \
                        _SETTING_AFTER.match(text[found.end():]):
                    continue
                line = max(n for offset, n in starts if offset <= sentence.start() + found.start())
                stated += [(line, _figure(number, found.group(3)))
                           for number in found.group(1, 2) if number]
    return stated


def test_a_measured_figure_is_narrowly_a_rate_a_ratio_a_memory_or_a_timed_cost(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "SQE moved 35,263 events/s, 1.40x quixstreams, in 0.22-0.27 s a cycle.\n"
        "Its p99 was 2.346 s for 60 s of input; quixstreams' `commit_interval` 0.5 s.\n"
        "A mark takes 174 bytes per mark, a key 20 bytes. A batch took 9 s.\n"
        "The timeout is 120 s, and the latency aim <= 1 s. `wrote 10 in 2.0 s (5 records/s)`\n"
        "```\nlatency 7 s, 12 records/s\n```\n")
    assert _stated_figures(page) == [
        (1, ("35,263", "events/s")), (1, ("1.40", "x")), (1, ("0.22", "s")), (1, ("0.27", "s")),
        (2, ("2.346", "s")), (3, ("174", "bytes"))]


def test_the_current_figures_table_says_when_how_and_on_what_each_was_measured():
    rows = _figures_table()[1]
    assert len(rows) >= 30, "docs/performance.md lost rows of its Current figures table"
    for row in rows:
        assert len(row) == 5, f"docs/performance.md: the figures row {row[0]!r} has " \
                              f"{len(row)} cells instead of 5"
        figure, value, measured, command, commit = row
        assert re.search(r"\d", value), f"docs/performance.md: {figure!r} has no value"
        assert re.match(r"\d{4}-\d\d-\d\d$|not recorded", measured), \
            f"docs/performance.md: {figure!r} has no date, nor says it is not recorded"
        assert re.search(r"bench/|the same|above|not recorded", command), \
            f"docs/performance.md: {figure!r} names no command, nor says it is not recorded"
        assert re.match(r"`[0-9a-f]{7,40}`|not recorded$", commit), \
            f"docs/performance.md: {figure!r} names no commit, nor says it is not recorded"


def _words(figure: str) -> frozenset[str]:
    """The words of a figures row's first cell, lower case, code marks left out."""
    return frozenset(re.findall(r"[\w.,/'=-]*\w", figure.lower().replace("`", "")))


def _same_figures(rows: list[list[str]]) -> list[str]:
    """The pairs of figures rows that measure one figure: the same first cell twice, or a
    first cell whose words are all another's (an older run of that figure, told with a
    qualifier less)."""
    return [f"{row[0]!r} and {other[0]!r}" for i, row in enumerate(rows)
            for j, other in enumerate(rows)
            if (i < j and row[0] == other[0])
            or (i != j and row[0] != other[0] and _words(row[0]) <= _words(other[0]))]


def test_the_current_figures_table_has_one_row_per_figure():
    hop = "that run, SQE's hop cycle enrich / load at 1,000 events/s; at 5,000 events/s"
    client = ("SQE chain with the client compiler (`conf/low-latency.yaml`) beside quixstreams "
              "exactly-once at a 0.5 s `commit_interval`, in one run{}: p50 / p99 at 1,000 "
              "events/s; at 5,000 events/s")
    assert len(_same_figures([[hop], [hop]])) == 1, "the same first cell twice"
    assert len(_same_figures([[client.format("")], [client.format(
        ", each Python worker making the Kafka state's producer at its first read")]])) == 1
    assert not _same_figures([["Avro values, one thread: decoded"],
                              ["Protobuf values, one thread: decoded"]])
    same = _same_figures(_figures_table()[1])
    assert not same, ("docs/performance.md's Current figures table measures these twice: keep "
                      "the newest row, its older values in bench/results/:\n" + "\n".join(same))


#: What the README does not copy from the Current figures table, beside the figures the
#: other pages are checked for (_stated_figures): a rate, a ratio such as "1.38x" or
#: "2 times", or milliseconds, wherever it stands.
_README_FIGURE = re.compile(
    rf"{_NUMBER} ?(?:(?:records|events|msgs|messages|keys)/s|x|times|ms)\b")


def _readme_figures(page: Path) -> list[str]:
    """The benchmark figures ``page`` states in its prose, a link's target left out."""
    found = [f"{number}{'' if unit == 'x' else ' '}{unit}"
             for _, (number, unit) in _stated_figures(page)]
    for _, line in _numbered_prose(page.read_text()):
        found += _README_FIGURE.findall(re.sub(r"\]\([^)]*\)", "]", line))
    return list(dict.fromkeys(found))


def test_the_readme_copies_no_figure_but_links_the_current_figures(tmp_path):
    sample = tmp_path / "README.md"
    sample.write_text(
        "* A chain delivered 1,000 events/s 0.659 s late at the median and 1.145 s at p99.\n"
        "  A chain moves 1.21x to 2.42x quixstreams' rate, about 174 bytes per mark; a\n"
        "  commit takes 0.55 ms ([Current figures](docs/performance.md#current-3x-1-ms)).\n"
        "```\nlatency 7 s, 12 records/s\n```\n")
    assert set(_readme_figures(sample)) == {"1,000 events/s", "0.659 s", "1.145 s", "1.21x",
                                            "2.42x", "174 bytes", "0.55 ms"}
    figures = _readme_figures(README)
    assert not figures, f"README.md copies figures that the next run changes: {figures}; " \
                        "say it in words and link docs/performance.md#current-figures"
    assert "docs/performance.md#current-figures" in _links(README)


@pytest.mark.parametrize("page", FIGURE_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_state_only_the_measured_figures_of_the_current_figures_table(page):
    held = _held()
    wrong = [f"{page.relative_to(ROOT)}:{line}: {number}{'' if unit == 'x' else ' '}{unit} is "
             "not in the table of docs/performance.md#current-figures."
             for line, (number, unit) in _stated_figures(page) if (number, unit) not in held]
    assert not wrong, "\n".join(wrong)


def _readme_topology() -> str:
    text = README.read_text()
    section = text.split("## A topology of your own\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    return block


def test_readme_topology_validates_and_its_mistake_reads_as_shown(tmp_path, monkeypatch,
                                                                 capsys):
    monkeypatch.chdir(tmp_path)
    text = _readme_topology()
    Path("big.yaml").write_text(text)
    conf = str(ROOT / "conf" / "local.yaml")
    assert main(["validate", "big.yaml", "--config", conf]) == 0
    shown = re.search(r"^error: big\.yaml: .*$", README.read_text(), re.M)
    assert shown, "README.md lost the validate message of its topology"
    Path("big.yaml").write_text(text.replace("expressions: [region, event_id, amount]",
                                             "expressions: [region, event_id, amout]"))
    capsys.readouterr()
    assert main(["validate", "big.yaml", "--config", conf]) == 2
    assert capsys.readouterr().err.strip() == shown.group(0)


@pytest.mark.spark
def test_readme_topology_runs_as_written(spark, kafka_bootstrap, kafka_topic, redis_url, tmp_path):
    import json

    import redis

    import sqe
    from sqe.cli.sample_events import produce_events, sample_events

    topic = kafka_topic(2)
    produce_events(kafka_bootstrap, topic, 200, partitions=2)
    path = tmp_path / "big.yaml"
    path.write_text(_readme_topology().replace("objectName: events ", f"objectName: {topic} "))
    client = redis.Redis.from_url(redis_url)
    host, port = client.connection_pool.connection_kwargs["host"], \
        client.connection_pool.connection_kwargs["port"]
    result = sqe.run(sqe.prepare(path, config=[ROOT / "conf" / "local.yaml"],
                                 checkpoint=tmp_path / "ck", conf={
                         "jw.sqe.spout.kafka.brokers": kafka_bootstrap,
                         "jw.sqe.state.redis.host": host, "jw.sqe.state.redis.port": port,
                         "jw.sqe.state.redis.database":
                             client.connection_pool.connection_kwargs.get("db", 0)}),
        once=True, spark=spark)
    big = [e for e in sample_events(200) if e["amount"] > 50]
    assert result.records_read == 200 and result.rows_written == len(big)
    eu = {k.decode(): json.loads(v) for k, v in client.hgetall("eu").items()}
    assert eu == {e["event_id"]: e["amount"] for e in big if e["region"] == "eu"}
