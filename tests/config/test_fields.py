"""Field references are checked against the stream's fields at validate time: every query's
select, where and aggregations, Spark SQL strings included, along the chain of streams."""

from __future__ import annotations

import pytest

from sqe.api import load_topology, validate
from sqe.config.plan import plan_topology
from sqe.engine.batch.pipeline import build_pipelines
from sqe.errors import TopologyError
from sqe.lang.references import stream_references

EVENTS = """\
- CreateStream:
    streamName: Events
    objectName: events
    spoutName: KAFKA
    deserializer: json
    options: {jw.sqe.spout.fields: {event_id: string, region: string, amount: bigint}}
"""

RECORDS = ("_key, _value, _topic, _partition, _offset, _timestamp, _pid, _source_partition, "
           "_source_offset, _index, _filter_value")


def _query(n_from: str, fields: str, select: str, where: str = "", state: str = "CONSOLE",
           into: str = "out") -> str:
    state_line = f", stateName: {state}" if state else ""
    text = (f"- Query:\n    insertInto: {{objectName: {into}{state_line}, fields: [{fields}]}}\n"
            f"    select: {{expressions: [{select}]}}\n    from: {{objectName: {n_from}}}\n")
    return text + (f"    where: {where}\n" if where else "")


def _problems(tmp_path, text: str) -> list[str]:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(TopologyError) as info:
        validate(path)
    prefix = f"{path}: "
    assert all(m.startswith(prefix) for m in info.value.messages)
    return [m[len(prefix):] for m in info.value.messages]


