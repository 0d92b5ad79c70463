"""Option registry, coercion and the precedence of option sources."""

from __future__ import annotations

import pytest

from sqe.api import load_topology, validate
from sqe.config.options import coerce, render
from sqe.config.plan import plan_topology
from sqe.config.registry import REGISTRY, RETIRED, lookup, suggest
from sqe.config.settings import Settings, load_config, parse_conf_pairs, spark_conf_options
from sqe.errors import OptionError, RefusedOption, TopologyError

REQUIRED_SQE_KEYS = {
    "jw.sqe.spout.kafka.filterReplays": False,
    "jw.sqe.spout.kafka.filterReplays.metadata.ttl": 172800,
    "jw.sqe.state.kafka.keytype": "messagehash",
    "jw.sqe.state.kafka.partitionClass": None,
    "jw.sqe.state.kafka.brokers": ["localhost:9092"],
    "jw.sqe.state.redis.host": "localhost",
    "jw.sqe.state.redis.port": 6379,
    "jw.sqe.state.redis.database": 0,
    "jw.sqe.state.redis.datatype": "STRING",
    "jw.sqe.state.redis.keyname.fields": [],
    "jw.sqe.state.redis.fieldname.fields": [],
    "jw.sqe.state.redis.delimiter": ":",
    "jw.sqe.state.redis.expireintervalsec": 0,
    "jw.sqe.spout.kafka.brokers": ["localhost:9092"],
    "jw.sqe.spout.kafka.startingOffsets": "earliest",
    "jw.sqe.spout.kafka.maxRecordsPerBatch": None,
    "jw.sqe.spout.kafka.filterReplays.redis.url": "redis://localhost:6379/0",
    "jw.sqe.pid": None,
}


def test_registry_declares_every_required_key_with_its_default():
    for key, default in REQUIRED_SQE_KEYS.items():
        assert key in REGISTRY, key
        assert REGISTRY[key].default == default, key
    for option in REGISTRY.values():
        assert option.key.startswith("jw.sqe.") and option.doc.strip(), option.key


@pytest.mark.parametrize("raw", ["StreamMetadata", "STREAMMETADATA", "streammetadata"])
def test_keytype_matches_case_insensitively(raw):
    assert coerce(REGISTRY["jw.sqe.state.kafka.keytype"], raw, "x") == "streammetadata"


@pytest.mark.parametrize(
    "key,raw,expected",
    [
        ("jw.sqe.spout.kafka.filterReplays", "TRUE", True),
        ("jw.sqe.spout.kafka.filterReplays", False, False),
        ("jw.sqe.spout.kafka.maxRecordsPerBatch", "5000", 5000),
        ("jw.sqe.state.redis.port", "6380", 6380),  # SQE parsed the port from a string
        ("jw.sqe.spout.kafka.brokers", "a:1, b:2,", ["a:1", "b:2"]),
        ("jw.sqe.spout.kafka.brokers", ["a:1"], ["a:1"]),
        ("jw.sqe.spout.kafka.brokers", "[a:1, b:2]", ["a:1", "b:2"]),
        ("jw.sqe.spout.fixed.values", "[[1, x], [2, y]]", [[1, "x"], [2, "y"]]),
        ("jw.sqe.state.redis.datatype", "hash", "HASH"),
        ("jw.sqe.spout.kafka.brokers", ["[::1]:9092", "SASL_SSL://k.example:9093"],
         ["[::1]:9092", "SASL_SSL://k.example:9093"]),
        ("jw.sqe.spout.fields", {"id": "string", "amount": "decimal(10, 2)"},
         {"id": "string", "amount": "decimal(10, 2)"}),
        ("jw.sqe.spout.fields", "{id: string, n: bigint}", {"id": "string", "n": "bigint"}),
        ("jw.sqe.spout.fields", ["id", "n"], {"id": None, "n": None}),
        ("jw.sqe.spout.fields", "id, n", {"id": None, "n": None}),
    ],
)
def test_coercion_accepts_typed_and_string_spellings(key, raw, expected):
    assert coerce(REGISTRY[key], raw, "x") == expected
    assert coerce(REGISTRY[key], render(REGISTRY[key], expected), "x") == expected


