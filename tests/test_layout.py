"""The package's layers hold: each layer imports only the layers below it, project imports sit at
the top of their module, every package says what it owns, and no module is too long to read."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import ROOT

PACKAGES = ("sqe", "state", "partitioners")

#: Layer -> the layers it may import (besides itself), bottom up.  A module's layer is the
#: longest prefix of its dotted name found here.
ALLOWED: dict[str, set[str]] = {
    "sqe.errors": set(),
    "sqe.faults": set(),
    "sqe.wire": {"sqe.errors"},
    "partitioners": {"sqe.errors", "sqe.wire"},
    "sqe.lang": {"sqe.errors", "sqe.wire"},
    "sqe.config": {"sqe.errors", "sqe.wire", "sqe.lang", "partitioners"},
    "state": {"sqe.errors", "sqe.faults", "sqe.wire", "sqe.lang.expressions", "sqe.config",
              "partitioners"},
    "sqe.source": {"sqe.errors", "sqe.wire", "sqe.lang", "sqe.config", "state.hwm"},
    "sqe.engine": {"sqe.errors", "sqe.faults", "sqe.wire", "sqe.lang", "sqe.config", "state",
                   "sqe.source"},
    "sqe.api": {"sqe.errors", "sqe.wire", "sqe.lang", "sqe.config", "state", "sqe.source",
                "sqe.engine"},
    "sqe.cli": {"sqe", "sqe.errors", "sqe.faults", "sqe.wire", "sqe.lang", "sqe.config",
                "state", "sqe.source", "sqe.engine", "sqe.api"},
    "sqe": {"sqe.api", "sqe.config", "sqe.errors", "sqe.lang", "sqe.wire"},  # the face
}

#: Imports inside a function that are there on purpose, with why.
DEFERRED = {
    ("sqe.cli.submit", "sqe.cli.main"): "the spark-submit script fixes sys.path first",
}

MAX_LINES = 400


def _modules() -> list[tuple[str, Path]]:
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out.append((name, path))
    return out


def _layer(name: str) -> str:
    return max((layer for layer in ALLOWED if name == layer or name.startswith(layer + ".")),
               key=len)


def _imports(tree: ast.Module) -> list[tuple[str, bool]]:
    """(imported project module, whether the import is inside a function), TYPE_CHECKING
    blocks left out."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((a.name, inner) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.append((child.module, inner))
            visit(child, inner)

    visit(tree, False)
    return [(m, nested) for m, nested in found if m.split(".")[0] in PACKAGES]


MODULES = _modules()


@pytest.mark.parametrize("name,path", MODULES, ids=[m for m, _ in MODULES])
def test_imports_go_down_the_layers_only(name, path):
    layer = _layer(name)
    allowed = ALLOWED[layer] | {layer}
    wrong = []
    for module, nested in _imports(ast.parse(path.read_text())):
        target = module
        if not any(target == a or target.startswith(a + ".") for a in allowed) \
                and _layer(target) not in allowed:
            wrong.append(f"{module} (layer {_layer(target)})")
        if nested and (name, module) not in DEFERRED:
            wrong.append(f"{module} imported inside a function")
    assert not wrong, f"{path.relative_to(ROOT)} (layer {layer}) imports {', '.join(wrong)}"


@pytest.mark.parametrize("name,path", MODULES, ids=[m for m, _ in MODULES])
def test_modules_are_short_and_say_what_they_own(name, path):
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"{path.relative_to(ROOT)} is over {MAX_LINES}"
    if text.strip():
        assert ast.get_docstring(ast.parse(text)), f"{path.relative_to(ROOT)} has no docstring"


def test_every_package_says_what_it_may_import():
    for name, path in MODULES:
        if path.name == "__init__.py" and name != "sqe":
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            assert "May import" in doc, f"{path.relative_to(ROOT)} does not say what it may import"
