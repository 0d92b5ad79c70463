"""What the tests share: paths of the repository, and (in the modules here) small Kafka
helpers, the shipped chain, mutations of files and the like.  The real services the tests run
against are the repository's top-level ``support`` package, which the benchmarks use too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

#: The repository's root.
ROOT = Path(__file__).resolve().parents[2]
#: SQE's own topology files, as the original Java SQE shipped them in its tests.
DATA = ROOT / "tests" / "data"
#: Reference vectors kept in the repository.
VECTORS = ROOT / "tests" / "vectors"


def redis_string_query(object_name: str, key: str, value: str, source: str = "In") -> dict:
    """A topology's ``Query`` command writing ``key`` -> ``value`` of stream ``source`` into a
    Redis STRING state ``object_name`` (the shape several engine tests share)."""
    return {"Query": {"insertInto": {"objectName": object_name, "stateName": "REDIS",
                                     "fields": [key, value],
                                     "options": {"jw.sqe.state.redis.datatype": "STRING",
                                                 "jw.sqe.state.redis.keyname.fields": [key]}},
                      "select": {"expressions": [key, value]},
                      "from": {"objectName": source}}}


def fixed_words(tmp_path: Path, expression: object, where: object = None) -> Path:
    """``words.yaml`` in ``tmp_path``: a FIXED stream of two words (``word``, ``n``: a 1, b 2)
    printed by one query selecting ``word`` and ``expression`` (as ``x``), ``where`` if given."""
    query: dict = {"insertInto": {"objectName": "out", "stateName": "CONSOLE",
                                  "fields": ["word", "x"]},
                   "select": {"expressions": ["word", expression]},
                   "from": {"objectName": "Words"}}
    if where is not None:
        query["where"] = where
    commands = [{"CreateStream": {"streamName": "Words", "objectName": "words",
                                  "spoutName": "FIXED", "options": {
                                      "jw.sqe.spout.fixed.fields": ["word", "n"],
                                      "jw.sqe.spout.fixed.values": [["a", 1], ["b", 2]]}}},
                {"Query": query}]
    path = tmp_path / "words.yaml"
    path.write_text(yaml.safe_dump(commands))
    return path


def sqe_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``sqe ARGS`` as a process of this Python, with ``env`` over this environment."""
    return subprocess.run([sys.executable, "-m", "sqe.cli.main", *args], capture_output=True,
                          text=True, timeout=600, env={**os.environ, **(env or {})})
