"""The streaming job: Kafka source -> decode -> idempotent sinks, one transaction per micro-batch."""
import json
import logging
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from . import RECORDS_PER_TASK
from .checkpoint_folder import CheckpointFolder
from .class_archive import ClassArchive
from .decode import UNKNOWN
from .kafka_offsets import EndOffsets
from .operator_counts import SINK_WRITER, append_counts, counting_folder
from .kafka_source import client_conf, decoded_stream, register, source_options  # noqa: F401 (re-exported)
from ..sinks import open_sink, utcnow

__all__ = ["BatchWriter", "build_spark", "checkpoint_query_id", "DEAD_LETTER_COLUMNS",
           "default_shuffle_partitions", "driver_frees_memory", "driver_java_options", "DRIVER_MEMORY",
           "DURATION_UNITS_MS", "JIT_OPTIONS", "job_spark_defaults", "LOCAL_CHECKPOINT_FILES", "log", "M_MMAP_THRESHOLD",
           "M_TRIM_THRESHOLD", "parse_duration_ms", "parse_end_offsets", "parse_trigger", "PYTHON_WORKER_ENV", "source_options",
           "spark_defaults_file", "start_query", "start_stream", "stop_spark", "user_spark_settings",
           "workers_build_line"]

log = logging.getLogger("dirstream.job")
DRIVER_MEMORY = "4g"
# Flat memory: the Python workers hand freed memory back to the OS. glibc's malloc keeps a
# fixed mmap threshold (large buffers are unmapped when freed, not kept in its heap) and trims its
# heap past 128 KiB free; pyarrow allocates from malloc instead of its mimalloc pool, which keeps
# freed pages. A backlog's micro-batches then raise a worker's memory only while they run.
PYTHON_WORKER_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072",
                     "ARROW_DEFAULT_MEMORY_POOL": "system"}
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3                      # glibc's mallopt parameters (malloc.h)


def driver_frees_memory() -> None:
    """The same for the driver's own Python process, which collects each micro-batch's output as
    Arrow (TableWriter, BatchWriter): started before it could take the environment variables, it
    sets them by call. Without it a catch-up's largest batch stays in the driver's resident memory."""
    import ctypes
    import pyarrow as pa
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:                                               # not glibc: nothing to set
        return
    for parameter, name in ((M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_"), (M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_")):
        libc.mallopt(parameter, int(PYTHON_WORKER_ENV[name]))


# Spark's JVMs compile with C1 only. C2 took 55 % of the driver JVM's CPU in a 30,000-message run
# (35 of 64 s, by thread; JFR: Spark's planning, Janino, the SQL parser, task (de)serialisation, code
# a micro-batch runs a few times); with C1 alone the JVM took 30 s, the job ran 1.13x faster and small
# micro-batches 1.1-1.2x (docs/benchmarks.md). Most of the work is in the Python workers.
JIT_OPTIONS = "-XX:TieredStopAtLevel=1"


def driver_java_options(memory: str, pretouch: bool = True) -> str:
    """The driver JVM's heap is fixed at spark.driver.memory and, for a job that runs on, touched whole
    at start: under a backlog G1 grows it to the whole of it anyway (docs/benchmarks.md), and an
    elastic heap made the JVM's resident memory follow the load (2.1 -> 3.1 GB catching up). A pass
    that ends (--once) does not touch it first: 2.2 s of its start on a 2-core machine. C1 only
    (JIT_OPTIONS)."""
    return f"-Xms{memory} {JIT_OPTIONS}" + (" -XX:+AlwaysPreTouch" if pretouch else "")


def default_shuffle_partitions(master: str) -> int:
    """The stateful operators' tasks per micro-batch when the first run of a checkpoint does not say:
    one per core in local mode (each task loads and commits its state store at every micro-batch:
    with 2 partitions instead of 4 on 2 cores the whole job in 2,000-record batches ran 1.11x
    faster), 4 on a cluster (docs/deploying.md, "Running on a Spark cluster")."""
    if master == "local":
        return 1
    if master.startswith("local[") and master.endswith("]"):
        cores = master[len("local["):-1].split(",")[0]
        if cores == "*":
            return max(1, os.cpu_count() or 1)
        if cores.isdigit() and int(cores) > 0:
            return int(cores)
    return 4


