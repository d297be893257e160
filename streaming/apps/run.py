"""`dirstream run`: the long-running streaming job."""
import argparse
import logging
import os
import signal
import sys
import tempfile
import time

__all__ = ["cmd_run", "cn_settings", "default_log_file", "DEFAULT_CHECKPOINT", "DEFAULT_SINK", "local_checkpoint",
           "Observers", "OPERATORS_QUERY_NAME", "RAW_TOPIC_PARTITIONS", "register", "skipped_offsets_log",
           "StoppedWhileStarting", "StopRequests"]

DEFAULT_SINK = "sqlite:///var/dirstream.db"
DEFAULT_CHECKPOINT = "var/checkpoint"
OPERATORS_QUERY_NAME = "dirstream-operators"   # pipeline_progress.query_name of the operators' rows
RAW_TOPIC_PARTITIONS = 4                 # as `produce simulate|replay --partitions` creates them

from .. import build_line  # noqa: E402
from ..spark import RECORDS_PER_TASK  # noqa: E402
from .metrics import DEFAULT_PORT as METRICS_PORT  # noqa: E402
from ..wire.topics import OUTBOUND_TOPIC  # noqa: E402
from ..operators.findings import FLOOD_PER_MINUTE  # noqa: E402
from ..operators.notifications import Mode  # noqa: E402


def register(sub, add_kafka_arguments) -> None:
    run = sub.add_parser("run", help="run the streaming job: Kafka -> decode -> sink tables",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         description="Run the streaming job: Kafka -> decode -> operators -> sink tables.\n\n"
                                     "Runs until stopped (Ctrl-C stops it cleanly after the current batch).",
                         epilog="example:\n"
                                "  dirstream run --bootstrap 127.0.0.1:19092 --sink sqlite:///var/dirstream.db\n"
                                "  dirstream run --once --pec-name pec0 --checkpoint var/checkpoint")
    add_kafka_arguments(run)
    run.add_argument("--sink", default=DEFAULT_SINK, help=f"sqlite:///path.db or postgresql://... "
                                                          f"(default {DEFAULT_SINK})")
    run.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT, help=f"Spark checkpoint dir (default "
                                                                      f"{DEFAULT_CHECKPOINT})")
    run.add_argument("--once", action="store_true", help="process everything available now, then exit")
    run.add_argument("--trigger", default="2s", help="micro-batch interval, e.g. 500ms, 2s, 1m (default 2s)")
    run.add_argument("--master", default="local[*]", help="Spark master: local[*], spark://host:7077, k8s://...")
    run.add_argument("--max-records", type=int, default=200_000,
                     help="records of the raw topics per micro-batch at most (default 200,000)")
    run.add_argument("--records-per-task", type=int, default=RECORDS_PER_TASK,
                     help="the job reads a Kafka partition's range in Spark tasks of at most this many records, "
                          "and a micro-batch of fewer than 10,000 records a core in one task a core "
                          f"(default {RECORDS_PER_TASK:,}; 0: one task per Kafka partition)")
    run.add_argument("--starting-offsets", default="earliest",
                     help='earliest, latest, or JSON {"topic": {"0": 42}} (first run only)')
    run.add_argument("--skip-data-loss", action="store_true",
                     help="skip offsets deleted before they were read (counted in pipeline_progress) instead of failing")
    topics = run.add_mutually_exclusive_group()
    topics.add_argument("--topics", help="comma-separated topics: only the raw query runs over them (default: "
                        "the whole job, over the three raw topics and msmq.qb.rejected)")
    topics.add_argument("--topic-pattern", help="regular expression over topic names")
    run.add_argument("--pec-name", help="the PEC's machine name, as an administrator gives it (MQDSRP 3.1.3.1); "
                                        "default: learnt from the traffic")
    run.add_argument("--outbound-topic", default=OUTBOUND_TOPIC,
                     help=f"topic for what the replicas send (default {OUTBOUND_TOPIC}); 'none' to only record it")
    cn = run.add_argument_group("MQCN notification batching (product behaviour notes <3>, <14>)")
    cn.add_argument("--cn-mode", choices=[mode.value for mode in Mode], default=Mode.BATCHED.value,
                    help="batched (Windows XP and later, default) or immediate (NT 4 / Windows 2000)")
    cn.add_argument("--cn-first-wait", default="1m", help="timer after a quiet period (default 1m)")
    cn.add_argument("--cn-window", default="15m", help="timer after the last processing (default 15m)")
    cn.add_argument("--cn-quiet", default="14m", help="quiet period that counts as idle (default 14m)")
    cn.add_argument("--cn-refresh-threshold", type=int, default=100,
                    help="notifications in one window that trigger a refresh of every queue (default 100)")
    cn.add_argument("--flood-per-minute", type=int, default=FLOOD_PER_MINUTE,
                    help="notifications from one sender to one queue manager in a minute past which each is "
                         f"an mqcn-flood security finding (default {FLOOD_PER_MINUTE:,})")
    run.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                     help="extra Spark setting; repeatable")
    run.add_argument("--log-file", help="where Spark's, the Python workers' and the job's own log lines go "
                                        "(default: dirstream-run.log beside a local checkpoint folder, else in the "
                                        "working directory)")
    run.add_argument("--log-format", choices=["auto", "rich", "plain"], default="auto",
                     help="the console: rich (a live table per query), plain (lines), auto (rich on a terminal)")
    run.add_argument("--metrics-port", type=int, default=METRICS_PORT,
                     help=f"serve Prometheus metrics on this port (default {METRICS_PORT}; 0: off)")
    run.add_argument("--metrics-host", default="127.0.0.1", help="the metrics server's address (default 127.0.0.1)")
    run.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    stop = StopRequests()
    try:
        return _run(args, stop)
    except StoppedWhileStarting:                   # asked to stop while waiting for Kafka: nothing started
        print("dirstream run: stopped before the job started (Kafka did not answer yet)", file=sys.stderr)
        return 0
    except KeyboardInterrupt:                      # a second signal while starting: nothing was processed yet
        print("dirstream run: interrupted while starting", file=sys.stderr)
        return 130


