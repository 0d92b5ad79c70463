"""The sqe command line, run as a user runs it (a subprocess), exit codes and messages."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sqe.cli.main import main
from sqe.config.registry import CLIENT_PROPERTIES, REGISTRY
from sqe.engine.spark.worker_python import local_worker_python
from tests.support import ROOT


def sqe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sqe.cli.main", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_validate_shipped_topologies_with_and_without_config():
    """Every shipped topology validates alone and with every shipped config (conf/cluster.yaml
    is the one docs/deploy.md submits with)."""
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "topologies").glob("*.yaml"))
    configs = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "conf").glob("*.yaml"))
    assert "conf/cluster.yaml" in configs
    for extra in ([], *(["--config", c] for c in configs)):
        out = sqe("validate", *files, *extra)
        assert out.returncode == 0, out.stderr
        assert out.stdout.count("OK ") == len(files)
        assert "Traceback" not in out.stderr


def test_validate_reports_every_bad_file_and_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- CreateStream: {streamName: S, objectName: t, spoutName: KAFKA}\n"
                   "- Query:\n    insertInto: {objectName: o, stateName: MONGO, fields: [a]}\n"
                   "    select: {expressions: [a]}\n    from: {objectName: S}\n")
    out = sqe("validate", str(bad), "topologies/enrich.yaml")
    assert out.returncode == 2
    assert (f"error: {bad}: command 2 (Query) -> insertInto -> stateName: expected one of "
            "KAFKA, REDIS, POSTGRES, CONSOLE") in out.stderr
    assert "OK topologies/enrich.yaml" in out.stdout
    assert "Traceback" not in out.stderr


def test_validate_conf_errors_and_warnings(tmp_path):
    out = sqe("validate", "topologies/load.yaml", "--conf", "jw.sqe.spout.kafka.filterReplay=true")
    assert out.returncode == 2
    assert "did you mean jw.sqe.spout.kafka.filterReplays?" in out.stderr
    out = sqe("validate", "topologies/load.yaml", "--conf", "novalue")
    assert out.returncode == 2 and "--conf 'novalue': expected key=value" in out.stderr
    out = sqe("validate", "topologies/load.yaml", "--conf", "jw.sqe.parallelism.hint=3")
    assert out.returncode == 0 and "warning: --conf: jw.sqe.parallelism.hint has no effect" in out.stderr
    out = sqe("validate", "topologies/load.yaml", "--config", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "cannot read config file" in out.stderr


def test_options_lists_the_registry():
    out = sqe("options")
    assert out.returncode == 0
    for key in REGISTRY:
        assert key in out.stdout
    assert "jw.sqe.spout.kafka.zkhosts" in out.stdout and "retired" in out.stdout
    md = sqe("options", "--markdown")
    rows = [line for line in md.stdout.splitlines() if line.startswith("| `jw.sqe.")]
    assert len(rows) == len(REGISTRY) + len(CLIENT_PROPERTIES) + 1  # plus retired zkhosts
    assert "| `jw.sqe.spout.kafka.filterReplays.metadata.ttl` | integer >= 1 | `172800` |" in md.stdout


def test_keys_encode_decode_pid():
    out = sqe("keys", "encode", "1234567890123", "7", "42")
    assert out.returncode == 0 and out.stdout.strip() == "0000011f71fb04cb00000007000000000000002a"
    out = sqe("keys", "decode", "0000011f71fb04cb00000007000000000000002a",
              "ffffffffffffffffffffffffffffffffffffffff")
    assert out.stdout.splitlines() == ["pid=1234567890123 partition=7 offset=42",
                                       "pid=-1 partition=-1 offset=-1"]
    out = sqe("keys", "pid", "a", "", "")
    assert out.returncode == 0 and out.stdout.strip() == "584566915021039271"


@pytest.mark.parametrize(
    "args,message",
    [
        (["keys", "decode", "abcd"], "key 'abcd': stream metadata key must be exactly 20 bytes, got 2"),
        (["keys", "decode", "zz"], "key 'zz': non-hexadecimal"),
        (["keys", "encode", "1", "2147483648", "0"], "partition 2147483648 does not fit"),
    ],
)
def test_keys_bad_input_exits_2_with_a_sentence(args, message):
    out = sqe(*args)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr


def test_console_script_is_installed():
    out = subprocess.run([str(Path(sys.executable).parent / "sqe"), "--version"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("sqe ")


@pytest.mark.spark
def test_run_with_a_spark_value_spark_refuses_is_one_sentence_naming_the_file(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("Spark:\n  spark.sql.shuffle.partitions: many\n")
    out = sqe("run", "topologies/hello.yaml", "--config", str(cfg), "--once",
              "--checkpoint", str(tmp_path / "ck"))
    assert out.returncode == 2, out.stderr
    assert (f"error: {cfg} (Spark): spark.sql.shuffle.partitions = 'many': Spark refuses it (it "
            "should be a/an 'int' value)") in out.stderr.splitlines()
    assert "Traceback" not in out.stderr


def test_run_on_a_checkpoint_that_is_a_file_is_refused_before_spark(tmp_path):
    (tmp_path / "afile").write_text("x")
    out = sqe("run", "topologies/hello.yaml", "--once", "--checkpoint", str(tmp_path / "afile"))
    assert (out.returncode, out.stderr) == (2, (
        f"error: topologies/hello.yaml: checkpoint {tmp_path / 'afile'} cannot be a directory: "
        f"{tmp_path / 'afile'} is a file\n"))


@pytest.mark.parametrize("argv,said", [
    (["rn"], "sqe: error: argument COMMAND: invalid choice: 'rn' (did you mean 'run'? choose "
             "from 'validate', 'run', "),
    (["hwm", "shwo"], "sqe hwm: error: argument ACTION: invalid choice: 'shwo' (did you mean "
                      "'show'? choose from 'show', 'rebuild', 'reset')"),
    (["run", "t.yaml", "--checkpiont", "ck"], "sqe run: error: unrecognized arguments: "
                                              "--checkpiont ck (did you mean --checkpoint?)"),
    (["run", "t.yaml", "--onec", "--chekpoint=ck"],
     "sqe run: error: unrecognized arguments: --onec --chekpoint=ck (did you mean --once for "
     "--onec, --checkpoint for --chekpoint=ck?)"),
    (["hwm", "show", "load.Enriched", "--redsi", "redis://h:6379/0"],
     "sqe hwm show: error: unrecognized arguments: --redsi redis://h:6379/0 (did you mean "
     "--redis?)"),
    (["run", "t.yaml", "--zzz"], "sqe run: error: unrecognized arguments: --zzz\n"),
])
def test_a_mistyped_command_or_flag_names_the_closest_one(argv, said, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err


def test_every_argument_of_every_command_has_help_text():
    import argparse

    from sqe.cli.main import _parser

    def bare(parser: argparse.ArgumentParser, path: str) -> list[str]:
        found = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found += bare(sub, f"{path} {name}")
            elif not action.help:
                found.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
        return found

    assert bare(_parser(), "sqe") == []


@pytest.mark.parametrize("session_options,plans", [
    ({}, 1),  # the session carries nothing beyond the config files: validated once
    ({"spark.jw.sqe.spout.kafka.maxRecordsPerBatch": "500"}, 1),  # what the files gave it
    ({"spark.jw.sqe.spout.kafka.maxRecordsPerBatch": "700"}, 2),  # spark-submit --conf: on top
])
def test_sqe_run_validates_once_and_enters_the_api_once(monkeypatch, tmp_path, session_options,
                                                        plans):
    """``sqe run`` followed from the CLI: the topology is validated and the checkpoint settled
    once (sqe.prepare), the run enters the API once with that; only options a session carries
    beyond the config files' (spark-submit's ``--conf spark.jw.sqe.*``) plan it again.  The
    JVM is what is left out: the session and the streaming run are stand-ins that record."""
    from sqe import api
    from sqe.cli import commands
    from sqe.engine.run import planning

    # sqe run's own SIGINT/SIGTERM handlers would outlive the test
    monkeypatch.setattr(commands, "_stop_on_signals", lambda: (threading.Event(), []))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("Spark:\n  spark.jw.sqe.spout.kafka.maxRecordsPerBatch: 500\n")
    planned, runs = [], []
    real_plan = planning.plan_topology

    def plan_topology(*args, **kwargs):
        planned.append(args)
        return real_plan(*args, **kwargs)

    def run_topology(plan, spark, name, checkpoint, mode, runtime, **kwargs):
        runs.append((plan, name, checkpoint, mode))
        return []

    monkeypatch.setattr(planning, "plan_topology", plan_topology)
    monkeypatch.setattr(api, "run_topology", run_topology)
    monkeypatch.setattr(planning, "session_conf", lambda spark: list(session_options.items()))
    monkeypatch.setattr(commands, "build_session", lambda *a, **k: object())
    monkeypatch.setattr(commands, "quiet_failure_traces", lambda spark: None)
    code = main(["run", "topologies/enrich.yaml", "--config", "conf/local.yaml", "--config",
                 str(cfg), "--once", "--progress", "off"])
    assert code == 0
    assert len(planned) == plans
    [(plan, name, checkpoint, mode)] = runs
    assert (name, checkpoint, mode) == ("enrich", str(Path("checkpoints") / "enrich"), "once")
    expected = int(session_options.get("spark.jw.sqe.spout.kafka.maxRecordsPerBatch", "500"))
    assert plan.streams["Events"].max_records == expected


def test_a_prepared_run_keeps_its_own_options(tmp_path):
    """sqe.prepare settles what a run needs without Spark; sqe.run refuses the arguments that
    moved to sqe.prepare in one sentence saying where they go."""
    import sqe

    prepared = sqe.prepare("topologies/enrich.yaml", config=["conf/local.yaml"],
                           checkpoint=tmp_path / "ck")
    assert (prepared.checkpoint, prepared.topology.name) == (str(tmp_path / "ck"), "enrich")
    assert prepared.plan.streams["Events"].brokers
    with pytest.raises(sqe.ArgumentError, match=r"sqe.run: give config=, checkpoint= to "
                                               r"sqe.prepare\(topology, config=, checkpoint=\.\.\.\) "
                                               "and its result to sqe.run"):
        sqe.run(prepared, config=["conf/local.yaml"], checkpoint="elsewhere", once=True)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(sqe.OptionError, match="cannot be a directory"):
        sqe.prepare("topologies/enrich.yaml", checkpoint=tmp_path / "afile")


def test_sqe_pipelines_runs_spark_pipelines_jvm_with_the_fixed_entry_script(monkeypatch):
    from sqe.cli import pipelines

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    command, env = pipelines.spark_pipelines_command(["run", "--spec", "p/spark-pipeline.yml"])
    home = Path(env["SPARK_HOME"])
    assert command[:2] == [str(home / "bin" / "spark-class"),
                           "org.apache.spark.deploy.SparkPipelines"]
    assert Path(command[2]).name == "pipelines_entry.py" and Path(command[2]).is_file()
    assert command[3:] == ["run", "--spec", "p/spark-pipeline.yml"]
    # a local master: the entry script, the server's workers and its planners import the
    # installed pyspark (bytecode cached), not the zip Spark puts first on their path
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == local_worker_python()
    for master in (["--master", "spark://h:7077"], ["--master=yarn"]):
        _, env = pipelines.spark_pipelines_command(["run", *master])
        assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == sys.executable
    _, env = pipelines.spark_pipelines_command(["run", "--master", "local[2]"])
    assert env["PYSPARK_PYTHON"] == local_worker_python()
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")  # the user's choice stays
    _, env = pipelines.spark_pipelines_command(["run"])
    assert env["PYSPARK_PYTHON"] == "/opt/py/bin/python"
    assert str(home / "python") in env["PYTHONPATH"].split(os.pathsep)
    assert any(Path(p).name.startswith("py4j-") for p in env["PYTHONPATH"].split(os.pathsep))


def test_sqe_pipelines_run_removes_what_failed_checkpoint_writes_left_in_its_storage(
        tmp_path, monkeypatch, capsys):
    """A flow's first batch that failed on a full disk leaves Spark's temporary offsets file
    (and its checksum); with them there, every later run of the flow refuses to start
    (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY).  ``sqe pipelines run`` removes them from the
    spec's storage before it starts the pipeline, and leaves Spark's own files alone."""
    from sqe.cli import pipelines

    uuid = "0c0ffee0-1111-2222-3333-444455556666"
    flow = tmp_path / "store" / "_checkpoints" / "sink" / "flow" / "0"
    (flow / "offsets").mkdir(parents=True)
    (flow / "commits").mkdir()
    left = [flow / "offsets" / f".0.{uuid}.tmp", flow / "offsets" / f"..0.{uuid}.tmp.crc",
            flow / f".metadata.{uuid}.tmp"]
    kept = [flow / "metadata", flow / ".metadata.crc", flow / "commits" / "0",
            flow / "offsets" / f".0.{uuid}.tmp.bak"]
    for path in left + kept:
        path.write_text("v1")
    spec = tmp_path / "p" / "spark-pipeline.yml"
    spec.parent.mkdir()
    spec.write_text(f"name: p\nstorage: {(tmp_path / 'store').as_uri()}\n")
    assert pipelines.pipeline_storage(["run", "--spec", str(spec)], tmp_path) == \
        tmp_path / "store"
    assert pipelines.pipeline_storage(["run"], spec.parent / "transformations") == \
        tmp_path / "store"  # found in a parent, as spark-pipelines finds it
    spec.write_text("name: p\nstorage: ../store\n")  # relative: to the spec's directory
    assert pipelines.pipeline_storage(["run", "--spec=p/spark-pipeline.yml"], tmp_path) == \
        tmp_path / "store"
    spec.write_text("name: p\nstorage: s3a://bucket/store\n")
    assert pipelines.pipeline_storage(["run"], spec.parent) is None
    spec.write_text("name: p\nstorage: [")
    assert pipelines.pipeline_storage(["run"], spec.parent) is None  # spark-pipelines says why

    spec.write_text("name: p\nstorage: ../store\n")
    monkeypatch.chdir(spec.parent)
    monkeypatch.setattr(pipelines.os, "execve", lambda *a: None)
    assert pipelines._run(argparse.Namespace(args=["run"])) == 1
    assert [p for p in left + kept if p.exists()] == kept
    said = capsys.readouterr().err
    assert said.startswith("sqe pipelines: removed 3 temporary file(s) that checkpoint writes "
                           "which failed (a full disk, say) left under"), said
    pipelines._run(argparse.Namespace(args=["run"]))
    assert capsys.readouterr().err == ""  # nothing left to say


def test_a_spec_s_storage_path_is_read_beside_the_spec_as_the_file_uri_the_server_takes(
        tmp_path, monkeypatch):
    """pyspark 4.3's pipeline server refuses a storage that is not a URI
    (PIPELINE_STORAGE_ROOT_INVALID), examples/pipeline's ``pipeline-storage`` among them: the
    entry script gives it a path's file URI, relative to the spec's directory."""
    from pyspark.pipelines import cli

    from sqe.cli import pipelines_entry
    from sqe.cli.pipelines import storage_uri

    spec = tmp_path / "my pipeline" / "spark-pipeline.yml"
    assert storage_uri("pipeline-storage", spec) == \
        (tmp_path / "my pipeline" / "pipeline-storage").as_uri()
    assert storage_uri("/srv/p", spec) == "file:///srv/p"
    assert storage_uri("s3a://bucket/p", spec) == "s3a://bucket/p"
    assert storage_uri("file:///srv/p", spec) == "file:///srv/p"
    spec.parent.mkdir()
    spec.write_text("name: p\nstorage: pipeline-storage\n"
                    "libraries:\n  - glob:\n      include: transformations/**\n")
    monkeypatch.setattr(cli, "load_pipeline_spec", cli.load_pipeline_spec)
    pipelines_entry._storage_beside_spec()
    loaded = cli.load_pipeline_spec(spec)
    assert (loaded.name, loaded.storage) == ("p", storage_uri("pipeline-storage", spec))
    assert [g.include for g in loaded.libraries] == ["transformations/**/*"]  # pyspark's own


def test_the_pipelines_entry_script_lets_metrics_pass_beside_a_commands_results(monkeypatch):
    """The fix of SPARK-59135 that `sqe pipelines` applies: observed metrics (every Python data
    source sends some) no longer stop the command's stream; anything else unknown still does."""
    from pyspark.errors import PySparkValueError
    from pyspark.sql.connect.client import core
    from pyspark.sql.metrics import PlanMetrics

    from sqe.cli import pipelines_entry

    client = core.SparkConnectClient
    monkeypatch.setattr(client, "execute_command_as_iterator", client.execute_command_as_iterator)
    pipelines_entry._fixed()

    class Stub:
        def __init__(self, responses: list[object]) -> None:
            self.responses = responses

        def _execute_plan_request_with_metadata(self) -> object:
            return type("Request", (), {"plan": None})()

        def _set_command_in_plan(self, plan: object, command: object) -> None:
            pass

        def _execute_and_fetch_as_iterator(self, req: object, observations: object):  # type: ignore[no-untyped-def]
            yield from self.responses

    observed = core.PlanObservedMetrics("__python_accumulator__", [], [])
    metrics = PlanMetrics("plan", 1, 0, [])
    run = client.execute_command_as_iterator
    assert list(run(Stub([{"a": 1}, observed, metrics, {"b": 2}]), None)) == [{"a": 1}, {"b": 2}]
    with pytest.raises(PySparkValueError, match="UNKNOWN_RESPONSE"):
        list(run(Stub([{"a": 1}, "something else"]), None))


