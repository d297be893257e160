"""`dirstream run` serves Prometheus metrics: a real job scraped by a real Prometheus.

One continuous job reads simulated traffic in which one BSC stops receiving its propagations
part-way; Prometheus (Debian's package, started here with the project's rules, their windows scaled
down) scrapes the job. The alert for a replica falling behind fires for that BSC; once the job is
idle, the values Prometheus holds equal the sink's rows (counted here in SQL) and the dashboard's
figures; 1,000 scrapes in a loop while the job runs are all answered, and a scrape never waits for a
batch's lock nor a batch for a scrape's (tested on the endpoint itself, not by timing batches)."""
import threading
import time
import urllib.request
from pathlib import Path

import streaming
from infra.broker import free_port
from infra.prometheus_server import PrometheusServer
from producers.kafka import KafkaSettings, Publisher, ensure_topics
from producers.publish import publish_all
from producers.simulator import Simulator
from streaming.sinks import open_sink
from streaming.wire.topics import TOPICS
import job_runs

RULES = Path(__file__).resolve().parents[1] / "infra" / "prometheus" / "dirstream-alerts.yml"
VICTIM = "bsc1-1"                    # a BSC whose PSC's propagations stop reaching it
WITHHELD_AFTER = 1_500               # messages published before its propagations are withheld
RATE = 250.0
MESSAGES = 150_000                   # at most 10 minutes of traffic: it stops once the lag alert has fired
# The rules' windows scaled down: DirstreamReplicaLagGrowing's 10-minute deriv window becomes 60 s,
# longer than a micro-batch of this traffic takes even on a loaded machine (a few seconds), so every
# window holds a step of the victim's lag and the alert fires however slow the job is.
TIME_SCALE = 0.1


def _traffic(enough: threading.Event):
    """The simulated enterprise's messages, without the propagations to VICTIM after the first ones,
    until `enough` is set (or MESSAGES)."""
    for n, m in enumerate(Simulator(seed=29, attacks=frozenset({"mqcn-unauthenticated"})).messages(MESSAGES)):
        if enough.is_set():
            return
        if n >= WITHHELD_AFTER and m.kind == "ChangePropagation" and m.key == VICTIM:
            continue
        yield m.protocol, m.key, m.envelope


def _publish(bootstrap: str, done: threading.Event, enough: threading.Event) -> None:
    from producers.kafka import ConfluentPublisher
    settings = KafkaSettings(bootstrap)
    ensure_topics(settings, {t: 4 for t in TOPICS.values()})
    pub: Publisher = ConfluentPublisher(settings)
    try:
        publish_all(pub, _traffic(enough), rate=RATE, progress=None)
    finally:
        pub.close()
        done.set()


def _scrape(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=120) as answer:
        return answer.read()


def _durations(sink_url: str, since: float, until: float) -> dict[str, list[float]]:
    """Per query, durations (s) of the micro-batches that finished in [since, until] (Unix time)."""
    from streaming.apps.health import epoch_s
    sink = open_sink(sink_url)
    try:
        rows = sink.query("SELECT query_name, finished_at, duration_ms FROM pipeline_progress")
    finally:
        sink.close()
    out: dict[str, list[float]] = {}
    for r in rows:
        if since <= epoch_s(r["finished_at"]) <= until:
            out.setdefault(r["query_name"], []).append(r["duration_ms"] / 1000)
    return out


def _values(prom: PrometheusServer, expr: str, *labels: str) -> dict:
    return {tuple(s["metric"].get(k) for k in labels): float(s["value"][1]) for s in prom.query(expr)}


def test_prometheus_scrapes_the_job_fires_the_lag_alert_and_agrees_with_the_sink(broker, tmp_path):
    sink_url = f"sqlite:///{tmp_path / 'sink.db'}"
    port = free_port()
    published, enough = threading.Event(), threading.Event()
    publisher = threading.Thread(target=_publish, args=(broker, published, enough), daemon=True)
    publisher.start()
    proc = job_runs.job(broker, sink_url, tmp_path / "ckpt", "--outbound-topic", "none", "--metrics-port", str(port))
    try:
        with PrometheusServer(tmp_path / "prometheus", f"127.0.0.1:{port}", RULES, time_scale=TIME_SCALE) as prom:
            prom.wait_for(lambda: _values(prom, "dirstream_batches_total", "query").get(("dirstream",), 0) >= 3,
                          timeout=600, what="the job's first micro-batches in Prometheus")
            scraped = _scrape(port).decode()
            _storm_is_answered(sink_url, port)
            firing = prom.wait_for(lambda: [a for a in prom.alerts() if a["labels"]["alertname"] ==
                                            "DirstreamReplicaLagGrowing" and a["state"] == "firing"],
                                   timeout=900, what="DirstreamReplicaLagGrowing firing")
            enough.set()                                # the traffic has done its part
            assert {a["labels"]["server"] for a in firing} == {VICTIM}, firing
            assert published.wait(600)
            _idle(prom, sink_url)
            _prometheus_agrees_with_the_sink(prom, sink_url)
            _dashboard_agrees_with_prometheus(prom, sink_url)
    finally:
        job_runs.stop(proc)
    assert "Prometheus metrics on http://127.0.0.1:" in job_runs.output(proc)
    build = streaming.loaded_build()
    assert f'dirstream_build_info{{build="{build}",reason="{streaming.build_choice()[1] or ""}"}} 1.0' in scraped


