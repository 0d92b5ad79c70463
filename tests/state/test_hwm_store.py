"""The Redis HWM store against a real Redis: fencing, max-merge, TTL, int64 precision."""

from __future__ import annotations

import time

import pytest
import redis

from sqe.errors import StoreBehind
from sqe.ledger.hwm import HwmStore, StaleBatchError


@pytest.fixture
def store(redis_url):
    s = HwmStore.from_url(redis_url, "load/Enriched", ttl_seconds=3600)
    yield s
    s.client.close()


def test_empty_store(store):
    snap = store.load()
    assert snap.batch_id is None and snap.hwm == {}


def test_commit_merges_with_max_and_records_the_batch(store):
    assert store.commit(0, {(1, 0): 10, (1, 1): 5}) is True
    assert store.commit(1, {(1, 0): 7, (2, 0): 3}) is True  # 7 < 10: the mark stays
    snap = store.load()
    assert snap.batch_id == 1
    assert snap.hwm == {(1, 0): 10, (1, 1): 5, (2, 0): 3}


def test_a_committed_batch_is_skipped_and_an_older_one_fenced(store):
    store.commit(5, {(1, 0): 10})
    assert store.commit(5, {(1, 0): 99}) is False  # Spark re-ran batch 5
    with pytest.raises(StaleBatchError, match="batch 4 of consumer .* is older than batch 5, "
                                              "which another writer of consumer "
                                              "'load/Enriched' committed;"):
        store.commit(4, {(1, 0): 50})
    assert store.load().hwm == {(1, 0): 10}  # the refused writer changed nothing


def test_a_store_that_lost_the_batch_its_writer_saw_refuses_the_commit(store):
    """A store that loses commits while a batch runs (after its admission) refuses its commit,
    atomically: committing the batch's marks alone would leave the lost pairs' marks out."""
    store.commit(0, {(1, 0): 10, (2, 0): 4})
    assert store.admit(1, seen=0)
    store.client.delete(*store.keys)  # restarted empty, mid-batch
    with pytest.raises(StoreBehind, match="'?load/Enriched'?: the HWM store at .* holds no "
                       "batch, but batch 0 was committed there: the store lost commits"):
        store.commit(1, {(2, 0): 6}, seen=0)
    assert store.load().batch_id is None and store.load().hwm == {}
    with pytest.raises(StoreBehind, match="and batch 1 stops before reading anything"):
        store.admit(1, seen=0)
    store.commit(0, {(1, 0): 10, (2, 0): 4})  # rebuilt
    assert store.commit(1, {(2, 0): 6}, seen=0) is True
    assert store.load().hwm == {(1, 0): 10, (2, 0): 6}


def test_int64_offsets_keep_full_precision(store):
    big = 2**63 - 2
    store.commit(0, {(-(2**63), -1): big - 1, (0, 0): -(2**62)})
    store.commit(1, {(-(2**63), -1): big, (0, 0): -(2**62) - 1})
    assert store.load().hwm == {(-(2**63), -1): big, (0, 0): -(2**62)}
    store.commit(2, {(-(2**63), -1): big - 1})  # differs from big only past 2**53
    assert store.load().hwm[(-(2**63), -1)] == big


def test_keys_share_one_cluster_slot_and_consumers_are_isolated(store, redis_url):
    tags = {k.split("{")[1].split("}")[0] for k in store.keys}
    assert tags == {"load/Enriched"}
    other = HwmStore.from_url(redis_url, "other/Stream", ttl_seconds=3600)
    store.commit(3, {(1, 0): 1})
    assert other.load().batch_id is None
    other.client.close()


def test_entries_older_than_the_ttl_expire(redis_url):
    store = HwmStore.from_url(redis_url, "ttl/Stream", ttl_seconds=1)
    store.commit(0, {(1, 0): 10})
    assert store.load().hwm == {(1, 0): 10}
    time.sleep(2.1)
    assert store.load().hwm == {}  # expired entries are not served
    store.commit(1, {(2, 0): 1})  # and a commit deletes them
    assert redis.Redis.from_url(redis_url).hkeys(store.keys[0]) == [b"2:0"]
    store.client.close()


