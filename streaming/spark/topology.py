"""The job's queries: what each reads, what it derives, and in which order they run.

    msmq.cn.raw, msmq.dsrp.raw, msmq.sd.raw --> raw ------------> raw_messages_seen, dead_letters
    msmq.sd.raw -----------------------------> discovery ------> discovery tables
    msmq.dsrp.raw ---------------------------> replication ----> replication tables, msmq.dsrp.out,
                                                    |            msmq.dsrp.objects, msmq.dsrp.progress
                                                    v
    msmq.cn.raw, msmq.sd.raw, msmq.dsrp.objects -> notifications -> notification tables
                   (released up to msmq.dsrp.progress: streaming.spark.event_clock)

Running continuously, every query runs at once: the notification query's source waits for the
replication query's progress by itself. With --once the queries run in dependency order (each
phase to the end of what was in Kafka when it started), so one invocation also processes what a
query derives for another in the same run.
"""
import os
from dataclasses import dataclass, field

from ..wire.topics import OBJECTS_TOPIC, OUTBOUND_TOPIC, PROGRESS_TOPIC, TOPICS


@dataclass(frozen=True)
class QuerySpec:
    name: str                       # Spark's query name
    folder: str                     # its checkpoint, under the job's checkpoint folder
    label: str                      # pipeline_progress.query_name of an operator query
    reads: tuple[str, ...]
    derives: tuple[str, ...]
    after: tuple[str, ...] = ()     # queries whose derived topics it reads


RAW = QuerySpec("dirstream", "raw", "dirstream", tuple(TOPICS.values()),
                ("raw_messages_seen", "dead_letters", "pipeline_progress"))
DISCOVERY = QuerySpec("dirstream-discovery", "discovery", "discovery", (TOPICS["mqsd"],), ("discovery tables",))
REPLICATION = QuerySpec("dirstream-replication", "replication", "replication", (TOPICS["mqdsrp"],),
                        ("replication tables", OUTBOUND_TOPIC, OBJECTS_TOPIC, PROGRESS_TOPIC))
NOTIFICATIONS = QuerySpec("dirstream-notifications", "notifications", "notifications",
                          (TOPICS["mqcn"], TOPICS["mqsd"], OBJECTS_TOPIC, PROGRESS_TOPIC), ("notification tables",),
                          after=("dirstream-replication",))
QUERIES = (RAW, DISCOVERY, REPLICATION, NOTIFICATIONS)
OPERATORS = (DISCOVERY, REPLICATION, NOTIFICATIONS)


@dataclass
class JobSettings:
    """What `dirstream run` gives every query."""
    sink_url: str
    checkpoint: str
    source_opts: dict
    once: bool = False
    trigger: str = "2s"
    echo: object = print
    records_per_task: int | None = None
    pec_name: str | None = None
    outbound_topic: str | None = OUTBOUND_TOPIC
    kafka_conf: dict = field(default_factory=dict)
    cn_settings: object = None
    observer: object = None         # told of every micro-batch (streaming.apps.console.JobConsole)

    def checkpoint_of(self, spec: QuerySpec) -> str:
        return os.path.join(self.checkpoint, spec.folder)


def phases(once: bool, operators: bool = True) -> list[tuple[QuerySpec, ...]]:
    """The queries to start together, phase after phase: one phase when running continuously; in
    dependency order with --once. operators=False: the raw query alone (--topics, --topic-pattern)."""
    queries = QUERIES if operators else (RAW,)
    if not once:
        return [queries]
    done: set[str] = set()
    ordered = []
    while len(done) < len(queries):
        ready = tuple(q for q in queries if q.name not in done and all(a in done for a in q.after))
        ordered.append(ready)
        done |= {q.name for q in ready}
    return ordered


def internal_topics(job: JobSettings) -> dict[str, int]:
    """The topics the queries derive, with their partition count (one: a single writer, in order)."""
    topics = {OBJECTS_TOPIC: 1, PROGRESS_TOPIC: 1}
    if job.outbound_topic:
        topics[job.outbound_topic] = 1
    return topics


def start(spark, spec: QuerySpec, job: JobSettings):
    from . import pipeline
    common = dict(sink_url=job.sink_url, checkpoint=job.checkpoint_of(spec), source_opts=job.source_opts,
                  once=job.once, trigger=job.trigger, echo=job.echo, observer=job.observer)
    if spec is RAW:
        return pipeline.start_query(spark, records_per_task=job.records_per_task, **common)
    if spec is DISCOVERY:
        return pipeline.start_discovery_query(spark, **common)
    if spec is REPLICATION:
        return pipeline.start_replication_query(spark, pec_name=job.pec_name, outbound_topic=job.outbound_topic,
                                                kafka_conf=job.kafka_conf, objects_topic=OBJECTS_TOPIC,
                                                progress_topic=PROGRESS_TOPIC, **common)
    return pipeline.start_notification_query(spark, settings=job.cn_settings, objects_topic=OBJECTS_TOPIC,
                                             progress_topic=PROGRESS_TOPIC,
                                             replication_checkpoint=job.checkpoint_of(REPLICATION), **common)
