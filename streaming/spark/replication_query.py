"""MQDSRP replication as a stateful streaming operator: transformWithStateInPandas keyed by the
receiving directory server, driven by the sans-IO replica in streaming/operators/replication.py.

State per server (RocksDB state store): a ValueState with the replication state (partitions,
neighbours, pending changes, deleted objects) and a MapState of object buckets, so a micro-batch
reads and writes each touched bucket once (streaming/operators/replica_store.py). Timers (BSC Ack,
Change Propagation to BSCs, change-request waits) run on event time: the envelopes' arrival time.

Outputs are typed rows by table for the sink; outbound_messages are also published to
the outbound topic after the sink has committed the batch.
"""
import json
import time

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from .stateful import (ARRIVAL_ORDER, OUTPUT_DDL, GuardedSteps, TableWriter, dead_letter, raise_if_poison,
                       replace_timers, timer_dead_letter, typed_frame)
from ..operators.findings import evidence
from ..operators.notification_rows import FirstArrivals
from ..operators.replica_store import ObjectStore
from ..operators.replication import Replica, ServerState, state_from_bytes, state_to_bytes
from ..operators.replication_rows import step_rows
from ..wire import WireError, decode

WATERMARK_DELAY = "10 seconds"
OUTBOUND_CONFIRM_S = 240
STAGE = "operator:replication"
VERSIONS = "object_versions"                # the pseudo-table of directory versions (published, not a sink table)
# A replica's rows are handed on every this many messages (stateful.GuardedSteps): about 50 rows a
# message, so a step's rows stay a few MB in the Python worker whatever the micro-batch's size.
STEP_MESSAGES = 200
SNAPSHOT_TABLES = ("replication_servers", "replication_partitions")     # one row per server (partition) a batch


class MapStateBackend:
    """replica_store.BucketBackend over a Spark MapState (bucket number -> bytes)."""

    def __init__(self, state):
        self.state = state

    def load(self, bucket: int) -> bytes | None:
        if not self.state.containsKey((bucket,)):
            return None                     # asked first: a lookup of a missing key logs a warning per call
        value = self.state.getValue((bucket,))
        return bytes(value[0]) if value is not None else None

    def get(self, bucket: int) -> bytes:
        """A bucket the layout says exists: one round trip, not two."""
        return bytes(self.state.getValue((bucket,))[0])

    def save(self, bucket: int, data: bytes | None) -> None:
        if data is None:
            self.state.removeKey((bucket,))
        else:
            self.state.updateValue((bucket,), (data,))

    def buckets(self):
        return (k[0] for k in self.state.keys()) if self.state.exists() else iter(())


