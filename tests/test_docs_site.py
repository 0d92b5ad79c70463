"""The documentation site and the public API it documents: ``mkdocs build --strict`` passes
(no broken link, anchor or reference, every page in the navigation), docs/api.md documents
exactly ``sqe.__all__``, every type a public signature names is a public name, and the
public calls' docstrings say their parameters, return value and errors."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import typing
from collections.abc import Iterator

import pytest

import sqe
from tests.support import ROOT

API_PAGE = ROOT / "docs" / "api.md"
#: The calls whose docstrings must have Args, Returns and Raises sections.
CALLS = ("load_topology", "validate", "run", "encode_keys", "decode_keys", "pid_for")


def test_the_site_builds_strictly(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(tmp_path)})
    problems = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0 and not problems, done.stderr[-4000:]
    api = (tmp_path / "site" / "api.html").read_text()
    for name in ("load_topology", "RunResult", "StaleBatchError", "PrometheusWatcher"):
        assert f'id="sqe.{name}"' in api, f"the API page does not document sqe.{name}"


def _documented() -> list[str]:
    return re.findall(r"^::: sqe\.(\w+)$", API_PAGE.read_text(), re.M)


def test_the_api_page_documents_exactly_the_public_names():
    documented = _documented()
    public = [name for name in sqe.__all__ if name != "__version__"]
    assert public == list(sqe._EXPORTS), "sqe.__all__ and sqe._EXPORTS list other names"
    assert len(documented) == len(set(documented)), "docs/api.md documents a name twice"
    assert documented == public, (
        "docs/api.md's ::: entries differ from sqe.__all__ (same order): "
        f"undocumented {sorted(set(public) - set(documented))}, "
        f"not public {sorted(set(documented) - set(public))}")


def _classes(hint: object) -> Iterator[type]:
    """The classes of the project that a type hint names, through unions and generics."""
    if isinstance(hint, type):
        if hint.__module__.split(".")[0] == "sqe":
            yield hint
        return
    origin = typing.get_origin(hint)
    if isinstance(origin, type) and origin.__module__.split(".")[0] == "sqe":
        yield origin
    for arg in typing.get_args(hint):
        yield from _classes(arg)


def _signatures(obj: object) -> Iterator[tuple[str, object]]:
    """(where, hint) of every annotation of a public function, or of a public class's fields,
    public methods and properties."""
    if not isinstance(obj, type):
        if callable(obj):
            for name, hint in typing.get_type_hints(obj).items():
                yield f"{obj.__qualname__}({name})", hint
        return
    for name, hint in typing.get_type_hints(obj).items():
        if not name.startswith("_"):
            yield f"{obj.__qualname__}.{name}", hint
    for name, member in vars(obj).items():
        if name.startswith("_") and name != "__init__":
            continue
        function = member.fget if isinstance(member, property) else member
        if inspect.isfunction(function):
            for arg, hint in typing.get_type_hints(function).items():
                yield f"{obj.__qualname__}.{name}({arg})", hint


def test_every_type_a_public_signature_names_is_public():
    public = {getattr(sqe, name) for name in sqe.__all__ if isinstance(getattr(sqe, name), type)}
    hidden = {}
    for name in sqe.__all__:
        for where, hint in _signatures(getattr(sqe, name)):
            for cls in _classes(hint):
                if cls not in public:
                    hidden.setdefault(f"{cls.__module__}.{cls.__qualname__}", where)
    assert not hidden, f"public signatures name types that `sqe` does not export: {hidden}"


@pytest.mark.parametrize("name", CALLS)
def test_public_calls_document_parameters_return_and_errors(name):
    call = getattr(sqe, name)
    doc = inspect.getdoc(call) or ""
    sections = {s: re.search(rf"^{s}:\n((?:    .*\n?|\n)+)", doc, re.M) for s in
                ("Args", "Returns", "Raises")}
    assert sections["Args"] and sections["Returns"], f"sqe.{name}: no Args or Returns section"
    described = set(re.findall(r"^    (\w+):", sections["Args"].group(1), re.M))
    params = set(inspect.signature(call).parameters)
    assert described == params, f"sqe.{name}: Args {sorted(described)} != {sorted(params)}"
    if name != "pid_for":  # the one call that raises nothing of its own
        assert sections["Raises"], f"sqe.{name}: no Raises section"