# A checkpoint on the local file system is written through Hadoop's FileSystem API. Spark's default,
# FileContext, renames each file it writes (offsets, commits, every state store's changelog, and
# each one's checksum file) after asking for the status of both names, and without Hadoop's native
# library the local file system answers each by running `readlink` as a child process of the driver
# JVM: about 50 processes a micro-batch, on the path of the batch's commit (0.09 -> 0.03 s a batch
# in 2,000-record batches, docs/benchmarks.md). A local rename is atomic either way. Another
# filesystem's checkpoint (hdfs://, s3a://) keeps Spark's default.
LOCAL_CHECKPOINT_FILES = {"spark.sql.streaming.checkpointFileManagerClass":
                          "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"}


def build_spark(master: str = "local[*]", app_name: str = "msmq-dirstream", conf: dict | None = None,
                write_class_archive: bool = False, pretouch: bool = True, local_checkpoint: bool = False):
    """The Spark session. The driver JVM maps this machine's class archive when there is one; with
    write_class_archive it writes one when there is none, installed by stop_spark (class_archive.py).
    local_checkpoint: the queries' checkpoints are on the local file system (LOCAL_CHECKPOINT_FILES)."""
    global _class_archive
    if (conf or {}).get("spark.pyspark.python"):
        # an in-process driver takes the Python workers' interpreter from PYSPARK_PYTHON only
        os.environ["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")      # everything stays on loopback
    from pyspark.sql import SparkSession
    given = user_spark_settings(conf or {})
    _jvm_in_own_session()
    _class_archive = ClassArchive.for_this_machine(write=write_class_archive)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in job_spark_defaults(master, given, pretouch, local_checkpoint).items():
        if key not in given:            # the user's setting wins, wherever it was given
            builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    driver_frees_memory()
    if not master.startswith("local"):
        # a cluster's executors get the project's code from the job itself (workers need only Python
        # and the third-party dependencies)
        from .code_archive import write_code_archive
        spark.sparkContext.addPyFile(str(write_code_archive(Path(tempfile.gettempdir()) / "msmq-dirstream")))
    register(spark)
    return spark


_class_archive = ClassArchive(None, write=False)


def workers_build_line(spark) -> str:
    """Which build of the codecs the Python workers load (streaming.build_line), from one task that
    imports the job's code as the operators' tasks do."""
    from .. import build_line
    return spark.sparkContext.parallelize([0], 1).map(lambda _: build_line()).first()


def job_spark_defaults(master: str, given: dict, pretouch: bool, local_checkpoint: bool = False) -> dict[str, str]:
    """The job's Spark settings, each applied only where the user has not set it."""
    defaults = {
        **(LOCAL_CHECKPOINT_FILES if local_checkpoint else {}),
        "spark.sql.shuffle.partitions": str(default_shuffle_partitions(master)),
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        # a commit writes the batch's changes, not a snapshot of the whole store (snapshots are
        # made in the background), so a commit's cost follows the batch, not the state's size
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.python.worker.reuse": "true",
        # the Python workers, and the state server each stateful task's Python side calls on
        # every state read and write, over Unix sockets instead of loopback TCP
        "spark.python.unix.domain.socket.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.adaptive.enabled": "false",          # not supported in streaming anyway
        "spark.sql.debug.maxToStringFields": "100",
        # Spark's 1 GB default driver heap runs out under a backlog's large micro-batches in local mode
        "spark.driver.memory": DRIVER_MEMORY,
        # the user's spark.driver.defaultJavaOptions replaces this (extraJavaOptions adds to it)
        "spark.driver.defaultJavaOptions": driver_java_options(given.get("spark.driver.memory", DRIVER_MEMORY),
                                                               pretouch) + " " + _class_archive.java_options(),
        # a cluster's executors compile as the driver does (user options add to it)
        "spark.executor.defaultJavaOptions": JIT_OPTIONS,
    }
    defaults.update({f"spark.executorEnv.{key}": value for key, value in PYTHON_WORKER_ENV.items()})
    return defaults