def _storm_is_answered(sink_url: str, port: int) -> None:
    """1,000 back-to-back scrapes while the job runs are all answered; the batch durations before and
    during are printed as figures only (a loaded machine slows any batch: why a scrape cannot is
    tested by how the endpoint is built, below)."""
    storm_from = time.time()
    for _ in range(1_000):
        assert _scrape(port).startswith(b"# HELP")
    scraped = time.time() - storm_from
    quiet = _durations(sink_url, storm_from - 60, storm_from)
    print(f"scrape storm: 1,000 scrapes in {scraped:.1f} s; batch durations (s) in the minute before {quiet}")


def test_scrapes_never_wait_for_a_batch_nor_a_batch_for_a_scrape(tmp_path):
    """A scrape never takes a lock a micro-batch holds: 1,000 scrapes, each after a new commit so that
    each renders anew, are answered while a batch holds the sink's write transaction open; and the
    calls a batch makes into the metrics return while a scrape holds the rendering lock."""
    import sqlite3
    from streaming.apps.metrics import JobMetrics, MetricsServer
    path = tmp_path / "sink.db"
    open_sink(f"sqlite:///{path}").close()
    metrics = JobMetrics(f"sqlite:///{path}", refresh_s=0.05, min_refresh_s=0.0)
    server = MetricsServer(metrics, "127.0.0.1", free_port())
    metrics.start()
    server.start()
    port = server.address[1]
    batch = sqlite3.connect(path, isolation_level=None)
    try:
        batch.execute("BEGIN EXCLUSIVE")              # a micro-batch's write transaction, held open
        batch.execute("INSERT INTO dead_letters (topic, kafka_partition, kafka_offset) VALUES ('t', 0, 0)")
        for n in range(1_000):
            metrics.batch("dirstream", n, {"duration_ms": 5}, {}, [])
            assert _scrape(port).startswith(b"# HELP")
        assert metrics.generation >= 1_000
        with server._lock:                            # a scrape rendering the text
            calls = threading.Thread(target=lambda: (metrics.batch("dirstream", 1_000, {"duration_ms": 5}, {}, []),
                                                     metrics.progress({"query_name": "dirstream", "duration_ms": 5})))
            calls.start()
            calls.join(120)                           # only a hang exceeds this
            assert not calls.is_alive(), "a batch's call into the metrics waited for a scrape"
    finally:
        batch.execute("ROLLBACK")
        batch.close()
        server.stop()
        metrics.stop()


def test_security_findings_are_counted_by_kind_and_severity_every_kind_from_zero(tmp_path):
    from streaming.apps.metrics import JobMetrics
    from streaming.apps.sink_reader import SinkReader
    from streaming.operators.findings import KINDS
    url = f"sqlite:///{tmp_path}/sink.db"
    sink = open_sink(url)
    rows = [{"kind": "dsrp-unsigned", "severity": "high", "source": s, "target": "bsc1", "count": n,
             "bucket": "2026-01-01T00:00:00.000+00:00", "first_seen": "2026-01-01T00:00:01.000+00:00",
             "last_seen": "2026-01-01T00:00:02.000+00:00", "evidence": {}, "detail": {}}
            for s, n in (("psc1", 3), ("rogue", 4))]
    sink.write_batch("q", 0, {"security_findings": rows})
    sink.close()
    (family,) = [f for f in JobMetrics(url)._families(SinkReader(url)) if f.name == "dirstream_security_findings"]
    values = {(s.labels["kind"], s.labels["severity"]): s.value for s in family.samples if s.name.endswith("_total")}
    assert values == {(kind, severity): 7.0 if kind == "dsrp-unsigned" else 0.0
                      for kind, (severity, _why) in KINDS.items()}