def test_a_commit_expires_from_the_time_index_a_bounded_number_of_marks(redis_url):
    """Expiry reads the marks oldest first from a sorted set and stops at 1,000 per commit:
    what a commit costs does not grow with what is stored."""
    store = HwmStore.from_url(redis_url, "bounded/Stream", ttl_seconds=3600)
    client = redis.Redis.from_url(redis_url)
    store.commit(0, {(1, p): 5 for p in range(2500)})
    old = int(client.time()[0]) * 1000 - 7_200_000  # two hours ago: past the TTL
    client.zadd(store.keys[4], {f"1:{p}": old for p in range(2500)})
    assert store.load().hwm == {}  # not served once past the TTL
    store.commit(1, {(2, 0): 1})
    assert client.hlen(store.keys[0]) == 1501 and client.zcard(store.keys[4]) == 1501
    store.commit(2, {(2, 0): 2})
    store.commit(3, {(2, 0): 3})
    assert client.hkeys(store.keys[0]) == [b"2:0"] and client.zcard(store.keys[4]) == 1
    store.client.close()
    client.close()


def test_a_store_of_the_old_layout_is_read_and_moved_to_the_time_index(redis_url):
    """Stores written before the time index kept update times in a hash: they are read as
    they are, and the first commit moves them into the index (live and expired alike)."""
    store = HwmStore.from_url(redis_url, "old/Stream", ttl_seconds=3600)
    client = redis.Redis.from_url(redis_url)
    now = int(client.time()[0]) * 1000
    client.hset(store.keys[0], mapping={"7:0": 41, "7:1": 12, "8:0": 3})
    client.hset(store.keys[1], mapping={"7:0": now, "7:1": now - 10_000_000, "8:0": now})
    client.set(store.keys[2], 4)
    snapshot = store.load()
    assert (snapshot.batch_id, snapshot.hwm) == (4, {(7, 0): 41, (8, 0): 3})
    assert store.marks([(7, 0), (7, 1), (9, 9)]) == {(7, 0): 41}  # 7:1 is past the TTL
    assert store.last_commit().batch_id == 4 and store.admit(5) is True
    assert store.commit(5, {(7, 0): 50}) is True
    assert not client.exists(store.keys[1])
    assert client.zrange(store.keys[4], 0, -1) == [b"8:0", b"7:0"]
    assert store.load().hwm == {(7, 0): 50, (8, 0): 3}
    store.client.close()
    client.close()


def test_a_batch_reads_only_the_marks_it_asks_for(redis_url):
    """``marks`` answers for the pairs asked (live marks only, int64 exact) with work that
    grows with what is asked; ``last_commit`` reads no mark at all."""
    store = HwmStore.from_url(redis_url, "asked/Stream", ttl_seconds=3600)
    client = redis.Redis.from_url(redis_url)
    big = 2**63 - 2
    store.commit(3, {(1, 0): 10, (1, 1): big, (2, 0): 7, **{(9, p): 1 for p in range(3000)}},
                 offsets='{"0": 5}', checkpoint="/ck")
    client.zadd(store.keys[4], {"2:0": int(client.time()[0]) * 1000 - 7_200_000})  # expired
    assert store.marks([(1, 0), (1, 1), (2, 0), (5, 5), (1, 0)]) == {(1, 0): 10, (1, 1): big}
    assert store.marks([]) == {}
    commit = store.last_commit()
    assert (commit.batch_id, commit.offsets, commit.checkpoint) == (3, '{"0": 5}', "/ck")
    assert store.count() == 3003
    assert store.admit(3, '{"0": 5}') is False and store.admit(4, '{"0": 9}') is True
    with pytest.raises(StaleBatchError):
        store.admit(2)
    empty = HwmStore.from_url(redis_url, "asked/Empty", ttl_seconds=3600)
    assert empty.last_commit() is None and empty.marks([(1, 0)]) == {} and empty.count() == 0
    for s in (store, empty):
        s.client.close()
    client.close()


def test_bad_arguments():
    client = redis.Redis()
    with pytest.raises(ValueError, match="at least 1 second"):
        HwmStore(client, "c", 0)
    with pytest.raises(ValueError, match="non-empty consumer"):
        HwmStore(client, "", 10)


