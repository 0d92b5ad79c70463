"""Secured production services: client-property pass-through, Redis AUTH/ACL/TLS/Sentinel/Cluster,
secrets from the environment, and nothing secret in anything a run writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis

from sqe.api import validate
from sqe.cli.main import main
from sqe.clients.redis_endpoint import RedisEndpoint, persistence_warning
from sqe.config.client_properties import consumer_properties, producer_properties
from sqe.config.plan import plan_topology
from sqe.config.registry import CONSUMER_PREFIX, PRODUCER_PREFIX
from sqe.config.settings import Settings, load_config
from sqe.errors import OptionError, TopologyError
from sqe.lang.topology import load_topology
from sqe.ledger.hwm import HwmStore
from sqe.secrets import expand_env, is_secret_key, mask_value, redact_url, scrub
from sqe.wire.keys import StreamMetadata
from support.secured_redis import make_tls_files, start_cluster, start_redis, start_sentinel
from tests.support.kafka_io import produce, read_topic

TOPOLOGY = """\
- CreateStream:
    streamName: In
    objectName: {source}
    spoutName: KAFKA
    deserializer: json
    options:
      jw.sqe.spout.kafka.filterReplays: true
- Query:
    insertInto:
      objectName: seen
      stateName: REDIS
      fields: [name, id, v]
      options:
        jw.sqe.state.redis.datatype: HASH
        jw.sqe.state.redis.keyname.fields: [name]
        jw.sqe.state.redis.fieldname.fields: [id]
    select:
      expressions: [{{sql: "'seen'"}}, id, v]
    from: {{objectName: In}}
{kafka_state}"""

KAFKA_STATE = """\
- Query:
    insertInto:
      objectName: {dest}
      stateName: KAFKA
      fields: [id, v]
      options:
        jw.sqe.state.kafka.keytype: StreamMetadata
    select:
      expressions: [id, v]
    from: {{objectName: In}}
