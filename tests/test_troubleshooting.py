"""docs/troubleshooting.md is held to the program's error classes.

The page has one ``## ClassName`` section per class of ``sqe.errors.__all__``, in that
order (after its prose sections), and each says what it means and what to do.  The exit
code each section states is the one the ``sqe`` command gives for that class, found by
running the CLI's own handlers (``sqe/cli/main.py``, and ``sqe run``'s in
``sqe/cli/commands.py``) on an error of the class, not read from the page.  Every
``sqe <command>`` the page names is a subcommand, and every ``--flag`` written after one in
a code span is a flag of that subcommand.  The page links only pages of docs/, and headings
they have.  No Spark session and no services.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import re
import signal
import threading
from types import SimpleNamespace
from typing import Any, cast

import pytest

import sqe.errors
from sqe.cli import commands
from sqe.cli import main as cli_main
from sqe.engine.run import failure, runner
from sqe.errors import BadRecordError, ChunkError, RunError, RunStopped, SqeError
from sqe.source.kafka import rows
from tests.support import ROOT

DOCS = ROOT / "docs"
PAGE = DOCS / "troubleshooting.md"
#: The page's ``## `` sections that are not error classes, in order, before the first class.
PROSE = ["Find your message", "Messages that are not errors"]
#: The markers every section of a class has.
MEANS, TO_DO = "**What it means.**", "**What to do.**"
#: The exit code a section states: one code, or two (``130 or 143``).
EXIT_CODE = re.compile(r"^\*\*Exit code:\*\* (\d+)(?: or (\d+))?\b", re.M)
#: ``sqe <command>`` anywhere on the page (not ``sqe-spark``, ``sqe.errors``, ``sqe: ...``).
NAMED = re.compile(r"(?<![\w./-])sqe ([a-z][\w-]*)")


def _classes() -> list[str]:
    return list(sqe.errors.__all__)


def _lines() -> list[tuple[str, bool]]:
    """The page's lines, each with whether it is inside a fenced code block (fences left out)."""
    out, fenced = [], False
    for line in PAGE.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        out.append((line, fenced))
    return out


def _sections(level: str = "## ") -> dict[str, str]:
    """The page's sections at ``level`` (``## ``, ``### ``), heading -> body, in page order;
    a section ends at the next heading of its level or a higher one."""
    out: dict[str, str] = {}
    current: str | None = None
    higher = tuple("#" * n + " " for n in range(1, len(level) - 1))
    for line, fenced in _lines():
        if not fenced and line.startswith(level):
            current = line[len(level):].strip()
            assert current not in out, f"two sections {current!r}"
            out[current] = ""
        elif not fenced and line.startswith(higher):
            current = None
        elif current is not None:
            out[current] += line + "\n"
    return out


def test_every_error_class_has_its_section_in_the_order_of_all() -> None:
    names = _classes()
    for i, name in enumerate(names):
        cls = getattr(sqe.errors, name)
        assert isinstance(cls, type) and issubclass(cls, SqeError), f"{name} is no SqeError"
        bases = [b.__name__ for b in cls.__mro__[1:] if b.__name__ in names]
        assert all(names.index(b) < i for b in bases), f"{name} comes before a base in __all__"
    assert list(_sections()) == PROSE + names, (
        "docs/troubleshooting.md's ## headings must be the prose sections, then exactly the "
        "classes of sqe.errors.__all__ in its order (a class added to sqe/errors.py needs its "
        "section)")


def test_every_section_says_what_it_means_and_what_to_do() -> None:
    sections = _sections()
    for name in _classes():
        body = sections.get(name, "")
        assert EXIT_CODE.search(body), f"## {name} states no '**Exit code:** N'"
        assert MEANS in body, f"## {name} has no {MEANS}"
        assert TO_DO in body, f"## {name} has no {TO_DO}"
        assert "error: " in body or "sqe: " in body, f"## {name} shows no example message"
    warnings = _sections("### ")
    assert warnings, "the page lists no messages that are not errors"
    for heading, body in warnings.items():
        assert MEANS in body and TO_DO in body, f"### {heading} lacks {MEANS} or {TO_DO}"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def _code() -> list[str]:
    """The page's code: its inline code spans (also those quoted inside example messages),
    and the lines of its code blocks that are commands (``sqe ...``)."""
    prose = "\n".join(line for line, fenced in _lines() if not fenced)
    spans = [m.group(2).replace("\n", " ") for m in re.finditer(r"(`+)(.+?)\1", prose, re.S)]
    for line, fenced in _lines():
        if fenced:
            spans += [line] if line.startswith("sqe ") else re.findall(r"`([^`]+)`", line)
    return spans