def test_cli_shows_and_resets_a_consumer(redis_url, capsys):
    from sqe.cli.main import main

    store = HwmStore.from_url(redis_url, "cli.S", 3600)
    store.commit(3, {(5, 1): 42})
    assert main(["hwm", "show", "cli.S", "--redis", redis_url]) == 0
    out = capsys.readouterr().out
    assert "committed batch 3, 1 high-water mark(s)" in out and "pid=5 partition=1 offset=42" in out
    # the TTL of the config: a mark 2 s old is past a TTL of 1 s
    client = redis.Redis.from_url(redis_url)
    client.zadd(store.keys[4], {"5:1": int(client.time()[0]) * 1000 - 2_000})
    client.close()
    assert main(["hwm", "show", "cli.S", "--redis", redis_url, "--conf",
                 "jw.sqe.spout.kafka.filterReplays.metadata.ttl=1"]) == 0
    assert "committed batch 3, 0 high-water mark(s)" in capsys.readouterr().out
    assert main(["hwm", "reset", "cli.S", "--redis", redis_url]) == 2
    assert "replaced by sqe reset TOPOLOGY" in capsys.readouterr().err
    assert store.load().batch_id == 3  # nothing was changed


def test_reset_forgets_marks_and_offsets_and_keeps_the_batch_id(store):
    store.commit(3, {(5, 1): 42}, offsets='{"0": 7}', checkpoint="/ck/S")
    commit = store.load().commit
    assert (commit.batch_id, commit.offsets, commit.checkpoint, commit.reset) == (
        3, '{"0": 7}', "/ck/S", False)
    tag = "sqe:{load/Enriched}"
    store.client.set(f"{tag}:read:t/0/0/9", "{}")  # what a source task reported reading
    store.client.sadd(f"{tag}:reads:q:3", f"{tag}:read:t/0/0/9")
    assert store.reset() == 1
    assert store.client.keys(f"{tag}:read*") == []
    after = store.load()
    assert after.hwm == {} and after.commit.batch_id == 3
    assert (after.commit.offsets, after.commit.reset) == (None, True)
    with pytest.raises(StaleBatchError):  # ids a state has seen never come again
        store.commit(2, {})
    assert store.commit(4, {(5, 1): 1}, offsets='{"0": 9}') is True
    assert store.load().commit.reset is False


def _stage(store, batch: int, index: int, rows: dict[bytes, bytes], checkpoint: str = "/ck/a"
           ) -> str:
    key = store.stage_key(batch, checkpoint, index)
    store.client.hset(key, mapping=rows)
    return key


def test_staged_rows_land_with_the_commit_and_only_then(store, redis_url):
    from sqe.ledger.hwm import Stage

    hash_key = _stage(store, 0, 0, {b"2:EUe1": b"100", b"2:EUe2": b"",
                                    "5:δx:ye3".encode(): b"\xff\x00"})
    str_key = _stage(store, 0, 1, {b"4:k:1:": b"v1"})
    client = redis.Redis.from_url(redis_url)
    assert client.exists("EU", "δx:y", "k:1:") == 0  # staged, not applied
    assert store.commit(0, {(1, 0): 9}, [Stage(hash_key, "HASH", 60), Stage(str_key, "STRING")])
    assert client.hgetall("EU") == {b"e1": b"100", b"e2": b""}
    assert client.hgetall("δx:y") == {b"e3": b"\xff\x00"}
    assert client.get("k:1:") == b"v1"
    assert 0 < client.ttl("EU") <= 60 and client.ttl("k:1:") == -1
    assert client.exists(hash_key, str_key) == 0  # the stages are gone
    assert (store.load().batch_id, store.load().hwm) == (0, {(1, 0): 9})


def test_a_refused_or_repeated_commit_applies_no_staged_row(store, redis_url):
    from sqe.ledger.hwm import Stage

    store.commit(5, {(1, 0): 10})
    client = redis.Redis.from_url(redis_url)
    stale = _stage(store, 4, 0, {b"1:Xa": b"1"})
    with pytest.raises(StaleBatchError):
        store.commit(4, {(1, 0): 50}, [Stage(stale, "HASH")])
    again = _stage(store, 5, 0, {b"1:Xb": b"1"})
    assert store.commit(5, {(1, 0): 60}, [Stage(again, "HASH")]) is False
    assert client.exists("X") == 0 and client.exists(again, stale) == 0
    assert store.load().hwm == {(1, 0): 10}
    assert store.reset() == 1  # the mark: the refused writer left no stage
    assert sorted(client.keys("*")) == [f"sqe:{{load/Enriched}}:{k}".encode()
                                        for k in ("applied", "batch", "commit")]


