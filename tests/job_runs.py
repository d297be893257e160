"""Helpers the job tests share: the responder in a thread, a continuous job in the background.
The operators end to end (the responder's heals through Kafka, SIGKILL, the outbound topic,
PostgreSQL): tests/test_determinism.py."""
import signal
import subprocess
import threading
import time

from producers.kafka import KafkaSettings
from producers.responder import run_responder
from streaming.sinks import open_sink
from streaming.spark.pipeline import source_options, start_query
from streaming.wire.topics import OUTBOUND_TOPIC, TOPICS

TABLES = ("directory_objects", "directory_history", "deleted_objects", "replication_partitions",
          "replication_servers", "pending_changes", "outbound_messages", "queue_managers", "qm_queues", "notifications",
          "notification_batches", "discovery_requests", "site_topology", "discovery_unmatched_replies", "dead_letters",
          "raw_messages_seen", "security_findings")
LEFT_OUT = {"recorded_at", "batch_id"}
KAFKA_COORDINATES = {"kafka_partition", "kafka_offset", "partition", "offset"}
FAULTS = ("--reorder", "0.1", "--duplicate", "0.05", "--drop", "0.03", "--nack", "0.01", "--corrupt", "0.01",
          "--unauthenticated", "0.05", "--burst-rate", "0.01")


def dump(url: str, left_out=frozenset()) -> dict[str, list[tuple]]:
    s = open_sink(url)
    try:
        out = {}
        for table in TABLES:
            rows = s.query(f"SELECT * FROM {table}")
            skip = LEFT_OUT | left_out | ({"message_id"} if table == "outbound_messages" else set())
            if left_out & KAFKA_COORDINATES:
                rows = [_without_coordinates(r) for r in rows]
            out[table] = sorted((tuple((k, str(v)) for k, v in sorted(r.items()) if k not in skip) for r in rows))
        return out
    finally:
        s.close()


def _without_coordinates(row: dict) -> dict:
    """A security finding's evidence without its Kafka partition and offset (its topic and message
    id stay): runs over differently partitioned topics compare equal."""
    import json
    if row.get("evidence") is None:
        return row
    evidence = json.loads(row["evidence"]) if isinstance(row["evidence"], str) else row["evidence"]
    kept = {end: {k: v for k, v in (where or {}).items() if k not in KAFKA_COORDINATES}
            for end, where in evidence.items()}
    return dict(row, evidence=json.dumps(kept, sort_keys=True))


def differences(a: dict, b: dict) -> list[str]:
    out = []
    for table in TABLES:
        only_a, only_b = set(a[table]) - set(b[table]), set(b[table]) - set(a[table])
        if only_a or only_b:
            out.append(f"{table}: {len(a[table])} vs {len(b[table])} rows, {len(only_a)} only in the first "
                       f"(e.g. {sorted(only_a)[:1]}), {len(only_b)} only in the second (e.g. {sorted(only_b)[:1]})")
    return out


class Responder:
    """`dirstream produce respond` in a thread: the object authorities of the simulated enterprise."""

    def __init__(self, bootstrap: str, truth_path: str):
        self.stop = threading.Event()
        self.stats = {}
        self.thread = threading.Thread(target=self._run, args=(bootstrap, truth_path), daemon=True)
        self.thread.start()

    def _run(self, bootstrap, truth_path):
        self.stats = run_responder(KafkaSettings(bootstrap), truth_path, outbound_topic=OUTBOUND_TOPIC,
                                   raw_topic=TOPICS["mqdsrp"], stop=self.stop.is_set)

    def close(self):
        self.stop.set()
        self.thread.join(30)


def bare_job(broker, sink, ckpt, *extra) -> subprocess.Popen:
    """`dirstream run` in the background with only the arguments given (job() adds the usual ones)."""
    import shutil
    import sys
    from pathlib import Path
    exe = shutil.which("dirstream", path=str(Path(sys.executable).parent))
    log = open(f"{ckpt}-{time.monotonic_ns()}.log", "w")     # a file: the job's output would fill a pipe
    proc = subprocess.Popen([exe, "run", "--bootstrap", broker, "--sink", sink, "--checkpoint", str(ckpt),
                             "--master", "local[2]", *extra], stdout=log, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    proc.log_path = log.name
    return proc


def job(broker, sink, ckpt, *extra) -> subprocess.Popen:
    return bare_job(broker, sink, ckpt, "--trigger", "1s", "--pec-name", "pec0", *extra)


def output(proc) -> str:
    with open(proc.log_path) as fh:
        return fh.read()


def kill_tree(root: int) -> None:
    """SIGKILL to a process and every process under it: the job's JVM and Python workers run in a
    session of their own, out of reach of a signal to the job's process group."""
    import os
    parents = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
    doomed, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        doomed.append(pid)
        frontier.extend(child for child, parent in parents.items() if parent == pid)
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def crash(proc: subprocess.Popen) -> None:
    """The job crashing: every process of it killed at once."""
    kill_tree(proc.pid)
    proc.wait(30)


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)              # Ctrl-C: stops after the current batch
    assert proc.wait(600) == 0, output(proc)[-5000:]