def test_a_pipelines_server_takes_a_free_port_unless_its_run_names_one(monkeypatch):
    """spark-pipelines binds 15002 for every pipeline; `sqe pipelines` asks for a free port
    unless the spec's configuration or spark-pipelines' --conf (which spark-submit hands on as
    PYSPARK_REMOTE_INIT_CONF_<i>) names one.  A whole run with 15002 taken is
    tests/engine/test_pipelines.py."""
    from pyspark.sql.connect.client.core import DefaultChannelBuilder
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from sqe.cli import pipelines_entry

    started: list[dict[str, object]] = []
    monkeypatch.setattr(ConnectSession, "_start_connect_server",
                        staticmethod(lambda master, opts: started.append(dict(opts))))
    monkeypatch.setattr(DefaultChannelBuilder, "default_port", DefaultChannelBuilder.default_port)
    monkeypatch.setenv("PYSPARK_REMOTE_INIT_CONF_LEN", "1")
    monkeypatch.setenv("PYSPARK_REMOTE_INIT_CONF_0", json.dumps({"spark.app.name": "p"}))
    pipelines_entry._own_port()
    given = {"spark.sql.shuffle.partitions": "2"}
    ConnectSession._start_connect_server("local", given)
    assert given == {"spark.sql.shuffle.partitions": "2"}  # set on the session after: no port
    ConnectSession._start_connect_server("local", {pipelines_entry.PORT_OPTION: "15010"})
    monkeypatch.setenv("PYSPARK_REMOTE_INIT_CONF_0",
                       json.dumps({pipelines_entry.PORT_OPTION: "15011"}))
    ConnectSession._start_connect_server("local", {})
    assert [o.get(pipelines_entry.PORT_OPTION) for o in started] == ["0", "15010", None]


