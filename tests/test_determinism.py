"""The sink tables are a pure function of what is in Kafka.

One simulated enterprise with every fault type switched on; the same Kafka input processed
continuously in micro-batches of 1,200 records with a SIGKILL in the middle while the responder
answers (until verify is clean and everything is read), then with one partition per topic instead
of four, in one --once pass of bigger micro-batches (in the tests' Spark session). Every table must come out the same, row
for row (the raw tables too), and verify clean (see CONVERGING). --once repeated with the responder
answering between runs is the second test's. Columns left out of the comparison: recorded_at (processing time),
dead_letters.batch_id (which micro-batch found it), outbound_messages.message_id (scoped by the
checkpoint, so that two jobs never send the same message id: docs/design.md, "Determinism").
"""
import os
import signal
import subprocess
import time

from conftest import dirstream, simulate
from producers.kafka import KafkaSettings, ensure_topics
from streaming.sinks import open_sink
from streaming.wire.envelope import decode_envelope
from streaming.wire.topics import TOPICS
from job_runs import FAULTS, KAFKA_COORDINATES, Responder, crash, differences, dump, once_in_session

def run(broker, sink, checkpoint, *extra, env=None) -> subprocess.Popen:
    import shutil
    import sys
    from pathlib import Path
    exe = shutil.which("dirstream", path=str(Path(sys.executable).parent))
    log = open(f"{checkpoint}-{time.monotonic_ns()}.log", "w")
    proc = subprocess.Popen([exe, "run", "--bootstrap", broker, "--sink", sink, "--checkpoint", str(checkpoint),
                             "--master", "local[2]", "--pec-name", "pec0", *extra], stdout=log,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, **(env or {})})
    proc.log_path = log.name
    return proc


def once(broker, sink, checkpoint, *extra) -> None:
    proc = run(broker, sink, checkpoint, "--once", *extra)
    assert proc.wait(600) == 0, open(proc.log_path).read()[-5000:]


def verified(truth_file, sink, *only) -> subprocess.CompletedProcess:
    return dirstream("verify", "--truth", str(truth_file), "--sink", sink, *(a for o in only for a in ("--only", o)))


# With lost propagations in a history published all at once, the replicas heal when the responder's
# replies arrive, and those are dated after everything already on the topic (docs/design.md, Determinism):
# a queue manager that read a stale replica before keeps what it read (docs/design.md, MQCN operator:
# limits), the same in every configuration. The MQCN tables are compared row for row; verify checks
# them against the truth in the test below, whose traffic loses nothing.
CONVERGING = ("discovery", "replication")


def wait_until_answered(responder: Responder, quiet_s: float = 4.0, timeout: float = 60.0) -> None:
    """Until the responder has answered nothing new for quiet_s seconds."""
    deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
    while time.monotonic() < deadline:
        now = dict(responder.stats)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.5)


