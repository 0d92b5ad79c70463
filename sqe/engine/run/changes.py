"""What a checkpoint last ran, and what a run does with each change made to the topology since.

Each stream keeps ``<checkpoint>/<streamName>/sqe-topology.json``, written when a
run starts (:class:`StreamRecord`): its consumer (topology name and stream name),
what it reads (reader, topic, ``filterReplays`` and the HWM store), the states its
queries write, and the layout each Kafka state places records with
(:mod:`state.kafka.layout`).  Before a run reads anything, :func:`review` holds
the topology against those records, change by change:

* **continues exactly-once**: a query's ``select``, ``where`` or fields changed, a query
  added or removed (a new one's state gets the records of the run's batches on), a stream
  added or removed, ``maxRecordsPerBatch`` or other read limits changed, ``filterReplays``
  turned on; a Kafka state's topic gained partitions (it keeps placing records over the
  ones it used, and says so);
* **refused before anything is read**, in one sentence each: a stream renamed (its
  checkpoint and its stores' records are under the old name), the topology renamed on the
  same checkpoint, the source topic or reader changed, an HWM store that holds nothing of
  a consumer that committed to another one, and a Kafka state whose partitioner, key
  type or chunking changed (readers behind on the old layout would lose records) unless
  the run adopts the new layout (``--adopt-layout``, after the readers caught up);
* said as a warning: ``filterReplays`` turned off (replays pass from then on).

The records are written by :func:`write_records` once every check passed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sqe.engine.batch.pipeline import StreamPipeline
from sqe.engine.spark.checkpoint import CheckpointFiles, StreamCheckpoint
from sqe.errors import TopologyChanged
from sqe.ledger.commits import Commit
from state.kafka.layout import KafkaLayout, grown_topic
from state.kafka.sink import KafkaSink

__all__ = ["RECORD", "Review", "StreamRecord", "TopologyChanged", "record_of", "review",
           "write_records"]

#: The file in each stream's checkpoint folder that says what last ran on it.
RECORD = "sqe-topology.json"



@dataclass(frozen=True)
class StreamRecord:
    """What one stream of a topology was when a run on its checkpoint started."""

    consumer: str  # <topology name>.<streamName>
    reader: str  # sqe-kafka | native | fixed
    topic: str | None  # the source topic (None: a FIXED stream)
    filter_replays: bool
    hwm_store: str | None  # the HWM store's address without secrets (None: no filterReplays)
    states: tuple[str, ...] = ()  # "<STATE> <objectName>" of each query with a state
    kafka: Mapping[str, KafkaLayout] = field(default_factory=dict)  # by the state's topic

    def to_json(self) -> str:
        """The record as its file holds it."""
        return json.dumps({
            "version": 1, "consumer": self.consumer, "reader": self.reader, "topic": self.topic,
            "filterReplays": self.filter_replays, "hwmStore": self.hwm_store,
            "states": list(self.states),
            "kafka": {t: layout.to_json() for t, layout in sorted(self.kafka.items())},
        }, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> StreamRecord:
        """A record written by :meth:`to_json` (ValueError when it is not one)."""
        data = json.loads(text)
        if not isinstance(data, dict) or "consumer" not in data:
            raise ValueError("not an SQE topology record")
        return cls(str(data["consumer"]), str(data.get("reader", "sqe-kafka")),
                   data.get("topic"), bool(data.get("filterReplays", False)),
                   data.get("hwmStore"), tuple(data.get("states", ())),
                   {t: KafkaLayout.from_json(v) for t, v in data.get("kafka", {}).items()})

    @property
    def source(self) -> str:
        """What the stream reads, for messages."""
        return f"topic {self.topic}" if self.topic else "its FIXED rows"


def _reader(p: StreamPipeline) -> str:
    return "fixed" if p.fixed is not None else ("native" if p.native else "sqe-kafka")


def _kafka_sinks(p: StreamPipeline) -> list[KafkaSink]:
    return [s.sink for s in p.steps if isinstance(s.sink, KafkaSink)]


def record_of(p: StreamPipeline, layouts: Mapping[str, KafkaLayout]) -> StreamRecord:
    """The record of pipeline ``p``, its Kafka states placing records by ``layouts``."""
    states = tuple(f"{s.sink.state_name} {s.query.insertInto.objectName}"
                   for s in p.steps if s.sink is not None)
    return StreamRecord(p.consumer, _reader(p), p.stream.objectName if p.fixed is None else None,
                        p.filtering, p.settings.hwm_store.display if p.filtering else None,
                        states, dict(layouts))


def _read(files: CheckpointFiles, stream: str) -> StreamRecord | None:
    text = files.read(f"{stream}/{RECORD}")
    if text is None:
        return None
    try:
        return StreamRecord.from_json(text)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise TopologyChanged(f"{files.location}/{stream}/{RECORD} cannot be read ({exc}); it "
                              "says what last ran on this checkpoint: restore it, or delete it "
                              "to take the topology as it is now") from None


@dataclass
class Review:
    """What :func:`review` found: the layouts each stream's Kafka states place records by,
    what to say (``notes``, ``warnings``) and what is refused."""

    layouts: dict[str, dict[str, KafkaLayout]] = field(default_factory=dict)  # by stream
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)


def review(files: CheckpointFiles, pipelines: Sequence[StreamPipeline],
           checkpoints: Mapping[str, StreamCheckpoint], adopt: bool,
           hwm_commit: Callable[[StreamPipeline], Commit | None]) -> Review:
    """Hold ``pipelines`` against what their checkpoint (``files``: its root; ``checkpoints``:
    each stream's, by name) last ran; raises :class:`TopologyChanged` with every refused
    change, one sentence each.  ``adopt``: the Kafka states take their topics' partition
    counts and their new partitioners, key types and chunking; ``hwm_commit`` reads a
    stream's HWM store's record of its last batch."""
    out = Review()
    names = {p.stream.streamName for p in pipelines}
    records = {p.stream.streamName: _read(files, p.stream.streamName) for p in pipelines}
    departed = {n: r for n in files.names("") if n not in names
                and (r := _read(files, n)) is not None}
    renamed: set[str] = set()
    for p in pipelines:
        name, old = p.stream.streamName, records[p.stream.streamName]
        ran = not checkpoints[name].is_empty()
        if old is None and not ran:
            renamed |= _renamed(p, departed, files.location, out)
        if old is not None and ran:
            committed = checkpoints[name].last_committed() is not None
            _same_stream(p, old, out, hwm_commit, committed)
        out.layouts[name] = _layouts(p, old if ran else None, adopt, out)
    for other in sorted(set(departed) - renamed):
        out.notes.append(f"stream {other} is no longer in the topology; its checkpoint folder "
                         f"{files.location}/{other} stays until you remove it")
    if out.refusals:
        raise TopologyChanged(" ".join(f"{r}." if len(out.refusals) == 1 else f"({i}) {r}."
                                       for i, r in enumerate(out.refusals, 1)))
    return out


def _renamed(p: StreamPipeline, departed: Mapping[str, StreamRecord], root: str, out: Review
             ) -> set[str]:
    """The streams that are gone from the topology and read what new stream ``p`` reads: ``p``
    is one of them renamed, which is refused."""
    name, now, found = p.stream.streamName, record_of(p, {}), set()
    for other, rec in departed.items():
        if rec.topic and (rec.reader, rec.topic) == (now.reader, now.topic):
            found.add(other)
            out.refusals.append(
                f"stream {name} has no checkpoint yet, but stream {other}, which this topology "
                f"no longer has, read the same {rec.source} on this checkpoint: a renamed "
                f"stream would read that topic again from startingOffsets under a new consumer "
                f"({p.consumer}) and pid, so every record would be written again; rename it "
                f"back to {other}, or, to start it over on purpose, remove {root}/{other} and "
                f"run `sqe reset` for consumer {rec.consumer}")
    return found


def _same_stream(p: StreamPipeline, old: StreamRecord, out: Review,
                 hwm_commit: Callable[[StreamPipeline], Commit | None], committed: bool
                 ) -> None:
    """The checks of a stream that ran on its checkpoint before (``old``; ``committed``: a
    batch of it was committed there)."""
    name, now = p.stream.streamName, record_of(p, {})
    if old.consumer != now.consumer:
        topology = old.consumer.rsplit(".", 1)[0]
        out.refusals.append(
            f"stream {name}'s checkpoint was run as consumer {old.consumer}, and this run is "
            f"{now.consumer} (the topology's name, from --name or the file's name, changed): "
            "its pids and its stores' records are under the old name; run with --name "
            f"{topology}, or give this name a checkpoint of its own")
        return
    if (old.reader, old.topic) != (now.reader, now.topic):
        out.refusals.append(
            f"stream {name} read {old.source} with the {old.reader} reader on this checkpoint "
            f"and now reads {now.source} with the {now.reader} reader: the checkpoint's "
            f"offsets are those of {old.source}; read the new one on a new, empty checkpoint "
            f"after `sqe reset` for consumer {now.consumer}")
        return
    if old.filter_replays and not now.filter_replays:
        out.warnings.append(f"stream {name} no longer filters replays (filterReplays was on "
                            "when this checkpoint last ran): replays written upstream pass "
                            "from this run on")
    elif now.filter_replays and not old.filter_replays:
        out.notes.append(f"stream {name} filters replays from this run on: its high-water "
                         "marks start with the next batch")
    elif (now.filter_replays and old.hwm_store != now.hwm_store and committed
          and hwm_commit(p) is None):
        out.refusals.append(
            f"stream {name} committed its high-water marks to the HWM store at "
            f"{old.hwm_store}, and the one at {now.hwm_store} holds nothing of consumer "
            f"{now.consumer}: without its marks, replays of records it read before would pass; "
            f"point jw.sqe.spout.kafka.filterReplays.redis.url back at {old.hwm_store}, or "
            f"copy the keys sqe:{{{now.consumer}}}:* there, or start it over on purpose with "
            "`sqe reset` for this consumer and a new, empty checkpoint")
    for state in now.states:
        if state not in old.states:
            out.notes.append(f"stream {name}: the {state.split(' ', 1)[0]} state "
                             f"{state.split(' ', 1)[1]} is new: it gets the records of this "
                             "run's batches, not those read before")


def _layouts(p: StreamPipeline, old: StreamRecord | None, adopt: bool, out: Review
             ) -> dict[str, KafkaLayout]:
    """The layout each Kafka state of ``p`` places records by, given the ones ``old`` kept."""
    name, found, counts = p.stream.streamName, {}, {}
    for sink in _kafka_sinks(p):
        topic = sink.config.topic
        count = counts[topic] = sink.topic_partitions() if sink.config.partitioner else None
        now = sink.layout(count)
        kept = old.kafka.get(topic) if old is not None else None
        if kept is None or kept == now:
            found[topic] = now
            continue
        changes = kept.changes(now)
        if changes and not adopt:
            out.refusals.append(
                f"stream {name}: the Kafka state {topic} places records differently from when "
                f"this checkpoint last ran ({'; '.join(changes)}): records of one (pid, source "
                f"partition) would land in other partitions or with other keys, and a reader "
                f"still behind on {topic} would drop or misread them; stop, let every topology "
                f"that reads {topic} catch up, then start this one once with --adopt-layout")
            continue
        if changes or kept.partitions is None or count is None or adopt:
            if adopt:
                out.notes.append(f"stream {name}: the Kafka state {topic} adopts the layout it "
                                 f"has now ({_describe(now)})")
            found[topic] = now
        elif count < kept.partitions:
            out.refusals.append(
                f"stream {name}: the Kafka state {topic} has {count} partitions, fewer than "
                f"the {kept.partitions} it placed records over, so the topic was deleted and "
                f"created again; start the topologies that read {topic} over, and this one "
                "once with --adopt-layout")
        else:  # the topic gained partitions: keep placing records over the ones used
            found[topic] = KafkaLayout(kept.partitions, now.partitioner, now.keytype,
                                       now.chunking)
            out.warnings.append(grown_topic(topic, kept.partitions, count))
    for sink in _kafka_sinks(p):  # a topic that grew was said to have grown already
        layout = found.get(sink.config.topic)
        sink.route_over(layout.partitions if layout is not None else None,
                        counts.get(sink.config.topic))
    return found


def _describe(layout: KafkaLayout) -> str:
    spread = (f"{layout.partitions} partitions by {layout.partitioner}" if layout.partitioner
              else "placed by the producer")
    return f"{spread}, keys {layout.keytype}" + (", chunked" if layout.chunking else "")


def write_records(files: CheckpointFiles, pipelines: Iterable[StreamPipeline],
                  found: Review) -> None:
    """Record what runs on each stream's checkpoint now (after every check passed)."""
    for p in pipelines:
        name = p.stream.streamName
        files.write(f"{name}/{RECORD}", record_of(p, found.layouts.get(name, {})).to_json())
