"""What `pip install sqe-spark` gives a user: one import name, its data files and metadata, the
demo from an empty directory with nothing but the installed wheel, and a sentence naming the
extra when an optional dependency is missing."""

from __future__ import annotations

import re
import zipfile
from email.parser import Parser

import pyspark
import pytest
import yaml

import sqe
from tests.support import ROOT


@pytest.fixture(scope="module")
def wheel_files(installed_sqe) -> dict[str, bytes]:
    with zipfile.ZipFile(installed_sqe.wheel) as z:
        return {n: z.read(n) for n in z.namelist()}


def test_the_wheel_installs_sqe_partitioners_and_state_and_nothing_else_at_the_top(wheel_files):
    tops = {name.split("/")[0] for name in wheel_files}
    info = f"sqe_spark-{sqe.__version__}.dist-info"
    assert tops == {"sqe", "partitioners", "state", info}
    assert sorted(wheel_files[f"{info}/top_level.txt"].split()) == [
        b"partitioners", b"sqe", b"state"]
    for shipped in ("state/kafka/sink.py", "partitioners/base.py",
                    "sqe/ledger/hwm.py", "sqe/py.typed", "state/py.typed",
                    "partitioners/py.typed", "sqe/config/data/spark-settings.txt",
                    "sqe/topologies/enrich.yaml", "sqe/topologies/load.yaml",
                    "sqe/conf/local.yaml", "sqe/engine/spark/java/sqe-spark.jar",
                    "sqe/engine/spark/java/LocalCheckpointFileManager.java"):
        assert shipped in wheel_files, f"the wheel lacks {shipped}"
    for name in ("enrich.yaml", "load.yaml", "hello.yaml"):  # the repository's, as they are
        assert wheel_files[f"sqe/topologies/{name}"] == (ROOT / "topologies" / name).read_bytes()
    assert not [n for n in wheel_files if "__pycache__" in n or n.endswith(".pyc")]


def test_the_metadata_says_what_a_user_needs(wheel_files):
    info = f"sqe_spark-{sqe.__version__}.dist-info"
    meta = Parser().parsestr(wheel_files[f"{info}/METADATA"].decode())
    assert meta["Version"] == sqe.__version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert f"{info}/licenses/LICENSE" in wheel_files
    requires = meta.get_all("Requires-Dist")
    assert "pyspark<5,>=4.0" in requires
    assert set(meta.get_all("Provides-Extra")) >= {"postgres", "metrics", "plot", "local",
                                                    "pack", "all"}
    base = [r for r in requires if "extra ==" not in r]
    for optional in ("psycopg", "prometheus", "matplotlib", "noida", "venv-pack"):
        assert not any(r.startswith(optional) for r in base), f"{optional} is not optional"
    assert "Typing :: Typed" in meta.get_all("Classifier")


def test_version_flags(installed_sqe, tmp_path):
    for flag in ("-V", "--version"):
        done = installed_sqe.run("sqe", flag, cwd=tmp_path)
        assert done.stdout.strip() == f"sqe {sqe.__version__}", done.stderr


def test_a_missing_extra_is_one_sentence_naming_it(installed_sqe, tmp_path):
    topology = yaml.safe_load((ROOT / "topologies/load.yaml").read_text())
    topology[1]["Query"]["insertInto"] = {
        "objectName": "loaded", "stateName": "POSTGRES", "fields": ["region", "event_id"],
        "options": {"jw.sqe.state.postgres.dsn": "postgresql://localhost/test"}}
    topology[1]["Query"]["select"] = {"expressions": ["region", "event_id"]}
    (tmp_path / "load.yaml").write_text(yaml.safe_dump(topology, sort_keys=False))
    done = installed_sqe.run("sqe", "validate", "load.yaml", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: load.yaml: command 2 (Query): a POSTGRES state needs psycopg, which is not "
        "installed: pip install 'sqe-spark[postgres]'"), done.stderr
    done = installed_sqe.run("sqe", "run", str(ROOT / "topologies/hello.yaml"), "--once",
                             "--metrics-port", "0", cwd=tmp_path)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        "error: --metrics-port needs prometheus_client, which is not installed: pip install "
        "'sqe-spark[metrics]'"), done.stderr


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
@pytest.mark.smoke
def test_sqe_demo_runs_from_an_empty_directory_with_only_the_wheel(installed_sqe, tmp_path):
    """The demo as a user runs it: a crash of enrich mid-batch, and load keeping each event once
    (the pyspark of the wheel's virtualenv is the one the tests run with)."""
    empty = tmp_path / "anywhere"
    empty.mkdir()
    done = installed_sqe.run("sqe", "demo", "--events", "1500", "--workdir", str(empty / "w"),
                             cwd=empty, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"records produced to events:\s+1500\n", done.stdout), done.stdout
    assert re.search(r"records in the final store:\s+1500\n", done.stdout), done.stdout
    assert re.search(r"duplicates in the final store:\s+0\n", done.stdout), done.stdout
    dropped = int(re.search(r"replays dropped by load:\s+(\d+)", done.stdout).group(1))
    present = int(re.search(r"replays present in enriched:\s+(\d+)", done.stdout).group(1))
    assert dropped == present > 0
    assert re.search(rf"records in enriched \(after the crash\):\s+{1500 + present}\n",
                     done.stdout), done.stdout
    assert "enrich: SIGKILLed mid-batch" in done.stdout
    assert f"per-batch progress: sqe report {empty}/w/checkpoints/enrich" in done.stdout
    version = installed_sqe.run("python", "-c", "import pyspark; print(pyspark.__version__)",
                                cwd=empty)
    assert version.stdout.strip() == pyspark.__version__