class StoppedWhileStarting(Exception):
    """A stop asked for while the job waited for Kafka to answer, before anything ran."""


class StopRequests:
    """SIGINT and SIGTERM, whether sent to the driver alone or to its whole process group (a terminal's
    Ctrl-C, a service manager, a container runtime): the first asks for a clean stop (the micro-batch
    in flight finishes, no other starts: the stop file), a second one stops at once (KeyboardInterrupt;
    the restart redoes the batch in flight). Installed before Spark starts, so that a signal while
    starting is a clean stop too; Spark's JVM and Python workers run in a session of their own
    (streaming.spark.pipeline.build_spark) and never see a signal sent to the job's process group."""

    def __init__(self):
        self.requested, self.stop_file, self.signal_name = False, None, None
        self.install()

    def install(self) -> None:
        """Again after Spark has started: PySpark's SparkContext puts in its own SIGINT handler, which
        cancels every running Spark job (the micro-batch in flight) and raises KeyboardInterrupt."""
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum, _frame):
        # no printing here: the main thread may be inside a write to the same stream
        if self.requested:
            raise KeyboardInterrupt
        self.requested, self.signal_name = True, signal.Signals(signum).name
        if self.stop_file:
            open(self.stop_file, "w").close()

    def watch(self, stop_file: str) -> None:
        """The source's stop file, once the job has one."""
        self.stop_file = stop_file
        if self.requested:
            open(stop_file, "w").close()

    def announce(self, say) -> None:
        say(f"dirstream run: {self.signal_name}: stopping after the current batch (a second signal stops at once)")