class ReplicationProcessor(StatefulProcessor):
    def __init__(self, pec_name: str | None = None, id_scope: str = "", step_messages: int = STEP_MESSAGES):
        self.pec_name = pec_name
        self.id_scope = id_scope            # the checkpoint's query id: outbound message ids per job
        self.step_messages = step_messages  # a key's output is handed on every this many messages

    def init(self, handle) -> None:
        self.handle = handle
        self.control = handle.getValueState("replica", StructType([StructField("state", BinaryType())]))
        self.objects = handle.getMapState("objects", StructType([StructField("bucket", IntegerType())]),
                                          StructType([StructField("blob", BinaryType())]))
        self.task_arrivals = FirstArrivals()   # init runs once per task: what this task's output passes on

    def _replica(self, server: str) -> Replica:
        st = state_from_bytes(bytes(self.control.get()[0])) if self.control.exists() else ServerState(server)
        return Replica(st, ObjectStore(MapStateBackend(self.objects)), self.pec_name)

    def handleInputRows(self, key, rows, timerValues):
        self.fired_ms = None
        frame = pd.concat(list(rows)).sort_values(list(ARRIVAL_ORDER))
        steps = GuardedSteps(lambda: self._replica(key[0]), list(frame.itertuples(index=False)), _receive,
                             self._step_changes, self.step_messages, _same_instant)
        for rows_of_step in steps:
            yield from self._output(rows_of_step)
        dead = [dead_letter(STAGE, "mqdsrp", row, exc) for row, exc in steps.poisoned]
        yield from self._finish(steps.machine, dead)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        self.fired_ms = expiredTimerInfo.getExpiryTimeInMs()          # Spark removes it itself
        due = expiredTimerInfo.getExpiryTimeInMs()
        try:
            r = self._replica(key[0])
            r.fire_timers_until(max(due, timerValues.getCurrentWatermarkInMs()))
        except Exception as exc:          # noqa: BLE001 -- never fail the micro-batch: nothing is saved
            replace_timers(self.handle, None, self.fired_ms)
            yield _frame([timer_dead_letter(STAGE, "mqdsrp", key[0], due, exc)])
            return
        yield from self._finish(r)

    def _step_rows(self, r: Replica) -> list:
        return step_rows(r, r.s.now_ms, self.id_scope)

    def _step_changes(self, r: Replica) -> list:
        """A step's rows but the server's and its partitions' (the batch's last step writes them, and
        the sink keeps a server's last row of a batch anyway)."""
        return [(t, p) for t, p in self._step_rows(r) if t not in SNAPSHOT_TABLES]

    def _output(self, rows: list):
        versions = self.task_arrivals.pre_select([p for t, p in rows if t == VERSIONS])
        rows = [(t, p) for t, p in rows if t != VERSIONS] + [(VERSIONS, p) for p in versions]
        if rows:
            yield _frame(rows)

    def _finish(self, r: Replica, dead: list | None = None):
        r.store.flush()
        rows = self._step_rows(r) + (dead or [])
        self.control.update((state_to_bytes(r.s),))
        replace_timers(self.handle, r.next_timer_ms(), self.fired_ms)
        yield from self._output(rows)

    def close(self) -> None:
        pass


def _frame(rows: list[tuple[str, object]]) -> pd.DataFrame:
    """Sink rows as typed chunks (stateful.typed_frame; directory_history's properties come as their
    JSON text already); directory versions (VersionRecords) as the line the writer publishes."""
    return typed_frame([(t, {"line": p.encode()} if t == VERSIONS else p) for t, p in rows],
                       rendered={"directory_history": ("properties",)})


def _same_instant(a, b) -> bool:
    """Messages of one instant share a step: the store folds two versions of an object at one instant
    into one only within a step (ObjectStore._record)."""
    return a.arrival_ms == b.arrival_ms


def _receive(r: Replica, row) -> None:
    raise_if_poison(row.message_id)
    r.fire_timers_until(int(row.arrival_ms) - 1)       # the timers due before it fire first
    r.inspect(authentication_level=row.authentication_level, source=row.source_machine,
              arrival_ms=int(row.arrival_ms), where=evidence(row.topic, row.partition, row.offset, row.message_id))
    body = bytes(row.body)
    try:
        msg = decode("mqdsrp", body)
    except WireError:
        return                              # a dead letter, recorded by the raw query
    r.receive(msg, arrival_ms=int(row.arrival_ms), source=row.source_machine, message_class=row.message_class,
              destination_queue=row.destination_queue, body=body)


def batch_end_offsets(checkpoint: str, batch_id: int) -> dict:
    """A micro-batch's end offsets from the checkpoint's offset log (written before the batch ran):
    a version line, the batch metadata, then one line of JSON per source."""
    import os
    with open(os.path.join(checkpoint, "offsets", str(batch_id))) as fh:
        lines = fh.read().splitlines()
    ends: dict = {}
    for line in lines[2:]:
        if line.strip().startswith("{"):
            for topic, parts in json.loads(line).items():
                if isinstance(parts, dict):
                    ends.setdefault(topic, {}).update(parts)
    return ends


