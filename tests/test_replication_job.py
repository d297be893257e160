"""The replication and notification operators end to end on PostgreSQL, and the helpers the job
tests share (the responder in a thread). The responder's heals through Kafka, SIGKILL and the
outbound topic: tests/test_determinism.py."""
import signal
import subprocess
import threading
import time

from conftest import dirstream, simulate
from producers.kafka import KafkaSettings
from producers.responder import run_responder
from streaming.sinks import open_sink
from streaming.wire.topics import OUTBOUND_TOPIC, TOPICS


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


def job(broker, sink, ckpt, *extra) -> subprocess.Popen:
    import shutil
    import sys
    from pathlib import Path
    exe = shutil.which("dirstream", path=str(Path(sys.executable).parent))
    log = open(f"{ckpt}-{time.monotonic_ns()}.log", "w")     # a file: a long run's output would fill a pipe
    proc = subprocess.Popen([exe, "run", "--bootstrap", broker, "--sink", sink, "--checkpoint", str(ckpt),
                             "--master", "local[2]", "--trigger", "1s", "--pec-name", "pec0", *extra],
                            stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    proc.log_path = log.name
    return proc


def output(proc) -> str:
    with open(proc.log_path) as fh:
        return fh.read()


def verify(truth_file, sink) -> subprocess.CompletedProcess:
    return dirstream("verify", "--truth", str(truth_file), "--sink", sink, "--only", "replication")


def wait_until_verified(truth_file, sink, proc, timeout=240) -> subprocess.CompletedProcess:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, output(proc)[-5000:]
        started = "replication batch" in output(proc)          # this process has done work
        done = verify(truth_file, sink) if started and _tables_exist(sink) else None
        if done is not None and done.returncode == 0:
            return done
        time.sleep(3)
    raise AssertionError(f"replicas did not converge within {timeout} s:\n{done.stdout[-3000:] if done else ''}")


def _tables_exist(url: str) -> bool:
    try:
        s = open_sink(url)
        try:
            return bool(s.query("SELECT COUNT(*) AS n FROM replication_partitions")[0]["n"])
        finally:
            s.close()
    except Exception:
        return False


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)              # Ctrl-C: stops after the current batch
    assert proc.wait(120) == 0, output(proc)[-5000:]


def test_queue_managers_verify_against_the_truth_on_postgresql(broker, tmp_path, pg_url):
    """MQCN end to end: v1 and v2 queue managers, unauthenticated v1 copies, 100+ bursts; v2 events
    resolved against the replicas built from the MQDSRP messages of the same stream."""
    _, truth = simulate(broker, tmp_path, "--seed", "5", "--count", "4000", "--reorder", "0.1", "--duplicate",
                        "0.05", "--unauthenticated", "0.05", "--burst-rate", "0.01")
    truth_file = next(tmp_path.glob("truth-*.json"))
    assert truth["discarded_notifications"]
    proc = job(broker, pg_url, tmp_path / "ckpt")
    deadline = time.monotonic() + 240
    while True:
        assert proc.poll() is None, output(proc)[-5000:]
        done = dirstream("verify", "--truth", str(truth_file), "--sink", pg_url, "--only", "notifications",
                         "--only", "replication") if "notifications batch" in output(proc) else None
        if done is not None and done.returncode == 0:
            break
        assert time.monotonic() < deadline, done.stdout[-3000:] if done else output(proc)[-3000:]
        time.sleep(3)
    stop(proc)
    assert "9 queue managers" in done.stdout and "0 differences" in done.stdout
    s = open_sink(pg_url)
    try:
        outcomes = {r["outcome"] for r in s.query("SELECT DISTINCT outcome FROM notifications")}
        refreshes = s.query("SELECT COUNT(*) AS n FROM notification_batches WHERE refresh_all")[0]["n"]
        v2_applied = s.query("SELECT COUNT(*) AS n FROM notifications WHERE version = 2 AND outcome = 'applied' "
                             "AND action = 'create queue'")[0]["n"]
        per_query = {r["query_name"]: r for r in s.query(
            "SELECT query_name, COUNT(*) AS batches, SUM(input_rows) AS rows, SUM(late_rows) AS late, "
            "MAX(state_rows) AS state FROM pipeline_progress GROUP BY query_name")}
    finally:
        s.close()
    # every query's progress is recorded; nothing of the pipeline's own topic arrives late
    assert set(per_query) == {"dirstream", "dirstream-discovery", "dirstream-replication", "dirstream-notifications"}
    assert all(q["batches"] > 0 and q["late"] == 0 for q in per_query.values())
    assert per_query["dirstream-notifications"]["rows"] > 0 and per_query["dirstream-replication"]["state"] > 0
    assert {"applied", "discarded"} <= outcomes and refreshes > 0 and v2_applied > 0