def _run(args, stop: "StopRequests") -> int:
    import os

    from ..spark import topology
    from ..spark.pipeline import build_spark, source_options, stop_spark, workers_build_line
    from ..spark.kafka_offsets import SourceError
    from ..sinks import SinkError

    from .console import ConsoleHandler, JobConsole, capture_output
    log_file = args.log_file or default_log_file(args.checkpoint)
    out, err = capture_output(log_file)
    fancy = args.log_format == "rich" or (args.log_format == "auto" and err.isatty())
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr, force=True)          # the log file
    logging.getLogger("py4j").setLevel(logging.WARNING)
    log = logging.getLogger("dirstream.run")
    console = JobConsole(out, err, fancy)
    logging.getLogger("dirstream").addHandler(ConsoleHandler(console))
    say = lambda text: (log.info("%s", text), console.notice(text))  # noqa: E731
    print(f"dirstream run: Spark's and the job's log in {log_file}", file=err, flush=True)
    build = build_line()
    log.info("%s", build)
    print(f"dirstream run: {build}", file=err, flush=True)
    problem = settings_error(args)
    if problem:                                     # before anything starts: the flags alone are wrong
        say(f"dirstream run: {problem}")
        return 2
    operators = not args.topics and not args.topic_pattern
    local = local_checkpoint(args.checkpoint)
    earlier = topology.earlier_layout(local) if operators and local else None
    if earlier:                                 # a local folder is looked at before anything starts
        say(f"dirstream run: {earlier}")
        return 2
    try:
        from infra.broker import BrokerError, java_binary
        java_binary("Spark")            # PySpark's own failure is a traceback about its gateway
    except BrokerError as exc:          # the machine's: a service manager may start it again later
        say(f"dirstream run: {exc}")
        return 1
    try:
        settings_options = _kafka_options(args)
        _check_security(args.bootstrap, settings_options)
    except (ValueError, RuntimeError) as exc:     # a bad --kafka-config, or Kafka refused its settings
        say(f"dirstream run: {exc}")
        return 2
    problem = _sink_problem(args.sink)
    if problem:                                 # before Kafka's waits and Spark: a sink that cannot be opened
        say(f"dirstream run: {problem}")
        return 1 if problem.environment else 2
    opts = source_options(args.bootstrap, settings_options,
                          args.topics.split(",") if args.topics else None, args.starting_offsets, args.max_records,
                          not args.skip_data_loss, skipped_offsets_log(args.checkpoint))
    if args.topic_pattern:
        opts.pop("topics")
        opts["topicPattern"] = args.topic_pattern
    opts["stopFile"] = os.path.join(tempfile.gettempdir(), f"dirstream-stop-{os.getpid()}-{time.time_ns()}")
    if not args.topics and not args.topic_pattern:
        try:
            _when_kafka_answers(lambda: _create_missing_raw_topics(args.bootstrap, settings_options, log),
                                args.bootstrap, stop)
        except RuntimeError as exc:                # refused settings, or the broker did not answer within the wait
            say(f"dirstream run: {exc}")
            return _start_failure(exc)
    conf = dict(item.split("=", 1) for item in args.spark_conf)
    from ..sinks import masked
    log.info("reading %s from %s; writing %s; checkpoint %s; master %s", opts.get("topics") or opts["topicPattern"],
             args.bootstrap, masked(args.sink), args.checkpoint, args.master)
    # the whole job's run writes the machine's class archive (a raw-only run would leave out the operators')
    spark = build_spark(args.master, conf=conf, write_class_archive=operators, pretouch=not args.once,
                        local_checkpoint=local_checkpoint(args.checkpoint) is not None)
    if not args.master.startswith("local"):     # a cluster's executors load the code the job ships them
        say(f"dirstream run: on the executors, {workers_build_line(spark)}")
    try:
        earlier = topology.earlier_layout(args.checkpoint, spark) if operators and not local else None
    except Exception as exc:                    # noqa: BLE001 -- py4j's: the filesystem's own message
        return _checkpoint_failure(args.checkpoint, _java_message(exc), say)
    if earlier:
        say(f"dirstream run: {earlier}")
        return 2
    stop.install()
    echo = lambda line: (log.info("%s", line), console.info(line))  # noqa: E731
    metrics = _serve_metrics(args, {"bootstrap.servers": args.bootstrap, **settings_options}, say)
    job = topology.JobSettings(
        args.sink, args.checkpoint, opts, once=args.once, trigger=args.trigger, echo=echo,
        records_per_task=args.records_per_task, pec_name=args.pec_name,
        outbound_topic=None if args.outbound_topic.lower() == "none" else args.outbound_topic,
        kafka_conf={"bootstrap.servers": args.bootstrap, **settings_options}, cn_settings=cn_settings(args),
        observer=Observers(console, metrics[0] if metrics else None))
    spec = topology.query(operators)
    if args.once:
        console.once_total = _records_to_read(spark, opts, args.sink, job.checkpoint_of(spec))
    if operators:
        _record_operator_progress(spark, job)
        for topic, partitions in topology.internal_topics(job).items():
            try:
                _when_kafka_answers(lambda: _ensure_topic(args.bootstrap, settings_options, topic, partitions),
                                    args.bootstrap, stop)
            except RuntimeError as exc:
                say(f"dirstream run: {exc}")
                return _start_failure(exc)
    rc = 0
    stop.watch(opts["stopFile"])
    console.start()
    try:
        try:
            query = topology.start(spark, spec, job)
        except (SourceError, SinkError, ValueError) as exc:
            console.stop()
            say(f"dirstream run: {exc}")
            return 1 if getattr(exc, "environment", False) else 2
        rc, _stopped = _supervise([query], log, say, stop)
    finally:
        console.stop()
        if os.path.exists(opts["stopFile"]):
            os.remove(opts["stopFile"])
        if metrics:
            metrics[0].stop()
            metrics[1].stop()
    print(console.summary(), file=out, flush=True)
    # The queries are stopped and every batch is committed: a late signal (a service manager
    # signalling again) must not turn the clean stop into death by signal. Stop Spark and leave with
    # our exit code.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        stop_spark(spark, lambda text: print(f"dirstream run: {text}", file=out, flush=True))
    except Exception:
        pass
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)                                   # noqa: the queries and Spark are stopped