def test_the_tables_are_a_pure_function_of_kafka(broker, tmp_path, spark):
    _, truth = simulate(broker, tmp_path, "--seed", "21", "--count", "2500", *FAULTS,
                        "--attack", "dsrp-unknown-sender,mqsd-rogue-reply")
    truth_file = next(tmp_path.glob("truth-*.json"))
    assert truth["dropped"] and truth["duplicates"] and truth["discarded_notifications"]
    assert {a["kind"] for a in truth["attacks"]} >= {"dsrp-unknown-sender", "mqsd-rogue-reply"}

    # continuously, in micro-batches of 1,200 records, killed with SIGKILL and restarted, the
    # responder answering the replicas' sync requests, until verify is clean and nothing is left
    slowed = f"sqlite:///{tmp_path}/slowed.db"
    responder = Responder(broker, str(truth_file))
    try:
        proc = run(broker, slowed, tmp_path / "c_slowed", "--trigger", "300ms", "--max-records", "1200")
        _wait_for(lambda: _count(slowed, "notifications") > 0, proc)
        crash(proc)
        proc = run(broker, slowed, tmp_path / "c_slowed", "--trigger", "300ms", "--max-records", "1200")
        try:
            # bounds only a hang exceeds: a loaded machine took more than 600 s to converge here
            _wait_for(lambda: verified(truth_file, slowed, *CONVERGING).returncode == 0, proc, timeout=1800,
                      why=lambda: verified(truth_file, slowed, *CONVERGING).stdout[-3000:]
                      + f"\nrows dropped as late: {_late_rows(slowed)}")
            wait_until_answered(responder)
            settled = _Settled(broker, slowed)
            _wait_for(settled, proc, timeout=600)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(120)
    finally:
        responder.close()
    # Kafka holds its final content from here on (the raw topics: what the job sent last is unanswered)
    expected = dump(slowed)
    assert verified(truth_file, slowed, *CONVERGING).returncode == 0
    _every_outbound_message_is_on_its_topic(broker, slowed)
    assert "0 notifications unresolved" in verified(truth_file, slowed, "notifications").stdout
    assert expected["notifications"] and expected["directory_objects"] and expected["dead_letters"]
    # the server registry's findings too (the unauthenticated fault's are the MQCN operator's)
    assert {"dsrp-unknown-sender", "mqsd-rogue-reply"} <= {dict(row)["kind"] for row in expected["security_findings"]}
    assert verified(truth_file, slowed, "findings").returncode == 0
    assert _late_rows(slowed) == 0

    # one partition per topic (the same records, in the order they arrived), in one --once pass of
    # micro-batches of 1,500 records (the same query, in the tests' own Spark session)
    _repartition(broker, 1)
    single = f"sqlite:///{tmp_path}/single.db"
    once_in_session(spark, broker, single, tmp_path / "c_single", max_records=1500)
    assert differences(dump(slowed, KAFKA_COORDINATES), dump(single, KAFKA_COORDINATES)) == []
    assert verified(truth_file, single, *CONVERGING).returncode == 0


class _Settled:
    """Every record the raw topics hold now read, and the micro-batch after the last one with data
    (the one that fires its timers) run: the latest batch has no input, or none came for still_s (a
    bound only a hang exceeds: a no-data batch follows within seconds)."""

    def __init__(self, bootstrap: str, url: str, still_s: float = 120.0):
        self.bootstrap, self.url, self.still_s = bootstrap, url, still_s
        self.latest: tuple[int, float] | None = None           # (batch id, when first seen)

    def __call__(self) -> bool:
        if not _read_everything(self.bootstrap, self.url):
            return False
        s = open_sink(self.url)
        try:
            latest = s.query("SELECT batch_id, input_rows FROM pipeline_progress WHERE query_name = 'dirstream' "
                             "ORDER BY batch_id DESC LIMIT 1")[0]
        finally:
            s.close()
        if latest["input_rows"] == 0:
            return True
        if self.latest is None or self.latest[0] != latest["batch_id"]:
            self.latest = (latest["batch_id"], time.monotonic())
        return time.monotonic() - self.latest[1] >= self.still_s


def _read_everything(bootstrap: str, url: str) -> bool:
    """The job has read every record the raw topics hold now."""
    from streaming.spark.kafka_offsets import EndOffsets
    offsets = EndOffsets({"bootstrap.servers": bootstrap}, list(TOPICS.values()))
    try:
        in_kafka = sum(offsets.ends().values())
    finally:
        offsets.close()
    s = open_sink(url)
    try:
        read = s.query("SELECT COALESCE(SUM(input_rows), 0) AS n FROM pipeline_progress "
                       "WHERE query_name = 'dirstream'")[0]["n"]
    finally:
        s.close()
    return read >= in_kafka