def test_a_big_stage_is_applied_after_its_commit_in_steps_of_a_bounded_size(
        store, redis_url, monkeypatch):
    """However many rows a batch stages, no step of its commit holds the server for more than
    APPLY_ROWS rows: the commit script records the stage, and bounded steps apply it."""
    from sqe.ledger.hwm import APPLY_ROWS, Stage

    n = 5 * APPLY_ROWS + 17
    key = _stage(store, 0, 0, {f"1:H{i}".encode(): str(i).encode() for i in range(n)})
    store.client.expire(key, 86_400)
    steps: list[int] = []
    apply = store._apply

    def counted(keys, args):
        before = store.client.hlen(key)
        left = apply(keys=keys, args=args)
        steps.append(before - store.client.hlen(key))
        return left

    monkeypatch.setattr(store, "_apply", counted)
    client = redis.Redis.from_url(redis_url)
    assert store.commit(0, {(1, 0): 9}, [Stage(key, "HASH")]) is True
    # about APPLY_ROWS a step (a scan's page comes whole), and no row twice
    assert sum(steps) == n and max(steps) <= 2 * APPLY_ROWS and len(steps) <= 8, steps
    assert client.hlen("H") == n and client.hget("H", "42") == b"42"
    assert client.exists(key, *store.apply_keys[:1]) == 0
    assert client.get(store.apply_keys[1]) == b"0"  # the last batch whose rows are all in


def test_a_commit_left_applying_is_finished_before_anything_else(store, redis_url, monkeypatch):
    """The process dies after the commit, with rows still to apply: the next batch's start
    (or its commit) applies them first, so a later batch's row of the same key wins."""
    from sqe.ledger import hwm
    from sqe.ledger.hwm import Stage

    monkeypatch.setattr(hwm, "APPLY_ROWS", 10)
    first = _stage(store, 0, 0, {f"1:K{i}".encode(): b"old" for i in range(1000)})
    apply, calls = store._apply, []

    def dies(keys, args):
        calls.append(1)
        if len(calls) > 1:
            raise redis.ConnectionError("gone")
        return apply(keys=keys, args=args)

    monkeypatch.setattr(store, "_apply", dies)
    with pytest.raises(redis.ConnectionError):
        store.commit(0, {(1, 0): 9}, [Stage(first, "HASH")])
    client = redis.Redis.from_url(redis_url)
    assert store.load().batch_id == 0  # committed, 10 of its rows applied
    assert 10 <= client.hlen("K") < 100 and client.exists(store.apply_keys[0]) == 1
    assert client.ttl(first) == -1  # a stage to apply never expires

    later = HwmStore.from_url(redis_url, "load/Enriched", ttl_seconds=3600)
    second = _stage(later, 1, 0, {b"1:K3": b"new", b"1:K4000": b"new"})
    assert later.commit(1, {(1, 0): 12}, [Stage(second, "HASH")]) is True
    assert client.hgetall("K") == {**{f"{i}".encode(): b"old" for i in range(1000)},
                                   b"3": b"new", b"4000": b"new"}
    assert client.get(later.apply_keys[1]) == b"1" and client.exists(later.apply_keys[0]) == 0

    third = _stage(later, 2, 0, {b"1:K5": b"third"})  # once more, dying before any step
    monkeypatch.setattr(later, "_apply", lambda keys, args: (_ for _ in ()).throw(
        redis.ConnectionError("gone")))
    with pytest.raises(redis.ConnectionError):
        later.commit(2, {(1, 0): 13}, [Stage(third, "HASH")])
    monkeypatch.undo()
    assert client.hget("K", "5") == b"old"
    assert later.admit(3) is True  # the next batch's start applies it
    assert client.hget("K", "5") == b"third" and client.exists(later.apply_keys[0]) == 0
    later.client.close()


