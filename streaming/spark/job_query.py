"""The job as one streaming query: one read of the raw topics, two stateful operators chained in one
plan, one foreachBatch writing every table of a micro-batch in one sink transaction.

    msmq.dsrp.raw, msmq.sd.raw, msmq.cn.raw
        -> source (decode=job: every record read and decoded once; each task's counts and dead letters)
        -> DirectoryProcessor, keyed by operator_key:
               R|server      the MQDSRP replica of that directory server
               D|request     the MQSD request (its RequestID)
               F|sender      the MQQB packets a capture producer rejected (mqqb-malformed findings)
               P|topic|part  passes MQCN records and task summaries on
           its output: sink rows (typed chunks) and the MQCN operator's input (notifications, and the
           directory versions the replicas derived, keyed by the owning queue manager: a step's
           versions for one queue manager packed in one row), and the
           server registry's input (the directory servers the replicas' objects name, and the
           senders and discovery replies to check)
        -> QueueManagerProcessor, keyed by route_key:
               a queue manager (MQCN)
               ~servers      the server registry (dsrp-unknown-sender, mqsd-rogue-reply findings)
               ~sink|n       passes the sink rows on
        -> JobWriter: the raw tables, every operator table, pipeline_progress, one transaction;
           then what the replicas send, to the outbound topic

The versions reach the queue managers inside the plan, in the micro-batch that derived them. The
event-time clock is the source's watermark, 10 s behind the latest arrival time read: each reading
task yields one clock row with the micro-batch's clock (clock_time: the latest arrival time planned,
streaming.spark.kafka_source), and the watermark is on that column alone. Spark drops an input row as late when its watermark column is at
or behind the previous micro-batch's watermark; every record's clock_time is null, so none is ever
dropped, whatever the pace of event time or a partition that brings records older than what the
others released (a clock row may be, and carries nothing). The replicas fire their timers up to
it, then the queue managers apply what it has passed, versions included, in event-time order.
The first operator's output carries no event time (event_time is null on every row): its rows are
never late and never move the clock; the queue managers hold each row until the watermark passes
its own time (event_ms).

Every sink row carries its origin (the key whose step wrote it) and a sequence number, and the
writer puts a key's rows back in the order it wrote them, whatever the shuffles in between.
"""
import itertools
import zlib
from collections import namedtuple

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from .decode import FINDING, PASS_ON, REPLICA, REQUEST
from .discovery_query import DiscoveryProcessor
from .rejected_query import RejectedPacketsProcessor
from .notification_query import NotificationProcessor
from .operator_counts import start_counting
from .worker_gc import set_worker_gc
from .write_behind import local_spool_folder, WriteBehind, WrittenQuery
from . import RECORDS_PER_TASK
from .pipeline import BatchWriter, start_stream, checkpoint_query_id
from .stateful import batch_rows
from .replication_query import VERSIONS, ReplicationProcessor
from .registry_query import SERVERS, RegistryProcessor
from ..operators.replication_rows import REGISTRY
from ..operators.notification_input import DIRECTORY_VERSIONS, ROW_FIELDS, pack_versions
from ..operators.notifications import queue_manager_of
from ..wire.topics import REJECTED_TOPIC, TOPICS

__all__ = ["DirectoryProcessor", "FIRST_COLUMNS", "FIRST_DDL", "FirstRow", "job_stream", "JobWriter", "key_order",
           "queue_manager_key", "QueueManagerProcessor", "RAW_SUMMARY", "ROW_FIELDS", "SINK", "SINK_COLUMNS",
           "SINK_DDL", "SINK_KEYS", "sink_route", "start_job_query", "WATERMARK_DELAY"]