@pytest.mark.parametrize(
    "key,raw,text",
    [
        ("jw.sqe.spout.kafka.filterReplays", "yes", "expected true or false"),
        ("jw.sqe.spout.kafka.filterReplays", 1, "expected true or false"),
        ("jw.sqe.spout.kafka.maxRecordsPerBatch", "abc", "expected an integer"),
        ("jw.sqe.spout.kafka.maxRecordsPerBatch", True, "expected an integer"),
        ("jw.sqe.spout.kafka.maxRecordsPerBatch", 0, "expected an integer >= 1"),
        ("jw.sqe.state.kafka.keytype", "uuid", "expected one of messagehash, field, streammetadata"),
        ("jw.sqe.spout.kafka.brokers", [1, 2], "expected a list of strings"),
        ("jw.sqe.state.redis.delimiter", 5, "expected a string"),
        ("jw.sqe.spout.kafka.filterReplays.redis.url", "localhost:6379", "redis://"),
        ("jw.sqe.state.kafka.partitionClass", "nope.Nope", "cannot import module 'nope'"),
        ("jw.sqe.spout.kafka.brokers", "%s", "broker '%s' is not host:port (e.g. kafka-1:9092)"),
        ("jw.sqe.state.kafka.brokers", "a:1,b", "broker 'b' is not host:port"),
        ("jw.sqe.state.kafka.brokers", ["a:99999"], "broker 'a:99999' is not host:port"),
        ("jw.sqe.spout.fields", {"amount": "bigitn"},
         "field amount: bigitn is not a Spark SQL type; did you mean bigint?"),
        ("jw.sqe.spout.fields", [1], "expected a map of field name: Spark SQL type"),
    ],
)
def test_wrong_types_name_key_value_and_origin(key, raw, text):
    with pytest.raises(OptionError) as info:
        coerce(REGISTRY[key], raw, "conf/x.yaml (SQE)")
    message = str(info.value)
    assert message.startswith(f"conf/x.yaml (SQE): {key} = {raw!r}: ")
    assert text in message


@pytest.mark.parametrize(
    "typo,expected",
    [
        ("jw.sqe.spout.kafka.filterReplay", "jw.sqe.spout.kafka.filterReplays"),
        ("jw.sqe.spout.kafka.filterreplays", "jw.sqe.spout.kafka.filterReplays"),
        ("jw.sqe.state.redis.hots", "jw.sqe.state.redis.host"),
        ("jw.sqe.state.kafka.keyType", "jw.sqe.state.kafka.keytype"),
        ("jw.sqe.spout.kafka.maxRecordPerBatch", "jw.sqe.spout.kafka.maxRecordsPerBatch"),
    ],
)
def test_unknown_key_suggests_the_closest(typo, expected):
    assert suggest(typo) == expected
    with pytest.raises(OptionError, match=f"--conf: unknown option {typo}; did you mean {expected}"):
        lookup(typo, "--conf")


def test_unknown_key_without_a_close_match_points_at_sqe_options():
    with pytest.raises(OptionError, match="run 'sqe options'"):
        lookup("jw.sqe.completely.different", "--conf")


def test_zkhosts_is_rejected_with_the_replacement():
    assert "jw.sqe.spout.kafka.zkhosts" in RETIRED
    with pytest.raises(OptionError, match="set jw.sqe.spout.kafka.brokers"):
        Settings.defaults().overlay({"jw.sqe.spout.kafka.zkhosts": ["zk:2181"]}, "f.json")


def test_settings_are_immutable_and_know_their_origin():
    s = Settings.defaults()
    t = s.overlay({"jw.sqe.state.redis.port": 7000}, "one")
    assert s["jw.sqe.state.redis.port"] == 6379 and t["jw.sqe.state.redis.port"] == 7000
    assert t.origin("jw.sqe.state.redis.port") == "one"
    assert t.origin("jw.sqe.state.redis.host") == "default"
    with pytest.raises(TypeError):
        t["jw.sqe.state.redis.port"] = 1  # type: ignore[index]
    assert t.explicit() == {"jw.sqe.state.redis.port": 7000}


