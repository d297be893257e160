"""Prometheus metrics of `dirstream run` (docs/monitoring.md, "Metrics"): the job's queries
and the directory's health, served over HTTP.

Every figure the dashboard also shows comes from the same sink rows through streaming/apps/health.py:
a background thread reads them after each committed micro-batch (at most every `min_refresh_s`, and
every `refresh_s` anyway, for the live Kafka lag) and swaps in a new snapshot; a scrape serves the
last rendered exposition. Nothing here runs inside a micro-batch, and no lock is held across one:
the queries only set an event and record a duration in the histogram."""
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Histogram, Info, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .. import build_choice, loaded_build
from . import health

__all__ = ["DEFAULT_PORT", "DURATION_BUCKETS", "JobMetrics", "log", "MetricsServer", "serve",
           "sink_outage_families"]

log = logging.getLogger("dirstream.metrics")

DEFAULT_PORT = 9108
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)


class JobMetrics:
    """The observer the queries report to (besides the console) and the registry the server renders."""

    def __init__(self, sink_url: str, kafka_conf: dict | None = None, refresh_s: float = 5.0,
                 min_refresh_s: float = 1.0):
        self.sink_url, self.kafka_conf = sink_url, dict(kafka_conf or {})
        self.refresh_s, self.min_refresh_s = refresh_s, min_refresh_s
        self.registry = CollectorRegistry(auto_describe=True)
        self.durations = Histogram("dirstream_batch_duration_seconds", "Micro-batch duration per query",
                                   ["query"], buckets=DURATION_BUCKETS, registry=self.registry)
        self.registry.register(_Snapshot(self))
        why = build_choice()[1]
        Info("dirstream_build", "Which build of the codecs the job runs: mypyc (compiled) or python, and why not "
             "compiled", registry=self.registry).info({"build": loaded_build(), "reason": why or ""})
        self.families: list = []                # the last snapshot (swapped whole)
        self.generation = 0                     # bumped at every change: the rendered text is redone
        self._committed = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reader = None
        self._offsets = None
        self.refresh_errors = 0

    # ------------------------------------------------------------ observer (after each sink commit)
    def batch(self, query: str, batch_id: int, progress: dict | None, written: dict, dead: list) -> None:
        if progress is not None:                # the raw query's own progress row
            self.durations.labels(query).observe((progress.get("duration_ms") or 0) / 1000)
        self.generation += 1
        self._committed.set()

    def progress(self, row: dict) -> None:
        """An operator query's micro-batch, from Spark's progress (written to pipeline_progress)."""
        self.durations.labels(row["query_name"]).observe((row.get("duration_ms") or 0) / 1000)
        self.generation += 1
        self._committed.set()

    # ------------------------------------------------------------ the refresher
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="dirstream-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._committed.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._offsets is not None:
            self._offsets.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.refresh()
            self._committed.wait(max(self.refresh_s - (time.monotonic() - started), 0))
            self._committed.clear()
            self._stop.wait(self.min_refresh_s)          # a burst of commits: one refresh

    def refresh(self) -> None:
        """Read the sink (and Kafka's end offsets) into a new snapshot."""
        from .sink_reader import SinkUnavailable
        try:
            self.families = self._families(self._sink())
        except SinkUnavailable as exc:          # a new sink: the first batch creates it
            log.info("metrics: the sink is not readable yet: %s", exc)
        except Exception as exc:                # noqa: BLE001 -- metrics never stop the job
            from ..sinks import OUTAGE
            self.refresh_errors += 1
            self._reader = None                 # a sink outage is said once, by its writers
            (log.info if OUTAGE.since is not None else log.warning)("metrics: could not read the sink: %s", exc)
        self.generation += 1

    def _sink(self):
        if self._reader is None:
            from .sink_reader import SinkReader
            self._reader = SinkReader(self.sink_url)
        return self._reader

    def _families(self, reader) -> list:
        queries = health.query_summary(reader)
        clock = health.replica_clock(reader)
        return (self._query_families(queries) + _dead_letter_families(health.dead_letter_counts(reader))
                + _replica_families(health.replicas(reader)) + _qm_families(health.queue_managers(reader, clock))
                + _discovery_families(health.discovery_outcomes(reader))
                + _finding_families(health.finding_counts(reader))
                + [_gauge("dirstream_metrics_refreshed_timestamp_seconds",
                          "When the metrics last read the sink (Unix time)", [], [((), time.time())])])

    def _query_families(self, queries: list[dict]) -> list:
        def per_query(name, doc, value, kind=_gauge):
            return kind(name, doc, ["query"], [((q["query"],), value(q)) for q in queries if value(q) is not None])
        unread = self._unread(queries)
        return [
            per_query("dirstream_batches", "Micro-batches committed", lambda q: q["batches"], _counter),
            per_query("dirstream_input_rows", "Input rows of the committed micro-batches", lambda q: q["input_rows"],
                      _counter),
            per_query("dirstream_late_rows", "Rows dropped behind the watermark", lambda q: q["late_rows"], _counter),
            per_query("dirstream_last_batch_timestamp_seconds", "When the last micro-batch finished (Unix time)",
                      lambda q: health.epoch_s(q["finished_at"])),
            per_query("dirstream_lag_records", "Records beyond the last micro-batch's end when it was planned",
                      lambda q: q["total_lag"]),
            per_query("dirstream_unread_records", "Records in the query's topics now that it has not committed",
                      lambda q: unread.get(q["query"])),
            per_query("dirstream_state_rows", "State rows after the last micro-batch", lambda q: q["state_rows"]),
            per_query("dirstream_state_memory_bytes", "State store memory after the last micro-batch",
                      lambda q: q["state_memory_bytes"]),
        ]

    def _unread(self, queries: list[dict]) -> dict[str, int]:
        """Per query: Kafka's end offsets now minus the end offsets of its last committed batch."""
        from ..spark.pipeline import parse_end_offsets
        committed = {q["query"]: parse_end_offsets(q["end_offsets"]) for q in queries}
        partitions = sorted({tp for ends in committed.values() for tp in ends})
        if not partitions or not self.kafka_conf:
            return {}
        try:
            if self._offsets is None:
                from ..spark.kafka_offsets import EndOffsets
                self._offsets = EndOffsets(self.kafka_conf, [], broker_wait_s=0)
            now = self._offsets.ends(partitions)
        except Exception as exc:                # noqa: BLE001 -- the broker may be down: no live lag
            log.warning("metrics: could not read Kafka's end offsets: %s", exc)
            return {}
        return {query: sum(max(now[tp] - end, 0) for tp, end in ends.items()) for query, ends in committed.items()}