class Observers:
    """Tells every observer (the console, the metrics) of each committed micro-batch."""

    def __init__(self, *observers):
        self.observers = [o for o in observers if o is not None]

    def batch(self, *args) -> None:
        for o in self.observers:
            o.batch(*args)

    def progress(self, row: dict) -> None:
        for o in self.observers:
            o.progress(row)


def _serve_metrics(args, kafka_conf: dict, say):
    """(JobMetrics, MetricsServer), or None when --metrics-port is 0 or the address is taken (the job
    runs on: its metrics are not worth stopping it for)."""
    if not args.metrics_port:
        return None
    from .metrics import serve
    try:
        metrics, server = serve(args.sink, kafka_conf, args.metrics_host, args.metrics_port)
    except OSError as exc:
        say(f"dirstream run: metrics not served: cannot listen on {args.metrics_host}:{args.metrics_port} ({exc}); "
            f"choose another with --metrics-port, or 0 to turn them off")
        return None
    host, port = server.address[:2]
    say(f"dirstream run: Prometheus metrics on http://{host}:{port}/metrics")
    return metrics, server


def _record_operator_progress(spark, job) -> None:
    """The operators' side of each micro-batch in pipeline_progress (state, timers, late rows), beside
    the row the job's writer commits with the batch's tables."""
    from ..spark import topology
    from ..spark.pipeline import checkpoint_query_id
    from ..spark.progress import OperatorProgress
    query_id = checkpoint_query_id(spark, job.checkpoint_of(topology.JOB))
    spark.streams.addListener(OperatorProgress(job.sink_url, {topology.JOB.name: f"{query_id}/operators"},
                                               job.observer, {topology.JOB.name: OPERATORS_QUERY_NAME}))


def _records_to_read(spark, opts: dict, sink_url: str, checkpoint: str) -> int | None:
    """How many records of the raw topics the job has not read yet (for --once's progress bar)."""
    from ..spark.kafka_offsets import EndOffsets
    from ..spark.kafka_source import client_conf
    from ..spark.pipeline import checkpoint_query_id, parse_end_offsets
    from ..sinks import open_sink
    try:
        topics = [t for t in opts.get("topics", "").split(",") if t] or None
        offsets = EndOffsets(client_conf(opts), topics, opts.get("topicPattern"), broker_wait_s=0)
        try:
            ends = offsets.ends()
            lows = offsets.lows(list(ends))
        finally:
            offsets.close()
        sink = open_sink(sink_url)
        try:
            last = sink.last_progress(checkpoint_query_id(spark, checkpoint)) or {}
        finally:
            sink.close()
        done = parse_end_offsets(last.get("end_offsets"))
        return sum(max(end - max(done.get(tp, 0), lows[tp]), 0) for tp, end in ends.items())
    except Exception:          # noqa: BLE001 -- the bar is informative: never fail the run for it
        return None


