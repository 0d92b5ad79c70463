"""Spark settings: the known names are the running Spark's, an unknown ``spark.*`` key is a
warning naming the closest known one (``sqe validate`` still exits 0), keys of the families
Spark passes on are not, and a ``Spark:`` value that is no single value is an error."""

from __future__ import annotations

import pytest

from sqe.cli.main import main
from sqe.config.settings import load_config
from sqe.config.spark_settings import (
    is_spark_setting,
    registered_spark_settings,
    unknown_spark_setting,
)
from sqe.errors import OptionError
from tests.support import ROOT

#: The JVM objects whose loading registers Spark's settings (every object of Spark 4.3's jars
#: that builds a ConfigEntry), loaded before ``ConfigEntry.knownConfigs`` is read.
SETTING_HOLDERS = [
    f"org.apache.spark.internal.config.{name}$"
    for name in ("package", "Deploy", "History", "Kryo", "Network", "Python", "R", "Status",
                 "Streaming", "Tests", "UI", "Worker")
] + [
    "org.apache.spark.sql.internal.SQLConf$", "org.apache.spark.sql.internal.StaticSQLConf$",
    "org.apache.spark.deploy.k8s.Config$", "org.apache.spark.deploy.yarn.config.package$",
    "org.apache.spark.sql.hive.HiveUtils$", "org.apache.spark.sql.connect.config.Connect$",
    "org.apache.spark.streaming.StreamingConf$",
    "org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager$",
]


def _running_sparks_settings(spark) -> set[str]:
    """Every setting the running Spark registers, with the old names it still reads."""
    jvm = spark.sparkContext._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()

    def scala_object(name: str):
        return jvm.java.lang.Class.forName(name, True, loader).getField("MODULE$").get(None)

    for holder in SETTING_HOLDERS:
        scala_object(holder)
    names: set[str] = set()
    for entry in list(scala_object("org.apache.spark.internal.config.ConfigEntry$")
                      .knownConfigs().values()):
        names.add(entry.key())
        names.update(n for n in entry.alternatives().mkString("\n").split("\n") if n)
    spark_conf = jvm.java.lang.Class.forName("org.apache.spark.SparkConf$", True, loader)
    field = spark_conf.getDeclaredField("allAlternatives")  # SparkConf's renamed settings
    field.setAccessible(True)
    renamed = field.get(spark_conf.getField("MODULE$").get(None)).keySet().mkString("\n")
    names.update(n for n in renamed.split("\n") if n)
    return names


@pytest.mark.spark
def test_the_setting_names_are_the_running_sparks(spark):
    names = _running_sparks_settings(spark)
    kept = registered_spark_settings()
    assert names - kept == set(), "new in this Spark: add them to sqe/config/data/spark-settings.txt"
    assert kept - names == set(), "gone from this Spark: drop them from spark-settings.txt"
    data = (ROOT / "sqe/config/data/spark-settings.txt").read_text().splitlines()
    listed = [line for line in data if line and not line.startswith("#")]
    assert listed == sorted(set(listed)), "spark-settings.txt: one name per line, sorted"


@pytest.mark.parametrize(
    "key",
    ["spark.sql.shuffle.partitions", "spark.master", "spark.app.name", "spark.local.dir",
     "spark.driver.extraJavaOptions", "spark.hadoop.fs.s3a.endpoint", "spark.hive.metastore.uris",
     "spark.executorEnv.REDIS_PASSWORD", "spark.sql.catalog.lake",
     "spark.sql.catalog.lake.warehouse", "spark.kubernetes.driver.label.team",
     "spark.executor.resource.gpu.amount", "spark.ssl.ui.enabled", "spark.shuffle.io.maxRetries",
     "spark.sql.streaming.stateStore.rocksdb.compactOnCommit", "spark.yarn.executor.memoryOverhead",
     "spark.jw.sqe.spout.kafka.filterReplays"],
)
def test_known_settings_and_families_do_not_warn(key):
    assert is_spark_setting(key)
    assert unknown_spark_setting(key, "c.yaml (Spark)") is None


