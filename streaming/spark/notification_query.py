"""MQCN change notifications as a stateful streaming operator: transformWithStateInPandas keyed by
the queue manager (the GUID in its NOTIFY_QUEUE_PRIVATE), driven by the sans-IO queue manager in
streaming/operators/notifications.py.

Inputs: the notifications (msmq.cn.raw) and the directory as the MQDSRP replicas hold it
(msmq.dsrp.objects: the replication operator's queue and machine rows, keyed by the owning queue
manager). The event-time clock is the arrival time of all traffic (msmq.sd.raw is read for its
time only), so the batching timers fire while the directory is quiet; the timers' durations and the
refresh threshold are settings.
"""
import json
import pickle

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from pyspark.sql.types import BinaryType, StructField, StructType

from .stateful import OUTPUT_DDL, POISON_IDS, TableWriter, apply_guarded, dead_letter, raise_if_poison, replace_timers
from ..operators.notification_rows import directory_version, step_rows
from ..operators.notifications import QMState, QueueManager, Settings, notification_from
from ..wire import WireError, decode

WATERMARK_DELAY = "10 seconds"
OBJECTS_TOPIC = "msmq.dsrp.objects"
CLOCK_KEY = "~clock"
STAGE = "operator:notifications"


class NotificationProcessor(StatefulProcessor):
    def __init__(self, settings: Settings):
        self.settings = settings

    def init(self, handle) -> None:
        self.handle = handle
        self.state = handle.getValueState("queue_manager", StructType([StructField("state", BinaryType())]))

    def _load(self, key: str) -> QueueManager:
        st = pickle.loads(bytes(self.state.get()[0])) if self.state.exists() else QMState(key)
        qm = QueueManager(st, self.settings)
        if POISON_IDS:                      # test-only: these notifications raise when processed
            process = qm.process
            qm.process = lambda n, now, batch: (setattr(qm, "current", n), raise_if_poison(n.message_id),
                                                process(n, now, batch))[2]
        return qm

    def handleInputRows(self, key, rows, timerValues):
        if key[0] == CLOCK_KEY:
            return                          # MQSD rows: they only moved the event-time clock
        frame = pd.concat(list(rows)).sort_values(["event_ms", "kind", "topic", "partition", "offset"])
        qm, poisoned = apply_guarded(lambda: self._load(key[0]), list(frame.itertuples(index=False)), _apply_row)
        dead = [dead_letter(STAGE, "mqcn" if row.kind != "directory" else "directory", row, exc)
                for row, exc in poisoned]
        yield from self._finish(qm, timerValues.getCurrentWatermarkInMs(), dead)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        # every timer due by the watermark, in order: one fired timer may arm another already due
        now = max(expiredTimerInfo.getExpiryTimeInMs(), timerValues.getCurrentWatermarkInMs())
        skipped: dict[str, tuple] = {}
        while True:
            qm = self._load(key[0])
            qm.s.pending = [n for n in qm.s.pending if n.message_id not in skipped]
            try:
                qm.on_timer(now)
                break
            except Exception as exc:          # noqa: BLE001 -- the notification being processed is the poison
                culprit = qm.current
                if culprit is None or culprit.message_id in skipped:
                    raise
                skipped[culprit.message_id] = (culprit, exc)
        dead = [dead_letter(STAGE, "mqcn", _Origin(n), exc) for n, exc in skipped.values()]
        yield from self._finish(qm, timerValues.getCurrentWatermarkInMs(), dead)

    def _finish(self, qm: QueueManager, watermark_ms: int, dead: list):
        qm.forget_versions(watermark_ms)
        rows = step_rows(qm) + dead
        self.state.update((pickle.dumps(qm.s, protocol=5),))
        replace_timers(self.handle, qm.next_timer_ms())
        if rows:
            yield pd.DataFrame([(t, json.dumps(p, default=str)) for t, p in rows], columns=["table_name", "payload"])

    def close(self) -> None:
        pass


def _apply_row(qm: QueueManager, row) -> None:
    if row.kind == "directory":
        routed = directory_version(json.loads(bytes(row.body)))
        if routed:
            qm.directory_object(routed[1], routed[2])
        return
    try:
        msg = decode("mqcn", bytes(row.body))
    except WireError:
        return                              # a dead letter, recorded by the raw query
    n = notification_from(msg, message_id=row.message_id, arrival_ms=int(row.event_ms),
                          sender_identifier_type=row.sender_identifier_type,
                          authentication_level=row.authentication_level, source=row.source_machine,
                          destination_queue=row.destination_queue)
    n.origin = (row.topic, int(row.partition), int(row.offset), bytes(row.body))
    qm.receive(n, row.destination_machine)


class _Origin:
    """A pending notification's Kafka coordinates and body, as a dead letter wants them."""

    def __init__(self, n):
        self.topic, self.partition, self.offset, self.body = n.origin
        self.message_id, self.arrival_ms, self.source_machine = n.message_id, n.arrival_ms, n.source


COLUMNS = ["qm_key", "event_time", "event_ms", "kind", "topic", "partition", "offset", "body", "message_id",
           "sender_identifier_type", "authentication_level", "source_machine", "destination_machine",
           "destination_queue"]


def notification_stream(spark, traffic_opts: dict, objects_opts: dict, settings: Settings):
    from pyspark.sql import functions as F

    from .kafka_source import decoded_stream
    traffic = (decoded_stream(spark, traffic_opts, "envelope").filter("ok")
               .withColumn("qm_key", F.coalesce(
                   F.nullif(F.lower(F.regexp_extract("destination_queue", r"(?i)^PRIVATE=\{?([0-9a-f-]{36})", 1)),
                            F.lit("")), F.col("destination_machine")))
               .withColumn("event_time", F.col("arrival_time"))
               .withColumn("kind", F.col("protocol")))
    objects = (spark.readStream.format("msmq_kafka").options(**objects_opts).load()
               .withColumn("qm_key", F.col("key").cast("string"))
               .withColumn("event_time", F.to_timestamp(F.get_json_object(F.col("value").cast("string"),
                                                                          "$.updated_at")))
               .withColumn("kind", F.lit("directory")).withColumn("body", F.col("value"))
               .withColumn("message_id", F.lit(None).cast("string"))
               .withColumn("sender_identifier_type", F.lit(None).cast("string"))
               .withColumn("authentication_level", F.lit(None).cast("string"))
               .withColumn("source_machine", F.lit(None).cast("string"))
               .withColumn("destination_machine", F.lit(None).cast("string"))
               .withColumn("destination_queue", F.lit(None).cast("string")))
    with_ms = lambda df: df.withColumn("event_ms", (F.unix_micros("event_time") / 1000).cast("long"))  # noqa: E731
    union = with_ms(traffic).select(*COLUMNS).unionByName(with_ms(objects).select(*COLUMNS))
    # MQSD rows only move the clock. They are not filtered out here: a filter would be pushed below
    # the watermark and they would no longer count; they all go to one key that ignores them.
    clocked = union.withColumn("qm_key", F.when(F.col("kind") == "mqsd", F.lit(CLOCK_KEY)).otherwise(F.col("qm_key")))
    return (clocked.withWatermark("event_time", WATERMARK_DELAY)
            .groupBy("qm_key")
            .transformWithStateInPandas(NotificationProcessor(settings), OUTPUT_DDL, "Append", "EventTime"))


class NotificationWriter(TableWriter):
    def __init__(self, sink_url: str, query_id: str, echo=print):
        super().__init__(sink_url, query_id, echo, label="notifications")
