"""A PySpark Python streaming data source over confluent-kafka, registered as "msmq_kafka".

Offsets live in Spark's checkpoint ({"topic": {"partition": offset}}), so a restarted query resumes
exactly where it committed. Each Kafka partition is one Spark partition, read into Arrow record
batches. Options:

  bootstrap          Kafka bootstrap servers (required)
  topics             comma-separated topic names, or
  topicPattern       a regular expression over topic names (new matching topics are picked up)
  optionalTopics     comma-separated topics read too once they exist (picked up when created)
  startingOffsets    earliest (default), latest, or JSON {"topic": {"0": 42}}
  maxRecordsPerBatch cap on records per micro-batch (admission control)
  maxRecordsPerPartition  split a Kafka partition's range into Spark partitions of at most this many
                     records (as Spark's own Kafka source); default: one Spark partition per Kafka
                     partition. Balances the cores when a few Kafka partitions hold most records.
  readTasks          a micro-batch of fewer than GROUP_RECORDS records a task is read in this many tasks
                     (the cores), one task reading its ranges in turn (a task costs a Python worker's
                     round of set-up whatever it reads: a live micro-batch's few records took one task per
                     Kafka partition, most of it set-up); default, and a bigger micro-batch: a task a range
  failOnDataLoss     true (default): fail when offsets to read were deleted; false: skip ahead
  dataLossLog        file that records skipped offsets when failOnDataLoss is false
  decode             true: decode envelopes and bodies in the reading task (streaming.spark.decode), so the
                     source yields decoded rows (one Python hop fewer than a separate mapInArrow);
                     envelope: the envelope only (for operators that decode the body themselves);
                     summary: decode every record but yield only counts and dead letters
                     (streaming.spark.decode.summarize_records; the raw query's input);
                     job: both in one read, the good records keyed for their operator and each
                     task's counts and dead letters (streaming.spark.decode.job_batches)
  idlePartitionSeconds  with decoded envelopes, a live micro-batch ends every partition at the earliest
                     arrival time among the partitions' last records, leaving out partitions whose end
                     has not moved for this many seconds (default 5; 0: every partition counts as idle,
                     each ends at its high-water offset); see streaming.spark.event_clock
  stopFile           a local file whose existence means a stop was asked for: no new micro-batch
                     starts (the query goes idle after the batch in flight and is stopped between batches)
  kafka.<setting>    any Kafka client setting (security.protocol, sasl.*, ssl.*, ...)
"""
import json
import logging
import os
import time
from dataclasses import dataclass
from functools import cache

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

from ..wire.topics import CAPTURE_HEADER, JOB_GROUP, TOPICS, acl_refused
from .kafka_offsets import READ_AHEAD, EndOffsets, SourceError, flatten, nest
from .worker_gc import set_worker_gc

__all__ = ["ARROW_BATCH_ROWS", "arrow_schema", "client_conf", "decoded_stream", "GROUP_RECORDS", "grouped",
           "KafkaInputPartition", "KafkaRangeGroup", "KafkaSource", "KafkaStreamReader", "log", "proportional_cap",
           "READ_IDLE_TIMEOUT_S", "register", "RENEW_AFTER_S", "SCHEMA", "SOURCE_NAME", "source_options"]

log = logging.getLogger("dirstream.source")

SOURCE_NAME = "msmq_kafka"
SCHEMA = StructType([
    StructField("topic", StringType(), False), StructField("partition", IntegerType(), False),
    StructField("offset", LongType(), False), StructField("timestamp", TimestampType(), True),
    StructField("key", BinaryType(), True), StructField("value", BinaryType(), True),
])


@cache
def arrow_schema():
    """SCHEMA as the Arrow batches read() yields. pyarrow is imported here, not with the module:
    Spark imports the module in short-lived planning workers too (create_data_source), where pyarrow
    alone is 40 MB more; they linger for a minute after the job starts, when a catch-up's first
    batches run."""
    import pyarrow as pa
    return pa.schema([
        pa.field("topic", pa.string(), nullable=False), pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False), ("timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.binary()), ("value", pa.binary()),
    ])