def test_commands_and_flags_named_exist() -> None:
    commands_ = _subcommands(cli_main._parser())
    named = set(NAMED.findall(PAGE.read_text()))
    assert named, "the page names no sqe command"
    assert named <= set(commands_), f"not sqe commands: {sorted(named - set(commands_))}"
    checked = 0
    for span in _code():
        words = span.split()
        for i, word in enumerate(words[:-1]):
            if word != "sqe" or words[i + 1] not in commands_:
                continue
            parser, rest = commands_[words[i + 1]], words[i + 2:]
            actions = _subcommands(parser)
            if rest and rest[0] in actions:
                parser, rest = actions[rest[0]], rest[1:]
            for token in rest:
                if token == "sqe":
                    break
                if token.startswith("--"):
                    flag = token.split("=", 1)[0].rstrip(".,;:)'\"")
                    assert flag in _flags(parser), f"`{span}`: {flag} is no flag of {parser.prog}"
                    checked += 1
    assert checked >= 10, "the page lost its commands with flags"


def _cli_exit(error: BaseException) -> int:
    """What ``sqe`` exits with when a command raises ``error``: sqe/cli/main.py's handler."""
    def command(_args: argparse.Namespace) -> int:
        raise error

    with pytest.MonkeyPatch.context() as m:
        m.setattr(cli_main, "parse_or_suggest",
                  lambda _parser, _argv: argparse.Namespace(func=command))
        return cli_main.main(["anything"])


def _run_exit(error: BaseException, signum: int) -> int:
    """What ``sqe run`` exits with when the run raises ``error`` after the process received
    ``signum``: its own handler in sqe/cli/commands.py, with Spark and the files stubbed."""
    def run(*_args: Any, **_kwargs: Any) -> Any:
        raise error

    topology = SimpleNamespace(name="load", path="topologies/load.yaml")
    plan = SimpleNamespace(warnings=(), spark_conf={}, spark_origins={})
    prepared = SimpleNamespace(topology=topology, plan=plan, checkpoint="checkpoints/load")
    with pytest.MonkeyPatch.context() as m:
        m.setattr(commands.api, "prepare", lambda *_a, **_k: prepared)
        m.setattr(commands.api, "run", run)
        m.setattr(logging, "basicConfig", lambda **_k: None)
        m.setattr(commands, "set_log_level", lambda _level: None)
        m.setattr(commands, "_held_elsewhere", lambda _path: None)
        m.setattr(commands, "_watchers", lambda _args: [])
        m.setattr(commands, "build_session", lambda *_a, **_k: object())
        m.setattr(commands, "_stop_on_signals", lambda: (threading.Event(), [signum]))
        return cli_main.main(["run", "topologies/load.yaml", "--verbose", "--progress", "off"])


def _corrupt_chunk(cls: type[ChunkError]) -> BaseException:
    """The error a chunk error reaches the CLI in: what the source raises for a chunk that
    cannot be decoded, under corruptChunkPolicy fail (sqe/source/kafka/rows.py)."""
    config = SimpleNamespace(stream=SimpleNamespace(corrupt_policy="fail",
                                                    bad_record_policy="fail"))
    part = SimpleNamespace(topic="enriched", partition=1)
    records = SimpleNamespace(offsets=[4711], keys=[None], values=[b"SQEC"])
    reason = rows._reason(cls("what is wrong"))
    with pytest.raises(SqeError) as raised:
        rows._reject(cast(Any, config), cast(Any, part), cast(Any, records), {0: reason},
                     "corrupt", None, cast(Any, None))
    assert f"corrupt chunk at enriched/1 offset 4711: {cls.__name__}: " in str(raised.value)
    return raised.value


