"""Optional dependencies: which extra of ``sqe-spark`` brings each, and the sentence a
missing one is.

Not every run needs Postgres, Prometheus, plots, a local broker, packing or Spark
Connect's client, so ``pip install sqe-spark`` brings none of them; each comes with an
extra (``pip install 'sqe-spark[postgres]'``).  Code that uses one imports it through
:func:`optional` (the module, or None when it is not installed) and says what is missing
with :func:`missing` (a located sentence for ``sqe validate``) or :func:`require`
(a :class:`~sqe.errors.PrerequisiteError`).

Example::

    >>> EXTRAS["psycopg"]
    'postgres'
    >>> missing("json", "a test")  is None   # installed: nothing to say
    True
"""

from __future__ import annotations

import importlib
from types import ModuleType

from sqe.errors import PrerequisiteError

__all__ = ["EXTRAS", "install_hint", "missing", "optional", "require"]

#: Importable module -> the extra of sqe-spark that installs it.
EXTRAS = {
    "psycopg": "postgres",
    "prometheus_client": "metrics",
    "matplotlib": "plot",
    "noida_db": "local",
    "venv_pack": "pack",
    "packaging": "pack",
    "grpc": "connect",
}


def install_hint(module: str) -> str:
    """The command that installs ``module`` with SQE."""
    return f"pip install 'sqe-spark[{EXTRAS[module]}]'"


def optional(module: str) -> ModuleType | None:
    """``module`` imported, or None when it (not something it imports) is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] == module.split(".")[0]:
            return None
        raise


def missing(module: str, what: str) -> str | None:
    """The sentence for ``what`` (e.g. ``topology.yaml: command 3 (Query): a POSTGRES state``)
    when ``module`` is not installed, else None."""
    if optional(module) is not None:
        return None
    return f"{what} needs {module.split('.')[0]}, which is not installed: {install_hint(module)}"


def require(module: str, what: str) -> ModuleType:
    """``module``, or a :class:`PrerequisiteError` saying which extra installs it."""
    found = optional(module)
    if found is None:
        raise PrerequisiteError(str(missing(module, what)))
    return found