def test_once_is_complete_and_converges_with_the_responder_in_three_runs(broker, tmp_path, pg_url):
    """--once processes in one invocation what the replicas derive for the queue managers; with the
    responder answering between runs, verify is clean by the third run at the latest. The traffic comes from a capture: simulated as MQQB
    sessions with split, reordered and retransmitted TCP segments, replayed, then processed. The
    sink is PostgreSQL (the other job tests write SQLite)."""
    truth_file = _published_through_a_capture(broker, tmp_path, "--seed", "11", "--count", "800",
                                               "--duplicate", "0.05", "--unauthenticated", "0.05",
                                               "--burst-rate", "0.01")
    sink = pg_url
    responder = Responder(broker, str(truth_file))
    try:
        for runs in range(1, 4):
            if runs == 1:           # on a terminal: what the console shows
                _console_on_a_terminal(broker, sink, tmp_path / "c_once", tmp_path / "run.log")
            else:
                once(broker, sink, tmp_path / "c_once")
            done = verified(truth_file, sink)
            if done.returncode == 0:
                break
            wait_until_answered(responder)
    finally:
        responder.close()
    assert done.returncode == 0, done.stdout[-3000:]
    assert "0 notifications unresolved" in done.stdout and _count(sink, "notifications") > 0
    assert _late_rows(sink) == 0
    _every_query_and_outcome_is_there(sink)
    _verify_names_a_tampered_object(truth_file, sink)


def _every_query_and_outcome_is_there(url: str) -> None:
    """The query's and its operators' progress is recorded; MQCN applied v1 and v2 changes, discarded the
    unauthenticated copies and refreshed after a burst."""
    s = open_sink(url)
    try:
        outcomes = {r["outcome"] for r in s.query("SELECT DISTINCT outcome FROM notifications")}
        refreshes = s.query("SELECT COUNT(*) AS n FROM notification_batches WHERE refresh_all")[0]["n"]
        v2_applied = s.query("SELECT COUNT(*) AS n FROM notifications WHERE version = 2 AND outcome = 'applied'")[0]["n"]
        per_query = {r["query_name"]: r for r in s.query(
            "SELECT query_name, COUNT(*) AS batches, SUM(input_rows) AS rows_in, MAX(state_rows) AS state "
            "FROM pipeline_progress GROUP BY query_name")}
    finally:
        s.close()
    assert set(per_query) == {"dirstream", "dirstream-operators"}             # the job's one query
    assert all(q["batches"] > 0 for q in per_query.values())
    assert per_query["dirstream-operators"]["rows_in"] > 0 and per_query["dirstream-operators"]["state"] > 0
    assert {"applied", "discarded"} <= outcomes and refreshes > 0 and v2_applied > 0


def _published_through_a_capture(broker, tmp_path, *simulation) -> str:
    """`produce simulate --pcap`, then `produce replay` of the capture: every message published."""
    import json
    capture, truth_file = tmp_path / "sim.pcapng", tmp_path / "truth.json"
    done = dirstream("produce", "simulate", *simulation, "--pcap", str(capture), "--truth", str(truth_file))
    assert done.returncode == 0, done.stderr
    written = json.loads(done.stdout)
    done = dirstream("produce", "replay", "--bootstrap", broker, str(capture))
    assert done.returncode == 0, done.stderr[-3000:]
    replayed = json.loads(done.stdout)
    assert replayed["published"] == written["written"] and replayed["skipped"] == 0
    assert replayed["msmq_not_published"]["MQQB EstablishConnection"] == 2 * written["tcp_sessions"]
    return str(truth_file)


def _verify_names_a_tampered_object(truth_file, url: str) -> None:
    """`dirstream verify` fails and names the object when a replica differs from the truth."""
    import json
    from streaming.sinks import as_bool
    s = open_sink(url)
    victim = next(r for r in s.query("SELECT server, object_guid, properties, deleted FROM directory_objects "
                                     "WHERE object_type = 'queue' ORDER BY server, object_guid")
                  if not as_bool(r["deleted"]))
    props = victim["properties"] if isinstance(victim["properties"], dict) else json.loads(victim["properties"])
    props["PROPID_Q_LABEL"] = "tampered"
    mark = s.placeholder
    cur = s.conn.cursor()
    cur.execute(f"UPDATE directory_objects SET properties = {mark} WHERE server = {mark} AND object_guid = {mark}",
                (json.dumps(props), victim["server"], victim["object_guid"]))
    s.conn.commit()
    s.close()
    done = verified(truth_file, url, "replication")
    assert done.returncode == 1
    assert f"{victim['object_guid']} PROPID_Q_LABEL is 'tampered'" in done.stdout


