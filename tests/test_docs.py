"""The user documentation agrees with the code: the options table is the registry's."""

from __future__ import annotations

import re

import pytest

from sqe.cli.main import main
from tests.support import ROOT

README = ROOT / "README.md"


def test_readme_options_table_is_the_registry(capsys):
    text = README.read_text()
    found = re.search(r"<!-- options-table:start -->\n(.*?)<!-- options-table:end -->", text,
                      re.S)
    assert found, "README.md lost its options-table markers"
    assert main(["options", "--markdown"]) == 0
    generated = capsys.readouterr().out
    documented = found.group(1)
    missing = [line for line in generated.splitlines() if line not in documented.splitlines()]
    stale = [line for line in documented.splitlines() if line not in generated.splitlines()]
    assert not missing and not stale, (
        "README.md's options table differs from `sqe options --markdown`; paste its output "
        f"between the markers.\nmissing: {missing}\nstale: {stale}")
    assert documented == generated  # same order too
    # Every row has the header's four columns: a | inside a cell (an enum) is escaped.
    for line in generated.splitlines():
        cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
        assert len(cells) == 4, f"options table row with {len(cells)} columns: {line}"


def test_readme_names_only_existing_commands_and_files(capsys):
    text = README.read_text()
    root = README.parent
    named = re.findall(r"`((?:topologies|conf|bench|docker|tests|sqe|state|partitioners)/"
                       r"[\w./-]+)`", text)
    for path in sorted(set(named)):
        assert (root / path).exists(), f"README.md names {path}, which does not exist"
    from sqe.cli.main import _parser

    known = set(_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    used = set(re.findall(r"(?:^|`)sqe ([a-z][\w-]*)", text, re.M))  # commands, not prose
    assert used <= known, f"README.md uses unknown sqe commands: {sorted(used - known)}"


def _python_blocks(section: str) -> list[str]:
    text = README.read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", body, re.S)


@pytest.mark.spark
def test_readme_python_blocks_run_as_written(spark, tmp_path, monkeypatch, capsys):
    blocks = _python_blocks("Using SQE from Python")
    assert len(blocks) == 2, "the section's Python examples moved"
    for name in ("topologies", "conf"):
        (tmp_path / name).symlink_to(README.parent / name)
    monkeypatch.chdir(tmp_path)  # the blocks name files relative to the repository
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    out = capsys.readouterr().out.splitlines()
    assert "3 2" in out
    assert any(line.startswith("Greetings batch 0: 3 records read") for line in out)
    assert ("--conf: unknown option jw.sqe.spout.kafka.filterReplay; did you mean "
            "jw.sqe.spout.kafka.filterReplays?") in out
    assert (tmp_path / "checkpoints" / "hello" / "sqe-progress.jsonl").is_file()


def test_ci_runs_the_readme_test_command():
    command = re.search(r"```sh\n(python3 -m venv .venv && [^\n]*pytest[^\n]*)\n```",
                        README.read_text())
    assert command, "README.md lost its test command"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert command.group(1) in ci, ".ci/run does not run the README's test command as written"


def test_nothing_shipped_points_outside_the_repository():
    shipped = [ROOT / "README.md", *ROOT.glob("topologies/*"), *ROOT.glob("conf/*"),
               *ROOT.glob("docker/*"), *(p for pkg in ("sqe", "state", "partitioners")
                                         for p in (ROOT / pkg).rglob("*.py"))]
    bad = [str(p.relative_to(ROOT)) for p in shipped
           if "DESIGN.md" in p.read_text() or "../shared" in p.read_text()]
    assert not bad, f"these name files a user of the repository does not have: {bad}"