def user_spark_settings(conf: dict) -> dict[str, str]:
    """The Spark settings the user gave: spark-defaults.conf, spark-submit's own (--conf and its
    options, when spark-submit started this driver), then --spark-conf."""
    given = spark_defaults_file()
    if os.environ.get("PYSPARK_GATEWAY_PORT"):             # a driver spark-submit started: its JVM holds them
        from pyspark import SparkConf
        from pyspark.core.context import SparkContext
        SparkContext._ensure_initialized()
        given.update(SparkConf().getAll())
    given.update(conf)
    return given


def spark_defaults_file() -> dict[str, str]:
    """spark-defaults.conf as spark-submit reads it: in SPARK_CONF_DIR, else SPARK_HOME's conf folder
    (pyspark's own Spark when SPARK_HOME is not set); a Java properties file."""
    import pyspark
    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    path = Path(os.environ.get("SPARK_CONF_DIR") or os.path.join(home, "conf")) / "spark-defaults.conf"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    settings = {}
    for line in lines:
        found = re.match(r"\s*([^#!\s=:][^\s=:]*)\s*[=:\s]\s*(.*?)\s*$", line)
        if found:
            settings[found.group(1)] = found.group(2)
    return settings


def _jvm_in_own_session() -> None:
    """Spark's driver JVM, and with it the Python workers it starts, in a session (and process group)
    of its own: a service manager or a container runtime stops a program by signalling its whole
    process group, and SIGTERM would kill the JVM under the running query (its shutdown hook stops
    Spark) and the Python workers mid-task, so `dirstream run` could not finish the micro-batch in
    flight and exit 0. The driver alone handles the signals (streaming.apps.run.StopRequests). The
    JVM still ends with the driver: it exits when its standard input, the driver's pipe, closes.
    PySpark starts the JVM through pyspark.core.context.launch_gateway, with no way to pass Popen
    options from the session builder: that name is wrapped, once."""
    import pyspark.core.context as context
    launch = context.launch_gateway
    if getattr(launch, "own_session", False):
        return

    def launch_in_own_session(conf=None, popen_kwargs=None):
        return launch(conf, {**(popen_kwargs or {}), "start_new_session": True})
    launch_in_own_session.own_session = True
    context.launch_gateway = launch_in_own_session


def stop_spark(spark, say=lambda text: None) -> None:
    """Stops the session; if its JVM writes the machine's class archive, waits for that and installs it."""
    from pyspark import SparkContext
    spark.stop()
    if _class_archive.pending is not None:
        say("saving the driver JVM's class archive (once per machine and Spark version: later starts "
            "are faster)")
        _class_archive.install_after_exit(getattr(SparkContext._gateway, "proc", None))


DEAD_LETTER_COLUMNS = ("topic", "partition", "offset", "protocol", "kafka_key", "message_id", "source_machine",
                       "destination_machine", "arrival_time", "error_structure", "error_field", "error_offset",
                       "error_reason", "error", "raw_value")