def _failed_batch(error: SqeError) -> BaseException:
    """The error an error of a batch (raised in foreachBatch) reaches the CLI in: the run
    raises the query's failure as a RunError of the batch's sentence (sqe/engine/run/runner.py)."""
    sentence = failure.describe_failure(RuntimeError("the query failed"),
                                        [cast(Any, SimpleNamespace(failure=error))])
    assert sentence == str(error)
    assert "raise RunError(describe_failure(" in inspect.getsource(runner._run)
    return RunError(sentence)


def _expected_exits(cls: type[SqeError]) -> set[int]:
    """The exit codes of the ``sqe`` command for an error of ``cls``."""
    if cls is SqeError:  # never raised as such: its kinds, as the handler tells them apart
        kinds = [SqeError, type("BadInput", (SqeError, ValueError), {}),
                 type("Failure", (SqeError, RuntimeError), {})]
        return {_cli_exit(kind("x")) for kind in kinds}
    if issubclass(cls, RunStopped):
        return {_run_exit(cls("stopped: Enriched after batch 12"), s)
                for s in (signal.SIGINT, signal.SIGTERM)}
    if issubclass(cls, ChunkError):  # a reason inside the source's corrupt-chunk error
        return {_cli_exit(_corrupt_chunk(cls))}
    if cls is BadRecordError:  # raised by badRecordPolicy fail inside a batch only
        return {_cli_exit(_failed_batch(cls("bad record at events/0 offset 200: why")))}
    return {_cli_exit(cls("the message"))}


@pytest.mark.parametrize("name", sqe.errors.__all__)
def test_stated_exit_code_is_the_clis(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    found = EXIT_CODE.search(_sections().get(name, ""))
    assert found, f"## {name} states no '**Exit code:** N'"
    stated = {int(code) for code in found.groups() if code is not None}
    expected = _expected_exits(getattr(sqe.errors, name))
    capsys.readouterr()  # what the handlers printed
    assert stated == expected, f"## {name} states exit {stated}; the CLI gives {expected}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_links_stay_in_docs_and_lead_to_headings() -> None:
    text = PAGE.read_text()
    for banned in ("../shared", "DESIGN.md", "/work"):
        assert banned not in text, f"the page mentions {banned}"
    prose = "\n".join(re.sub(r"(`+).*?\1", "", line) for line, fenced in _lines() if not fenced)
    links = re.findall(r"\]\(([^)\s]+)\)", prose)
    assert links, "the page links nothing"
    for link in links:
        path, _, anchor = link.partition("#")
        assert re.fullmatch(r"[\w-]*(\.md)?", path), f"{link}: not a page of docs/"
        target = DOCS / path if path else PAGE
        assert target.is_file(), f"{link}: no such page in docs/"
        if anchor:
            headings = [re.sub(r"^#+\s+", "", line) for line in target.read_text().splitlines()
                        if re.match(r"#{1,6}\s", line)]
            assert anchor in {_slug(h) for h in headings}, f"{link}: no such heading"


def test_one_error_tree_every_error_a_user_meets_is_a_value_or_a_run_time_error() -> None:
    """Every class of sqe.errors but their base and the one validation keeps to itself has
    ValueError (bad input, exit 2) or RuntimeError (failed at run time, exit 1) as a base; the
    refusals of a store are StateErrors, and Redis's BUSY past the wait is one too while its
    handlers still see a Redis error."""
    import redis

    from sqe.clients.redis_busy import RedisBusyError
    from sqe.errors import RefusedOption, StaleBatchError, StateError

    for name in sqe.errors.__all__:
        cls = getattr(sqe.errors, name)
        assert issubclass(cls, SqeError), name
        if cls not in (SqeError, RefusedOption):
            assert issubclass(cls, ValueError) != issubclass(cls, RuntimeError), name
    assert not issubclass(RefusedOption, ValueError | RuntimeError)
    assert issubclass(StaleBatchError, StateError) and issubclass(BadRecordError, RuntimeError)
    assert issubclass(RedisBusyError, StateError) and issubclass(RedisBusyError,
                                                                 redis.ResponseError)
    assert _cli_exit(RedisBusyError("it answered BUSY for 30 s")) == 1