def first_arrival_records(arrivals: FirstArrivals, lines, chunk: int = 20_000):
    """FirstArrivals.select over the version lines of a micro-batch (VersionRecord.encode: owner, key,
    event ms, text; a pyarrow string array, or a list of str), as (value, key) records to publish, in
    the same order. The lines stay in Arrow: only each line's key and time become Python values, and
    the kept records' texts a chunk at a time (a batch of 300,000 messages held over a million lines
    as Python objects on the driver); the lines are split a piece at a time."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if not isinstance(lines, (pa.Array, pa.ChunkedArray)):
        lines = pa.array(lines, pa.string())
    if len(lines) == 0:
        return
    keys, times = [], []
    for part in (lines.chunks if isinstance(lines, pa.ChunkedArray) else [lines]):
        for start in range(0, len(part), chunk):        # split a piece at a time: never a second copy of all
            parts = pc.split_pattern(part.slice(start, chunk), "\t", max_splits=3)
            keys.append(pc.list_element(parts, 1))
            times.append(pc.cast(pc.list_element(parts, 2), pa.int64()))
    keys, times = pa.concat_arrays(keys), pa.concat_arrays(times)
    order = pc.sort_indices(pa.table({"ms": times, "i": pa.array(range(len(lines)), pa.int64())}),
                            sort_keys=[("ms", "ascending"), ("i", "ascending")])
    kept = [i for i, key, ms in zip(order.to_pylist(), pc.take(keys, order).to_pylist(),
                                    pc.take(times, order).to_pylist()) if arrivals.keep(key, ms)]
    del keys, times, order
    for start in range(0, len(kept), chunk):
        for line in _take_lines(lines, kept[start:start + chunk]):
            owner, _key, _ms, text = line.split("\t", 3)
            yield text.encode(), owner.encode()


def _take_lines(lines, at: list[int]) -> list[str]:
    """lines[at] as Python strings, taken from each chunk apart: a ChunkedArray's take would
    concatenate all its chunks first (a catch-up's versions are hundreds of MB)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    wanted, out, first = pa.array(at, pa.int64()), [None] * len(at), 0
    for part in (lines.chunks if isinstance(lines, pa.ChunkedArray) else [lines]):
        here = pc.and_(pc.greater_equal(wanted, first), pc.less(wanted, first + len(part)))
        texts = part.take(pc.subtract(wanted.filter(here), first)).to_pylist()
        for position, text in zip(pc.indices_nonzero(here).to_pylist(), texts):
            out[position] = text
        first += len(part)
    return out


def replication_stream(decoded, pec_name: str | None = None, id_scope: str = ""):
    from pyspark.sql import functions as F
    return (decoded.filter("ok")
            .withColumn("arrival_ms", (F.unix_micros("arrival_time") / 1000).cast("long"))
            .withWatermark("arrival_time", WATERMARK_DELAY)
            .select("state_key", "arrival_ms", "arrival_time", "topic", "partition", "offset", "body",
                    "source_machine", "message_class", "destination_queue", "message_id", "authentication_level")
            .groupBy("state_key")
            .transformWithStateInPandas(ReplicationProcessor(pec_name, id_scope), OUTPUT_DDL, "Append", "EventTime"))


class ReplicationWriter(TableWriter):
    """Sink rows in one transaction per batch, then the batch's outbound messages to Kafka.

    The table is exactly once (the batch marker); Kafka is at least once: a batch replayed after a
    crash between the commit and the publish is published again, with the same message ids
    (deterministic per server), so a consumer can drop repeats."""

    SIDE_TABLES = (VERSIONS,)

    def __init__(self, sink_url: str, query_id: str, echo=print, outbound: dict | None = None,
                 objects: dict | None = None, checkpoint: str | None = None):
        super().__init__(sink_url, query_id, echo, label="replication")
        self.outbound = outbound            # {"topic": ..., "kafka": {confluent settings}} or None
        self.objects = objects              # the same for the directory versions the MQCN operator reads,
        self.checkpoint = checkpoint        # with "progress_topic": where this query's progress goes
        self._producer = None
        self._objects_offsets = None
        self._first_arrivals = FirstArrivals()

    def after_write(self, rows: dict[str, list[dict]]) -> None:
        if self.objects:
            versions = rows.get(VERSIONS)
            self._publish(self.objects, self._object_records(versions.column("line") if versions else []))
            # after the versions are confirmed: the MQCN operator's clock may now pass what this batch read
            self._publish({**self.objects, "topic": self.objects["progress_topic"]}, [self._progress_record()])
        if self.outbound:
            self._publish(self.outbound, self._outbound_records(rows.get("outbound_messages") or []))

    def _progress_record(self) -> tuple[bytes, bytes]:
        """The replication topic's offsets this query has fully processed (its batch's end offsets, as
        Spark's offset log holds them): every version derived from records before them is published,
        below "objects_end" (the versions topic's end offsets once they are confirmed), so the MQCN
        operator's source can read the versions a capped micro-batch at a time (kafka_source._gated)."""
        return json.dumps({"query_id": self.query_id, "batch_id": self.batch_id,
                           "ends": batch_end_offsets(self.checkpoint, self.batch_id),
                           "objects_end": self._objects_ends()}).encode(), b"progress"

    def _objects_ends(self) -> dict:
        from .kafka_offsets import EndOffsets, nest     # the driver's: the Python workers need no Kafka client
        if self._objects_offsets is None:
            self._objects_offsets = EndOffsets(self.objects["kafka"], [self.objects["topic"]])
        return nest(self._objects_offsets.ends())

    def _publish(self, target: dict, records) -> None:
        """(value, key) records to target["topic"], all confirmed before the batch counts as done: a
        record Kafka did not take fails the batch (which then runs again), it is never dropped."""
        if self._producer is None:
            from confluent_kafka import Producer
            self._producer = Producer(target["kafka"])
        failed: list = []

        def delivered(err, _msg) -> None:
            if err is not None:
                failed.append(err)
        deadline = time.monotonic() + OUTBOUND_CONFIRM_S
        for value, key in records:
            while True:
                try:
                    self._producer.produce(target["topic"], value=value, key=key, on_delivery=delivered)
                    break
                except BufferError:     # the client's queue is full (a batch of 300k messages had 1M versions)
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"Kafka took no record for {OUTBOUND_CONFIRM_S} s ({target['topic']})")
                    self._producer.poll(0.1)            # deliveries drain it
            self._producer.poll(0)
        if self._producer.flush(OUTBOUND_CONFIRM_S):     # waits out a broker restart; then the batch fails
            raise RuntimeError(f"records not confirmed by Kafka within {OUTBOUND_CONFIRM_S} s ({target['topic']})")
        if failed:
            raise RuntimeError(f"{len(failed)} records not delivered to {target['topic']}: {failed[0]}")

    def _object_records(self, lines):
        """Queue and machine versions, keyed by the owning queue manager, for the MQCN operator: the
        first arrival of each version across the replicas (notification_rows.FirstArrivals)."""
        return first_arrival_records(self._first_arrivals, lines)

    @staticmethod
    def _outbound_records(messages: list[dict]):
        from ..wire.envelope import encode_envelope, make_envelope
        for m in messages:
            env = make_envelope("mqdsrp", bytes.fromhex(m["body"]), source_machine=m["server"],
                                destination_machine=m["destination"],
                                destination_queue=f"DIRECT=OS:{m['destination']}\\private$\\mqis_queue$",
                                sent_time=m["sent_at"], sender_identifier_type="QueueManagerIdentifier",
                                authentication_level="Sig10", hash_algorithm="MD5", message_id=m["message_id"])
            yield encode_envelope(env), m["destination"].encode()
