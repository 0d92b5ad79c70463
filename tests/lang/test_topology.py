"""Topology files: SQE command files load unchanged; malformed files fail with located errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sqe.api import load_topology, validate
from sqe.config.plan import plan_topology
from sqe.errors import TopologyError
from sqe.lang.expressions import (
    Constant,
    Field,
    Function,
    Sql,
    output_name,
    parse_expression,
    to_raw,
)
from sqe.lang.functions import known_function_names
from sqe.lang.topology import CreateStream, Query, SetCommand, read_topology
from tests.support import DATA, ROOT


def test_sqe_replay_file_loads_unchanged():
    t = load_topology(DATA / "sqe_kafka_replays.json")
    assert [type(c) for c in t.commands] == [CreateStream, Query, Query]
    stream, middle, dest = t.commands
    assert stream.spoutName == "KAFKA" and stream.spoutType == "OPAQUE"
    assert stream.deserializer == "identity"
    assert middle.insertInto.stateName is None and middle.select.expressions == [Field("_value")]
    assert dest.from_.objectName == "middle" and dest.insertInto.stateName == "KAFKA"
    plan = plan_topology(t)
    s = plan.streams["Source"].settings
    assert s["jw.sqe.spout.kafka.filterReplays"] is True
    assert s["jw.sqe.spout.kafka.clientid"] == "replay-test"
    state = plan.state_settings(dest).settings
    assert state["jw.sqe.state.kafka.keytype"] == "streammetadata"
    assert state["jw.sqe.state.kafka.partitionClass"].endswith("SourcePartitionPartitioner")


def test_sqe_complex_query_file_loads_unchanged():
    t = load_topology(DATA / "sqe_complex_query.json")
    assert isinstance(t.commands[0], SetCommand) and isinstance(t.commands[-1], SetCommand)
    q = t.queries[0]
    date, token, hll, total = q.select.expressions
    assert output_name(date) == "formatdate(parsedate(DateString,yyyy-MM-dd HH:mm),yyyy-MM-dd)"
    assert token == Field("AccountToken")
    assert hll == Function("createhll", (Field("UserName"),))
    assert total == Function("sum", (Field("HappyDanceCount"),))
    # SQE writes 0.0 and false as bare JSON constants
    assert q.where.args[1] == Function(
        "or", (Function(">", (Field("HappyDanceCount"), Constant(0.0))), Constant(False))
    )
    plan = plan_topology(t)
    s = plan.state_settings(q).settings
    assert s["jw.sqe.state.redis.host"] == "localhost"  # from the Set before the query
    assert s["jw.sqe.state.redis.database"] == 3 and s["jw.sqe.state.redis.datatype"] == "HASH"
    assert any("a is not a jw.sqe.* option" in w for w in plan.warnings)


def test_the_original_zkhosts_file_is_told_what_to_use_instead(tmp_path):
    raw = json.loads((DATA / "sqe_kafka_replays.json").read_text())
    options = raw[0]["CreateStream"]["options"]
    options["jw.sqe.spout.kafka.zkhosts"] = options.pop("jw.sqe.spout.kafka.brokers")
    path = tmp_path / "kafka-replays.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(TopologyError) as info:
        plan_topology(load_topology(path))
    assert info.value.messages == [
        f"{path}: command 1 (CreateStream) -> options: jw.sqe.spout.kafka.zkhosts is no longer "
        "supported: ZooKeeper hosts are not used on Spark; set jw.sqe.spout.kafka.brokers "
        "to the Kafka bootstrap servers instead"
    ]


@pytest.mark.parametrize("path", sorted((ROOT / "topologies").glob("*.yaml")))
def test_shipped_topologies_are_valid(path):
    plan = plan_topology(load_topology(path))
    assert plan.topology.streams and plan.topology.queries


def test_shipped_topologies_form_the_replay_chain():
    enrich = plan_topology(load_topology(ROOT / "topologies" / "enrich.yaml"))
    load = plan_topology(load_topology(ROOT / "topologies" / "load.yaml"))
    writer = enrich.topology.queries[0]
    state = enrich.state_settings(writer).settings
    assert state["jw.sqe.state.kafka.keytype"] == "streammetadata"
    assert state["jw.sqe.state.kafka.partitionClass"].endswith("SourcePartitionPartitioner")
    reader = load.topology.streams[0]
    assert reader.objectName == writer.insertInto.objectName
    assert load.streams[reader.streamName].settings["jw.sqe.spout.kafka.filterReplays"] is True


def _write(tmp_path, text: str, name: str = "t.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


STREAM = "- CreateStream: {streamName: S, objectName: topic, spoutName: KAFKA}\n"
QUERY = ("- Query:\n    insertInto: {objectName: out, fields: [a]}\n"
         "    select: {expressions: [a]}\n    from: {objectName: S}\n")


@pytest.mark.parametrize(
    "body,message",
    [
        (STREAM + "- Query:\n    insertInto: {objectName: o, stateName: MONGO, fields: [a]}\n"
                  "    select: {expressions: [a]}\n    from: {objectName: S}\n",
         "command 2 (Query) -> insertInto -> stateName: expected one of KAFKA, REDIS, POSTGRES, "
         "CONSOLE"),
        (STREAM + "- Query:\n    insertInto: {objectName: o, fields: [a]}\n"
                  "    select: {expressions: [a]}\n",
         "command 2 (Query) -> from: is required"),
        (STREAM + "- Query:\n    insertInto: {objectName: o, fields: [a], stateNmae: KAFKA}\n"
                  "    select: {expressions: [a]}\n    from: {objectName: S}\n",
         "command 2 (Query) -> insertInto -> stateNmae: is not a known field (expected "
         "objectName, stateName, stateType, fields, options)"),
        (STREAM + "- Query:\n    insertInto: {objectName: o, fields: [a]}\n"
                  "    select: {expressions: [{Frobnicate: [a]}]}\n    from: {objectName: S}\n",
         "command 2 (Query) -> select -> expression 1: unknown function Frobnicate; known "
         "functions: +, -"),
        (STREAM + "- Query:\n    insertInto: {objectName: o, fields: [a]}\n"
                  "    select: {expressions: [{If: [a, {C: 1}]}]}\n    from: {objectName: S}\n",
         "command 2 (Query) -> select -> expression 1 -> if: if takes 3 argument(s), got 2"),
        (STREAM + "- Query:\n    insertInto: {objectName: o, fields: [a]}\n"
                  "    select: {expressions: [{formatdate: [{parsedate: [a, {C: [1]}]}, "
                  "{C: x}]}]}\n    from: {objectName: S}\n",
         "command 2 (Query) -> select -> expression 1 -> formatdate -> argument 1 -> "
         "parsedate -> argument 2 -> C: a constant must be a string, number, boolean or null"),
        ("- CreateStream: {streamName: S, objectName: t, spoutName: KAFKA, spoutType: EAGER}\n"
         + QUERY,
         "command 1 (CreateStream) -> spoutType: expected one of TRANSACTIONAL, OPAQUE, "
         "NON_TRANSACTIONAL"),
        ("- CreateStream: {streamName: S, objectName: t, spoutName: KAFKA, deserializer: thrift}\n"
         + QUERY,
         "command 1 (CreateStream) -> deserializer: expected one of identity, json, avro, "
         "protobuf"),
        ("- CreateStream: {streamName: S, objectName: t}\n" + QUERY,
         "command 1 (CreateStream) -> spoutName: is required"),
        (STREAM + "- Select: {}\n", "command 2: unknown command Select; expected Set, "
                                     "CreateStream or Query"),
        (STREAM + "- {Set: {key: a, value: 1}, Query: {}}\n",
         "command 2: expected a map with exactly one key"),
        ("Set: {key: a, value: b}\n", "a topology file must be a list of commands"),
        (STREAM + QUERY.replace("from: {objectName: S}", "from: {objectName: Nope}"),
         "command 2 (Query) -> from -> objectName: no stream named Nope before this query "
         "(known: S)"),
        (STREAM + QUERY.replace("fields: [a]", "fields: [a, b]"),
         "command 2 (Query) -> insertInto -> fields: 2 field name(s) for 1 selected "
         "expression(s)"),
        (STREAM + QUERY.replace("from: {objectName: S}",
                                "from: {objectName: S}\n    where: {Sum: [a]}"),
         "command 2 (Query) -> where: an aggregation cannot be used in where"),
        (STREAM, "no Query command"),
        (QUERY, "no CreateStream command"),
        (STREAM + STREAM + QUERY, "command 2 (CreateStream) -> streamName: S is already defined"),
        (STREAM.replace("spoutName: KAFKA", "spoutName: KAFKA, options: [1]") + QUERY,
         "command 1 (CreateStream) -> options: expected a map of key: value"),
        # lists are numbered from 1 everywhere, as commands and arguments are
        (STREAM + QUERY.replace("fields: [a]", "fields: [a, [b]]").replace(
            "expressions: [a]", "expressions: [a, a]"),
         "command 2 (Query) -> insertInto -> field 2: expected a string"),
    ],
)
def test_malformed_topologies_name_file_command_and_path(tmp_path, body, message):
    path = _write(tmp_path, body)
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ")
    assert message in text, text


def test_a_command_that_does_not_load_hides_nothing_else(tmp_path):
    """Each command is checked, and so are the checks across commands: a command that does
    not load is skipped by them (the stream it names counts as there, and the stream a query
    reads is still checked), and the others keep their place in the file."""
    path = _write(tmp_path, STREAM.replace("KAFKA", "KAFKA, spoutType: EAGER") + QUERY
                  + QUERY.replace("[a]}\n    from: {objectName: S}",
                                  "[{Frobnicate: [a]}]}\n    from: {objectName: Nope}")
                  + QUERY.replace("fields: [a]", "fields: [a, b]"))
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert info.value.messages == [
        f"{path}: command 1 (CreateStream) -> spoutType: expected one of TRANSACTIONAL, OPAQUE, "
        "NON_TRANSACTIONAL",
        f"{path}: command 3 (Query) -> select -> expression 1: unknown function Frobnicate; "
        "known functions: " + ", ".join(known_function_names()),
        f"{path}: command 3 (Query) -> from -> objectName: no stream named Nope before this "
        "query (known: S, out)",
        f"{path}: command 4 (Query) -> insertInto -> fields: 2 field name(s) for 1 selected "
        "expression(s); they must match one to one"]
    topology = read_topology(path)
    assert topology.problems == tuple(info.value.messages)
    # command 4 loaded, but its fields do not match its expressions: the later checks skip it
    assert [topology.label(c) for c in topology.commands] == ["command 2 (Query)"]


def test_an_unknown_key_is_reported_and_the_rest_of_its_command_checked(tmp_path):
    json_stream = STREAM.replace("KAFKA", "KAFKA, deserializer: json")  # any field is known
    path = _write(tmp_path, json_stream + QUERY + "    wheer: {sql: 'a > 0'}\n")
    topology = read_topology(path)
    assert topology.problems == (f"{path}: command 2 (Query) -> wheer: is not a known field "
                                 "(expected insertInto, select, from, where)",)
    (query,) = topology.queries
    assert query.where is None and topology.label(query) == "command 2 (Query)"
    with pytest.raises(TopologyError) as info:
        plan_topology(topology)  # the later checks report the loading problems with theirs
    assert info.value.messages == list(topology.problems)


#: Spark SQL strings that do not parse -> where the error is when the file is loaded.
SQL_ERRORS = {
    "select: {expressions: [a, {sql: 'upper(a))'}]}":
        "select -> expression 2 -> sql: syntax error at column 9 of \"upper(a))\": "
        "unexpected ')'",
    "select: {expressions: [a]}\n    where: {And: [{sql: 'a >'}, true]}":
        "where -> and -> argument 1 -> sql: syntax error at column 3 of \"a >\": incomplete "
        "expression near '>'",
    "select: {expressions: [{sql: \"concat(a, 'x)\"}]}":
        "select -> expression 1 -> sql: syntax error at column 11 of \"concat(a, 'x)\": a "
        "quote is not closed",
    "select: {expressions: [{sql: 'a, b'}]}":
        "select -> expression 1 -> sql: syntax error at column 1 of \"a, b\": expected one "
        "expression (a list of expressions needs one {sql: ...} each)",
    "select: {expressions: [{sql: 'a FROM t'}]}":
        "select -> expression 1 -> sql: syntax error at column 3 of \"a FROM t\": expected one "
        "expression, not a query (FROM ...)",
    "select: {expressions: [a]}\n    where: {sql: 'a > 1 AND lenght(a) < 3'}":
        "where -> sql: unknown function at column 11 of \"a > 1 AND lenght(a) < 3\": lenght; "
        "did you mean length?",
}


@pytest.mark.parametrize("select,message", SQL_ERRORS.items())
def test_spark_sql_syntax_errors_are_located_when_loading(tmp_path, select, message):
    path = _write(tmp_path, STREAM + QUERY.replace("select: {expressions: [a]}", select))
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert info.value.messages == [f"{path}: command 2 (Query) -> {message}"]


@pytest.mark.parametrize(
    "options,message",
    [
        ("{jw.sqe.spout.kafka.filterReplay: true}",
         "command 1 (CreateStream) -> options: unknown option jw.sqe.spout.kafka.filterReplay; "
         "did you mean jw.sqe.spout.kafka.filterReplays?"),
        ("{jw.sqe.spout.kafka.filterReplays: maybe}",
         "command 1 (CreateStream) -> options: jw.sqe.spout.kafka.filterReplays = 'maybe': "
         "expected true or false"),
        ("{jw.sqe.spout.kafka.brokers: []}",
         "command 1 (CreateStream): a KAFKA stream needs jw.sqe.spout.kafka.brokers"),
    ],
)
def test_option_errors_in_commands_are_located(tmp_path, options, message):
    path = _write(tmp_path, STREAM.replace("spoutName: KAFKA", f"spoutName: KAFKA, options: {options}")
                  + QUERY)
    with pytest.raises(TopologyError) as info:
        plan_topology(load_topology(path))
    assert f"{path}: {message}" in str(info.value)


def test_state_requirements(tmp_path):
    body = STREAM.replace("}", ", deserializer: json}") + (
        "- Query:\n    insertInto:\n      objectName: o\n      stateName: kafka\n"
        "      fields: [a]\n      options: {jw.sqe.state.kafka.keytype: Field}\n"
        "    select: {expressions: [a]}\n    from: {objectName: S}\n"
        "- Query:\n    insertInto:\n      objectName: r\n      stateName: REDIS\n"
        "      fields: [a]\n      options: {jw.sqe.state.redis.keyname.fields: [b]}\n"
        "    select: {expressions: [a]}\n    from: {objectName: S}\n"
    )
    with pytest.raises(TopologyError) as info:
        validate(_write(tmp_path, body))
    assert len(info.value.messages) == 2
    assert "keytype field writes the first field as key" in info.value.messages[0]
    assert "jw.sqe.state.redis.keyname.fields names b" in info.value.messages[1]


def test_fixed_stream_rows_must_match_fields(tmp_path):
    body = ("- CreateStream:\n    streamName: S\n    objectName: f\n    spoutName: FIXED\n"
            "    options:\n      jw.sqe.spout.fixed.fields: [a, b]\n"
            "      jw.sqe.spout.fixed.values: [[1, 2], [3]]\n" + QUERY)
    with pytest.raises(TopologyError, match=r"jw.sqe.spout.fixed.values -> row 2: 1 value\(s\) for 2"):
        plan_topology(load_topology(_write(tmp_path, body)))


def test_json_and_yaml_syntax_errors_are_one_line_naming_file_line_and_column(tmp_path):
    cases = [
        ("t.json", "[{", "t.json:1:3: not valid JSON: expecting property name enclosed in "
                         "double quotes"),
        ("t.json", '[\n  {"Set": {"key": 1}\n]', "t.json:3:1: not valid JSON: expecting ',' "
                                                   "delimiter"),
        ("t.yaml", "- {a: [", "t.yaml:1:8: not valid YAML: expected the node content, but "
                              "found the end of the text (while parsing a flow node)"),
        ("t.yaml", "- Set:\n    key: a\n   value: b\n", "t.yaml:3:4: not valid YAML: "
         "expected the end of the indented block, but found the start of a map (while parsing "
         "a block mapping at line 1, column 3)"),
        ("t.yaml", "- Set: {key: a, value: 2020-13-45}\n", "t.yaml:1:24: not valid YAML: "
         "'2020-13-45' is not a date (YYYY-MM-DD) or a timestamp (month must be in 1..12)"),
        ("t.yaml", "- Set:\n\tkey: a\n", "t.yaml:2:1: not valid YAML: found character "
         "'\\t' that cannot start any token (while scanning for the next token)"),
        ("t.yaml", "- Set: {key: a, value: \x07}\n", "t.yaml:1:24: not valid YAML: the control "
                                                     "character U+0007 is not allowed in YAML"),
    ]
    for name, text, message in cases:
        with pytest.raises(TopologyError) as info:
            load_topology(_write(tmp_path, text, name))
        assert info.value.messages == [f"{tmp_path}/{message}"]
    with pytest.raises(TopologyError, match="cannot read topology file"):
        load_topology(tmp_path / "missing.yaml")


def test_bytes_that_are_not_utf8_are_located(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_bytes("- Set:\n    key: caf\xc3\xa9\n    value: \xff\n".encode("latin-1"))
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert info.value.messages == [f"{path}:3:12: not UTF-8 text: byte 0xff (invalid start byte)"]


def test_topology_name_defaults_to_the_file_stem(tmp_path):
    path = _write(tmp_path, STREAM + QUERY, "my-topo.yaml")
    assert load_topology(path).name == "my-topo"
    assert load_topology(path, name="other").name == "other"


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("UserName", Field("UserName")),
        (3, Constant(3)),
        (2.5, Constant(2.5)),
        (False, Constant(False)),
        (None, Constant(None)),
        ({"C": None}, Constant(None)),
        ({"C": "yyyy"}, Constant("yyyy")),
        ({"sql": "upper(name)"}, Sql("upper(name)")),
        ({"EQUALS": ["a", 1]}, Function("=", (Field("a"), Constant(1)))),
        ({"RLike": ["a", {"C": "^x"}]}, Function("rlike", (Field("a"), Constant("^x")))),
    ],
)
def test_expression_forms(raw, expected):
    parsed = parse_expression(raw)
    assert parsed == expected
    assert parse_expression(to_raw(parsed)) == parsed


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "a topology file must be a list of commands (Set, CreateStream, Query), got an "
             "empty file"),
        ("a: 1\n", "a topology file must be a list of commands (Set, CreateStream, Query), got "
                   "a map"),
        ("- CreateStream: {streamName: S, objectName: t, spoutName: KAFKA, options: {1: 2}}\n"
         + QUERY,  # the query reads S, which did not load: nothing is said of it
         "command 1 (CreateStream) -> options -> key 1: expected a string"),
    ],
)
def test_wrong_shapes_are_named_in_words(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert info.value.messages == [f"{path}: {message}"]


def test_expressions_nested_too_deeply_are_refused_where_they_are(tmp_path):
    expr: object = "a"
    for _ in range(80):  # deeper than expressions may nest, within what documents may
        expr = {"+": [expr, 1]}
    commands = [{"CreateStream": {"streamName": "S", "objectName": "t", "spoutName": "KAFKA"}},
                {"Query": {"insertInto": {"objectName": "o", "fields": ["x"]},
                           "select": {"expressions": [expr]}, "from": {"objectName": "S"}}}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(commands))
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert info.value.messages == [f"{path}: command 2 (Query) -> select -> expression 1: "
                                   "function calls nest 80 deep; at most 64 levels are allowed"]


# --- every list in a message is numbered from 1 -------------------------------------------

#: A JSON stream with declared fields a, b (so field references are checked) and brokers.
NUMBERED_STREAM = ("- CreateStream:\n    streamName: S\n    objectName: t\n    spoutName: KAFKA\n"
                   "    deserializer: json\n    options: {jw.sqe.spout.kafka.brokers: 'k:9092', "
                   "jw.sqe.spout.fields: [a, b]OPTIONS}\n")


def _numbered_query(expressions: str = "[a]", fields: str = "", where: str = "",
                    into: str = "") -> str:
    fields = fields or "[" + ", ".join(f"f{i}" for i in range(expressions.count(",") + 1)) + "]"
    return ("- Query:\n"
            f"    insertInto: {{objectName: out, fields: {fields}{into}}}\n"
            f"    select: {{expressions: {expressions}}}\n"
            "    from: {objectName: S}\n" + (f"    where: {where}\n" if where else ""))


@pytest.mark.parametrize("options,query,message", [
    pytest.param("", _numbered_query() + "- Nope: {}\n",
                 "command 3: unknown command Nope", id="command"),
    pytest.param("", _numbered_query("[a, {Nope: [b]}]"),
                 "command 2 (Query) -> select -> expression 2: unknown function Nope",
                 id="select-expression"),
    pytest.param("", _numbered_query("[a, b, zzz]"),
                 "command 2 (Query) -> select -> expression 3: no field zzz in stream S",
                 id="select-expression-field"),
    pytest.param("", _numbered_query(where="{and: [a, {Nope: [1]}]}"),
                 "command 2 (Query) -> where -> and -> argument 2: unknown function Nope",
                 id="where-and-operand"),
    pytest.param("", _numbered_query(where="{or: [a, {sql: 'b +'}]}"),
                 "command 2 (Query) -> where -> or -> argument 2 -> sql: syntax error at "
                 "column 3", id="where-or-operand-sql"),
    pytest.param("", _numbered_query(where="{and: [a, {'=': [zzz, 1]}]}"),
                 "command 2 (Query) -> where -> and -> argument 2 -> = -> argument 1: no field "
                 "zzz in stream S", id="where-operand-field"),
    pytest.param("", _numbered_query("[{'+': [[1], a]}]"),
                 "command 2 (Query) -> select -> expression 1 -> + -> argument 1: expected a "
                 "field name, a constant or a one-key object, got list", id="function-argument"),
    pytest.param("", _numbered_query("[a, {'+': [1, {Sum: [b]}]}]"),
                 "command 2 (Query) -> select -> expression 2 -> + -> argument 2: an "
                 "aggregation cannot be nested inside another function", id="nested-aggregate"),
    pytest.param("", _numbered_query("[a, b]", fields="[x, [y]]"),
                 "command 2 (Query) -> insertInto -> field 2: expected a string",
                 id="topology-list-item"),
    pytest.param(", jw.sqe.spout.kafka.filterValues: [x, {c: 1}]", _numbered_query(),
                 "command 1 (CreateStream) -> options: jw.sqe.spout.kafka.filterValues = "
                 "['x', {'c': 1}]: expected a list of strings or a comma-separated string; "
                 "item 2 is a map", id="list-option-item"),
    pytest.param(", jw.sqe.spout.kafka.filterValues: [x, y, 7]", _numbered_query(),
                 "command 1 (CreateStream) -> options: jw.sqe.spout.kafka.filterValues = "
                 "['x', 'y', 7]: expected a list of strings or a comma-separated string; "
                 "item 3 is a number", id="list-option-item-number"),
    pytest.param("", _numbered_query() + "- Set: {key: jw.sqe.spout.fields, value: [a, b, 5]}\n",
                 "command 3 (Set): jw.sqe.spout.fields = ['a', 'b', 5]: expected a map of field "
                 "name: Spark SQL type (e.g. {id: string, amount: bigint}) or a list of field "
                 "names; item 3 is a number", id="fields-option-item"),
    pytest.param(", jw.sqe.spout.kafka.postFilter: {and: [{'=': [_key, {C: k}]}, "
                 "{'>': [_offset, zzz]}]}", _numbered_query(),
                 "command 1 (CreateStream) -> jw.sqe.spout.kafka.postFilter -> and -> "
                 "argument 2 -> > -> argument 2: a post-filter sees the source's record columns",
                 id="post-filter-argument"),
    pytest.param(", jw.sqe.spout.kafka.postFilter: {in: [_filter_value, {C: a}, _key]}",
                 _numbered_query(),
                 "command 1 (CreateStream) -> jw.sqe.spout.kafka.postFilter -> in -> argument "
                 "3: the values after the first must be constants in a post-filter",
                 id="post-filter-constant"),
    pytest.param("", _numbered_query(
        "[a, b]", into=", stateName: KAFKA, options: {jw.sqe.state.kafka.filterValue: "
                       "{or: [f0, qqq]}}"),
                 "command 2 (Query) -> jw.sqe.state.kafka.filterValue -> or -> argument 2: no "
                 "field qqq in stream out", id="state-filter-value-argument"),
])
def test_every_list_in_a_message_is_numbered_from_1(tmp_path, options, query, message):
    path = _write(tmp_path, NUMBERED_STREAM.replace("OPTIONS", options) + query)
    with pytest.raises(TopologyError) as info:
        validate(path)
    assert any(f"{path}: {message}" in m for m in info.value.messages), info.value.messages


def test_fixed_rows_are_numbered_from_1(tmp_path):
    body = ("- CreateStream:\n    streamName: S\n    objectName: f\n    spoutName: FIXED\n"
            "    options:\n      jw.sqe.spout.fixed.fields: [a, b]\n"
            "      jw.sqe.spout.fixed.values: [[1, 2], 3]\n" + QUERY)
    with pytest.raises(TopologyError) as info:
        plan_topology(load_topology(_write(tmp_path, body)))
    assert info.value.messages[0].endswith(
        "command 1 (CreateStream) -> options: jw.sqe.spout.fixed.values = [[1, 2], 3]: "
        "expected a list of rows, each a list of values; row 2 is a number")


@pytest.mark.parametrize("loc,expected", [
    (("select", "expressions", 1), ["select", "expression 2"]),
    (("insertInto", "fields", 0), ["insertInto", "field 1"]),
    (("options", "values", 0), ["options", "values item 1"]),
    (("options", "values", 1, 2), ["options", "values item 2", "item 3"]),  # a list in a list
    (("values", 0, 2, "name"), ["values item 1", "item 3", "name"]),
    ((0, "name"), ["item 1", "name"]),
    (("options", 5, "[key]"), ["options", "key 5"]),  # a map's key is named, not numbered
])
def test_pydantic_locations_are_numbered_from_1(loc, expected):
    from sqe.lang.problems import location

    assert location(loc) == expected
