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