ARROW_BATCH_ROWS = 10_000
READ_IDLE_TIMEOUT_S = 240.0          # longer than the driver's wait for an unreachable broker
RENEW_AFTER_S = 20.0                 # a reading task's client is replaced after this long without a record


class KafkaRangeGroup(InputPartition):
    """Several Kafka ranges read by one task, in turn (the option readTasks)."""

    def __init__(self, ranges: list["KafkaInputPartition"]):
        super().__init__(",".join(r.value for r in ranges))
        self.ranges = ranges


@dataclass
class KafkaInputPartition(InputPartition):
    topic: str
    partition: int
    start: int
    end: int

    def __init__(self, topic: str, partition: int, start: int, end: int, clock_ms: int | None = None):
        super().__init__(f"{topic}[{partition}]:{start}-{end}")
        self.topic, self.partition, self.start, self.end = topic, partition, start, end
        self.clock_ms = clock_ms            # decode=job: the micro-batch's clock (KafkaStreamReader._clock_ms)


def client_conf(options: dict) -> dict:
    bootstrap = options.get("bootstrap")
    if not bootstrap:
        raise SourceError("the msmq_kafka source needs the option bootstrap")
    conf = {"bootstrap.servers": bootstrap}
    conf.update({k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")})
    return conf


class KafkaSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self):
        mode = self.options.get("decode", "false").lower()
        if mode == "summary":
            from .columns import SUMMARY_DDL
            return SUMMARY_DDL
        if mode in ("true", "envelope"):
            from .columns import DECODED_DDL
            return DECODED_DDL
        if mode == "job":
            from .columns import JOB_DDL
            return JOB_DDL
        return SCHEMA

    def streamReader(self, schema):
        return KafkaStreamReader(dict(self.options))


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict):
        # Spark hands data source options over with lower-cased keys: look every option up in lower case.
        self.options = options = {k.lower(): v for k, v in options.items()}
        self.conf = client_conf(options)
        topics = list(_names(options, "topics"))
        self.pattern = options.get("topicpattern")
        if not topics and not self.pattern:
            raise SourceError("the msmq_kafka source needs the option topics or topicPattern")
        self.topics = topics or None
        self.optional = _names(options, "optionaltopics")
        self.max_records = int(options["maxrecordsperbatch"]) if options.get("maxrecordsperbatch") else None
        self.max_per_partition = _positive(options, "maxRecordsPerPartition")
        self.read_tasks = _positive(options, "readTasks")
        self.fail_on_data_loss = options.get("failondataloss", "true").lower() != "false"
        self.available_now_target: dict | None = None
        self._offsets: EndOffsets | None = None
        self._arrivals = None
        # with decoded envelopes, a capped micro-batch ends every partition at one event time
        self.align_by_time = options.get("decode", "false").lower() in ("true", "envelope", "job")
        self.idle_partition_s = _seconds(options, "idlePartitionSeconds")
        self._gate = None
        self._clock: int | None = None     # decode=job: the latest arrival time planned (_clock_ms)
        self._reset_logged: dict[tuple[str, int], int] = {}
        self.stop_file = options.get("stopfile")

    # The driver-side Kafka client is not shipped to executors.
    def __getstate__(self):
        state = dict(self.__dict__)
        state["_offsets"] = state["_arrivals"] = state["_gate"] = None
        return state

    @property
    def arrivals(self):
        """Arrival times by offset (streaming.spark.event_clock.ArrivalIndex), read on the driver."""
        if self._arrivals is None:
            from .event_clock import ArrivalIndex
            self._arrivals = ArrivalIndex(self.conf)
        return self._arrivals

    @property
    def gate(self):
        """Where live partitions' releases end (streaming.spark.event_clock.ReleaseGate), on the driver."""
        if self._gate is None:
            from .event_clock import IDLE_PARTITION_S, ReleaseGate
            idle_s = IDLE_PARTITION_S if self.idle_partition_s is None else self.idle_partition_s
            self._gate = ReleaseGate(self.arrivals, idle_s)
        return self._gate

    @property
    def offsets(self) -> EndOffsets:
        if self._offsets is None:
            self._offsets = EndOffsets(self.conf, self.topics, self.pattern, optional=self.optional)
        return self._offsets

    # ---------------------------------------------------------------- offsets
    def initialOffset(self) -> dict:
        starting = self.options.get("startingoffsets", "earliest").strip()
        partitions = self.offsets.partitions()
        if starting == "latest":
            return nest(self.offsets.ends(partitions))
        if starting == "earliest":
            return nest(self.offsets.lows(partitions))
        try:
            given = flatten(json.loads(starting))
        except (ValueError, AttributeError) as exc:
            raise SourceError(f"startingOffsets must be earliest, latest or JSON "
                              f'{{"topic": {{"0": 42}}}}: {exc}') from None
        lows = self.offsets.lows([tp for tp in partitions if tp not in given])
        return nest({tp: given[tp] if tp in given else lows[tp] for tp in partitions})

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now_target = nest(self.offsets.ends())

    def reportLatestOffset(self):
        return nest(self.offsets.ends())

    def latestOffset(self, start: dict, limit) -> dict:
        if self.stop_file and os.path.exists(self.stop_file):
            return start                        # a stop was asked for: nothing new (the query goes idle)
        begin = flatten(start)
        lows = {}
        if self.available_now_target is not None:
            ends = flatten(self.available_now_target)       # all there is: taken as complete
        else:
            bounds = self.offsets.bounds()
            ends, lows = {tp: high for tp, (_, high) in bounds.items()}, {tp: low for tp, (low, _) in bounds.items()}
        for tp in ends:                         # partitions added while running start at their beginning
            begin.setdefault(tp, 0)
        for tp, end in ends.items():
            if end < begin[tp]:
                self._offsets_went_back(tp, begin[tp], end)
        ends = {tp: max(ends.get(tp, begin[tp]), begin[tp]) for tp in begin}
        released = self._capped(begin, ends, limit.max_rows) if isinstance(limit, ReadMaxRows) else ends
        if self.align_by_time and self.available_now_target is None:
            # after the cap: a backlog's capped batch ends long before the heads, and the cuts are
            # then looked for within its ranges only
            released = self.gate.release(begin, ends, lows, released)
        return nest(released)

    def _capped(self, begin: dict, ends: dict, max_rows: int) -> dict:
        """At most max_rows records, shared in proportion to each partition's backlog; with decoded
        envelopes the shares end at one common event time (event_clock.aligned_cap)."""
        shares = {tp: end for tp, end in proportional_cap(begin, ends, max_rows).items() if tp in ends}
        if self.align_by_time:
            from .event_clock import aligned_cap
            shares = aligned_cap(self.arrivals, begin, ends, shares, max_rows)
        return shares

    def partitions(self, start: dict, end: dict):
        begin, finish = flatten(start), flatten(end)
        parts = []
        ranges = [(tp, begin.get(tp, 0), stop) for tp, stop in sorted(finish.items()) if stop > begin.get(tp, 0)]
        lows = self.offsets.lows([tp for tp, _first, _stop in ranges])
        for tp, first, stop in ranges:
            first = self._check_data_loss(tp, first, stop, lows[tp])
            if stop > first:
                parts.extend(_split(tp, first, stop, self.max_per_partition))
        if self.options.get("decode", "").lower() == "job" and parts:
            clock_ms = self._clock_ms({(p.topic, p.partition): p.end for p in parts})
            for part in parts:
                part.clock_ms = clock_ms
        return grouped(parts, self.read_tasks) if self.read_tasks else parts

    def _clock_ms(self, ends: dict) -> int | None:
        """The micro-batch's clock: the latest arrival time among the last records of the partitions it
        reads and of every micro-batch before it since the job started. Every reading task yields it as
        its clock row (decode.job_batches), so the watermark follows the latest arrival read, and a
        clock row is never behind the watermark of the micro-batch before (it moves only forward)."""
        latest = max((ms for ms in self.arrivals.heads(ends).values() if ms is not None), default=None)
        if latest is not None:
            self._clock = latest if self._clock is None else max(self._clock, latest)
        return self._clock

    def _offsets_went_back(self, tp: tuple[str, int], position: int, end: int) -> None:
        """The partition now ends before the checkpointed position: the topic was deleted and recreated
        (or truncated). Fail, or skip its offsets below the position (they are counted once)."""
        if self.fail_on_data_loss:
            raise SourceError(f"{tp[0]}[{tp[1]}] now ends at offset {end} but the checkpoint has read up to "
                              f"{position}: the topic was recreated or truncated; restart with --skip-data-loss "
                              f"to continue from offset {position}")
        if self._reset_logged.get(tp) != position:
            self._reset_logged[tp] = position
            low = self.offsets.low(tp)
            self._log_skipped(tp, low, position - low)

    def _log_skipped(self, tp: tuple[str, int], first: int, skipped: int) -> None:
        log_path = self.options.get("datalosslog")
        if log_path and skipped > 0:
            with open(log_path, "a") as fh:
                fh.write(json.dumps({"topic": tp[0], "partition": tp[1], "from": first, "skipped": skipped,
                                     "at": time.time()}) + "\n")

    def _check_data_loss(self, tp: tuple[str, int], first: int, stop: int, low: int) -> int:
        if low <= first:
            return first
        if self.fail_on_data_loss:
            raise SourceError(f"offsets {first}..{min(low, stop) - 1} of {tp[0]}[{tp[1]}] were deleted before they "
                              f"were read (earliest available: {low}); restart with --skip-data-loss to skip them")
        self._log_skipped(tp, first, min(low, stop) - first)
        return min(low, stop)

    def commit(self, end: dict) -> None:
        pass                                    # offsets are Spark's checkpoint; nothing to commit to Kafka

    def stop(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
        if self._arrivals is not None:
            self._arrivals.close()

    # ---------------------------------------------------------------- executors
    def read(self, partition: "KafkaInputPartition | KafkaRangeGroup"):
        set_worker_gc()
        for part in partition.ranges if isinstance(partition, KafkaRangeGroup) else (partition,):
            yield from self._read_range(part)

    def _read_range(self, partition: KafkaInputPartition):
        pool_key = tuple(sorted(self.conf.items()))
        held = {"consumer": _reading_consumer(pool_key, self.conf)}
        finished = False

        def renew(position: int):
            held["consumer"].close()
            held["consumer"] = _assigned(_new_consumer(self.conf), partition.topic, partition.partition, position)
            return held["consumer"]
        try:
            records = _read_records(_assigned(held["consumer"], partition.topic, partition.partition, partition.start),
                                    partition, renew, self.conf)
            mode = self.options.get("decode", "false").lower()
            if mode == "summary":
                from .decode import summarize_records
                summary = summarize_records(partition.topic, partition.partition, records)
                batches = [summary] if summary is not None else []
            elif mode == "job":
                from .decode import job_batches
                batches = job_batches(partition.topic, partition.partition, records, clock_ms=partition.clock_ms)
            else:
                batches = _arrow_batches(records, partition.topic, partition.partition)
            if mode in ("true", "envelope"):
                from .decode import decode_batches
                batches = decode_batches(batches, body=mode == "true")
            yield from batches
            finished = True
        finally:
            _release_consumer(pool_key, held["consumer"], finished)


# Each Python worker keeps its Kafka consumer from task to task (Spark reuses the workers), as
# Spark's own Kafka source pools its consumers: a new connection per task and micro-batch costs
# time, and the embedded broker slowed down under thousands of them over a long run.
_CONSUMERS: dict[tuple, object] = {}


def _reading_consumer(key: tuple, conf: dict):
    consumer = _CONSUMERS.pop(key, None)
    return consumer if consumer is not None else _new_consumer(conf)


def _new_consumer(conf: dict):
    from confluent_kafka import Consumer
    return Consumer({**READ_AHEAD, **conf, "group.id": conf.get("group.id", JOB_GROUP),
                     "enable.auto.commit": False, "auto.offset.reset": "error",
                     "fetch.wait.max.ms": 10, "log_level": conf.get("log_level", 3)})


def _assigned(consumer, topic: str, partition: int, position: int):
    from confluent_kafka import TopicPartition
    consumer.assign([TopicPartition(topic, partition, position)])
    return consumer


def _release_consumer(key: tuple, consumer, reusable: bool) -> None:
    """Keep a consumer whose task read its whole range; close one that failed or was abandoned."""
    if reusable and key not in _CONSUMERS:
        consumer.unassign()
        _CONSUMERS[key] = consumer
    else:
        consumer.close()


def _read_records(consumer, part: KafkaInputPartition, renew=None, conf: dict | None = None):
    """(offset, timestamp in us or None, key, value, capture position or None) of every record in
    the partition's range. renew(position): a fresh client assigned there, asked for after
    RENEW_AFTER_S without a record (a client that saw the broker restart under it fetched nothing
    for minutes with the records on the broker: stale metadata, as kafka_offsets.EndOffsets found)."""
    position, last_data = part.start, time.monotonic()
    renewed = last_data
    while position < part.end:
        batch = consumer.consume(min(ARROW_BATCH_ROWS, part.end - position), 1.0)
        if not batch and _position(consumer, part) >= part.end:
            return                              # the rest of the range held no records (transaction markers)
        if not batch and time.monotonic() - last_data > READ_IDLE_TIMEOUT_S:
            raise SourceError(f"{part.topic}[{part.partition}]: no records after offset {position} within "
                              f"{READ_IDLE_TIMEOUT_S:.0f} s, expected up to {part.end - 1}")
        if not batch and renew is not None and time.monotonic() - max(last_data, renewed) > RENEW_AFTER_S:
            log.warning("%s[%d]: no record after offset %d for %.0f s; reading on with a fresh Kafka client",
                        part.topic, part.partition, position, time.monotonic() - last_data)
            consumer, renewed = renew(position), time.monotonic()
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() in (-191, 30):     # _PARTITION_EOF is off; GROUP_AUTHORIZATION_FAILED: see below
                    continue
                _raise_if_refused(err, part, conf or {})
                raise SourceError(f"reading {part.topic}[{part.partition}] at {position} failed: {err.str()}")
            offset = msg.offset()
            if offset >= part.end:
                return
            ts_type, ts = msg.timestamp()
            yield offset, (ts * 1000 if ts_type and ts >= 0 else None), msg.key(), msg.value(), _capture(msg)
            position = offset + 1
        if batch:
            last_data = time.monotonic()


def _raise_if_refused(err, part: KafkaInputPartition, conf: dict) -> None:
    """An authorizer's refusal of the topic as the ACL to grant. (The group's is not one: librdkafka
    looks up the coordinator of any consumer's group, once, and reports its refusal as an error
    record, but a reader assigned its partition that commits nothing never uses the group.)"""
    if err.code() == 29:                # TOPIC_AUTHORIZATION_FAILED
        raise SourceError(acl_refused(conf.get("sasl.username"), "Read", "topic", part.topic))


def _capture(msg) -> str | None:
    """The capture position a capture producer put in the record's headers (JSON), else None."""
    headers = msg.headers()
    if headers:
        for name, value in headers:
            if name == CAPTURE_HEADER and value:
                return value.decode("utf-8", "replace")
    return None


def _position(consumer, part: KafkaInputPartition) -> int:
    from confluent_kafka import TopicPartition
    (tp,) = consumer.position([TopicPartition(part.topic, part.partition)])
    return tp.offset


def _arrow_batches(records, topic: str, partition: int):
    columns = {name: [] for name in SCHEMA.names}
    for offset, ts, key, value, *_capture in records:
        columns["offset"].append(offset)
        columns["timestamp"].append(ts)
        columns["key"].append(key)
        columns["value"].append(value)
        if len(columns["offset"]) >= ARROW_BATCH_ROWS:
            yield _to_batch(columns, topic, partition)
            columns = {name: [] for name in SCHEMA.names}
    if columns["offset"]:
        yield _to_batch(columns, topic, partition)


def _to_batch(columns: dict, topic: str, partition: int):
    import pyarrow as pa
    n = len(columns["offset"])
    columns["topic"], columns["partition"] = [topic] * n, [partition] * n
    schema = arrow_schema()
    return pa.RecordBatch.from_arrays([pa.array(columns[f.name], type=f.type) for f in schema], schema=schema)


def _positive(options: dict, name: str) -> int | None:
    text = options.get(name.lower())
    if not text:
        return None
    if not text.isdigit() or int(text) == 0:
        raise SourceError(f"the option {name} must be a positive whole number, got {text!r}")
    return int(text)


def _split(tp: tuple[str, int], first: int, stop: int, most: int | None) -> list[KafkaInputPartition]:
    """One Kafka partition's offset range as Spark partitions of at most `most` records, even sized."""
    pieces = 1 if most is None else -(-(stop - first) // most)
    bounds = [first + (stop - first) * i // pieces for i in range(pieces)] + [stop]
    return [KafkaInputPartition(tp[0], tp[1], a, b) for a, b in zip(bounds, bounds[1:])]


# A micro-batch of fewer records than this a core is read in one task a core: a task costs a Python
# worker's round of set-up (50-100 ms on a 2-core machine) whatever it reads, and reading about 40 µs
# a record. A bigger one keeps a task per range: a backlog's cores balance best over many tasks
# (the protocols' records cost differently), and fewer ran slower there.
GROUP_RECORDS = 10_000


def grouped(parts: list[KafkaInputPartition], tasks: int) -> list:
    """A small micro-batch's ranges (under GROUP_RECORDS a task) in `tasks` groups, each range
    (largest first) to the group with the fewest records so far; a group of one range stays that
    range, a group's ranges are read in Kafka order. A bigger micro-batch's ranges as they are."""
    if len(parts) <= tasks or sum(p.end - p.start for p in parts) >= tasks * GROUP_RECORDS:
        return parts
    groups: list[list[KafkaInputPartition]] = [[] for _ in range(tasks)]
    sizes = [0] * tasks
    for part in sorted(parts, key=lambda p: p.start - p.end):           # largest first (a stable sort)
        lightest = sizes.index(min(sizes))
        groups[lightest].append(part)
        sizes[lightest] += part.end - part.start
    return [KafkaRangeGroup(sorted(g, key=lambda p: (p.topic, p.partition, p.start))) if len(g) > 1 else g[0]
            for g in groups]


def proportional_cap(begin: dict, ends: dict, max_rows: int) -> dict:
    """Admission control: share max_rows across partitions with data, in proportion to their backlog."""
    backlog = {tp: ends[tp] - begin[tp] for tp in ends if ends[tp] > begin[tp]}
    total = sum(backlog.values())
    if total <= max_rows:
        return ends
    capped = dict(begin)
    for tp, n in backlog.items():
        capped[tp] = begin[tp] + max(1, n * max_rows // total)
    return capped


def _seconds(options: dict, name: str) -> float | None:
    text = options.get(name.lower())
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise SourceError(f"the option {name} must be a number of seconds (0 or more), got {text!r}")
    return value


def _names(options: dict, key: str) -> tuple[str, ...]:
    """A comma-separated option's names."""
    return tuple(t.strip() for t in options.get(key, "").split(",") if t.strip())


def register(spark) -> None:
    spark.dataSource.register(KafkaSource)


def source_options(bootstrap: str, kafka_options: dict | None = None, topics: list[str] | None = None,
                   starting_offsets: str = "earliest", max_records: int | None = None,
                   fail_on_data_loss: bool = True, data_loss_log: str | None = None) -> dict:
    opts = {"bootstrap": bootstrap, "topics": ",".join(topics or TOPICS.values()),
            "startingOffsets": starting_offsets, "failOnDataLoss": str(fail_on_data_loss).lower()}
    if max_records:
        opts["maxRecordsPerBatch"] = str(max_records)
    if data_loss_log:
        opts["dataLossLog"] = data_loss_log
    opts.update({f"kafka.{k}": v for k, v in (kafka_options or {}).items()})
    return opts


def decoded_stream(spark, options: dict, mode: str = "true"):
    """What the source's reading tasks decode (its option decode): "true" every record;
    "envelope" the envelope only (operators that parse the body themselves; the raw query has
    already turned bad bodies into dead letters); "summary" counts and dead letters only."""
    return spark.readStream.format(SOURCE_NAME).options(**options, decode=mode).load()