def test_overlay_each_checks_every_key_applies_the_good_ones_and_remembers_the_refused():
    values = {"jw.sqe.spout.kafka.filterReplay": True, "jw.sqe.spout.kafka.filterReplays": "maybe",
              "jw.sqe.spout.kafka.brokers": "k:9092"}
    s, problems = Settings.defaults().overlay_each(values, "o")
    assert problems == [
        "o: unknown option jw.sqe.spout.kafka.filterReplay; did you mean "
        "jw.sqe.spout.kafka.filterReplays?",
        "o: jw.sqe.spout.kafka.filterReplays = 'maybe': expected true or false"]
    assert s["jw.sqe.spout.kafka.brokers"] == ["k:9092"]
    with pytest.raises(RefusedOption):  # not its default: the value given was refused
        s["jw.sqe.spout.kafka.filterReplays"]
    above = s.overlay({"jw.sqe.spout.kafka.filterReplays": True}, "p")  # a layer above sets it
    assert above["jw.sqe.spout.kafka.filterReplays"] is True
    with pytest.raises(OptionError) as info:  # overlay refuses the layer at its first bad key
        Settings.defaults().overlay(values, "o")
    assert str(info.value) == problems[0]


def test_foreign_and_ignored_keys_are_reported_not_applied():
    s = Settings.defaults().overlay({"a": "b", "jw.sqe.parallelism.hint": 4}, "f.json")
    warnings = s.warnings()
    assert any("a is not a jw.sqe.* option" in w for w in warnings)
    assert any("jw.sqe.parallelism.hint has no effect on Spark" in w for w in warnings)