def test_same_database_compares_server_and_index(store, redis_url):
    base, db = redis_url.rsplit("/", 1)
    assert store.same_database(redis_url)
    assert store.same_database(base.replace("127.0.0.1", "localhost") + "/" + db)
    assert not store.same_database(f"{base}/{int(db) + 1 if int(db) < 15 else 0}")


def test_a_writer_refused_at_commit_leaves_no_stage_and_names_the_other(store, redis_url):
    """Two writers of one consumer on separate checkpoints, each with its own connection: the one
    behind is refused by the commit script, which deletes its stages in the same step."""
    from sqe.ledger.hwm import Stage

    ahead = HwmStore.from_url(redis_url, "load/Enriched", ttl_seconds=3600)
    ahead.commit(5, {(1, 0): 10}, offsets='{"0": 10}', checkpoint="/ck/a")
    client = redis.Redis.from_url(redis_url)
    other = ('which another writer of consumer \'load/Enriched\' committed (the run on '
             'checkpoint /ck/a, ending at source offsets {"0": 10}); that run is ahead')

    older = _stage(store, 4, 0, {b"1:Xa": b"1"}, "/ck/b")
    with pytest.raises(StaleBatchError) as refused:
        store.commit(4, {(1, 0): 50}, [Stage(older, "HASH")], '{"0": 50}', "/ck/b")
    assert "batch 4 of consumer 'load/Enriched' is older than batch 5, " + other \
        in str(refused.value)

    same = _stage(store, 5, 0, {b"1:Xb": b"1"}, "/ck/b")
    with pytest.raises(StaleBatchError) as refused:  # batch 5, but another checkpoint's
        store.commit(5, {(1, 0): 11}, [Stage(same, "HASH")], '{"0": 11}', "/ck/b")
    assert ('batch 5 of consumer \'load/Enriched\' ends at other source offsets ({"0": 11}) '
            "than batch 5, " + other) in str(refused.value)

    rerun = _stage(ahead, 5, 0, {b"1:Xc": b"1"}, "/ck/a")  # Spark re-ran batch 5
    assert ahead.commit(5, {(1, 0): 10}, [Stage(rerun, "HASH")], '{ "0" : 10 }', "/ck/a") is False
    assert client.exists("X", older, same, rerun) == 0
    assert store.load().hwm == {(1, 0): 10}
    assert sorted(client.keys("*")) == [f"sqe:{{load/Enriched}}:{k}".encode()
                                        for k in ("age", "applied", "batch", "commit", "hwm")]
    ahead.client.close()


def test_each_checkpoint_stages_apart_and_drops_only_its_own(store, redis_url):
    mine = _stage(store, 3, 0, {b"1:Ya": b"1"}, "/ck/a")
    theirs = _stage(store, 3, 0, {b"1:Yb": b"2"}, "hdfs://nn/ck/b")
    assert mine != theirs and mine.startswith("sqe:{load/Enriched}:stage:3:")
    assert store.drop_stages(3, "/ck/a", 2) == 1
    assert redis.Redis.from_url(redis_url).keys("sqe:*:stage:*") == [theirs.encode()]


def test_runs_on_one_checkpoint_stage_apart_and_a_commit_deletes_what_none_can_commit(
        store, redis_url):
    """Two runs of one checkpoint write batch 3 at once (and a third stopped in batch 2): the
    second's opening leaves the first's stage alone, the first's commit deletes the stages no
    commit can take any more, and nothing deletes rows left to apply."""
    from sqe.ledger.hwm import Stage
    from sqe.ledger.stages import new_writer

    client = redis.Redis.from_url(redis_url)
    first, second, stopped = (new_writer("/ck/a") for _ in range(3))

    def opened(batch: int, writer: str, row: str) -> str:
        key = store.stage_key(batch, writer, 0)
        store.stages.open(key, batch)
        client.hset(key, row, "1")
        return key

    mine, left = opened(3, first, "1:Ya"), opened(2, stopped, "1:Yc")
    theirs, ahead = opened(3, second, "1:Ya"), opened(4, second, "1:Yd")
    assert len({mine, theirs, left, ahead}) == 4 and client.hgetall(mine) == {b"1:Ya": b"1"}
    assert store.commit(3, {(1, 0): 3}, [Stage(mine, "HASH")], '{"0": 3}', apply=False)
    assert client.exists(theirs, left) == 0 and client.exists(mine, ahead) == 2
    assert store.drop_stages(3, first, 1) == 0 and client.exists(mine) == 1  # left to apply
    store.finish_applying()
    assert client.hgetall("Y") == {b"a": b"1"} and client.exists(mine) == 0
    client.hset(theirs, "1:Yb", "1")  # the second run's task comes late: its commit is too
    assert store.commit(3, {(1, 0): 3}, [Stage(theirs, "HASH")], '{"0": 3}') is False
    assert client.exists(theirs) == 0 and client.hgetall("Y") == {b"a": b"1"}
    assert client.zrange(store.stages.register, 0, -1) == [ahead.encode()]
    assert store.reset() == 2 and client.exists(ahead, store.stages.register) == 0