def _console_on_a_terminal(broker, sink, checkpoint, log_file) -> None:
    """`dirstream run --once` on a pseudo-terminal: a live line per query, the bar over the records
    in Kafka at the start and the summary; Spark's and the job's log lines only in the log file."""
    import re
    import sys
    from pathlib import Path

    from test_console import run_on_a_terminal
    text = run_on_a_terminal([str(Path(sys.executable).parent / "dirstream"), "run", "--bootstrap", broker, "--once",
                              "--master", "local[2]", "--pec-name", "pec0", "--sink", sink, "--checkpoint",
                              str(checkpoint), "--log-file", str(log_file)])
    for shown in ("records in Kafka at the start", "rows/s", "late rows", "dead letters", "job", "operators",
                  "rows written:", "late rows: 0"):
        assert shown in text, (shown, text[-3000:])
    assert not re.search(r"\b(WARN|INFO)\b", text), text[-3000:]          # no Spark or job log lines
    logged = log_file.read_text()
    assert "batch 0:" in logged and "Spark" in logged


def _every_outbound_message_is_on_its_topic(broker, url: str) -> None:
    """What the replicas sent is on the outbound topic, keyed by its destination, with its body (the
    responder answered it from there)."""
    from conftest import consume_all
    from streaming.wire.topics import OUTBOUND_TOPIC
    s = open_sink(url)
    out = s.query("SELECT message_id, operation, destination, body FROM outbound_messages")
    s.close()
    published = {}
    for rec in consume_all(broker, OUTBOUND_TOPIC):
        env = decode_envelope(rec.value())
        assert rec.key().decode() == env["destination_machine"]
        published[env["message_id"]] = env
    assert out and {r["operation"] for r in out} >= {"SyncRequest"}
    assert all(published[r["message_id"]]["body"].hex() == r["body"] for r in out)


def _count(url: str, table: str) -> int:
    try:
        s = open_sink(url)
        try:
            return s.query(f"SELECT COUNT(*) AS n FROM {table}")[0]["n"]
        finally:
            s.close()
    except Exception:
        return 0


def _late_rows(url: str) -> int:
    s = open_sink(url)
    try:
        return s.query("SELECT COALESCE(SUM(late_rows), 0) AS n FROM pipeline_progress")[0]["n"]
    finally:
        s.close()


def _wait_for(condition, proc, timeout: float = 600, why=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, open(proc.log_path).read()[-5000:]
        assert time.monotonic() < deadline, why()
        time.sleep(2)


def _repartition(bootstrap: str, partitions: int) -> None:
    """Every raw topic again with `partitions` partitions, holding the same records in arrival order
    (the job's own topics are emptied: a new job derives them again)."""
    from confluent_kafka import Producer
    from conftest import consume_all, delete_user_topics
    records = {topic: sorted(((_arrival(r.value()), r.partition(), r.offset()), r.key(), r.value())
                             for r in consume_all(bootstrap, topic)) for topic in TOPICS.values()}
    delete_user_topics(bootstrap)
    ensure_topics(KafkaSettings(bootstrap), {topic: partitions for topic in TOPICS.values()})
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for topic, rows in records.items():
        for _order, key, value in rows:
            producer.produce(topic, value, key)
    assert producer.flush(60) == 0


def _arrival(value: bytes) -> float:
    try:
        return decode_envelope(value)["arrival_time"].timestamp()
    except ValueError:
        return 0.0                      # a record whose envelope is broken: a dead letter wherever it is