def test_config_file_sections(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("Storm:\n  topology.workers: 1\nSQE:\n  jw.sqe.state.redis.database: 1\n"
                   "Spark:\n  spark.sql.shuffle.partitions: 3\n  spark.ui.enabled: false\n")
    loaded = load_config(cfg)
    assert loaded.sqe == {"jw.sqe.state.redis.database": 1}
    assert loaded.spark == {"spark.sql.shuffle.partitions": "3", "spark.ui.enabled": "false"}


@pytest.mark.parametrize(
    "text,error",
    [
        ("- a\n", "must be a map"),
        ("Flink: {}\n", "unknown section(s) Flink"),
        ("SQE: [1]\n", "section SQE must be a map"),
        ("SQE:\n  jw.sqe.state.redis.prot: 1\n", "did you mean jw.sqe.state.redis.port"),
        ("SQE: {a: [\n", "not valid YAML"),
    ],
)
def test_config_file_errors_name_the_file(tmp_path, text, error):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    with pytest.raises(OptionError) as info:
        load_config(cfg)
    assert str(cfg) in str(info.value) and error in str(info.value)


def test_config_file_syntax_errors_are_one_line_with_line_and_column(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("SQE:\n  jw.sqe.state.redis.port: 6379\nSpark:\n  spark.ui.enabled: [false\n")
    with pytest.raises(OptionError) as info:
        load_config(cfg)
    assert str(info.value) == (f"{cfg}:5:1: not valid YAML: expected ',' or ']', but got the end "
                               "of the text (while parsing a flow sequence at line 4, column 21)")
    cfg.write_bytes(b"SQE:\n  jw.sqe.state.redis.host: h\xe9\n")
    with pytest.raises(OptionError) as info:
        load_config(cfg)
    assert str(info.value) == (f"{cfg}:2:29: not UTF-8 text: byte 0xe9 (invalid continuation "
                               "byte)")


@pytest.mark.parametrize(
    "key,raw,message",
    [
        ("jw.sqe.spout.fixed.values", "[[1, 2], [3", "not valid YAML/JSON: expected ',' or ']', "
         "but got the end of the text (while parsing a flow sequence at line 1, column 10), at "
         "column 12 of the value"),
        ("jw.sqe.state.kafka.filterValue", "{sql: a, b: [}", "not valid YAML/JSON: expected the "
         "node content, but found '}' (while parsing a flow node), at column 14 of the value"),
        ("jw.sqe.spout.kafka.startingOffsets", '{"0": 1', 'expected earliest, latest or JSON '
         'like {"0": 42} (not valid JSON: expecting \',\' delimiter, at column 8)'),
        ("jw.sqe.spout.kafka.startingOffsets", '{"0": 1e400}', 'expected earliest, latest or '
         'JSON like {"0": 42} (partition 0: offset inf is not an offset >= 0)'),
    ],
)
def test_inline_structured_values_that_do_not_parse_say_where(key, raw, message):
    with pytest.raises(OptionError) as info:
        coerce(REGISTRY[key], raw, "--conf")
    assert str(info.value) == f"--conf: {key} = {raw!r}: {message}"


def test_missing_config_file_is_a_clear_error(tmp_path):
    with pytest.raises(OptionError, match="cannot read config file"):
        load_config(tmp_path / "nope.yaml")


def test_conf_pairs_and_spark_conf():
    assert parse_conf_pairs(["a=b=c", "k= v"]) == {"a": "b=c", "k": " v"}
    with pytest.raises(OptionError, match="expected key=value"):
        parse_conf_pairs(["novalue"])
    conf = {"spark.jw.sqe.pid": "5", "spark.app.name": "x", "jw.sqe.pid": "6"}
    assert spark_conf_options(conf) == {"jw.sqe.pid": "5"}


PRECEDENCE_TOPOLOGY = """
- Set: {key: jw.sqe.spout.kafka.maxRecordsPerBatch, value: 20}
- CreateStream:
    streamName: S
    objectName: topic
    spoutName: KAFKA
    options: {OPTS}
- Set: {key: jw.sqe.spout.kafka.maxRecordsPerBatch, value: 30}
- CreateStream: {streamName: T, objectName: topic2, spoutName: KAFKA}
- Query:
    insertInto: {objectName: out, fields: [x]}
    select: {expressions: [_value]}
    from: {objectName: S}
"""

KEY = "jw.sqe.spout.kafka.maxRecordsPerBatch"


@pytest.mark.parametrize(
    "opts,conf,spark,expected,origin",
    [
        ("{}", {}, {}, 20, "command 1 (Set)"),
        (f"{{{KEY}: 40}}", {}, {}, 40, "command 2 (CreateStream) -> options"),
        (f"{{{KEY}: 40}}", {KEY: "50"}, {}, 50, "--conf"),
        (f"{{{KEY}: 40}}", {KEY: "50"}, {KEY: "60"}, 60, "Spark conf"),
    ],
)
def test_precedence_of_sources(tmp_path, opts, conf, spark, expected, origin):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"SQE:\n  {KEY}: 10\n  jw.sqe.spout.kafka.clientid: from-config\n")
    topo = tmp_path / "t.yaml"
    topo.write_text(PRECEDENCE_TOPOLOGY.replace("{OPTS}", opts))
    plan = plan_topology(load_topology(topo), [load_config(cfg)], conf, spark)
    s = plan.streams["S"].settings
    assert s[KEY] == expected and origin in s.origin(KEY)
    assert s["jw.sqe.spout.kafka.clientid"] == "from-config"
    # A Set applies to the commands after it: stream T sees the second Set.
    if not conf and not spark:
        assert plan.streams["T"].settings[KEY] == 30


def test_config_below_set_commands(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"SQE:\n  {KEY}: 10\n")
    topo = tmp_path / "t.yaml"
    topo.write_text(PRECEDENCE_TOPOLOGY.replace("{OPTS}", "{}"))
    plan = plan_topology(load_topology(topo), [load_config(cfg)])
    assert plan.streams["S"].settings[KEY] == 20


def test_bad_conf_is_reported_once_with_its_origin(tmp_path):
    topo = tmp_path / "t.yaml"
    topo.write_text(PRECEDENCE_TOPOLOGY.replace("{OPTS}", "{}"))
    with pytest.raises(TopologyError) as info:
        plan_topology(load_topology(topo), conf={KEY: "many"})
    assert info.value.messages == [f"--conf: {KEY} = 'many': expected an integer >= 1"]


def test_expression_options_parse_fields_trees_and_sql():
    from sqe.lang.expressions import Field, Function, Sql

    opt = REGISTRY["jw.sqe.state.kafka.filterValue"]
    assert coerce(opt, "region", "--conf") == Field("region")
    assert coerce(opt, '{sql: "upper(region)"}', "--conf") == Sql("upper(region)")
    assert isinstance(coerce(opt, {"=": ["region", "eu"]}, "file"), Function)
    with pytest.raises(OptionError, match=r"--conf: jw.sqe.spout.kafka.postFilter = .*"):
        coerce(REGISTRY["jw.sqe.spout.kafka.postFilter"], {"a": 1, "b": 2}, "--conf")
    with pytest.raises(OptionError, match="expected 16..255 bytes"):
        coerce(REGISTRY["jw.sqe.state.kafka.filterSizeBytes"], 256, "x")


def _problems(tmp_path, topology: str, **conf: str) -> str:
    """The problems ``sqe validate`` finds in a topology file holding ``topology``."""
    path = tmp_path / "t.yaml"
    path.write_text(topology)
    with pytest.raises(TopologyError) as err:
        validate(path, conf=conf)
    return str(err.value)


def test_chunk_options_are_checked_together(tmp_path):
    text = _problems(tmp_path, """
- CreateStream: {streamName: S, objectName: t, spoutName: KAFKA,
    options: {jw.sqe.spout.kafka.corruptChunkPolicy: deadletter}}
- Query:
    insertInto: {objectName: o, stateName: KAFKA, fields: [a],
                 options: {jw.sqe.state.kafka.chunking: true}}
    select: {expressions: [a]}
    from: {objectName: S}
""")
    assert "corruptChunkPolicy deadletter needs jw.sqe.spout.kafka.deadLetterTopic" in text
    assert "chunking keys each chunk by the StreamMetadata of its last message" in text


def test_post_filters_and_native_readers_are_checked_before_spark(tmp_path):
    text = _problems(tmp_path, """
- CreateStream: {streamName: A, objectName: t, spoutName: KAFKA,
    options: {jw.sqe.spout.kafka.postFilter: {sql: "region = 'eu'"}}}
- CreateStream: {streamName: B, objectName: t, spoutName: KAFKA,
    options: {jw.sqe.spout.kafka.postFilter: {"=": [region, {C: eu}]}}}
- CreateStream: {streamName: C, objectName: t, spoutName: KAFKA,
    options: {jw.sqe.spout.kafka.chunks: true, jw.sqe.spout.kafka.format: native}}
- CreateStream: {streamName: D, objectName: t, spoutName: KAFKA,
    options: {jw.sqe.spout.kafka.postFilter: {Hash: [_filter_value]}}}
- Query:
    insertInto: {objectName: o, stateName: CONSOLE, fields: [a]}
    select: {expressions: [a]}
    from: {objectName: A}
""", **{"jw.sqe.spout.kafka.brokers": "k:9092"})
    assert "a post-filter runs inside the source, before Spark, so it cannot be a Spark SQL" in text
    assert "a post-filter sees the source's record columns (_key, _value" in text
    assert "jw.sqe.spout.kafka.chunks run(s) in SQE's own Kafka source" in text
    assert "function hash cannot run in a post-filter; it may call and, or" in text


def test_fixed_streams_do_not_filter_replays_and_postgres_takes_no_aggregates(tmp_path):
    text = _problems(tmp_path, """
- CreateStream: {streamName: F, objectName: f, spoutName: FIXED,
    options: {jw.sqe.spout.fixed.fields: [a], jw.sqe.spout.fixed.values: [[1]],
              jw.sqe.spout.kafka.filterReplays: true}}
- Query:
    insertInto: {objectName: t, stateName: POSTGRES, fields: [a, s],
                 options: {jw.sqe.state.postgres.dsn: "postgresql://x"}}
    select: {expressions: [a, {Sum: [a]}]}
    from: {objectName: F}
""")
    assert "a FIXED stream has none" in text
    assert "merges into a REDIS or KAFKA state, not POSTGRES" in text