def test_the_marks_updated_last_with_their_age_for_sqe_status(redis_url):
    """``recent`` gives the marks updated last, newest first, with their age by the server's
    clock, and how many are live, in both layouts; it reads what it shows, plus a count."""
    store = HwmStore.from_url(redis_url, "recent/Stream", ttl_seconds=3600)
    client = redis.Redis.from_url(redis_url)
    now = int(client.time()[0]) * 1000
    client.hset(store.keys[0], mapping={"7:0": 41, "7:1": 12, "8:0": 3})  # the old layout
    client.hset(store.keys[1], mapping={"7:0": now - 5_000, "7:1": now - 10_000_000, "8:0": now})
    marks, live = store.recent(5)
    assert live == 2 and [(pair, offset) for pair, offset, _ in marks] == [((8, 0), 3),
                                                                          ((7, 0), 41)]
    assert 4.0 <= marks[1][2] < 60
    store.commit(1, {(7, 0): 50, **{(9, p): 1 for p in range(100)}})  # into the time index
    client.zadd(store.keys[4], {"8:0": now - 30_000})
    marks, live = store.recent(2)
    assert live == 102 and len(marks) == 2 and all(age < 60 for _, _, age in marks)
    assert ((8, 0), 3) not in [(pair, offset) for pair, offset, _ in marks]  # not among the last
    assert store.recent(0) == ([], 102)
    store.client.close()
    client.close()


@pytest.mark.spark
def test_one_job_stages_rows_of_several_states_even_when_a_task_holds_both(
        spark, store, redis_url):
    from sqe.clients.redis_endpoint import RedisEndpoint
    from sqe.ledger.hwm import Stage
    from state.redis.sink import STAGE_TTL_SECONDS, stage_all
    from state.sink import Staged

    hash_key, str_key = store.stage_key(0, "/ck/a", 0), store.stage_key(0, "/ck/a", 1)
    rows = spark.createDataFrame(
        [(hash_key, "2:EUe1", bytearray(b"100")), (str_key, "4:k:1:", bytearray(b"v1")),
         (hash_key, "2:EUe2", bytearray(b"\xff\x00"))],
        "_stage string, _rf string, _rv binary").coalesce(1)  # one task, both stages
    endpoint = RedisEndpoint(redis_url)
    by_region = Staged("by_region", hash_key, rows.where(rows._stage == hash_key), endpoint,
                       stage_all)
    both = Staged("both", "", rows, endpoint, stage_all)  # a task whose rows name two hashes
    assert stage_all([by_region, both]) == {hash_key: 4, str_key: 1}  # rows per hash sent
    client = redis.Redis.from_url(redis_url)
    assert client.hgetall(hash_key) == {b"2:EUe1": b"100", b"2:EUe2": b"\xff\x00"}
    assert 0 < client.ttl(hash_key) <= STAGE_TTL_SECONDS and 0 < client.ttl(str_key)
    assert store.commit(0, {(1, 0): 9}, [Stage(hash_key, "HASH"), Stage(str_key, "STRING")])
    assert client.hgetall("EU") == {b"e1": b"100", b"e2": b"\xff\x00"}
    assert client.get("k:1:") == b"v1"
    client.close()