def _valid(tmp_path, text: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    validate(path)


def test_declared_fields_catch_typos_in_select_where_aggregations_and_sql(tmp_path):
    text = EVENTS + _query(
        "Events", "region, total, loud",
        'region, {Sum: [amout]}, {sql: "upper(regoin)"}',
        where='{And: [{">": [amont, 0]}, {sql: "event_id IS NOT NULL"}]}')
    assert _problems(tmp_path, text) == [
        "command 2 (Query) -> select -> expression 2 -> sum -> argument 1: no field amout in "
        "stream Events; did you mean amount?",
        "command 2 (Query) -> select -> expression 3 -> sql: no field regoin in stream Events "
        "(column 7 of \"upper(regoin)\"); did you mean region?",
        "command 2 (Query) -> where -> and -> argument 1 -> > -> argument 1: no field amont in "
        "stream Events; did you mean amount?",
    ]


def test_a_field_with_nothing_close_lists_what_the_stream_has(tmp_path):
    assert _problems(tmp_path, EVENTS + _query("Events", "x", "zzz")) == [
        "command 2 (Query) -> select -> expression 1: no field zzz in stream Events; it has "
        f"jw.sqe.spout.fields and the record columns: event_id, region, amount, {RECORDS}"]


def test_names_match_case_insensitively_and_record_columns_are_fields(tmp_path):
    _valid(tmp_path, EVENTS + _query("Events", "a, b, c", 'Amount, _offset, {sql: "REGION"}'))


def test_an_identity_stream_has_the_record_columns_only(tmp_path):
    text = ("- CreateStream: {streamName: Raw, objectName: raw, spoutName: KAFKA}\n"
            + _query("Raw", "v, u", "_value, user_id"))
    assert _problems(tmp_path, text) == [
        "command 2 (Query) -> select -> expression 2: no field user_id in stream Raw; it has "
        "only the record columns, as its deserializer is identity (deserializer: json reads "
        f"the fields of JSON values): {RECORDS}"]


def test_a_fixed_stream_has_its_fixed_fields(tmp_path):
    text = ("- CreateStream:\n    streamName: F\n    objectName: f\n    spoutName: FIXED\n"
            "    options: {jw.sqe.spout.fixed.fields: [word, count], "
            "jw.sqe.spout.fixed.values: [[hi, 1]]}\n"
            + _query("F", "w, c", 'word, {"*": [cuont, 2]}'))
    assert _problems(tmp_path, text) == [
        "command 2 (Query) -> select -> expression 2 -> * -> argument 1: no field cuont in "
        "stream F; did you mean count?"]


def test_the_chain_of_streams_is_followed(tmp_path):
    text = (EVENTS
            + _query("Events", "region, total", "region, {Sum: [amount]}", state="", into="mid")
            + _query("mid", "r, a", "region, amount")  # amount did not make it into mid
            + _query("out", "r2", "totl", into="out2"))  # SQE reads a state's output by name
    assert _problems(tmp_path, text) == [
        "command 3 (Query) -> select -> expression 2: no field amount in stream mid; it has "
        "the fields of command 2 (Query) (insertInto -> fields): region, total",
        "command 4 (Query) -> select -> expression 1: no field totl in stream out; it has the "
        "fields of command 3 (Query) (insertInto -> fields): r, a",
    ]


def test_a_json_stream_without_declared_fields_is_checked_from_its_first_query_on(tmp_path):
    events = EVENTS.replace("    options: {jw.sqe.spout.fields: "
                            "{event_id: string, region: string, amount: bigint}}\n", "")
    text = (events + _query("Events", "a", 'anything, {sql: "whatever + 1"}', state="",
                            into="mid").replace("fields: [a]", "fields: [a, b]")
            + _query("mid", "c", "bb"))
    assert _problems(tmp_path, text) == [
        "command 3 (Query) -> select -> expression 1: no field bb in stream mid; did you mean b?"]


def test_declared_fields_belong_to_json_streams(tmp_path):
    text = ("- CreateStream: {streamName: Raw, objectName: raw, spoutName: KAFKA, "
            "options: {jw.sqe.spout.fields: [a]}}\n" + _query("Raw", "v", "_value"))
    assert _problems(tmp_path, text) == [
        "command 1 (CreateStream): jw.sqe.spout.fields declares the fields of a stream with "
        "deserializer json; stream Raw has deserializer identity"]


def test_the_names_each_stream_is_read_by_include_sql_columns(tmp_path):
    events = EVENTS.replace("    options: {jw.sqe.spout.fields: "
                            "{event_id: string, region: string, amount: bigint}}\n",
                            "    options: {jw.sqe.pid: 7}\n")
    text = (events + _query("Events", "a, b", 'region, {sql: "concat(user, event_id, region)"}',
                            where='{">": [amount, 0]}', state="", into="mid")
            + _query("mid", "c", '{sql: "upper(a)"}'))
    path = tmp_path / "t.yaml"
    path.write_text(text)
    topology = load_topology(path)
    assert stream_references(topology) == {"Events": ["region", "event_id", "amount"],
                                           "mid": ["a"]}
    (pipeline,) = build_pipelines(plan_topology(topology), "t")
    assert pipeline.wanted_fields == ["region", "event_id", "amount"]


def test_a_kafka_states_filter_value_reads_the_querys_output(tmp_path):
    kafka = ("    insertInto:\n      objectName: out\n      stateName: KAFKA\n"
             "      fields: [region, amount]\n      options:\n"
             "        jw.sqe.state.kafka.filterValue: {FV}\n"
             "    select: {expressions: [region, amount]}\n    from: {objectName: Events}\n")
    _valid(tmp_path, EVENTS + "- Query:\n" + kafka.replace("{FV}", "{sql: 'lower(REGION)'}"))
    assert _problems(tmp_path, EVENTS + "- Query:\n" + kafka.replace("{FV}", "event_id")) == [
        "command 2 (Query) -> jw.sqe.state.kafka.filterValue: no field event_id in stream out; "
        "it has insertInto -> fields: region, amount"]
    assert _problems(tmp_path, EVENTS + "- Query:\n" + kafka.replace("{FV}", "{sql: 'f(('}")) == [
        "command 2 (Query) -> jw.sqe.state.kafka.filterValue -> sql: syntax error at column 3 "
        "of \"f((\": incomplete expression near '('"]


def _avro_stream(options: str) -> str:
    return ("- CreateStream:\n    streamName: Clicks\n    objectName: clicks\n"
            f"    spoutName: KAFKA\n    deserializer: avro\n    options: {options}\n")


def test_an_avro_stream_has_its_reader_schemas_fields_and_needs_one(tmp_path):
    schema = tmp_path / "click.avsc"
    schema.write_text('{"type": "record", "name": "Click", "fields": [{"name": "id", "type": '
                      '"string"}, {"name": "geo", "type": {"type": "record", "name": "G", '
                      '"fields": [{"name": "country", "type": "string"}]}}]}')
    with_file = _avro_stream(f"{{jw.sqe.spout.schema.file: {schema}, "
                             "jw.sqe.spout.kafka.includeHeaders: true}")
    _valid(tmp_path, with_file + _query("Clicks", "id, c, h", 'id, {sql: "geo.country"}, '
                                                               "_headers"))
    assert _problems(tmp_path, with_file + _query("Clicks", "id", "ids")) == [
        "command 2 (Query) -> select -> expression 1: no field ids in stream Clicks; "
        "did you mean id?"]
    assert _problems(tmp_path, _avro_stream("{}") + _query("Clicks", "id", "id")) == [
        "command 1 (CreateStream): stream Clicks: deserializer avro needs a reader schema: set "
        "jw.sqe.spout.schemaRegistry.url (a Schema Registry) or jw.sqe.spout.schema.file (a "
        "local .avsc file)"]
    (problem,) = _problems(tmp_path, _avro_stream(
        "{jw.sqe.spout.schemaRegistry.url: 'http://sqe:hunter2@127.0.0.1:1', "
        "jw.sqe.spout.schemaRegistry.max.retries: 0}") + _query("Clicks", "id", "id"))
    assert problem.startswith("command 1 (CreateStream): cannot reach the Schema Registry at "
                              "http://sqe:***@127.0.0.1:1 (for subject clicks-value its latest "
                              "version)"), problem


def test_a_protobuf_stream_has_its_messages_fields(tmp_path):
    from google.protobuf import descriptor_pb2, text_format

    files = descriptor_pb2.FileDescriptorSet()
    files.file.append(text_format.Parse(
        'name: "ads.proto" package: "ads" syntax: "proto3" '
        'message_type { name: "Geo" field { name: "country" number: 1 type: TYPE_STRING '
        'label: LABEL_OPTIONAL } } '
        'message_type { name: "Click" field { name: "id" number: 1 type: TYPE_STRING '
        'label: LABEL_OPTIONAL } field { name: "geo" number: 2 type: TYPE_MESSAGE '
        'label: LABEL_OPTIONAL type_name: ".ads.Geo" } }', descriptor_pb2.FileDescriptorProto()))
    desc = tmp_path / "ads.desc"
    desc.write_bytes(files.SerializeToString())
    stream = _avro_stream(f"{{jw.sqe.spout.schema.file: {desc}, "
                          "jw.sqe.spout.schema.message: ads.Click}").replace(
        "deserializer: avro", "deserializer: protobuf")
    _valid(tmp_path, stream + _query("Clicks", "id, c", 'id, {sql: "geo.country"}'))
    assert _problems(tmp_path, stream + _query("Clicks", "id", "ids")) == [
        "command 2 (Query) -> select -> expression 1: no field ids in stream Clicks; "
        "did you mean id?"]
    (problem,) = _problems(tmp_path, stream.replace("ads.Click", "ads.Clack")
                           + _query("Clicks", "id", "id"))
    assert problem.startswith("command 1 (CreateStream): stream Clicks: "
                              "jw.sqe.spout.schema.file"), problem
    assert "has no message ads.Clack" in problem
