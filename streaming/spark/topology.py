"""The job's query: what it reads and derives, and how a checkpoint of an earlier layout is told.

    msmq.cn.raw, msmq.dsrp.raw, msmq.sd.raw, msmq.qb.rejected --> the job (one query, streaming.spark.job_query)
        raw_messages_seen, dead_letters, pipeline_progress, the replication, discovery and
        notification tables (one sink transaction per micro-batch), msmq.dsrp.out

With --topics or --topic-pattern the raw query alone runs (counts and dead letters, no operators).
"""
import os
from dataclasses import dataclass, field

from .checkpoint_folder import CheckpointFolder
from ..wire.topics import OUTBOUND_TOPIC, SOURCE_TOPICS, TOPICS

__all__ = ["EARLIER_LAYOUT", "earlier_layout", "internal_topics", "JOB", "JobSettings", "query", "QuerySpec",
           "RAW", "start"]


@dataclass(frozen=True)
class QuerySpec:
    name: str                       # Spark's query name
    folder: str                     # its checkpoint, under the job's checkpoint folder
    label: str                      # pipeline_progress.query_name of an operator query
    reads: tuple[str, ...]
    derives: tuple[str, ...]


RAW = QuerySpec("dirstream", "raw", "dirstream", tuple(TOPICS.values()),
                ("raw_messages_seen", "dead_letters", "pipeline_progress"))
JOB = QuerySpec("dirstream", "job", "dirstream", SOURCE_TOPICS,
                ("raw_messages_seen", "dead_letters", "pipeline_progress", "replication tables", "discovery tables",
                 "notification tables", OUTBOUND_TOPIC))
# the four queries' checkpoint folders before the job became one query
EARLIER_LAYOUT = ("discovery", "replication", "notifications")


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


def query(operators: bool = True) -> QuerySpec:
    """The job's query; operators=False: the raw query alone (--topics, --topic-pattern)."""
    return JOB if operators else RAW


def earlier_layout(checkpoint: str, spark=None) -> str | None:
    """The message that stops `dirstream run` when the checkpoint holds the four queries of an
    earlier version (None if it does not): their state cannot become the one query's. With Spark,
    through its filesystem (any URI); without, a local folder."""
    if spark is None:
        found = [f for f in EARLIER_LAYOUT if os.path.isdir(os.path.join(checkpoint, f))]
    else:
        folder = CheckpointFolder(spark, checkpoint)
        found = [f for f in EARLIER_LAYOUT if folder.holds_folder(f)]
    if not found:
        return None
    return (f"the checkpoint {checkpoint} was written by an earlier version of the job (four queries: "
            f"{', '.join(found)}, ...); this version runs one query and cannot resume from it. Rebuild: run with a "
            f"new --checkpoint and an empty sink; the tables are a pure function of what is in Kafka, so the new "
            f"checkpoint replays it into the same tables")


def internal_topics(job: JobSettings) -> dict[str, int]:
    """The topics the job derives, with their partition count (one: a single writer, in order)."""
    return {job.outbound_topic: 1} if job.outbound_topic else {}


def start(spark, spec: QuerySpec, job: JobSettings):
    from . import pipeline
    common = dict(sink_url=job.sink_url, checkpoint=job.checkpoint_of(spec), source_opts=job.source_opts,
                  once=job.once, trigger=job.trigger, echo=job.echo, observer=job.observer,
                  records_per_task=job.records_per_task)
    if spec is RAW:
        return pipeline.start_query(spark, **common)
    from .job_query import start_job_query
    return start_job_query(spark, pec_name=job.pec_name, outbound_topic=job.outbound_topic,
                           kafka_conf=job.kafka_conf, settings=job.cn_settings, **common)