class _Snapshot:
    """A prometheus_client collector over JobMetrics' last snapshot (no sink read at scrape time)."""

    def __init__(self, metrics: JobMetrics):
        self.metrics = metrics

    def collect(self):
        return list(self.metrics.families) + sink_outage_families()

    def describe(self):
        return []


def _family(kind, name: str, doc: str, labels: list[str], samples) -> object:
    family = kind(name, doc, labels=labels)
    for values, value in samples:
        family.add_metric(list(values), value)
    return family


def _gauge(name, doc, labels, samples):
    return _family(GaugeMetricFamily, name, doc, labels, samples)


def _counter(name, doc, labels, samples):
    return _family(CounterMetricFamily, name, doc, labels, samples)


def sink_outage_families() -> list:
    """Live at every scrape (the snapshot cannot be read from a sink that is down): how long the job's
    writers have been waiting for the sink, and how often that happened."""
    from ..sinks import OUTAGE
    since = OUTAGE.since
    return [_gauge("dirstream_sink_unavailable_seconds", "How long a micro-batch has been waiting for the sink to "
                   "answer (0: it answers)", [], [((), time.time() - since if since is not None else 0.0)]),
            _counter("dirstream_sink_outages", "Times the sink stopped answering while the job wrote", [],
                     [((), OUTAGE.outages)]),
            _counter("dirstream_sink_reconnects", "Attempts to connect to the sink again while it did not answer", [],
                     [((), OUTAGE.retries)])]


def _dead_letter_families(counts: dict[tuple[str, str], int]) -> list:
    return [_counter("dirstream_dead_letters", "Messages in dead_letters, by stage and reason", ["stage", "reason"],
                     sorted(counts.items()))]