def _idle(prom: PrometheusServer, sink_url: str) -> None:
    """The job has read everything (its own and its operators' progress rows) and Prometheus holds the
    sink's last batch counts."""
    def caught_up():
        sink = open_sink(sink_url)
        try:
            counts = {(r["q"],): float(r["n"]) for r in sink.query(
                "SELECT query_name AS q, COUNT(*) AS n FROM pipeline_progress GROUP BY query_name")}
        finally:
            sink.close()
        unread = _values(prom, "dirstream_unread_records", "query")
        return len(counts) == 2 and unread and not any(unread.values()) and \
            _values(prom, "dirstream_batches_total", "query") == counts
    prom.wait_for(caught_up, timeout=600, interval=2, what="the job idle and Prometheus up to date")
    time.sleep(3)                                   # a last scrape after the last refresh
    prom.wait_for(caught_up, timeout=300, interval=2, what="the job still idle")


def _prometheus_agrees_with_the_sink(prom: PrometheusServer, sink_url: str) -> None:
    sink = open_sink(sink_url)
    try:
        parts = sink.query("SELECT * FROM replication_partitions")
        managers = sink.query("SELECT * FROM queue_managers")
        outcomes = sink.query("SELECT outcome, COUNT(*) AS n FROM discovery_requests GROUP BY outcome")
        rows = sink.query("SELECT query_name AS q, SUM(input_rows) AS n FROM pipeline_progress GROUP BY query_name")
        dead = sink.query("SELECT COUNT(*) AS n FROM dead_letters")[0]["n"]
        findings = sink.query("SELECT kind, severity, SUM(count) AS n FROM security_findings GROUP BY kind, severity")
    finally:
        sink.close()
    replica = ("server", "partition")
    assert _values(prom, "dirstream_replica_last_seq_number", *replica) == {
        (p["server"], p["partition_id"]): float(int(p["last_seq"], 16)) for p in parts}
    assert _values(prom, "dirstream_replica_pending_changes", *replica) == {
        (p["server"], p["partition_id"]): float(p["pending_count"]) for p in parts}
    assert _values(prom, "dirstream_qm_notifications_waiting", "queue_manager") == {
        (m["machine_id"],): float(m["notifications_waiting"]) for m in managers}
    assert _values(prom, "dirstream_qm_unresolved_reads", "queue_manager") == {
        (m["machine_id"],): float(m["unresolved_reads"]) for m in managers}
    assert _values(prom, "dirstream_discovery_requests_total", "outcome") == {
        (o["outcome"],): float(o["n"]) for o in outcomes}
    assert _values(prom, "dirstream_input_rows_total", "query") == {(r["q"],): float(r["n"]) for r in rows}
    assert sum(_values(prom, "dirstream_dead_letters_total", "stage", "reason").values()) == dead
    found = {(r["kind"], r["severity"]): float(r["n"]) for r in findings}
    assert set(found) == {("mqcn-unauthenticated", "medium")}, found       # the traffic's attack
    assert {k: v for k, v in _values(prom, "dirstream_security_findings_total", "kind", "severity").items()
            if v} == found
    # the victim is behind every other replica of a site partition by what they applied
    lag = _values(prom, "dirstream_replica_lag_seq_numbers", *replica)
    newest: dict[str, int] = {}
    for p in parts:
        if not p["owned"]:
            newest[p["partition_id"]] = max(newest.get(p["partition_id"], 0), int(p["last_seq"], 16))
    behind = {k: v for k, v in lag.items() if k[0] == VICTIM}
    assert max(behind.values()) > 50, behind
    for p in parts:
        if p["server"] == VICTIM and not p["owned"]:
            assert lag[(VICTIM, p["partition_id"])] >= newest[p["partition_id"]] - int(p["last_seq"], 16)


def _dashboard_agrees_with_prometheus(prom: PrometheusServer, sink_url: str) -> None:
    """The Replication page's cells show the lag Prometheus holds."""
    from streaming.apps.dashboard_pages import replication_page
    from streaming.apps.sink_reader import SinkReader
    lag = _values(prom, "dirstream_replica_lag_seq_numbers", "server", "partition")
    shown = {}
    for cell in _walk(replication_page(SinkReader(sink_url))):
        if getattr(cell, "className", None) == "replica-cell":
            server, partition = cell.title.split(" / ")
            texts = [c.children for c in cell.children if isinstance(getattr(c, "children", None), str)]
            shown[(server, partition)] = next((int(t.split()[1]) for t in texts if t.startswith("lag ")), None)
    assert shown
    assert {k: v for k, v in shown.items() if v is not None} == {
        k: v for k, v in lag.items() if k in shown and shown[k] is not None}
    assert any(v > 50 for (server, _), v in shown.items() if server == VICTIM and v is not None)


def _walk(component):
    if isinstance(component, (list, tuple)):
        for c in component:
            yield from _walk(c)
        return
    yield component
    children = getattr(component, "children", None)
    if children is not None and not isinstance(children, str):
        yield from _walk(children)
