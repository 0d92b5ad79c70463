"""``null`` is no option value: wherever an option is given, ``null`` is a located error at
``sqe validate`` that says what the option takes and what leaving it out gives."""

from __future__ import annotations

import pytest

from sqe.api import validate
from sqe.config.options import Option, coerce
from sqe.config.registry import REGISTRY, lookup
from sqe.config.settings import load_config
from sqe.errors import OptionError, TopologyError

#: One option of every kind, with what the error says it takes and its default.
KINDS = [
    ("jw.sqe.spout.kafka.filterReplays", "a boolean", "the default (false)"),
    ("jw.sqe.spout.kafka.maxRecordsPerBatch", "an integer >= 1", "it to stay unset"),
    ("jw.sqe.state.redis.delimiter", "a string", "the default (:)"),
    ("jw.sqe.state.kafka.keytype", "one of messagehash, field, streammetadata",
     "the default (messagehash)"),
    ("jw.sqe.state.redis.keyname.fields", "a list of strings (or comma-separated string)",
     "the default ([])"),
    ("jw.sqe.spout.fixed.values", "a list of lists", "it to stay unset"),
    ("jw.sqe.state.kafka.filterValue", "a SQE expression", "it to stay unset"),
    ("jw.sqe.spout.kafka.consumer.fetch.wait.max.ms", "a string, number or boolean",
     "it to stay unset"),
    ("jw.sqe.spout.fields", "a map of field name: Spark SQL type", "it to stay unset"),
]


@pytest.mark.parametrize("key,expected,default", KINDS, ids=[k for k, _, _ in KINDS])
def test_null_is_refused_for_every_kind_naming_what_the_option_takes(key, expected, default):
    with pytest.raises(OptionError) as info:
        coerce(lookup(key, "x"), None, "conf/x.yaml (SQE)")
    message = str(info.value)
    assert message.startswith(f"conf/x.yaml (SQE): {key}: null is not a value; expected {expected}")
    assert message.endswith(f"; leave the key out for {default}")


def test_null_float_option():
    option = Option("jw.sqe.x", "float", 1.5, "doc")
    with pytest.raises(OptionError, match=r"jw.sqe.x: null is not a value; expected a number; "
                                          r"leave the key out for the default \(1.5\)"):
        coerce(option, None, "--conf")


def test_every_declared_option_refuses_null():
    for option in REGISTRY.values():
        with pytest.raises(OptionError, match="null is not a value"):
            coerce(option, None, "x")


TOPOLOGY = """\
- Set: {key: jw.sqe.spout.kafka.maxRecordsPerBatch, value: SET}
- CreateStream:
    streamName: S
    objectName: topic
    spoutName: KAFKA
    options: {jw.sqe.spout.kafka.filterReplays: STREAM}
- Query:
    insertInto:
      objectName: out
      stateName: KAFKA
      fields: [x]
      options: {jw.sqe.state.kafka.keytype: STATE}
    select: {expressions: [_value]}
    from: {objectName: S}
"""


@pytest.mark.parametrize(
    "where,message",
    [
        ("SET", "command 1 (Set): jw.sqe.spout.kafka.maxRecordsPerBatch: null is not a value; "
                "expected an integer >= 1; leave the key out for it to stay unset"),
        ("STREAM", "command 2 (CreateStream) -> options: jw.sqe.spout.kafka.filterReplays: "
                   "null is not a value; expected a boolean; leave the key out for the default "
                   "(false)"),
        ("STATE", "command 3 (Query) -> insertInto -> options: jw.sqe.state.kafka.keytype: "
                  "null is not a value; expected one of messagehash, field, streammetadata; "
                  "leave the key out for the default (messagehash)"),
    ],
)
def test_null_in_a_topology_fails_validation_where_it_is(tmp_path, where, message):
    text = TOPOLOGY
    for place, value in (("SET", "100"), ("STREAM", "true"), ("STATE", "messagehash")):
        text = text.replace(place, "null" if place == where else value)
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(TopologyError) as info:
        validate(path)
    assert [m for m in info.value.messages if "null" in m] == [f"{path}: {message}"]


def test_null_in_a_config_file_fails_when_it_is_loaded(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("SQE:\n  jw.sqe.state.redis.keyname.fields: null\n")
    with pytest.raises(OptionError) as info:
        load_config(cfg)
    assert str(info.value) == (
        f"{cfg} (SQE): jw.sqe.state.redis.keyname.fields: null is not a value; expected a list "
        "of strings (or comma-separated string); leave the key out for the default ([])")