def test_a_failed_pipeline_run_ends_in_one_sentence_not_the_clients_traceback(monkeypatch,
                                                                               capsys):
    """pyspark's pipelines command line raises a flow's failure with Spark's streaming query
    dump; `sqe pipelines` says it in one sentence, SQE's own where a flow's SQE part refused."""
    import pyspark.pipelines.cli as pipelines_cli
    from pyspark.errors.exceptions.connect import StreamingQueryException

    from sqe.cli import pipelines_entry

    def failing() -> None:
        raise StreamingQueryException(message=(
            "[STREAM_FAILED] Query [id = q] terminated with exception: Traceback (most recent "
            "call last):\n  File \"sink.py\", line 9, in commit\nsqe.errors.SourceError: cannot "
            "read the HWM store of t.In: refused\n=== Streaming Query ===\nIdentifier: load "
            "[id = q]\nCurrent State: ACTIVE"))

    monkeypatch.setattr(pipelines_entry, "_fixed", lambda: None)
    monkeypatch.setattr(pipelines_entry, "_own_port", lambda: None)
    monkeypatch.setattr(pipelines_cli, "main", failing)
    assert pipelines_entry._run() == 1
    assert capsys.readouterr().err == ("error: the pipeline's run failed: cannot read the HWM "
                                       "store of t.In: refused\n")
    monkeypatch.setattr(pipelines_cli, "main", lambda: None)
    assert pipelines_entry._run() == 0
