"""The Python that Spark's driver plans SQE's source with, when the executors' Python is shipped.

Spark's way to give executors a Python environment is an archive unpacked in each
executor's working directory: ``spark-submit --archives env.tar.gz#environment`` with
``PYSPARK_PYTHON=./environment/bin/python``, a path relative to that directory.  A Python
data source, unlike a UDF, also runs on the driver: its JVM plans each micro-batch in a
Python process (``PythonPlannerRunner``) started with the same interpreter path as the
executors' workers, relative to the driver's working directory, where no ``environment``
was unpacked in client mode.  The planner then fails with ``Cannot run program
"./environment/bin/python"``, which PySpark reports only as ``An error occurred while
calling o117.load``.

:func:`bridge_planner_python` makes that relative path lead, on the driver, to the driver's
own interpreter (the one running SQE, which ``PYSPARK_DRIVER_PYTHON`` chose): a link named
like the path's first part (``environment``) in the driver's working directory, to a
temporary directory holding a launcher of this interpreter at the rest of the path
(``bin/python``).  The executors keep using their unpacked archive; the link is removed when
the run ends.  Nothing is done when the path exists on the driver already (cluster mode,
where the driver runs in a worker's directory; an absolute path; a name on ``PATH``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from sqe.errors import PrerequisiteError

__all__ = ["bridge_planner_python", "relative_python"]


def relative_python(python: str, where: str | Path) -> PurePosixPath | None:
    """``python`` as a path relative to ``where`` that does not exist there (what needs a
    bridge), or None: an absolute path, a bare name (looked up on ``PATH``), or one there."""
    path = PurePosixPath(python)
    if path.is_absolute() or len(path.parts) < 2:
        return None
    relative = PurePosixPath(*[p for p in path.parts if p != "."])
    if not relative.parts or relative.parts[0] == ".." or (Path(where) / relative).exists():
        return None
    return relative


def bridge_planner_python(python: str, where: str | Path) -> Callable[[], None] | None:
    """Make ``python`` (the executors' interpreter path) run this interpreter from ``where``
    (the driver JVM's working directory); returns what undoes it, or None when nothing was
    needed.  A directory where the link cannot be made is a :class:`PrerequisiteError`."""
    relative = relative_python(python, where)
    if relative is None:
        return None
    link = Path(where) / relative.parts[0]
    if link.exists() or link.is_symlink():
        raise PrerequisiteError(
            f"PYSPARK_PYTHON is {python}, a path in the executors' working directory (an "
            f"archive shipped with --archives), which Spark's driver also starts to plan SQE's "
            f"source, from {where}; {link} is there but holds no {relative}: run spark-submit "
            "from another directory, or give PYSPARK_PYTHON a path the driver has too")
    home = Path(tempfile.mkdtemp(prefix="sqe-planner-python-"))
    launcher = home.joinpath(*relative.parts[1:])
    try:
        launcher.parent.mkdir(parents=True, exist_ok=True)
        launcher.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
        launcher.chmod(0o755)
        link.symlink_to(home, target_is_directory=True)
    except OSError as exc:
        shutil.rmtree(home, ignore_errors=True)
        raise PrerequisiteError(
            f"PYSPARK_PYTHON is {python}, a path in the executors' working directory, which "
            f"Spark's driver also starts to plan SQE's source, from {where}; SQE could not "
            f"point it at the driver's Python there ({exc.strerror or exc}): run spark-submit "
            "from a writable directory, or give PYSPARK_PYTHON a path the driver has too"
        ) from None

    def undo() -> None:
        if link.is_symlink() and os.readlink(link) == str(home):
            link.unlink()
        shutil.rmtree(home, ignore_errors=True)

    return undo