"""


def write_topology(tmp_path: Path, source: str, dest: str | None = None) -> Path:
    path = tmp_path / "secured.yaml"
    path.write_text(TOPOLOGY.format(source=source, kafka_state=KAFKA_STATE.format(dest=dest)
                                    if dest else ""))
    return path


# -- ${ENV} references and masking ------------------------------------------------------------

def test_env_references_expand_with_defaults_and_escapes():
    env = {"HOST": "redis.internal", "EMPTY": ""}
    assert expand_env("rediss://${HOST}:6380/0", "f: k", env) == "rediss://redis.internal:6380/0"
    assert expand_env("${PORT:-6379}", "f: k", env) == "6379"
    assert expand_env("${EMPTY:-x}", "f: k", env) == ""  # set (even empty) wins over the default
    assert expand_env("$${HOST} costs $5", "f: k", env) == "${HOST} costs $5"
    assert expand_env(["${HOST}", {"a": "${HOST}"}], "f: k", env) == [
        "redis.internal", {"a": "redis.internal"}]
    with pytest.raises(OptionError, match=r"^conf.yaml: jw.x: \$\{NOPE\} is not set in the "
                                          r"environment"):
        expand_env("${NOPE}", "conf.yaml: jw.x", env)


def test_config_file_and_topology_read_secrets_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SQE_T_PW", "s3cret-value")
    conf = tmp_path / "prod.yaml"
    conf.write_text("SQE:\n  jw.sqe.state.redis.password: ${SQE_T_PW}\n"
                    "Spark:\n  spark.hadoop.fs.s3a.secret.key: ${SQE_T_PW}\n")
    cfg = load_config(conf)
    assert cfg.spark["spark.hadoop.fs.s3a.secret.key"] == "s3cret-value"
    topo = write_topology(tmp_path, "events")
    text = topo.read_text().replace(
        "      jw.sqe.spout.kafka.filterReplays: true",
        "      jw.sqe.spout.kafka.filterReplays: true\n"
        "      jw.sqe.spout.kafka.filterReplays.redis.password: ${SQE_T_PW}\n"
        "      jw.sqe.spout.kafka.filterReplays.redis.url: redis://${SQE_T_HOST:-db}:6379/3")
    topo.write_text(text)
    plan = plan_topology(load_topology(topo), [cfg])
    s = plan.streams["In"].settings
    assert s["jw.sqe.spout.kafka.filterReplays.redis.password"] == "s3cret-value"
    assert s["jw.sqe.spout.kafka.filterReplays.redis.url"] == "redis://db:6379/3"
    assert plan.states[1].settings["jw.sqe.state.redis.password"] == "s3cret-value"

    monkeypatch.delenv("SQE_T_PW")
    with pytest.raises(OptionError, match=rf"{conf} \(SQE\): jw.sqe.state.redis.password: "
                                          r"\$\{SQE_T_PW\} is not set"):
        load_config(conf)
    with pytest.raises(TopologyError, match=r"secured.yaml: command 1 \(CreateStream\) -> options: "
                       r"jw.sqe.spout.kafka.filterReplays.redis.password: \$\{SQE_T_PW\} is not set"):
        plan_topology(load_topology(topo))


def test_secret_values_are_masked_in_errors_and_listings(capsys):
    assert is_secret_key("jw.sqe.state.redis.password")
    assert is_secret_key("sasl.password") and is_secret_key("ssl.key.pem")
    assert is_secret_key("sasl.oauthbearer.client.secret")
    assert not is_secret_key("sasl.username") and not is_secret_key("ssl.ca.location")
    assert redact_url("redis://sqe:pw@h:1/0") == "redis://sqe:***@h:1/0"
    assert redact_url("redis://h:1/0") == "redis://h:1/0"
    assert redact_url("host=db user=sqe password='a b' sslmode=verify-full") == (
        "host=db user=sqe password=*** sslmode=verify-full")
    # a Spark Connect URL (Databricks: sc://host:443/;token=...;x-databricks-cluster-id=...)
    assert redact_url("sc://h:443/;token=dapi123;x-databricks-cluster-id=0a;use_ssl=true") == (
        "sc://h:443/;token=***;x-databricks-cluster-id=0a;use_ssl=true")
    assert redact_url("sc://h:15002") == "sc://h:15002"
    assert mask_value("jw.sqe.state.postgres.dsn", "postgresql://u:pw@h/db") == \
        "postgresql://u:***@h/db"
    assert scrub("login pw123 failed for pw123", ["pw123", None]) == "login *** failed for ***"
    with pytest.raises(OptionError) as err:
        Settings.defaults().overlay({"jw.sqe.state.redis.password": ["hunter2"]}, "f.yaml")
    assert "hunter2" not in str(err.value) and "= ***" in str(err.value)

    rc = main(["options", "--show", "--conf", "jw.sqe.state.redis.password=hunter2",
               "--conf", f"{CONSUMER_PREFIX}sasl.password=hunter3",
               "--conf", f"{CONSUMER_PREFIX}sasl.username=alice",
               "--conf", "jw.sqe.spout.kafka.filterReplays.redis.url=rediss://u:hunter4@h:1/0"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "hunter" not in out
    assert f"{CONSUMER_PREFIX}sasl.username = alice  (--conf)" in out
    assert "jw.sqe.state.redis.password = ***  (--conf)" in out
    assert "rediss://u:***@h:1/0" in out


# -- Kafka client properties --------------------------------------------------------------------

def test_client_properties_are_collected_per_stream_and_state():
    s = Settings.defaults().overlay({
        "jw.sqe.spout.kafka.clientid": "etl", "jw.sqe.spout.kafka.fetchSizeBytes": 1048576,
        f"{CONSUMER_PREFIX}security.protocol": "SASL_SSL",
        f"{CONSUMER_PREFIX}socket.keepalive.enable": True,
        f"{PRODUCER_PREFIX}linger.ms": 7}, "conf.yaml")
    assert consumer_properties(s) == {
        "client.id": "etl", "max.partition.fetch.bytes": "1048576",
        "security.protocol": "SASL_SSL", "socket.keepalive.enable": "true"}
    assert producer_properties(s) == {"linger.ms": "7"}


@pytest.mark.parametrize(("key", "message"), [
    (f"{CONSUMER_PREFIX}enable.auto.commit", "SQE sets the Kafka consumer property "
     "enable.auto.commit itself and it cannot be overridden: offsets live in Spark's checkpoint"),
    (f"{CONSUMER_PREFIX}group.id", "cannot be overridden: SQE names the consumer per source task"),
    (f"{CONSUMER_PREFIX}bootstrap.servers", "set jw.sqe.spout.kafka.brokers instead"),
    (f"{PRODUCER_PREFIX}enable.idempotence", "SQE sets the Kafka producer property "
     "enable.idempotence itself"),
    (f"{PRODUCER_PREFIX}transactional.id", "exactly-once without Kafka transactions"),
])
def test_owned_properties_cannot_be_overridden(key, message):
    with pytest.raises(OptionError) as err:
        Settings.defaults().overlay({key: "x"}, "prod.yaml (SQE)")
    assert str(err.value).startswith(f"prod.yaml (SQE): {key}: ")
    assert message in str(err.value)


def _plan_errors(tmp_path: Path, conf: dict) -> str:
    topo = write_topology(tmp_path, "events", "out")
    with pytest.raises(TopologyError) as err:
        validate(topo, conf=conf)
    return str(err.value)


def test_unknown_and_refused_properties_fail_validation_before_spark(tmp_path, capsys):
    text = _plan_errors(tmp_path, {f"{CONSUMER_PREFIX}fetch.min.bites": "1",
                                   f"{PRODUCER_PREFIX}sasl.jaas.config": "x required;"})
    assert (f"command 1 (CreateStream): {CONSUMER_PREFIX}fetch.min.bites (--conf): librdkafka "
            "has no consumer property fetch.min.bites") in text
    assert (f"{PRODUCER_PREFIX}sasl.jaas.config (--conf): librdkafka has no producer property "
            "sasl.jaas.config (sasl.jaas.config is a Java client property; librdkafka takes "
            "sasl.username and sasl.password") in text

    text = _plan_errors(tmp_path, {f"{CONSUMER_PREFIX}security.protocol": "SSL",
                                   f"{CONSUMER_PREFIX}ssl.ca.location": str(tmp_path / "no.pem"),
                                   f"{CONSUMER_PREFIX}sasl.password": "hunter2"})
    assert "the Kafka consumer properties (--conf) are refused by librdkafka" in text
    assert "ssl.ca.location" in text and "hunter2" not in text

    text = _plan_errors(tmp_path, {"jw.sqe.spout.kafka.clientid": "a",
                                   f"{CONSUMER_PREFIX}client.id": "b"})
    assert ("jw.sqe.spout.kafka.clientid (--conf) and jw.sqe.spout.kafka.consumer.client.id "
            "(--conf) set the same property differently") in text

    text = _plan_errors(tmp_path, {"jw.sqe.spout.kafka.filterReplays.redis.tls.caFile": "ca.pem",
                                   "jw.sqe.state.redis.url": "redis://h:1/0",
                                   "jw.sqe.state.redis.port": 6380})
    assert "TLS files are given but the URL does not use TLS; write rediss://" in text
    assert ("jw.sqe.state.redis.url (--conf) names the server, so jw.sqe.state.redis.port "
            "(--conf) would be ignored") in text

    topo = write_topology(tmp_path, "events", "out")
    rc = main(["validate", str(topo), "--conf", f"{CONSUMER_PREFIX}no.such=1"])
    err = capsys.readouterr().err
    assert rc == 2 and "librdkafka has no consumer property no.such" in err
    assert "Traceback" not in err


# -- Redis: password, ACL user, TLS with client certificates, Sentinel, Cluster -------------------

@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def password_redis(tmp_path_factory):
    """redis-server with requirepass and no persistence."""
    service, port = start_redis(tmp_path_factory.mktemp("pw-redis"),
                                ["--requirepass", "pw-Requirepass-1", "--save", "",
                                 "--appendonly", "no"], {"password": "pw-Requirepass-1"})
    yield port
    service.stop()


@pytest.fixture(scope="module")
def tls_acl_redis(tmp_path_factory, tls_files):
    """redis-server over TLS only, verifying client certificates, with the default user off
    and an ACL user ``sqe``, and AOF persistence on."""
    directory = tmp_path_factory.mktemp("tls-redis")
    args = ["--tls-port", "0", "--tls-cert-file", tls_files.server_cert,
            "--tls-key-file", tls_files.server_key, "--tls-ca-cert-file", tls_files.ca,
            "--tls-auth-clients", "yes", "--user", "default", "off",
            "--user", "sqe", "on", ">acl-Pass-2", "~*", "&*", "+@all",
            "--appendonly", "yes", "--databases", "4"]
    service, port = start_redis(directory, args, {
        "username": "sqe", "password": "acl-Pass-2", "ssl": True,
        "ssl_ca_certs": tls_files.ca, "ssl_certfile": tls_files.client_cert,
        "ssl_keyfile": tls_files.client_key})
    yield port
    service.stop()


def _roundtrip(endpoint: RedisEndpoint, consumer: str) -> None:
    store = HwmStore.from_url(endpoint, consumer, 3600)
    assert store.commit(0, {(7, 1): 41, (7, 2): 5})
    assert not store.commit(0, {(7, 1): 99})  # committed already
    assert store.commit(1, {(7, 1): 42})
    snapshot = store.load()
    assert snapshot.batch_id == 1 and snapshot.hwm == {(7, 1): 42, (7, 2): 5}
    assert store.reset() >= 1  # the marks (the batch id stays)
    assert store.load().hwm == {}
    store.client.close()


@pytest.mark.redis
def test_hwm_store_with_password_and_wrong_password(password_redis, capsys):
    url = f"redis://127.0.0.1:{password_redis}/1"
    _roundtrip(RedisEndpoint(url, password="pw-Requirepass-1"), "pw.S")
    _roundtrip(RedisEndpoint(f"redis://:pw-Requirepass-1@127.0.0.1:{password_redis}/1"), "pw.U")

    rc = main(["hwm", "show", "pw.S", "--redis", url, "--conf",
               "jw.sqe.spout.kafka.filterReplays.redis.password=Wrong-pw-9"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.strip().splitlines() == [
        f"error: HWM store: Redis at {url}: authentication failed (invalid username-password "
        "pair or user is disabled.)"]
    rc = main(["hwm", "show", "pw.S", "--redis",
               f"redis://:Wrong-pw-9@127.0.0.1:{password_redis}/1"])
    err = capsys.readouterr().err
    assert rc == 1 and "Wrong-pw-9" not in err and f"redis://:***@127.0.0.1:{password_redis}/1" in err


@pytest.mark.redis
def test_hwm_store_over_tls_with_acl_user_and_client_certificate(tls_acl_redis, tls_files):
    url = f"rediss://127.0.0.1:{tls_acl_redis}/2"
    endpoint = RedisEndpoint(url, "sqe", "acl-Pass-2", tls_files.ca, tls_files.client_cert,
                             tls_files.client_key)
    _roundtrip(endpoint, "tls.S")
    assert persistence_warning(endpoint.connect(), "the HWM store") is None

    no_cert = RedisEndpoint(url, "sqe", "acl-Pass-2", tls_files.ca)
    with pytest.raises(redis.ConnectionError) as err:
        no_cert.connect().ping()
    assert no_cert.display in no_cert.describe_error(err.value)
    wrong_user = RedisEndpoint(url, "default", "acl-Pass-2", tls_files.ca, tls_files.client_cert,
                               tls_files.client_key)
    with pytest.raises(redis.AuthenticationError) as err:
        wrong_user.connect().ping()
    text = wrong_user.describe_error(err.value)
    assert text.startswith(f"Redis at {url}: authentication failed") and "acl-Pass-2" not in text


@pytest.mark.redis
def test_persistence_off_is_reported(password_redis):
    client = RedisEndpoint(f"redis://127.0.0.1:{password_redis}/0",
                           password="pw-Requirepass-1").connect()
    warning = persistence_warning(client, "the HWM store at X")
    assert warning is not None and warning.startswith("the HWM store at X has no persistence")
    assert "a Redis restart loses the high-water marks" in warning


@pytest.mark.redis
def test_hwm_store_through_sentinel(tmp_path):
    master, port = start_redis(tmp_path / "master", ["--save", "", "--appendonly", "no"], {})
    try:
        sentinel, sentinel_port = start_sentinel(tmp_path / "sentinel", port, "hwm-master")
        try:
            endpoint = RedisEndpoint(f"redis+sentinel://127.0.0.1:{sentinel_port}/hwm-master/3")
            assert endpoint.kind == "sentinel" and endpoint.database == 3
            _roundtrip(endpoint, "sentinel.S")
            store = HwmStore.from_url(endpoint, "sentinel.T", 3600)
            store.commit(0, {(1, 0): 10})
            direct = redis.Redis(host="127.0.0.1", port=port, db=3)
            assert direct.hgetall("sqe:{sentinel.T}:hwm") == {b"1:0": b"10"}
            assert store.same_database(f"redis://127.0.0.1:{port}/3")
            assert not store.same_database(f"redis://127.0.0.1:{port}/2")
        finally:
            sentinel.stop()
    finally:
        master.stop()


@pytest.mark.redis
def test_hwm_store_on_a_redis_cluster(tmp_path):
    services, ports = start_cluster(tmp_path)
    try:
        hosts = ",".join(f"127.0.0.1:{p}" for p in ports[:2])
        endpoint = RedisEndpoint(f"redis+cluster://{hosts}")
        for consumer in ("cluster.A", "cluster.B", "cluster.C", "cluster.D"):
            _roundtrip(endpoint, consumer)  # hash tags put each consumer's keys in one slot
        store = HwmStore.from_url(endpoint, "cluster.A", 3600)
        assert not store.same_database(f"redis://127.0.0.1:{ports[0]}/0")
    finally:
        for service in services:
            service.stop()


# -- end to end: a secured run, the clients' settings, and the secret-leak grep --------------------

SASL_SECRET = "sasl-Secret-" + uuid.uuid4().hex[:8]
REDIS_SECRET = "acl-Pass-2"


def _records(n: int) -> list[tuple[bytes, bytes, int]]:
    return [(StreamMetadata(99, p, i).to_bytes(),
             json.dumps({"id": f"e{p}-{i}", "v": i}).encode(), p)
            for p in range(2) for i in range(n)]


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_secured_run_passes_properties_and_leaks_no_secret(kafka_bootstrap, kafka_topic,
                                                           tls_acl_redis, tls_files, tmp_path):
    source, dest = kafka_topic(2, "src"), kafka_topic(2, "out")
    produce(kafka_bootstrap, source, _records(30))
    # Upstream replays of three records per partition: filtered by the HWMs after batch 0.
    topo = write_topology(tmp_path, source, dest)
    sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "sqe-user", "sasl.password": "${SQE_T_SASL}"}
    conf = tmp_path / "secured.yaml.conf"
    lines = ["SQE:", f"  jw.sqe.spout.kafka.brokers: [{kafka_bootstrap}]",
             f"  jw.sqe.state.kafka.brokers: [{kafka_bootstrap}]",
             f"  jw.sqe.spout.kafka.filterReplays.redis.url: rediss://127.0.0.1:{tls_acl_redis}/1",
             "  jw.sqe.spout.kafka.filterReplays.redis.username: sqe",
             "  jw.sqe.spout.kafka.filterReplays.redis.password: ${SQE_T_REDIS}"]
    for prefix in ("jw.sqe.spout.kafka.filterReplays.redis", "jw.sqe.state.redis"):
        lines += [f"  {prefix}.tls.caFile: {tls_files.ca}",
                  f"  {prefix}.tls.certFile: {tls_files.client_cert}",
                  f"  {prefix}.tls.keyFile: {tls_files.client_key}"]
    lines += [f"  jw.sqe.state.redis.url: rediss://127.0.0.1:{tls_acl_redis}/1",
              "  jw.sqe.state.redis.username: sqe",
              "  jw.sqe.state.redis.password: ${SQE_T_REDIS}",
              f"  {CONSUMER_PREFIX}socket.keepalive.enable: true",
              f"  {PRODUCER_PREFIX}linger.ms: 7"]
    lines += [f"  {p}{k}: {v}" for p in (CONSUMER_PREFIX, PRODUCER_PREFIX) for k, v in sasl.items()]
    events = tmp_path / "events"
    events.mkdir()
    lines += ["Spark:", "  spark.eventLog.enabled: true", f"  spark.eventLog.dir: {events.as_uri()}"]
    conf.write_text("\n".join(lines) + "\n")
    client_log = tmp_path / "clients.jsonl"
    env = {**os.environ, "SQE_T_SASL": SASL_SECRET, "SQE_T_REDIS": REDIS_SECRET,
           "SQE_KAFKA_CLIENT_LOG": str(client_log), "PYSPARK_PYTHON": sys.executable}
    checkpoint = tmp_path / "ck"

    def sqe(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sqe.cli.main", *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)

    runs = [sqe("validate", str(topo), "--config", str(conf)),
            sqe("options", "--show", "--config", str(conf)),
            sqe("run", str(topo), "--config", str(conf), "--checkpoint", str(checkpoint),
                "--once")]
    assert runs[0].returncode == 0, runs[0].stderr
    assert runs[2].returncode == 0, runs[2].stderr
    produce(kafka_bootstrap, source, [r for r in _records(30) if r[0][-8:] in (
        (27).to_bytes(8, "big"), (28).to_bytes(8, "big"), (29).to_bytes(8, "big"))])
    runs.append(sqe("run", str(topo), "--config", str(conf), "--checkpoint", str(checkpoint),
                    "--once"))
    assert runs[3].returncode == 0, runs[3].stderr
    assert "6 replays dropped" in runs[3].stdout

    # The run worked through TLS + ACL Redis and SASL Kafka clients.
    state = RedisEndpoint(f"rediss://127.0.0.1:{tls_acl_redis}/1", "sqe", REDIS_SECRET,
                          tls_files.ca, tls_files.client_cert, tls_files.client_key).connect()
    assert state.hlen("seen") == 60
    assert len(read_topic(kafka_bootstrap, dest)) == 60

    # Every client, executors' included, was built with the properties; secrets masked.
    clients = [json.loads(line) for line in client_log.read_text().splitlines()]
    driver_pids = {c["pid"] for c in clients if c["role"] == "metadata"}
    readers = [c for c in clients if c["role"].endswith(" reader")]
    writers = [c for c in clients if c["role"] == f"Kafka state {dest}"]
    assert readers and writers and driver_pids
    assert any(c["pid"] not in driver_pids for c in readers + writers)  # Python workers
    for c in [*readers, *writers, *(c for c in clients if c["role"] == "metadata")]:
        assert {k: c["conf"].get(k) for k in sasl} == {**sasl, "sasl.password": "***"}, c
    assert all(c["conf"]["socket.keepalive.enable"] == "true" for c in readers)
    assert all(c["conf"]["linger.ms"] == "7" and c["conf"]["enable.idempotence"] is True
               for c in writers)

    # The grep: nothing any command printed or any file the run wrote holds a secret.
    written = [r.stdout + r.stderr for r in runs]
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p != conf]
    assert any(p.name.startswith("app-") or "local-" in p.name for p in events.iterdir())
    for secret in (SASL_SECRET, REDIS_SECRET):
        assert not [t for t in written if secret in t]
        leaked = [str(p) for p in files if secret.encode() in p.read_bytes()]
        assert not leaked, f"{secret} found in {leaked}"
    assert "***" in runs[1].stdout


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_run_warns_without_persistence_and_fails_in_one_line_on_a_wrong_password(
        spark, kafka_bootstrap, kafka_topic, password_redis, tmp_path, caplog):
    from sqe.engine.run.runner import run_topology
    from sqe.errors import SqeError

    source = kafka_topic(1, "src")
    produce(kafka_bootstrap, source, _records(5)[:5])
    url = f"redis://127.0.0.1:{password_redis}/2"
    conf = {"jw.sqe.spout.kafka.brokers": kafka_bootstrap,
            "jw.sqe.spout.kafka.filterReplays.redis.url": url,
            "jw.sqe.spout.kafka.filterReplays.redis.password": "pw-Requirepass-1",
            "jw.sqe.state.redis.url": url, "jw.sqe.state.redis.password": "pw-Requirepass-1"}
    topo = write_topology(tmp_path, source)
    caplog.set_level("WARNING", logger="sqe")
    run_topology(plan_topology(load_topology(topo), conf=conf), spark, "pw", tmp_path / "a",
                 "once")
    assert any(f"the HWM store at {url} has no persistence" in r.getMessage()
               for r in caplog.records)
    client = RedisEndpoint(url, password="pw-Requirepass-1").connect()
    assert client.hlen("seen") == 5

    bad = {**conf, "jw.sqe.spout.kafka.filterReplays.redis.password": "Wrong-pw-9",
           "jw.sqe.state.redis.password": "Wrong-pw-9"}
    with pytest.raises(SqeError) as err:  # when the run looks at its stores, before reading
        run_topology(plan_topology(load_topology(topo), conf=bad), spark, "pw", tmp_path / "b",
                     "once")
    text = str(err.value)
    assert "\n" not in text and "Wrong-pw-9" not in text
    assert f"Redis at {url}: authentication failed" in text


SECURE_ENV = "KAFKA_SECURE_BOOTSTRAP_SERVERS"
NO_SECURE_BROKER = (
    f"no SASL_SSL/SCRAM broker here: set {SECURE_ENV} and KAFKA_SECURE_PROPERTIES (JSON "
    "librdkafka properties, e.g. security.protocol, sasl.mechanism, sasl.username, "
    "sasl.password, ssl.ca.location). The pip broker noida-db speaks SASL/PLAIN without "
    "checking credentials (test_secured_run_passes_properties_and_leaks_no_secret uses it), "
    "fails SCRAM ('Server nonce in server-first-message: could not find attribute (r)') and "
    "has no TLS listener")


@pytest.mark.kafka
@pytest.mark.skipif(not os.environ.get(SECURE_ENV), reason=NO_SECURE_BROKER)
def test_source_and_state_clients_against_a_secured_broker():
    """Against a real SASL_SSL cluster: produce with the Kafka state's Sender and read the
    range back with the source's executor-side reader, both built from the properties."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from sqe.clients.kafka import Sender, new_producer, producer_conf
    from sqe.source.kafka import read_range
    from sqe.source.kafka.config import RangePartition, SourceConfig

    brokers = os.environ[SECURE_ENV]
    props = json.loads(os.environ.get("KAFKA_SECURE_PROPERTIES", "{}"))
    topic = f"sqe-secure-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": brokers, **props})
    admin.create_topics([NewTopic(topic, 1, -1)])[topic].result(timeout=60)
    sender = Sender(new_producer(producer_conf(brokers, props), "test"))
    for key, value, _ in _records(20)[:20]:
        sender.send(topic, value, key, 0)
    assert sender.finish() is None
    cfg = SourceConfig.from_options({"topic": topic, "brokers": brokers,
                                     **{f"consumer.{k}": v for k, v in props.items()}})
    rows = sum(b.num_rows for b in read_range(cfg, RangePartition(topic, 0, 0, 20)))
    assert rows == 20


def test_spark_redacts_the_value_of_every_secret_option_in_its_plans_and_ui():
    import re

    from sqe.config.registry import REGISTRY
    from sqe.secrets import SPARK_REDACTION_REGEX

    secret = [key for key, option in REGISTRY.items() if option.secret]
    assert "jw.sqe.spout.schemaRegistry.basic.auth.user.info" in secret
    assert [k for k in secret if not re.search(SPARK_REDACTION_REGEX, k)] == []