WATERMARK_DELAY = "10 seconds"
RAW_SUMMARY = "~raw"                        # a reading task's counts and dead letters (decode.TaskSummary)
SINK = "~sink|"                             # route_key prefix of sink rows in the second operator
SINK_KEYS = 8                               # sink rows spread over this many keys of the second operator
SINK_COLUMNS = ("origin", "seq", "table_name", "rows")
SINK_DDL = "origin string, seq bigint, table_name string, rows binary"
FIRST_COLUMNS = ("route_key", "event_time") + SINK_COLUMNS + ROW_FIELDS
FIRST_DDL = ("route_key string, event_time timestamp, " + SINK_DDL + ", event_ms bigint, kind string, "
             "topic string, partition int, offset bigint, body binary, message_id string, "
             "sender_identifier_type string, authentication_level string, source_machine string, "
             "destination_machine string, destination_queue string, capture string")
# A row the first operator yields: a sink row (route_key and SINK_COLUMNS) or a row for the second
# operator (route_key and ROW_FIELDS); whatever a row is not stays None.
FirstRow = namedtuple("FirstRow", FIRST_COLUMNS, defaults=(None,) * len(FIRST_COLUMNS))
def queue_manager_key(destination_queue: str | None, destination_machine: str | None) -> str | None:
    """The key of the queue manager a notification goes to: the GUID of its PRIVATE= format name
    (MQCN 1.9), else the destination machine."""
    return queue_manager_of(destination_queue) or destination_machine


def sink_route(origin: str) -> str:
    return f"{SINK}{zlib.crc32(origin.encode()) % SINK_KEYS}"


class DirectoryProcessor(StatefulProcessor):
    """The first operator: the replicas and the discovery requests, by operator_key prefix; the
    MQCN records and the reading tasks' summaries pass on."""

    def __init__(self, pec_name: str | None = None, id_scope: str = ""):
        self.replicas = ReplicationProcessor(pec_name, id_scope)
        self.requests = DiscoveryProcessor()
        self.rejected = RejectedPacketsProcessor()
        self.inner = {REPLICA: self.replicas, REQUEST: self.requests, FINDING: self.rejected}

    def init(self, handle) -> None:
        set_worker_gc()
        self.replicas.init(handle)          # each registers its own state variables on the one handle
        self.requests.init(handle)
        self.rejected.init(handle)
        self.seq = itertools.count()        # this task's sink rows, in the order they were written
        self.counts = start_counting("first operator", self, handle)

    def handleInputRows(self, key, rows, timerValues):
        origin = key[0]
        if origin.startswith(PASS_ON):
            yield from self._pass_on(origin, rows)
            return
        inner = self.inner[origin[:2]]
        for out in inner.handleInputRows((origin[2:],), rows, timerValues):
            yield self._frame(origin, out)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        origin = key[0]
        inner = self.inner[origin[:2]]
        for out in inner.handleExpiredTimer((origin[2:],), timerValues, expiredTimerInfo):
            yield self._frame(origin, out)

    def _frame(self, origin: str, out: pd.DataFrame) -> pd.DataFrame:
        """An inner operator's frame (typed chunks, and a replica's versions) as the first operator's rows."""
        routed = out["table_name"].isin((VERSIONS, REGISTRY)) if "owner" in out.columns else None
        sink = out[~routed] if routed is not None else out
        rows = self._sink_rows(origin, sink["table_name"].tolist(), sink["rows"].tolist())
        if routed is not None and routed.any():
            found = out[routed]
            by_owner: dict[str, list] = {}
            for table, owner, ms, text in zip(found["table_name"].tolist(), found["owner"].tolist(),
                                              found["event_ms"].tolist(), found["text"].tolist()):
                if table == VERSIONS:
                    by_owner.setdefault(owner, []).append((int(ms), text.encode()))
                else:
                    rows.append(FirstRow(SERVERS, event_ms=int(ms), kind=REGISTRY, body=text.encode()))
            rows += [FirstRow(owner, event_ms=versions[0][0], kind=DIRECTORY_VERSIONS, body=pack_versions(versions))
                     for owner, versions in by_owner.items()]
        return pd.DataFrame(rows, columns=list(FIRST_COLUMNS), dtype=object)

    def _sink_rows(self, origin: str, tables: list, chunks: list) -> list[tuple]:
        route = sink_route(origin)
        return [FirstRow(route, origin=origin, seq=next(self.seq), table_name=table, rows=data)
                for table, data in zip(tables, chunks)]

    def _pass_on(self, origin: str, frames):
        for frame in frames:
            summary = frame["summary"].notna()
            counted = frame["summary"][summary].tolist()
            rows = self._sink_rows(origin, [RAW_SUMMARY] * len(counted), counted)
            records = frame[~summary & frame["clock_time"].isna()]          # a clock row moves the watermark only
            rows += [FirstRow(queue_manager_key(queue, machine), event_ms=int(ms), kind="mqcn", topic=topic,
                               partition=int(partition), offset=int(offset), body=body, message_id=message_id,
                               sender_identifier_type=sender_type, authentication_level=level, source_machine=source,
                               destination_machine=machine, destination_queue=queue, capture=capture)
                     for ms, topic, partition, offset, body, message_id, sender_type, level, source, machine, queue,
                     capture in zip(*(records[c].tolist() for c in (
                         "arrival_ms", "topic", "partition", "offset", "body", "message_id", "sender_identifier_type",
                         "authentication_level", "source_machine", "destination_machine", "destination_queue",
                         "capture")))]
            if rows:
                yield pd.DataFrame(rows, columns=list(FIRST_COLUMNS), dtype=object)

    def close(self) -> None:
        if self.counts is not None:
            self.counts.flush()


