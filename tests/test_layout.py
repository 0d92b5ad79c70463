"""The package's layers hold: each layer imports only the layers below it, project imports sit at
the top of their module, every package says what it owns, and no module is too long to read."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest
import tomllib

from tests.support import ROOT

#: The import names the distribution installs, each a real folder at the repository's top as
#: the project's card lays it out: the framework, the partitioners and the states.
PACKAGES = ("sqe", "partitioners", "state")

#: The repository folders of data (no Python) that pyproject.toml maps into the package.
DATA_PACKAGES = {"sqe.topologies": "topologies", "sqe.conf": "conf"}

#: Layer -> the layers it may import (besides itself), bottom up.  A module's layer is the
#: longest prefix of its dotted name found here.
ALLOWED: dict[str, set[str]] = {
    "sqe.errors": set(),
    "sqe.version": set(),
    "sqe.faults": {"sqe.errors"},
    "sqe.logs": {"sqe.errors"},
    "sqe.secrets": {"sqe.errors"},
    "sqe.wire": {"sqe.errors"},
    "sqe.clients": {"sqe.errors", "sqe.secrets", "sqe.logs"},
    "partitioners": {"sqe.errors", "sqe.wire"},
    "sqe.lang": {"sqe.errors", "sqe.wire"},
    "sqe.config": {"sqe.errors", "sqe.secrets", "sqe.logs", "sqe.wire", "sqe.clients", "sqe.lang",
                   "partitioners"},
    "sqe.ledger": {"sqe.errors", "sqe.clients", "sqe.config"},
    "state": {"sqe.errors", "sqe.faults", "sqe.secrets", "sqe.wire", "sqe.clients",
                  "sqe.lang.expressions", "sqe.config", "sqe.ledger", "partitioners"},
    "sqe.source": {"sqe.errors", "sqe.secrets", "sqe.logs", "sqe.wire", "sqe.clients", "sqe.lang",
                   "sqe.config", "sqe.ledger"},
    "sqe.observe": {"sqe.errors", "sqe.wire", "sqe.config", "sqe.source"},
    "sqe.engine": set(),  # the package's docstring only
    "sqe.engine.spark": {"sqe.errors", "sqe.version", "sqe.logs", "sqe.secrets", "sqe.wire",
                         "sqe.clients", "sqe.config", "sqe.source"},
    "sqe.engine.batch": {"sqe.errors", "sqe.version", "sqe.faults", "sqe.logs", "sqe.secrets",
                         "sqe.wire", "sqe.clients", "sqe.lang", "sqe.config", "sqe.ledger", "state",
                         "sqe.source", "sqe.observe", "sqe.engine.spark"},
    "sqe.engine.run": {"sqe.errors", "sqe.version", "sqe.faults", "sqe.logs", "sqe.secrets",
                       "sqe.wire", "sqe.clients", "sqe.lang", "sqe.config", "sqe.ledger", "state",
                       "sqe.source", "sqe.observe", "sqe.engine.spark", "sqe.engine.batch"},
    "sqe.api": {"sqe.errors", "sqe.logs", "sqe.secrets", "sqe.wire", "sqe.clients", "sqe.lang",
                "sqe.config", "sqe.ledger", "state", "sqe.source", "sqe.observe", "sqe.engine"},
    "sqe.hop": {"sqe.errors", "sqe.clients", "sqe.lang", "sqe.config", "state", "sqe.source",
                "sqe.observe", "sqe.engine"},
    "sqe.cli": {"sqe", "sqe.errors", "sqe.faults", "sqe.logs", "sqe.secrets", "sqe.wire",
                "sqe.clients", "sqe.lang", "sqe.config", "sqe.ledger", "state", "sqe.source",
                "sqe.observe", "sqe.engine", "sqe.api"},
    "sqe": {"sqe.api", "sqe.clients", "sqe.config", "sqe.errors", "sqe.version", "sqe.lang",
            "sqe.observe", "sqe.wire"},  # the face
}

#: Imports inside a function that are there on purpose, with why.
DEFERRED = {
    ("sqe.cli.submit", "sqe.cli.main"): "the spark-submit script fixes sys.path first",
}

MAX_LINES = 400


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(p for top in PACKAGES for p in (ROOT / top).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
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


def test_the_packages_are_the_folders_at_the_top_with_no_link():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    links = [p for top in PACKAGES for p in (ROOT / top).rglob("*") if p.is_symlink()]
    assert links == [], f"links in the package: {links}; tools do not see through them"
    assert setuptools["package-dir"] == DATA_PACKAGES
    for package, folder in DATA_PACKAGES.items():
        assert not list((ROOT / folder).rglob("*.py")), f"{folder}/ ({package}) holds data only"
    found = {".".join(init.parent.relative_to(ROOT).parts)
             for top in PACKAGES for init in (ROOT / top).rglob("__init__.py")}
    assert set(setuptools["packages"]) == found | set(DATA_PACKAGES), (
        "pyproject.toml's packages must list every package of the tree")


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
        if path.name == "__init__.py" and name != "sqe":  # sqe's own face says what it shows
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            assert "May import" in doc, f"{path.relative_to(ROOT)} does not say what it may import"


def test_every_error_class_is_defined_in_sqe_errors():
    import importlib
    import inspect

    from sqe import errors

    outside = []
    for name, _ in MODULES:
        module = importlib.import_module(name)
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, errors.SqeError) and cls.__module__ != "sqe.errors":
                outside.append(f"{cls.__module__}.{cls_name}")
    assert not outside, f"error classes outside sqe.errors: {sorted(set(outside))}"
    assert set(errors.__all__) == {n for n, c in vars(errors).items()
                                   if inspect.isclass(c) and issubclass(c, Exception)}


def test_every_module_imports_first():
    # An import circle through a package's __init__ (a module imports a sibling package
    # whose __init__ imports back) breaks only when that module is the first one imported,
    # which the suite's own order hides: each module here is imported with no sqe module
    # loaded before it, in one fresh interpreter.
    import subprocess
    import sys

    names = [name for name, _ in MODULES]
    script = (
        "import importlib, sys\n"
        "failed = []\n"
        f"for name in {names!r}:\n"
        f"    for loaded in [m for m in sys.modules if m.split('.')[0] in {PACKAGES!r}]:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        failed.append(f'{name}: {type(exc).__name__}: {exc}')\n"
        "print('\\n'.join(failed))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=True)
    assert done.stdout.strip() == ""


#: Builtin exceptions raised on purpose where no user meets them, by (file, function), with why.
#: Every other error the package raises is an :class:`sqe.errors.SqeError`.
NOT_A_USERS = {
    ("sqe/__init__.py", "__getattr__"):
        "a module's __getattr__ answers AttributeError, which Python's import machinery asks",
    ("sqe/config/views.py", "__init__"): "a view naming a key the registry lacks: a bug of SQE's "
                                         "own code, found when the module loads",
    ("sqe/config/options.py", "_coerce"): "an option kind the converter lacks: a bug of SQE's "
                                           "own registry, found by the suite",
    ("sqe/source/json_fields.py", "_refuse"): "json.loads's hook; _parse turns it into a reason",
    ("sqe/source/json_fields.py", "_finite"): "json.loads's hook; _parse turns it into a reason",
    ("sqe/engine/run/changes.py", "from_json"): "its caller turns it into a sentence naming "
                                                "the file",
    ("sqe/engine/spark/arrow_writer.py", "write_batches"): "the abstract method a writer "
                                                           "overrides",
    ("sqe/observe/batch_report.py", "_checked"): "a BatchReport field of a type the progress file "
                                              "cannot hold: a bug found when the module loads",
    ("sqe/wire/chunk/arrow.py", "read_headers"): "the vectorised reader disagreeing with its "
                                                 "scalar reference: a bug",
    ("state/sink.py", "pass_task"): "the default of a state that is never written in one pass "
                                    "(the engine asks pass_planned first)",
}

_BUILTIN_ERRORS = {name for name, value in vars(builtins).items()
                   if isinstance(value, type) and issubclass(value, BaseException)}


def _raised_builtins(tree: ast.Module) -> list[tuple[str, str, int]]:
    """(builtin exception, enclosing function, line) of each ``raise`` of a builtin."""
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                else function
            if isinstance(child, ast.Raise) and child.exc is not None:
                target = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                if isinstance(target, ast.Name) and target.id in _BUILTIN_ERRORS:
                    found.append((target.id, function, child.lineno))
            visit(child, inner)

    visit(tree, "<module>")
    return found


def test_every_error_a_user_can_meet_is_an_sqe_error():
    wrong, used = [], set()
    for _, path in MODULES:
        where = str(path.relative_to(ROOT))
        for name, function, line in _raised_builtins(ast.parse(path.read_text())):
            if (where, function) in NOT_A_USERS:
                used.add((where, function))
            else:
                wrong.append(f"{where}:{line} raises {name} in {function}")
    assert not wrong, ("raise an sqe.errors class (one with the same builtin base) instead: "
                       + "; ".join(wrong))
    assert used == set(NOT_A_USERS), f"listed but raising no builtin: {set(NOT_A_USERS) - used}"
