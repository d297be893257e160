"""MQDSRP replication as a stateful streaming operator: transformWithStateInPandas keyed by the
receiving directory server, driven by the sans-IO replica in streaming/operators/replication.py.

State per server (RocksDB state store): a ValueState with the replication state (partitions,
neighbours, pending changes, deleted objects) and a MapState of object buckets, so a micro-batch
reads and writes each touched bucket once (streaming/operators/replica_store.py). Timers (BSC Ack,
Change Propagation to BSCs, change-request waits) run on event time: the envelopes' arrival time.

Outputs: typed rows by table for the sink (outbound_messages are also published to the outbound
topic once the sink has committed the batch), and the directory versions the replica derived, which
the job hands on to the MQCN queue managers in the same plan (streaming/spark/job_query.py).
"""
import time

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from .stateful import (ARRIVAL_ORDER, GuardedSteps, dead_letter, replace_timers,
                       timer_dead_letter, typed_chunks, typed_frame)
from ..operators.findings import evidence
from ..operators.notification_rows import FirstArrivals
from ..operators.replica_store import ObjectStore
from ..operators.replica_state import state_from_bytes, state_to_bytes
from ..operators.replication import Replica, ServerState
from ..operators.replication_rows import REGISTRY, step_rows
from ..wire import WireError, decode

__all__ = ["MapStateBackend", "OUTBOUND_CONFIRM_S", "outbound_records", "OutboundPublisher",
           "ReplicationProcessor", "SNAPSHOT_TABLES", "STAGE", "step_frame", "STEP_MESSAGES", "VERSION_COLUMNS",
           "VERSIONS"]

OUTBOUND_CONFIRM_S = 240
STAGE = "operator:replication"
VERSIONS = "object_versions"                # the directory versions a step derived (not a sink table)
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
        stored = self.control.get()  # get() is None when unset: one round trip to the JVM, not exists() then get()
        st = state_from_bytes(bytes(stored[0])) if stored is not None else ServerState(server)
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
            yield typed_frame([timer_dead_letter(STAGE, "mqdsrp", key[0], due, exc)])
            return
        yield from self._finish(r)

    def _step_rows(self, r: Replica) -> list:
        return step_rows(r, r.state.now_ms, self.id_scope)

    def _step_changes(self, r: Replica) -> list:
        """A step's rows but the server's and its partitions' (the batch's last step writes them, and
        the sink keeps a server's last row of a batch anyway)."""
        return [(t, p) for t, p in self._step_rows(r) if t not in SNAPSHOT_TABLES]

    def _output(self, rows: list):
        versions = self.task_arrivals.pre_select([p for t, p in rows if t == VERSIONS])
        registry = [p for t, p in rows if t == REGISTRY]
        sink = [(t, p) for t, p in rows if t != VERSIONS and t != REGISTRY]
        if sink or versions or registry:
            yield step_frame(sink, versions, registry)

    def _finish(self, r: Replica, dead: list | None = None):
        r.store.flush()
        rows = self._step_rows(r) + (dead or [])
        self.control.update((state_to_bytes(r.state),))
        replace_timers(self.handle, r.next_timer_ms(), self.fired_ms)
        yield from self._output(rows)

    def close(self) -> None:
        pass


VERSION_COLUMNS = ("owner", "event_ms", "text")


def step_frame(sink: list, versions: list, registry: list = ()) -> pd.DataFrame:
    """A step's output: its sink rows as typed chunks (table_name, rows: stateful.typed_frame;
    directory_history's properties come as their JSON text already), then its directory versions
    for the queue managers (table_name object_versions; owner, event_ms, text: VersionRecord's),
    then what it hands the server registry (table_name server_registry; event_ms, text)."""
    rows = [(t, r, None, None, None) for t, r in typed_chunks(sink, rendered={"directory_history": ("properties",)})]
    rows += [(VERSIONS, None, v.owner, v.event_ms, v.text) for v in versions]
    rows += [(REGISTRY, None, None, r["event_ms"], r["text"]) for r in registry]
    return pd.DataFrame(rows, columns=["table_name", "rows", *VERSION_COLUMNS], dtype=object)


def _same_instant(a, b) -> bool:
    """Messages of one instant share a step: the store folds two versions of an object at one instant
    into one only within a step (ObjectStore._record)."""
    return a.arrival_ms == b.arrival_ms


def _receive(r: Replica, row) -> None:
    r.fire_timers_until(int(row.arrival_ms) - 1)       # the timers due before it fire first
    body = bytes(row.body)
    try:
        msg = decode("mqdsrp", body)
    except WireError:
        msg = None                          # a dead letter, recorded by the raw query
    if msg is not None:
        r.receive(msg, arrival_ms=int(row.arrival_ms), source=row.source_machine, message_class=row.message_class,
                  destination_queue=row.destination_queue, body=body)
    r.inspect(authentication_level=row.authentication_level, source=row.source_machine,
              arrival_ms=int(row.arrival_ms),
              where=evidence(row.topic, row.partition, row.offset, row.message_id, getattr(row, "capture", None)),
              message_class=row.message_class, decoded=msg is not None)


def outbound_records(messages):
    """outbound_messages rows as (envelope, key) records: what a server sends, signed as Windows signs it."""
    from ..wire.envelope import encode_envelope, make_envelope
    for m in messages:
        env = make_envelope("mqdsrp", bytes.fromhex(m["body"]), source_machine=m["server"],
                            destination_machine=m["destination"],
                            destination_queue=f"DIRECT=OS:{m['destination']}\\private$\\mqis_queue$",
                            sent_time=m["sent_at"], sender_identifier_type="QueueManagerIdentifier",
                            authentication_level="Sig10", hash_algorithm="MD5", message_id=m["message_id"])
        yield encode_envelope(env), m["destination"].encode()


class OutboundPublisher:
    """Publishes (value, key) records, all confirmed before a batch counts as done: a record Kafka
    did not take fails the batch (which then runs again), it is never dropped."""

    def __init__(self, kafka_conf: dict):
        from confluent_kafka import Producer
        self.producer = Producer(kafka_conf)

    def publish(self, topic: str, records) -> None:
        failed: list = []

        def delivered(err, _msg) -> None:
            if err is not None:
                failed.append(err)
        deadline = time.monotonic() + OUTBOUND_CONFIRM_S
        for value, key in records:
            while True:
                try:
                    self.producer.produce(topic, value=value, key=key, on_delivery=delivered)
                    break
                except BufferError:     # the client's queue is full (a batch of 300k messages had 1M versions)
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"Kafka took no record for {OUTBOUND_CONFIRM_S} s ({topic})")
                    self.producer.poll(0.1)            # deliveries drain it
            self.producer.poll(0)
        if self.producer.flush(OUTBOUND_CONFIRM_S):     # waits out a broker restart; then the batch fails
            raise RuntimeError(f"records not confirmed by Kafka within {OUTBOUND_CONFIRM_S} s ({topic})")
        if failed:
            raise RuntimeError(f"{len(failed)} records not delivered to {topic}: {failed[0]}")