@pytest.mark.parametrize(
    "key,warning",
    [
        ("spark.sql.shuffle.partition", "is not a known Spark setting; did you mean "
                                        "spark.sql.shuffle.partitions?"),
        ("spark.ui.enable", "is not a known Spark setting; did you mean spark.ui.enabled?"),
        ("spark.Master", "is not a known Spark setting; did you mean spark.master?"),
        ("spark.hadoop.", "is not a known Spark setting; Spark ignores it unless a plugin reads it"),
        ("spark.cassandra.connection.host", "is not a known Spark setting; Spark ignores it "
                                            "unless a plugin reads it"),
        ("sql.shuffle.partitions", "is not a Spark setting (they start with spark.), so Spark "
                                   "ignores it; did you mean spark.sql.shuffle.partitions?"),
    ],
)
def test_unknown_settings_warn_naming_the_closest(key, warning):
    assert unknown_spark_setting(key, "c.yaml (Spark)") == f"c.yaml (Spark): {key} {warning}"


def _validate(capsys, *args: str) -> tuple[int, str]:
    code = main(["validate", str(ROOT / "topologies" / "hello.yaml"), *args])
    return code, capsys.readouterr().err


def test_validate_warns_about_a_misspelt_spark_setting_and_exits_0(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("Spark:\n  spark.sql.shuffle.partition: 4\n  spark.hadoop.fs.defaultFS: x\n"
                   "  spark.executorEnv.A: b\n  spark.ui.enabled: false\n")
    code, err = _validate(capsys, "--config", str(cfg))
    assert code == 0
    assert err.splitlines() == [f"warning: {cfg} (Spark): spark.sql.shuffle.partition is not a "
                                "known Spark setting; did you mean spark.sql.shuffle.partitions?"]


def test_spark_settings_among_options_are_ignored_and_say_where_they_belong(tmp_path, capsys):
    topology = tmp_path / "t.yaml"
    topology.write_text("- Set: {key: spark.sql.shuffle.partition, value: 4}\n"
                        + (ROOT / "topologies" / "hello.yaml").read_text())
    code = main(["validate", str(topology), "--conf", "spark.ui.enabled=false"])
    err = capsys.readouterr().err
    assert code == 0
    belongs = ("is a Spark setting, which SQE takes only from a config file's Spark: section (or "
               "spark-submit --conf), so it is ignored here")
    assert f"warning: --conf: spark.ui.enabled {belongs}\n" in err
    assert (f"warning: {topology}: command 1 (Set): spark.sql.shuffle.partition {belongs}; Spark "
            "does not know it either: did you mean spark.sql.shuffle.partitions?") in err


@pytest.mark.parametrize(
    "section,error",
    [
        ("  spark.sql.shuffle.partitions: [2]\n", "(Spark): spark.sql.shuffle.partitions = [2]: "
         "expected a string, number or boolean (Spark settings are single values)"),
        ("  spark.ui.enabled: {a: 1}\n", "(Spark): spark.ui.enabled = {'a': 1}: expected a "
         "string, number or boolean (Spark settings are single values)"),
        ("  spark.ui.enabled: null\n", "(Spark): spark.ui.enabled: null is not a value; expected "
         "a string, number or boolean; leave the key out for Spark's default"),
        ("  1: 2\n", "(Spark): the key 1 is not a string; Spark settings are named like "
                     "spark.sql.shuffle.partitions"),
        ("  spark.jw.sqe.spout.kafka.filterReplay: true\n", "(Spark): unknown option "
         "jw.sqe.spout.kafka.filterReplay; did you mean jw.sqe.spout.kafka.filterReplays?"),
    ],
)
def test_spark_values_that_are_no_single_value_are_errors_naming_the_file(tmp_path, section,
                                                                           error):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("Spark:\n" + section)
    with pytest.raises(OptionError) as info:
        load_config(cfg)
    assert str(info.value) == f"{cfg} {error}"


def test_a_section_that_is_false_is_not_taken_for_empty(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("SQE: false\n")
    with pytest.raises(OptionError, match="section SQE must be a map of key: value"):
        load_config(cfg)
