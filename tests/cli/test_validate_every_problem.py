"""``sqe validate`` reports every problem of a file in one run, each located, in file order.

A user found five mistakes of one file in four runs of ``sqe validate``: a problem found by an
early check (the commands' structure, an option's value) stopped the later ones.  Here one file
holds a mistake of every kind, each in a part of its own, next to parts that are valid; one run
must name every mistake (file, command, path inside it) and nothing else.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import sqe
from sqe.api import validate
from sqe.config.settings import load_config
from sqe.errors import TopologyError
from sqe.lang.topology import read_topology
from state.registry import SINKS
from tests.support import ROOT

MISTAKES = """\
- Set: {key: jw.sqe.spout.kafka.filterReplays.metadata.ttl, value: soon}
- CreateStream:
    streamName: Events
    objectName: events
    spoutName: KAFKA
    deserializer: json
    options:
      jw.sqe.spout.kafka.startingOffset: earliest
      jw.sqe.spout.kafka.brokers: [localhost]
      jw.sqe.spout.fields: {event_id: string, region: string, amount: bigint}
- CreateStream:
    streamName: Clicks
    objectName: clicks
    spoutName: KAFKA
    deserializer: json
    options:
      jw.sqe.spout.fields: {click_id: string, ms: bigitn}
      jw.sqe.spout.kafka.consumer.fetch.min.bites: 1
- Query:
    insertInto:
      objectName: by_region
      stateName: REDIS
      fields: [region, amount]
      options: {jw.sqe.state.redis.datatype: HASH, jw.sqe.state.redis.keyname.fields: [region]}
    select: {expressions: [regoin, amount]}
    from: {objectName: Events}
    wheer: {sql: "amount > 0"}
- Query:
    insertInto: {objectName: upper_regions, stateName: CONSOLE, fields: [a, b]}
    select: {expressions: [{sql: "upper(region))"}, {sql: "uppr(region)"}]}
    from: {objectName: Events}
- Query:
    insertInto: {objectName: o, stateName: REDDIS, fields: [event_id]}
    select: {expressions: [event_id]}
    from: {objectName: Event}
- Query:
    insertInto: {objectName: counts, stateName: CONSOLE, fields: [event_id, n]}
    select: {expressions: [event_id, {Summ: [amount]}]}
    from: {objectName: Events}
- Query:
    insertInto:
      objectName: enriched
      stateName: KAFKA
      fields: [event_id, amount]
      options: {jw.sqe.state.kafka.chunk.maxMessages: many, jw.sqe.state.kafka.producer.linger.mss: 5}
    select: {expressions: [event_id, amount]}
    from: {objectName: Events}
- Query:
    insertInto: {objectName: clicks_out, stateName: CONSOLE, fields: [click_id]}
    select: {expressions: [click_id]}
    from: {objectName: Clicks}
- Query:
    insertInto: {objectName: regions, stateName: CONSOLE, fields: [event_id, region]}
    select: {expressions: [event_id, {sql: "upper(region)"}]}
    from: {objectName: Events}
    where: {sql: "amount > 0"}