def local_checkpoint(checkpoint: str) -> str | None:
    """The local folder a checkpoint names (a path or file:// URI), None for another filesystem's URI."""
    scheme, found, rest = checkpoint.partition("://")
    if not found:
        return checkpoint
    return rest if scheme == "file" else None


def default_log_file(checkpoint: str) -> str:
    """dirstream-run.log beside a local checkpoint folder; in the working directory when the
    checkpoint is on another filesystem (hdfs://, s3a://, ...), where a log cannot be appended to."""
    local = local_checkpoint(checkpoint)
    if local is None:
        return os.path.abspath("dirstream-run.log")
    return os.path.join(os.path.dirname(os.path.abspath(local)), "dirstream-run.log")


def skipped_offsets_log(checkpoint: str) -> str:
    """Where the source logs the offsets --skip-data-loss passes over (summed into
    pipeline_progress.skipped_offsets): in a local checkpoint folder, else in the working directory
    (the source's process appends to it without Hadoop's filesystem)."""
    local = local_checkpoint(checkpoint)
    if local is None:
        return os.path.abspath("dirstream-raw-skipped-offsets.jsonl")
    return os.path.join(local, "raw-skipped-offsets.jsonl")


def _checkpoint_failure(checkpoint: str, message: str, say) -> int:
    """Exit 2 when no filesystem serves the checkpoint's scheme (a setting: its jars), else 1."""
    if "No FileSystem for scheme" in message or "ClassNotFoundException" in message:
        say(f"dirstream run: the checkpoint {checkpoint}: {message}; its filesystem's jars and settings go to "
            f"Spark (--spark-conf spark.jars=..., docs/deploying.md)")
        return 2
    say(f"dirstream run: the checkpoint {checkpoint} cannot be reached: {message}")
    return 1


