"""The user documentation agrees with the code: the options table is the registry's."""

from __future__ import annotations

import re
from pathlib import Path

from sqe.cli.main import main

README = Path(__file__).resolve().parent.parent / "README.md"


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


def test_readme_names_only_existing_commands_and_files(capsys):
    text = README.read_text()
    root = README.parent
    for path in sorted(set(re.findall(r"`((?:topologies|conf|bench|docker|tests)/[\w./-]+)`",
                                      text))):
        assert (root / path).exists(), f"README.md names {path}, which does not exist"
    from sqe.cli.main import _parser

    known = set(_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    used = set(re.findall(r"(?:^|`)sqe ([a-z][\w-]*)", text, re.M))  # commands, not prose
    assert used <= known, f"README.md uses unknown sqe commands: {sorted(used - known)}"