"""

#: Every mistake of MISTAKES, as ``sqe validate`` says it after "error: FILE: ", in file order.
#: Commands 9 and 10 are valid; command 9 reads a stream whose declared fields were refused,
#: so what it reads is not known and not checked.
REPORTED = [
    # a Set value of the wrong type
    "command 1 (Set): jw.sqe.spout.kafka.filterReplays.metadata.ttl = 'soon': expected an "
    "integer >= 1",
    # a misspelt option key and a bad broker address in one stream's options
    "command 2 (CreateStream) -> options: unknown option jw.sqe.spout.kafka.startingOffset; "
    "did you mean jw.sqe.spout.kafka.startingOffsets?",
    "command 2 (CreateStream) -> options: jw.sqe.spout.kafka.brokers = ['localhost']: broker "
    "'localhost' is not host:port (e.g. kafka-1:9092)",
    # a declared field type, and a librdkafka property of the same stream
    "command 3 (CreateStream) -> options: jw.sqe.spout.fields = {'click_id': 'string', 'ms': "
    "'bigitn'}: field ms: bigitn is not a Spark SQL type; did you mean bigint?",
    "command 3 (CreateStream): jw.sqe.spout.kafka.consumer.fetch.min.bites (FILE: command 3 "
    "(CreateStream) -> options): librdkafka has no consumer property fetch.min.bites",
    # an unknown key, an unknown field and what the state lacks, in one query
    "command 4 (Query) -> wheer: is not a known field (expected insertInto, select, from, where)",
    "command 4 (Query) -> select -> expression 1: no field regoin in stream Events; did you "
    "mean region?",
    "command 4 (Query): datatype HASH needs jw.sqe.state.redis.fieldname.fields",
    # a Spark SQL syntax error and an unknown Spark function
    "command 5 (Query) -> select -> expression 1 -> sql: syntax error at column 14 of "
    "\"upper(region))\": unexpected ')'",
    "command 5 (Query) -> select -> expression 2 -> sql: unknown function at column 1 of "
    "\"uppr(region)\": uppr; did you mean upper?",
    # a bad state name, and the unknown stream the same query reads
    "command 6 (Query) -> insertInto -> stateName: expected one of KAFKA, REDIS, POSTGRES, "
    "CONSOLE",
    "command 6 (Query) -> from -> objectName: no stream named Event before this query (known: "
    "Clicks, Events, by_region, upper_regions)",
    # an unknown SQE function
    "command 7 (Query) -> select -> expression 2: unknown function Summ; known functions: +, -, "
    "*, /, %, and, or, xor, not, =, !=, >, >=, <, <=, in, rlike, if, parsedate, formatdate, "
    "rounddate, gettime, hash, getmapvalue, expandkeys, expandvalues, sum, max, createhll, "
    "createhllp",
    # a state option of the wrong type, and a librdkafka property of the same state
    "command 8 (Query) -> insertInto -> options: jw.sqe.state.kafka.chunk.maxMessages = 'many': "
    "expected an integer >= 1",
    "command 8 (Query): jw.sqe.state.kafka.producer.linger.mss (FILE: command 8 (Query) -> "
    "insertInto -> options): librdkafka has no producer property linger.mss",
]


def _reported(path: str) -> list[str]:
    return [f"{path}: {line.replace('FILE', path)}" for line in REPORTED]


def test_one_run_of_sqe_validate_reports_every_mistake_located_and_nothing_else(tmp_path):
    bad = tmp_path / "t.yaml"
    bad.write_text(MISTAKES)
    out = subprocess.run([sys.executable, "-m", "sqe.cli.main", "validate", str(bad),
                          "topologies/enrich.yaml", "--config", "conf/local.yaml"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [f"error: {m}" for m in _reported(str(bad))]
    assert "OK topologies/enrich.yaml" in out.stdout  # the next file is still checked


def test_python_validate_raises_every_mistake_together(tmp_path):
    bad = tmp_path / "t.yaml"
    bad.write_text(MISTAKES)
    topology = read_topology(bad, state_names=tuple(SINKS))
    with pytest.raises(TopologyError) as info:
        validate(topology, config=[load_config(ROOT / "conf/local.yaml")])
    assert info.value.messages == _reported(str(bad))
    with pytest.raises(TopologyError) as from_path:  # sqe.validate(path), as a user calls it
        sqe.validate(bad, config=[ROOT / "conf/local.yaml"])
    assert from_path.value.messages == info.value.messages


def test_fixing_every_reported_mistake_leaves_a_valid_file(tmp_path):
    """What was reported was all there was: the fixed file is valid (no second run needed)."""
    fixed = MISTAKES
    for wrong, right in [
        ("value: soon", "value: 3600"), ("startingOffset:", "startingOffsets:"),
        ("[localhost]", "[localhost:9092]"), ("bigitn", "bigint"),
        ("fetch.min.bites", "fetch.min.bytes"), ("wheer", "where"), ("regoin", "region"),
        ("datatype: HASH", "datatype: STRING"), ("upper(region))", "upper(region)"),
        ("uppr", "upper"), ("REDDIS", "CONSOLE"), ("objectName: Event}", "objectName: Events}"),
        ("Summ", "sum"), ("maxMessages: many", "maxMessages: 500"), ("linger.mss", "linger.ms"),
    ]:
        assert wrong in fixed
        fixed = fixed.replace(wrong, right, 1)
    path = tmp_path / "t.yaml"
    path.write_text(fixed)
    validate(read_topology(path, state_names=tuple(SINKS)),
             config=[load_config(ROOT / "conf/local.yaml")])


def test_a_conf_mistake_comes_first_and_the_file_is_still_checked(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(MISTAKES)
    with pytest.raises(TopologyError) as info:
        validate(read_topology(path, state_names=tuple(SINKS)),
                 config=[load_config(ROOT / "conf/local.yaml")],
                 conf={"jw.sqe.spout.kafka.filterReplay": "true"})
    assert info.value.messages == [
        "--conf: unknown option jw.sqe.spout.kafka.filterReplay; did you mean "
        "jw.sqe.spout.kafka.filterReplays?", *_reported(str(path))]


def test_a_command_broken_across_commands_is_left_out_of_the_later_checks(tmp_path):
    """A stream defined twice, fields that do not match the expressions, an aggregation in
    where: each is reported, and its commands are not checked further (their states, the
    fields a query reads of a stream defined twice), as those checks cannot take them; the
    commands around them are."""
    path = tmp_path / "t.yaml"
    path.write_text("""\
- CreateStream: {streamName: S, objectName: s, spoutName: FIXED, options: {
    jw.sqe.spout.fixed.fields: [a, b], jw.sqe.spout.fixed.values: [[1, 2]]}}
- CreateStream: {streamName: S, objectName: u, spoutName: FIXED, options: {
    jw.sqe.spout.fixed.fields: [c], jw.sqe.spout.fixed.values: [[3]]}}
- CreateStream: {streamName: T, objectName: t, spoutName: FIXED, options: {
    jw.sqe.spout.fixed.fields: [t], jw.sqe.spout.fixed.values: [[4]]}}
- Query:
    insertInto: {objectName: o, stateName: KAFKA, fields: [t, n, x]}
    select: {expressions: [t, {sum: [t]}]}
    from: {objectName: T}
- Query:
    insertInto: {objectName: p, stateName: CONSOLE, fields: [t]}
    select: {expressions: [t]}
    from: {objectName: T}
    where: {sum: [t]}
- Query:
    insertInto: {objectName: q, stateName: CONSOLE, fields: [c]}
    select: {expressions: [c]}
    from: {objectName: S}
- Query:
    insertInto: {objectName: r, stateName: CONSOLE, fields: [tt]}
    select: {expressions: [tt]}
    from: {objectName: T}
""")
    with pytest.raises(TopologyError) as info:
        validate(read_topology(path, state_names=tuple(SINKS)),
                 config=[load_config(ROOT / "conf/local.yaml")])
    assert info.value.messages == [
        f"{path}: command 2 (CreateStream) -> streamName: S is already defined",
        f"{path}: command 4 (Query) -> insertInto -> fields: 3 field name(s) for 2 selected "
        "expression(s); they must match one to one",
        f"{path}: command 5 (Query) -> where: an aggregation cannot be used in where",
        f"{path}: command 7 (Query) -> select -> expression 1: no field tt in stream T; did you "
        "mean t?"]