def _java_message(exc: Exception) -> str:
    """The first line of a Java exception's message that py4j hands over."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def settings_error(args) -> str | None:
    """What is wrong with the flags alone, found before anything starts (None: nothing)."""
    from ..spark.pipeline import parse_duration_ms, parse_trigger
    for item in args.spark_conf:
        key, equals, _value = item.partition("=")
        if not equals or not key.strip():
            return f"--spark-conf {item!r}: expected key=value, like spark.executor.memory=4g"
    for flag in ("cn_quiet", "cn_first_wait", "cn_window"):
        try:
            parse_duration_ms(getattr(args, flag))
        except ValueError as exc:
            return f"--{flag.replace('_', '-')}: {exc}"
    try:
        parse_trigger(args.trigger)
    except ValueError as exc:                       # it names the flag
        return str(exc)
    return None


def _sink_problem(url: str):
    """The SinkError opening the sink raises (None: it opens, its tables made)."""
    from ..sinks import SinkError, open_sink
    try:
        open_sink(url).close()
    except SinkError as exc:
        return exc
    return None


def _start_failure(exc: Exception) -> int:
    """Exit 2 for settings Kafka refused (starting again cannot help), 1 for a Kafka that did not answer."""
    from producers.kafka import KafkaSecurityError
    return 2 if isinstance(exc, KafkaSecurityError) else 1


def cn_settings(args):
    from ..spark.pipeline import parse_duration_ms
    from ..operators.notifications import Settings
    return Settings(args.cn_mode, parse_duration_ms(args.cn_quiet), parse_duration_ms(args.cn_first_wait),
                    parse_duration_ms(args.cn_window), args.cn_refresh_threshold, args.flood_per_minute)


def _create_missing_raw_topics(bootstrap: str, options: dict, log) -> None:
    """A raw topic nothing was published to yet (a replay of one protocol, say) is created empty, so
    the job starts, and reads it once producers publish there."""
    from producers.kafka import KafkaSettings, ensure_topics
    from ..wire.topics import TOPICS
    created = ensure_topics(KafkaSettings(bootstrap, options), {t: RAW_TOPIC_PARTITIONS for t in TOPICS.values()},
                            need="Read")
    if created:
        log.warning("raw topic(s) %s did not exist on %s: created them empty with %d partitions and replication "
                    "factor 1 (`dirstream topics` creates them as a production cluster needs)",
                    ", ".join(sorted(created)), bootstrap, RAW_TOPIC_PARTITIONS)


def _when_kafka_answers(call, bootstrap: str, stop: "StopRequests"):
    """call() once Kafka answers: a job started while its broker is down or restarting waits for it
    as a running job's source does (kafka_offsets.patiently), instead of failing; a stop asked for
    meanwhile ends the wait. Refused credentials are not waited for."""
    from producers.kafka import KafkaSecurityError, KafkaUnavailable
    from ..spark.kafka_offsets import patiently

    def unless_stopped():
        if stop.requested:
            raise StoppedWhileStarting
    return patiently(call, "the topics", bootstrap, KafkaUnavailable, before_retry=unless_stopped,
                     fatal=(KafkaSecurityError,))


def _ensure_topic(bootstrap: str, options: dict, topic: str, partitions: int = 1) -> None:
    from producers.kafka import KafkaSettings, ensure_topics
    ensure_topics(KafkaSettings(bootstrap, options), {topic: partitions}, need="Write")


def _check_security(bootstrap: str, options: dict) -> None:
    """Before anything is written: Kafka refusing these settings (credentials, TLS trust, security
    protocol) stops the job with the reason (KafkaSecurityError); retrying would not help. A broker
    that does not answer yet is waited for later (a broker starting after the job is normal)."""
    from producers.kafka import KafkaSettings, KafkaUnavailable, KafkaSecurityError, check_reachable
    try:
        check_reachable(KafkaSettings(bootstrap, options))
    except KafkaSecurityError:
        raise
    except KafkaUnavailable:
        pass


def _kafka_options(args) -> dict:
    from producers.kafka import KafkaSettings
    return KafkaSettings.from_args(args.bootstrap, args.kafka_config, args.kafka_option).options


def _supervise(queries, log, say=print, stop: StopRequests | None = None) -> tuple[int, bool]:
    """Wait for the queries; the first SIGINT or SIGTERM (StopRequests) stops them after the batches
    in flight, a second one at once. Returns (exit code, whether a stop was asked for). The stop
    file (the sources' option stopFile) keeps every query from starting another batch (a query with
    a backlog runs its batches back to back and is otherwise never seen between two)."""
    stop = stop or StopRequests()
    try:
        while any(q.isActive for q in queries):
            time.sleep(0.5)
            if any(q.exception() is not None for q in queries if not q.isActive):
                break
            if stop.requested:
                stop.announce(say)
                _stop_between_batches(queries)
                break
    except KeyboardInterrupt:
        stop.requested = True
        say("dirstream run: a second signal: stopping at once (a restart redoes the micro-batch in flight)")
    for q in queries:
        q.stop()
    errors = [q.exception() for q in queries if q.exception() is not None]
    if errors:
        say(f"dirstream run: the query failed: {_short(errors[0])}")
        return 1, stop.requested
    log.info("stopped cleanly" if stop.requested else "finished")
    return 0, stop.requested


def _stop_between_batches(queries, timeout: float = 600) -> None:
    """Stop each query as soon as it is between two micro-batches (each finishes the batch in flight,
    none starts another one while the others finish theirs)."""
    pending, deadline = list(queries), time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for q in list(pending):
            if not q.isActive or not q.status.get("isTriggerActive"):
                q.stop()
                pending.remove(q)
        time.sleep(0.1)


def _short(error) -> str:
    text = str(error)
    for marker in ("SourceError: ", "SinkError: "):
        if marker in text:
            return text[text.index(marker) + len(marker):].split("\n")[0]
    return text.split("\n=== Streaming Query ===")[0][-2000:]