class QueueManagerProcessor(StatefulProcessor):
    """The second operator: the MQCN queue managers; the sink rows pass on."""

    def __init__(self, settings, pec_name: str | None = None):
        self.queue_managers = NotificationProcessor(settings)
        self.registry = RegistryProcessor(pec_name)

    def init(self, handle) -> None:
        set_worker_gc()
        self.queue_managers.init(handle)
        self.registry.init(handle, self.queue_managers.state)     # its own key, the same value state
        self.seq = itertools.count()
        self.counts = start_counting("second operator", self, handle)

    def _inner(self, key: str):
        return self.registry if key == SERVERS else self.queue_managers

    def handleInputRows(self, key, rows, timerValues):
        if key[0].startswith(SINK):
            for frame in rows:
                yield frame[list(SINK_COLUMNS)]
            return
        for out in self._inner(key[0]).handleInputRows(key, rows, timerValues):
            yield self._stamped(key[0], out)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        for out in self._inner(key[0]).handleExpiredTimer(key, timerValues, expiredTimerInfo):
            yield self._stamped(key[0], out)

    def _stamped(self, key: str, frame) -> pd.DataFrame:
        return pd.DataFrame({"origin": "Q|" + key, "seq": [next(self.seq) for _ in range(len(frame))],
                             "table_name": frame["table_name"].tolist(), "rows": frame["rows"].tolist()})

    def close(self) -> None:
        if self.counts is not None:
            self.counts.flush()


def job_stream(spark, opts: dict, settings, pec_name: str | None = None, id_scope: str = ""):
    """opts: the source over the three raw topics."""
    from pyspark.sql import functions as F

    from .kafka_source import decoded_stream
    first = (decoded_stream(spark, opts, "job")
             .withColumn("arrival_ms", (F.unix_micros("arrival_time") / 1000).cast("long"))
             .withWatermark("clock_time", WATERMARK_DELAY)
             .groupBy("operator_key")
             .transformWithStateInPandas(DirectoryProcessor(pec_name, id_scope), FIRST_DDL, "Append", "EventTime",
                                         eventTimeColumnName="event_time"))
    return (first.groupBy("route_key")
            .transformWithStateInPandas(QueueManagerProcessor(settings, pec_name), SINK_DDL, "Append", "EventTime"))


