"""The typed settings views and the option registry hold each other: every declared key is read
by exactly one view (or by the client-property translation), and each view reads declared keys
with the types the registry gives them."""

from __future__ import annotations

import pickle

import pytest

from sqe.config.client_properties import SQE_PROPERTY_KEYS
from sqe.config.registry import REGISTRY
from sqe.config.settings import Settings
from sqe.config.views import (
    KafkaStateSettings,
    RedisStateSettings,
    StateSettings,
    StreamSettings,
    view_keys,
)

#: Keys no view reads, and why.
UNREAD = {"jw.sqe.parallelism.hint": "accepted for compatibility, ignored on Spark"}


def test_every_registry_key_is_read_by_exactly_one_view():
    readers: dict[str, list[str]] = {}
    for view, keys in view_keys().items():
        for key in keys:
            readers.setdefault(key, []).append(view)
    for key in SQE_PROPERTY_KEYS:
        readers.setdefault(key, []).append("client_properties")
    twice = {k: v for k, v in readers.items() if len(v) > 1}
    unread = sorted(set(REGISTRY) - set(readers) - set(UNREAD))
    assert not twice and not unread, f"read twice: {twice}; read by no view: {unread}"
    assert set(readers) <= set(REGISTRY)


def test_views_give_typed_values_and_their_origin():
    s = Settings.defaults().overlay({
        "jw.sqe.spout.kafka.brokers": "a:1, b:2", "jw.sqe.spout.kafka.filterValues": "eu,us",
        "jw.sqe.spout.kafka.startingOffsets": "Latest",
        "jw.sqe.state.redis.keyname.fields": ["region"], "jw.sqe.state.redis.port": "6380",
        "jw.sqe.state.redis.password": "pw", "jw.sqe.state.kafka.producer.linger.ms": 5,
    }, "conf.yaml")
    stream, state = StreamSettings(s), StateSettings(s)
    assert stream.brokers == ("a:1", "b:2") and stream.bootstrap == "a:1,b:2"
    assert stream.filter_values == ("eu", "us") and stream.starting_offsets == "latest"
    assert stream.max_records is None and stream.filter_replays is False
    assert stream.origin(StreamSettings.brokers) == "conf.yaml"
    assert stream.origin(StreamSettings.max_records) == "default"
    redis = state.redis
    assert isinstance(redis, RedisStateSettings) and redis.key_fields == ("region",)
    assert redis.endpoint.url == "redis://localhost:6380/0" and redis.endpoint.password == "pw"
    assert isinstance(state.kafka, KafkaStateSettings)
    assert state.kafka.producer_properties == {"linger.ms": "5"}
    assert pickle.loads(pickle.dumps(stream)) == stream  # a stream's view goes to the executors


def test_an_endpoint_that_cannot_work_is_a_value_error_only_when_asked_for():
    s = Settings.defaults().overlay({"jw.sqe.state.redis.tls.caFile": "/ca.pem"}, "conf.yaml")
    state = StateSettings(s)
    assert state.kafka.brokers == ("localhost:9092",)  # other views are unaffected
    with pytest.raises(ValueError, match="TLS files are given but the URL does not use TLS"):
        _ = state.redis.endpoint


def test_a_redis_state_url_above_a_config_files_host_overrides_it():
    """conf/local.yaml names host and port; a --conf URL over it wins without a clash, while
    a host given beside the URL (or above it) is still said to be ignored."""
    url, host, port = ("jw.sqe.state.redis.url", "jw.sqe.state.redis.host",
                       "jw.sqe.state.redis.port")
    file = Settings.defaults().overlay({host: "localhost", port: 6379}, "conf/local.yaml (SQE)")
    over = file.overlay({url: "redis+sentinel://127.0.0.1:26379/m/0"}, "--conf")
    assert RedisStateSettings(over).server_keys_given_beside_url() == []
    assert pickle.loads(pickle.dumps(over)).overridden(host, url)  # the order travels too
    beside = file.overlay({url: "redis://h:1/0", port: 6380}, "--conf")
    assert RedisStateSettings(beside).server_keys_given_beside_url() == [
        f"{port} (--conf)"]
    above = Settings.defaults().overlay({url: "redis://h:1/0"}, "conf/local.yaml (SQE)") \
        .overlay({host: "other"}, "--conf")
    assert RedisStateSettings(above).server_keys_given_beside_url() == [f"{host} (--conf)"]
