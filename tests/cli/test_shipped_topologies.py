"""The shipped topologies run as they are: enrich.yaml then load.yaml, through `sqe run --once`."""

from __future__ import annotations

import json

import pytest
import redis
from confluent_kafka.admin import AdminClient, NewTopic

from sqe.cli.local_services import service_conf
from sqe.cli.main import main
from sqe.errors import SourceError
from tests.support import ROOT
from tests.support.kafka_io import produce, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]



def _create(bootstrap: str, *topics: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=30).topics
    new = [NewTopic(t, 3, 1, config={"retention.ms": "-1"}) for t in topics if t not in existing]
    for future in (admin.create_topics(new).values() if new else []):
        future.result(30)


def test_enrich_then_load_with_sqe_run_once(spark, kafka_bootstrap, redis_url, tmp_path, capsys):
    _create(kafka_bootstrap, "events", "enriched")
    before = len(read_topic(kafka_bootstrap, "enriched"))
    events = [{"event_id": f"e{i}", "user": f"u{i % 7}", "region": ["eu", "us", "apac"][i % 3],
               "amount": i} for i in range(60)]
    produce(kafka_bootstrap, "events",
            [(None, json.dumps(e).encode(), i % 3) for i, e in enumerate(events)])
    common = ["--config", str(ROOT / "conf/local.yaml"), *service_conf(kafka_bootstrap, redis_url)]
    assert main(["run", str(ROOT / "topologies/enrich.yaml"), "--once",
                 "--checkpoint", str(tmp_path / "enrich"), *common]) == 0
    enriched = read_topic(kafka_bootstrap, "enriched")[before:]
    assert len(enriched) == 60
    first = json.loads(next(r.value for r in enriched if json.loads(r.value)["event_id"] == "e51"))
    assert first == {"event_id": "e51", "user": "u2", "region": "EU", "amount": 51,
                     "amount_cents": 5100, "big_spender": True}
    assert main(["run", str(ROOT / "topologies/load.yaml"), "--once",
                 "--checkpoint", str(tmp_path / "load"), *common]) == 0
    out = capsys.readouterr().out
    assert "load: 1 batch(es)" in out
    client = redis.Redis.from_url(redis_url)
    assert client.hget("EU", "e51") == b"5100"
    assert sum(client.hlen(r) for r in ("EU", "US", "APAC")) == 60


def test_native_format_without_the_connector_is_a_clear_error(spark):
    from sqe.config.settings import Settings
    from sqe.config.views import StreamSettings
    from sqe.source.kafka.native import native_stream

    stream = StreamSettings(Settings.defaults().overlay(
        {"jw.sqe.spout.kafka.brokers": "127.0.0.1:1", "jw.sqe.spout.kafka.format": "native"}, "t"))
    with pytest.raises(SourceError, match="needs Spark's Kafka connector on the classpath"):
        native_stream(spark, "t", stream)


def test_sample_events_command_writes_events_enrich_can_read(kafka_bootstrap, kafka_topic, capsys):
    topic = kafka_topic(3, "samples")
    assert main(["sample-events", "--brokers", kafka_bootstrap, "--topic", topic, "--count", "20"]) == 0
    assert "20 sample events written" in capsys.readouterr().out
    events = [json.loads(r.value) for r in read_topic(kafka_bootstrap, topic)]
    assert sorted(e["event_id"] for e in events) == sorted(f"e{i}" for i in range(20))
    assert all(set(e) == {"event_id", "user", "region", "amount"} for e in events)
