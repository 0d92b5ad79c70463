"""``sqe pack``: the Python environment a cluster's executors need, as one archive to ship.

Spark's own way to give executors a Python with a library in it is a packed
virtualenv shipped with the job: ``spark-submit --archives sqe-env.tar.gz#environment``
with ``PYSPARK_PYTHON=./environment/bin/python`` (Spark's "Python Package
Management" page).  :func:`pack` makes that archive: a new virtualenv of this
interpreter's Python, this SQE (the same version: a checkout is built into a
wheel first) with the extras asked for and its dependencies, packed by
``venv-pack``.  PySpark is left out: an executor's Python workers import the
cluster's own PySpark (``$SPARK_HOME/python/lib``), which must match the
cluster's JVM, and leaving it out makes the archive some 400 MB smaller.

The archive runs on machines with the same operating system, architecture and
Python (``venv-pack`` links the environment's ``python`` to this interpreter's
installation path); where the executors have another Python, pack a conda
environment with ``conda-pack`` instead (docs/deploy.md).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlsplit

from sqe.config.extras import require
from sqe.errors import PrerequisiteError

__all__ = ["DISTRIBUTION", "pack"]

#: The distribution name of SQE on Spark.
DISTRIBUTION = "sqe-spark"


def _run(args: list[str], what: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise PrerequisiteError(f"sqe pack: {what} failed ({last[0]})")


def _installed_from() -> tuple[str | None, str]:
    """Where this SQE was installed from: a local directory or wheel file (None: an index),
    and its version."""
    dist = metadata.distribution(DISTRIBUTION)
    text = dist.read_text("direct_url.json")
    if not text:
        return None, dist.version
    url = json.loads(text).get("url", "")
    parts = urlsplit(url)
    return (unquote(parts.path) if parts.scheme == "file" else None), dist.version


def _requirement(work: Path) -> str:
    """What pip installs as SQE: a wheel of the checkout or file it came from, or the version
    from the package index."""
    where, version = _installed_from()
    if where is None:
        return f"{DISTRIBUTION}=={version}"
    if Path(where).is_file():
        return where
    wheels = work / "wheel"
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels),
          where], f"building a wheel of {where}")
    (built,) = wheels.glob("*.whl")
    return str(built)


def _dependencies(extras: list[str]) -> list[str]:
    """SQE's requirements for ``extras``, PySpark left out (see the module docstring)."""
    requirements = require("packaging.requirements", "sqe pack")
    out = []
    for text in metadata.requires(DISTRIBUTION) or []:
        req = requirements.Requirement(text)
        if req.name.lower() == "pyspark":
            continue
        if req.marker is not None and not any(req.marker.evaluate({"extra": e})
                                              for e in ["", *extras]):
            continue
        req.marker = None
        out.append(str(req))
    return out


def pack(output: str | Path, extras: list[str] | tuple[str, ...] = (),
         python: str | None = None) -> Path:
    """Pack a virtualenv with this SQE (and ``extras``) into ``output`` (``.tar.gz``);
    returns its path.  Needs ``venv-pack`` (``pip install 'sqe-spark[pack]'``)."""
    venv_pack = require("venv_pack", "sqe pack")
    target = Path(output).absolute()
    known = set(metadata.metadata(DISTRIBUTION).get_all("Provides-Extra") or [])
    unknown = sorted(set(extras) - known)
    if unknown:
        raise PrerequisiteError(f"sqe pack: no extra {', '.join(unknown)}; the extras are "
                                f"{', '.join(sorted(known))}")
    with tempfile.TemporaryDirectory(prefix="sqe-pack-") as tmp:
        work = Path(tmp)
        env = work / "environment"
        interpreter = str(python or getattr(sys, "_base_executable", None) or sys.executable)
        _run([interpreter, "-m", "venv", str(env)], f"making a virtualenv with {interpreter}")
        pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        _run([*pip, *_dependencies(list(extras))], "installing SQE's dependencies")
        _run([*pip, "--no-deps", _requirement(work)], "installing SQE")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = work / target.name  # moved into place once whole
        try:
            venv_pack.pack(prefix=str(env), output=str(partial), verbose=False)
        except venv_pack.VenvPackException as exc:
            raise PrerequisiteError(f"sqe pack: venv-pack could not pack {target.name}: {exc}"
                                    ) from None
        shutil.move(partial, target)
    return target
