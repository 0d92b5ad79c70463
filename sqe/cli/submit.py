"""The script ``spark-submit`` runs: ``sqe run`` with the arguments that follow it.

Under ``spark-submit`` the session comes from the submit command (master,
``--conf spark.jw.sqe.*`` options, resources); everything else is the same as
``sqe run``::

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master 'local[2]' \\
        "$(.venv/bin/python -m sqe.cli.submit --path)" topologies/enrich.yaml \\
        --config conf/local.yaml --once

``python -m sqe.cli.submit --path`` prints this file's path.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this file's directory (sqe/cli/) is sys.path[0]: its modules must not
# shadow top-level names, so drop it; the sqe package is imported from where it is installed.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)


def submit_main(argv: list[str]) -> int:
    """``sqe run`` with ``argv``; ``--path`` prints the path of this script instead."""
    if argv == ["--path"]:
        print(__file__)
        return 0
    from sqe.cli.main import main

    return main(["run", *argv])


if __name__ == "__main__":
    sys.exit(submit_main(sys.argv[1:]))