class BatchWriter:
    """foreachBatch: aggregates one micro-batch and writes every sink table in one transaction."""

    def __init__(self, sink_url: str, source_opts: dict, query_id: str, data_loss_log: str | None = None,
                 echo=print):
        self.sink_url = sink_url
        self.query_id = query_id
        self.source_opts = source_opts
        self.data_loss_log = data_loss_log
        self.echo = echo
        self._sink = None
        self._offsets = None
        self._ends: dict[tuple[str, int], int] = {}
        self._ends_restored = False
        self.query_name, self.observer = "dirstream", None     # set by start_stream
        self.behind = None              # a WriteBehind: the sink write runs behind the next micro-batch

    @property
    def sink(self):
        if self._sink is None:
            self._sink = open_sink(self.sink_url)
        return self._sink

    def __call__(self, df, batch_id: int) -> None:
        started = utcnow()
        t0 = time.monotonic()
        query_id = self.query_id
        if not self._ends_restored:     # once, before any write behind: the sink is the writer thread's after
            self._restore_ends(query_id)
            self._ends_restored = True
        rows = self.collect(df, batch_id)
        collected = time.monotonic()
        progress = self.progress_row(query_id, batch_id, started, t0, rows.pop("_counts"))
        rows["pipeline_progress"] = [progress]
        if self.behind is None:
            self.write(batch_id, rows)
        else:
            path = self.behind.spool(batch_id, rows)        # durable before Spark may commit the batch
            self.behind.start(lambda: self.write(batch_id, rows), path)
        self._count({"driver after collect ms": (time.monotonic() - collected) * 1000})

    def recover(self) -> None:
        """Before the query starts: the spooled micro-batches a stopped process left, written (or
        found written) and their side effects done, in batch order (streaming.spark.write_behind)."""
        for batch_id, path in self.behind.spooled():
            self.write(batch_id, self.behind.load(path), recovered=True)
            os.remove(path)

    def write(self, batch_id: int, rows: dict, recovered: bool = False) -> None:
        """One micro-batch's sink transaction, then its side effects (after_write) and its line."""
        query_id, progress = self.query_id, rows["pipeline_progress"][0]
        t0 = time.monotonic()
        written = self.sink.write_batch(query_id, batch_id, rows)
        self._count({"sink write ms": (time.monotonic() - t0) * 1000,
                     **{f"upserts {t}": n for t, n in self.sink.upserts.items()}})
        self.sink.upserts.clear()
        self.after_write(rows)
        if recovered:
            self.echo(f"batch {batch_id}: " + ("written from the write-behind spool" if written else
                                               "already written") + " (left by the process before)")
            return
        if self.observer is not None:
            self.observer.batch(self.query_name, batch_id, progress, {t: len(v) for t, v in rows.items()},
                                rows.get("dead_letters") or [])
        self.echo(f"batch {batch_id}: {progress['input_rows']} rows ({progress['dead_letters']} dead letters) in "
                  f"{progress['duration_ms']} ms, {progress['rows_per_second']:,.0f} rows/s, lag {progress['total_lag']}"
                  + ("" if written else " (already written: skipped)"))

    @staticmethod
    def _count(figures: dict) -> None:
        """The driver's figures, for the benchmark (operator_counts): a write's seconds and the sink's
        rows written by table, and what the query waited for after collecting (inline, the write;
        behind, the spool and the write before)."""
        folder = counting_folder()
        if folder:
            append_counts(folder, SINK_WRITER, figures)

    def after_write(self, rows: dict) -> None:
        """Called after every batch, also one already written (a replay): side effects go here."""

    def collect(self, df, batch_id: int) -> dict:
        return self.collect_summary(df, batch_id) if "row_type" in df.columns else self.collect_records(df, batch_id)

    def collect_summary(self, df, batch_id: int) -> dict:
        """decode=summary: the reading tasks have counted; add their counts up across tasks."""
        return self.summary_tables(df.toArrow(), batch_id)

    def summary_tables(self, table, batch_id: int) -> dict:
        """The reading tasks' counts (an Arrow table of decode.SUMMARY_ARROW rows, or None) as the raw tables."""
        import pyarrow.compute as pc
        if table is None:
            return self._tables(batch_id, [], [], [])
        kind = table["row_type"]
        parts = table.filter(pc.equal(kind, "partition")).group_by(["topic", "partition"]).aggregate(
            [("messages", "sum"), ("offset", "max"), ("dead_letters", "sum")]).to_pylist()
        seen = table.filter(pc.equal(kind, "seen")).group_by(["protocol", "server", "minute"]).aggregate(
            [("messages", "sum"), ("dead_letters", "sum")]).to_pylist()
        dead = table.filter(pc.equal(kind, "dead")).select(list(DEAD_LETTER_COLUMNS)).to_pylist()
        return self._tables(batch_id, [(r["topic"], r["partition"], r["messages_sum"], r["offset_max"],
                                        r["dead_letters_sum"]) for r in parts],
                            [(r["protocol"], r["server"], r["minute"], r["messages_sum"], r["dead_letters_sum"])
                             for r in seen], dead)

    def _tables(self, batch_id: int, parts: list[tuple], seen: list[tuple], dead: list[dict]) -> dict:
        now = utcnow()
        return {
            "_counts": [{"topic": t, "partition": p, "n": n, "last": last, "bad": bad} for t, p, n, last, bad in parts],
            "raw_messages_seen": [{"protocol": p, "server": s, "minute": m, "messages": n, "dead_letters": bad}
                                  for p, s, m, n, bad in seen],
            "dead_letters": [dict(r, kafka_partition=r.pop("partition"), kafka_offset=r.pop("offset"),
                                  batch_id=batch_id, recorded_at=now) for r in dead],
        }

    def collect_records(self, df, batch_id: int) -> dict:
        """decode=true (one row per record). One Spark action: the few columns the tables need go to
        the driver as Arrow (bodies stay behind; raw values only for dead letters), then are
        aggregated there with pyarrow."""
        import pyarrow.compute as pc
        from pyspark.sql import functions as F
        table = df.select(
            "topic", "partition", "offset", "ok", F.coalesce("protocol", F.lit(UNKNOWN)).alias("protocol"),
            F.coalesce("destination_machine", "key", F.lit(UNKNOWN)).alias("server"),
            F.date_trunc("minute", F.coalesce("arrival_time", "kafka_timestamp")).alias("minute"),
            F.col("key").alias("kafka_key"), "message_id", "source_machine", "destination_machine", "arrival_time",
            "error_structure", "error_field", "error_offset", "error_reason", "error", "raw_value").toArrow()
        bad = pc.invert(table["ok"])
        table = table.append_column("bad", pc.cast(bad, "int64"))
        per_partition = table.group_by(["topic", "partition"]).aggregate(
            [("offset", "count"), ("offset", "max"), ("bad", "sum")]).to_pylist()
        seen = table.group_by(["protocol", "server", "minute"]).aggregate(
            [("offset", "count"), ("bad", "sum")]).to_pylist()
        dead = table.filter(bad).select(list(DEAD_LETTER_COLUMNS)).to_pylist()
        return self._tables(batch_id, [(r["topic"], r["partition"], r["offset_count"], r["offset_max"], r["bad_sum"])
                                       for r in per_partition],
                            [(r["protocol"], r["server"], r["minute"], r["offset_count"], r["bad_sum"])
                             for r in seen], dead)

    def progress_row(self, query_id: str, batch_id: int, started, t0: float, counts: list[dict]) -> dict:
        for c in counts:
            self._ends[(c["topic"], c["partition"])] = c["last"] + 1
        latest = self._latest()
        lag = {f"{t}[{p}]": max(latest.get((t, p), end) - end, 0) for (t, p), end in sorted(self._ends.items())}
        for tp, end in latest.items():
            if tp not in self._ends and end > 0:
                lag[f"{tp[0]}[{tp[1]}]"] = end
        total = sum(c["n"] for c in counts)
        bad = sum(c["bad"] for c in counts)
        duration = time.monotonic() - t0
        return {"query_id": query_id, "batch_id": batch_id, "started_at": started, "finished_at": utcnow(),
                "input_rows": total, "good_rows": total - bad, "dead_letters": bad,
                "rows_per_second": total / duration if duration > 0 else 0.0, "duration_ms": int(duration * 1000),
                "end_offsets": {f"{t}[{p}]": e for (t, p), e in sorted(self._ends.items())}, "lag": lag,
                "total_lag": sum(lag.values()), "skipped_offsets": self._skipped(),
                "query_name": "dirstream", "late_rows": 0}          # no watermark: nothing is late

    def _latest(self) -> dict:
        try:
            if self._offsets is None:
                opts = self.source_opts
                topics = [t for t in opts.get("topics", "").split(",") if t] or None
                self._offsets = EndOffsets(client_conf(opts), topics, opts.get("topicPattern"), broker_wait_s=0)
            return self._offsets.ends()
        except Exception as exc:        # lag is informative (SourceError or client errors): never fail a batch
            log.warning("could not read end offsets for lag: %s", exc)
            return {}

    def _skipped(self) -> int:
        if not self.data_loss_log or not os.path.exists(self.data_loss_log):
            return 0
        with open(self.data_loss_log) as fh:
            return sum(json.loads(line)["skipped"] for line in fh if line.strip())

    def _restore_ends(self, query_id: str) -> None:
        last = self.sink.last_progress(query_id)
        if last:
            self._ends.update(parse_end_offsets(last.get("end_offsets")))


DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def parse_duration_ms(text: str, units: tuple[str, ...] = ("ms", "s", "m", "h"),
                      error: str = "a duration is like 500ms, 30s, 1m or 1h") -> int:
    """500ms, 2s, 1.5m, 1h -> milliseconds (only the given units)."""
    text = text.strip()
    for suffix in sorted(units, key=len, reverse=True):          # "ms" before "m" and "s"
        number = text[: -len(suffix)]
        if text.endswith(suffix) and number.replace(".", "", 1).isdigit():
            return int(float(number) * DURATION_UNITS_MS[suffix])
    raise ValueError(f"{error}, got {text!r}")


def parse_trigger(text: str) -> str:
    ms = parse_duration_ms(text, ("ms", "s", "m"), "--trigger takes a duration like 500ms, 2s or 1m")
    return f"{ms} milliseconds"


def start_query(spark, *, sink_url: str, checkpoint: str, source_opts: dict, once: bool = False,
                trigger: str = "2s", echo=print, per_record: bool = False,
                records_per_task: int | None = RECORDS_PER_TASK, observer=None):
    """The raw query. Its reading tasks decode every record and count (decode=summary); per_record
    sends every decoded row through Spark instead (decode=true: same tables, slower)."""
    data_loss_log = source_opts.get("dataLossLog")
    writer = BatchWriter(sink_url, source_opts, checkpoint_query_id(spark, checkpoint), data_loss_log, echo)
    writer.sink  # open (and create tables) before starting, so a bad URL fails fast
    if records_per_task:
        source_opts = {**source_opts, "maxRecordsPerPartition": str(records_per_task)}
    frame = decoded_stream(spark, source_opts, mode="true" if per_record else "summary")
    return start_stream(frame, "dirstream", checkpoint, writer, once, trigger, observer)


def start_stream(frame, name: str, checkpoint: str, writer, once: bool, trigger: str, observer=None):
    """observer: told of every micro-batch written (streaming.apps.console.JobConsole.batch)."""
    writer.query_name, writer.observer = name, observer
    stream = frame.writeStream.queryName(name).option("checkpointLocation", checkpoint).foreachBatch(writer)
    stream = stream.trigger(availableNow=True) if once else stream.trigger(processingTime=parse_trigger(trigger))
    return stream.start()


def parse_end_offsets(value) -> dict[tuple[str, int], int]:
    """pipeline_progress.end_offsets ({"topic[partition]": offset}, JSON text or a dict) by (topic, partition)."""
    if not value:
        return {}
    ends = json.loads(value) if isinstance(value, str) else value
    out = {}
    for name, end in ends.items():
        topic, _, part = name.rpartition("[")
        out[(topic, int(part.rstrip("]")))] = end
    return out


def checkpoint_query_id(spark, checkpoint: str) -> str:
    """A stable id for the query of this checkpoint (streaming.spark.checkpoint_folder)."""
    return CheckpointFolder(spark, checkpoint).query_id()