def once_in_session(spark, bootstrap: str, sink: str, checkpoint, max_records: int | None = None,
                    **job_kw) -> None:
    """`dirstream run --once --pec-name pec0 --outbound-topic none` in the tests' own Spark session:
    the same query (streaming.spark.job_query), without a JVM and Python workers started for it.
    job_kw: start_job_query's (records_per_task)."""
    from streaming.operators.notifications import Settings
    from streaming.spark.job_query import start_job_query
    from streaming.spark.pipeline import source_options
    query = start_job_query(spark, sink_url=sink, checkpoint=str(checkpoint), once=True, echo=lambda _l: None,
                            source_opts=source_options(bootstrap, max_records=max_records), settings=Settings(),
                            pec_name="pec0", outbound_topic=None, **job_kw)
    try:
        query.awaitTermination(900)
    except Exception:           # noqa: BLE001 -- StreamingQueryException: asserted below with its text
        pass
    assert query.exception() is None, query.exception()


def run_once(spark, bootstrap, sink_url, checkpoint, **source_kw):
    query = start_query(spark, sink_url=sink_url, checkpoint=str(checkpoint), once=True, echo=lambda _l: None,
                        source_opts=source_options(bootstrap, **source_kw))
    try:
        query.awaitTermination(600)
    except Exception:       # StreamingQueryException: the test reads it back from query.exception()
        pass
    return query


def sink_totals(url: str) -> dict:
    s = open_sink(url)
    try:
        progress = s.query("SELECT COALESCE(SUM(input_rows), 0) AS rows, COALESCE(SUM(dead_letters), 0) AS dead, "
                           "COUNT(*) AS batches FROM pipeline_progress WHERE query_name = 'dirstream'")[0]
        seen = {r["protocol"]: r["n"] for r in s.query(
            "SELECT protocol, SUM(messages) AS n FROM raw_messages_seen GROUP BY protocol")}
        dead = s.query("SELECT message_id, error_reason, error_structure, error_field, error_offset, topic, "
                       "kafka_partition, kafka_offset, raw_value FROM dead_letters")
        return {"rows": int(progress["rows"]), "dead": int(progress["dead"]), "batches": progress["batches"],
                "seen": {k: int(v) for k, v in seen.items()}, "dead_letters": dead}
    finally:
        s.close()


def wait_for_rows(url: str, n: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if sink_totals(url)["rows"] >= n:
                return
        except Exception:
            pass
        time.sleep(0.5)
    raise AssertionError(f"sink did not reach {n} rows within {timeout} s")


def raw_tables(url: str) -> dict:
    """The raw side of the sink: dead letters, the counts per protocol and server, the rows read."""
    s = open_sink(url)
    try:
        return {
            "dead_letters": s.query("SELECT topic, kafka_partition, kafka_offset, kafka_key, protocol, error, raw_value, "
                                    "message_id FROM dead_letters ORDER BY topic, kafka_partition, kafka_offset"),
            "raw_messages_seen": s.query("SELECT * FROM raw_messages_seen ORDER BY protocol, server, minute"),
            "rows": s.query("SELECT SUM(input_rows) AS n FROM pipeline_progress WHERE query_name = 'dirstream'")[0]["n"],
        }
    finally:
        s.close()


def once_until_verified(run_settings: list, respond_settings: list, truth, sink: str, checkpoint) -> tuple:
    """`dirstream run --once` (with its Kafka settings) while `produce respond` (with its own) answers
    the replicas' sync requests, again until verify finds the sink matches the truth, at most three
    times: (verify's last CompletedProcess, the responder's stderr). Each run must exit 0."""
    import shutil
    import sys
    from pathlib import Path
    from conftest import dirstream
    exe = shutil.which("dirstream", path=str(Path(sys.executable).parent)) or "dirstream"
    responder = subprocess.Popen([exe, "produce", "respond", *respond_settings, "--truth", str(truth),
                                  "--idle-exit", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(3):
            done = dirstream("run", *run_settings, "--once", "--sink", sink, "--checkpoint", str(checkpoint),
                             "--master", "local[2]", "--pec-name", "pec0", "--metrics-port", "0", timeout=600)
            assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
            verified = dirstream("verify", "--truth", str(truth), "--sink", sink)
            if verified.returncode == 0:
                break
            time.sleep(8)                        # the responder answers the sync requests just sent
    finally:
        responder.terminate()
        _, err = responder.communicate(30)
    return verified, err
