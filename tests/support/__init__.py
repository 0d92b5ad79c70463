"""What the tests share: paths of the repository, and (in the modules here) the real services
the tests run against and small Kafka helpers."""

from __future__ import annotations

from pathlib import Path

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