def start_job_query(spark, *, sink_url: str, checkpoint: str, source_opts: dict, settings, once: bool = False,
                    trigger: str = "2s", echo=print, pec_name: str | None = None, outbound_topic: str | None = None,
                    kafka_conf: dict | None = None, records_per_task: int | None = RECORDS_PER_TASK, observer=None):
    """The job: one query over the raw topics, the protocol operators in its plan
    (streaming.spark.job_query); what the replicas send goes to outbound_messages and, if
    outbound_topic is set, to Kafka."""
    opts = {k: v for k, v in source_opts.items() if k != "topicPattern"}
    opts["topics"] = ",".join(TOPICS.values())
    opts["optionalTopics"] = REJECTED_TOPIC     # created by a capture producer when it rejects a packet
    if records_per_task:
        opts["maxRecordsPerPartition"] = str(records_per_task)
        opts["readTasks"] = str(spark.sparkContext.defaultParallelism)     # a small micro-batch: a task a core
    query_id = checkpoint_query_id(spark, checkpoint)
    outbound = {"topic": outbound_topic, "kafka": kafka_conf or {}} if outbound_topic else None
    writer = JobWriter(sink_url, opts, query_id, opts.get("dataLossLog"), echo, outbound)
    writer.sink  # open (and create tables) before starting, so a bad URL fails fast
    spool = local_spool_folder(checkpoint)
    if spool is not None:               # (none on a Hadoop filesystem's checkpoint: the driver writes inline)
        writer.behind = WriteBehind(spool)
        writer.recover()
    query = start_stream(job_stream(spark, opts, settings, pec_name, query_id), "dirstream", checkpoint, writer, once,
                         trigger, observer)
    return query if writer.behind is None else WrittenQuery(query, writer.behind)


class JobWriter(BatchWriter):
    """foreachBatch of the one query: the reading tasks' counts and dead letters become the raw
    tables, the operators' typed chunks their tables, all in one transaction with the batch's
    progress; then the batch's outbound messages go to Kafka (at least once: a batch that fails
    after the commit publishes them again when it runs again)."""

    def __init__(self, sink_url: str, source_opts: dict, query_id: str, data_loss_log: str | None = None,
                 echo=print, outbound: dict | None = None):
        super().__init__(sink_url, source_opts, query_id, data_loss_log, echo)
        self.outbound = outbound
        self._publisher = None

    def collect(self, df, batch_id: int) -> dict:
        import pyarrow as pa
        from ..sinks.typed import TypedRows, record_batch
        output = df.toArrow()
        by_table = batch_rows(output, key_order(output))
        counted = by_table.pop(RAW_SUMMARY, None)
        tables = self.summary_tables(pa.Table.from_batches(list(counted.batches())) if counted else None, batch_id)
        raw_dead = tables.pop("dead_letters")
        tables.update(by_table)
        if raw_dead:
            operators_dead = by_table["dead_letters"].chunks if "dead_letters" in by_table else []
            tables["dead_letters"] = TypedRows("dead_letters",
                                               [record_batch("dead_letters", raw_dead)] + operators_dead)
        return tables

    def after_write(self, rows: dict) -> None:
        if self.outbound and rows.get("outbound_messages"):
            from .replication_query import OutboundPublisher, outbound_records
            if self._publisher is None:
                self._publisher = OutboundPublisher(self.outbound["kafka"])
            self._publisher.publish(self.outbound["topic"], outbound_records(rows["outbound_messages"]))


def key_order(table) -> list[int]:
    """Positions of the second operator's output rows (origin, seq, ...) sorted by key and then by
    the order that key wrote them in, whatever the shuffles did."""
    import pyarrow.compute as pc
    return pc.sort_indices(table.select(["origin", "seq"]),
                           sort_keys=[("origin", "ascending"), ("seq", "ascending")]).to_pylist()