def _replica_families(replicas: list[health.ReplicaHealth]) -> list:
    def per_replica(name, doc, value):
        return _gauge(name, doc, ["server", "partition"],
                      [((h.server, h.partition_id), value(h)) for h in replicas if value(h) is not None])
    purge = _gauge("dirstream_replica_purge_state", "1 for the replica's purge state (MC-MQDSRP 3.1.1.2.3)",
                   ["server", "partition", "state"],
                   [((h.server, h.partition_id, state), float(h.purge_state == state))
                    for h in replicas for state in health.PURGE_STATES])
    return [
        per_replica("dirstream_replica_last_seq_number", "LastSeqNumber of the replica", lambda h: h.last_seq),
        per_replica("dirstream_replica_authority_seq_number",
                    "The highest SeqNumber the partition's authority is known to have issued",
                    lambda h: h.authority_seq),
        per_replica("dirstream_replica_lag_seq_numbers", "Sequence numbers the replica is behind its authority",
                    lambda h: h.lag),
        per_replica("dirstream_replica_pending_changes", "Changes held until their predecessors arrive",
                    lambda h: h.pending),
        per_replica("dirstream_replica_sync_outstanding", "1 while a sync request awaits its reply",
                    lambda h: float(h.sync_outstanding)),
        purge,
        per_replica("dirstream_replica_last_change_timestamp_seconds",
                    "Event time the replica last applied a change (Unix time)", lambda h: h.last_change_s),
        per_replica("dirstream_replica_seconds_since_last_change",
                    "The directory's event clock minus the replica's last change", lambda h: h.seconds_since_last_change),
    ]


def _qm_families(managers: list[health.QueueManagerHealth]) -> list:
    def per_qm(name, doc, value):
        return _gauge(name, doc, ["queue_manager"], [((m.machine_id,), value(m)) for m in managers
                                                      if value(m) is not None])
    return [
        per_qm("dirstream_qm_notifications_waiting", "Notifications waiting in a batching window", lambda m: m.waiting),
        per_qm("dirstream_qm_unresolved_reads", "Notifications whose read waits for the object to appear",
               lambda m: m.unresolved),
        per_qm("dirstream_qm_last_processing_timestamp_seconds",
               "Event time the queue manager last processed notifications (Unix time)", lambda m: m.last_processed_s),
        per_qm("dirstream_qm_seconds_since_last_processing",
               "The directory's event clock minus the queue manager's last processing",
               lambda m: m.seconds_since_last_processing),
    ]


def _discovery_families(outcomes: dict[str, int]) -> list:
    return [_counter("dirstream_discovery_requests", "MQSD requests by outcome (no-reply: no server answered)",
                     ["outcome"], [((k,), v) for k, v in sorted(outcomes.items())])]


def _finding_families(counts: dict[tuple[str, str], int]) -> list:
    return [_counter("dirstream_security_findings", "Messages found hostile or broken, by kind and severity "
                     "(security_findings)", ["kind", "severity"], sorted(counts.items()))]


# ---------------------------------------------------------------------- the HTTP server
class MetricsServer:
    """/metrics over HTTP on its own threads; the text is rendered again only after a change."""

    def __init__(self, metrics: JobMetrics, host: str, port: int):
        self.metrics = metrics
        self._text, self._generation, self._lock = b"", -1, threading.Lock()
        handler = _handler(self)
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.address = self.httpd.server_address
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="dirstream-metrics-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def exposition(self) -> bytes:
        from ..sinks import OUTAGE
        generation = self.metrics.generation
        if generation != self._generation or OUTAGE.since is not None:      # while waiting: live seconds
            with self._lock:                         # scrapes only: never held by a micro-batch
                if generation != self._generation:
                    self._text, self._generation = generate_latest(self.metrics.registry), generation
        return self._text


def _handler(server: MetricsServer):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404, "only /metrics is served here")
                return
            body = server.exposition()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):          # a scrape every few seconds: not worth a log line
            pass
    return Handler


def serve(sink_url: str, kafka_conf: dict, host: str, port: int) -> tuple[JobMetrics, MetricsServer]:
    """Start the refresher and the server; raises OSError when the address cannot be bound."""
    metrics = JobMetrics(sink_url, kafka_conf)
    server = MetricsServer(metrics, host, port)
    metrics.start()
    server.start()
    return metrics, server
