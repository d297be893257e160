"""The driver's sink write behind the next micro-batch (streaming/spark/write_behind.py): the rows
spooled before Spark may commit the batch, written on a thread, the spool completed by a restart;
and a SIGKILL between Spark's commit of a batch and its sink write loses no row and writes none
twice."""
import os
import sqlite3
import time
from pathlib import Path

import pytest

from conftest import simulate
from job_runs import FAULTS, crash, differences, dump, job, once_in_session, output
from streaming.sinks import open_sink
from streaming.sinks.typed import TypedRows, record_batch
from streaming.spark.pipeline import BatchWriter
from streaming.spark.write_behind import SPOOL_FOLDER, WriteBehind, local_spool_folder


def _rows(batch_id: int) -> dict:
    progress = {"query_id": "q", "batch_id": batch_id, "started_at": None, "finished_at": None, "input_rows": 1,
                "good_rows": 1, "dead_letters": 0, "rows_per_second": 1.0, "duration_ms": 1, "end_offsets": {},
                "lag": {}, "total_lag": 0, "skipped_offsets": 0, "query_name": "dirstream", "late_rows": 0}
    sites = [{"site_id": f"site-{batch_id}-{i}", "directory_server": "dc1", "ip_supported": True,
              "ipx_supported": False, "connected_networks": [], "first_seen": "2026-12-06T10:00:00.000+00:00",
              "last_seen": "2026-12-06T10:00:01.000+00:00"} for i in range(3)]
    return {"pipeline_progress": [progress], "site_topology": TypedRows("site_topology", [record_batch("site_topology",
                                                                                                       sites)])}


def _writer(tmp_path) -> tuple[BatchWriter, list[str]]:
    lines: list[str] = []
    writer = BatchWriter(f"sqlite:///{tmp_path}/sink.db", {}, "q", echo=lines.append)
    writer.behind = WriteBehind(str(tmp_path / SPOOL_FOLDER))
    return writer, lines


def _count(url: str, table: str) -> int:
    s = open_sink(url)
    try:
        return s.query(f"SELECT COUNT(*) AS n FROM {table}")[0]["n"]
    finally:
        s.close()


def test_the_spool_is_the_checkpoints_own_folder_on_a_local_filesystem_only():
    assert local_spool_folder("ckpt/job") == os.path.join("ckpt/job", SPOOL_FOLDER)
    assert local_spool_folder("file:///data/ckpt/job") == os.path.join("/data/ckpt/job", SPOOL_FOLDER)
    assert local_spool_folder("hdfs://nn:8020/ckpt/job") is None
    assert local_spool_folder("s3a://bucket/ckpt/job") is None


def test_spooled_rows_read_back_the_same_and_in_batch_order(tmp_path):
    behind = WriteBehind(str(tmp_path / SPOOL_FOLDER))
    for batch_id in (10, 2, 9):
        behind.spool(batch_id, _rows(batch_id))
    assert [b for b, _ in behind.spooled()] == [2, 9, 10]
    back = behind.load(behind.spooled()[0][1])
    assert back["pipeline_progress"] == _rows(2)["pipeline_progress"]
    assert list(back["site_topology"]) == list(_rows(2)["site_topology"])


def test_a_batch_is_written_on_the_thread_and_its_spool_file_goes_after(tmp_path):
    writer, lines = _writer(tmp_path)
    path = writer.behind.spool(0, _rows(0))
    writer.behind.start(lambda: writer.write(0, _rows(0)), path)
    writer.behind.wait()
    assert _count(writer.sink_url, "site_topology") == 3
    assert writer.behind.spooled() == []
    assert lines and lines[0].startswith("batch 0: ")


def test_a_failed_write_keeps_its_spool_file_and_is_raised_at_the_next_batch(tmp_path):
    behind = WriteBehind(str(tmp_path / SPOOL_FOLDER))
    path = behind.spool(4, _rows(4))

    def fails():
        raise RuntimeError("the sink refused")
    behind.start(fails, path)
    with pytest.raises(RuntimeError, match="the sink refused"):
        behind.wait()
    assert isinstance(behind.failure, RuntimeError)
    assert [b for b, _ in behind.spooled()] == [4]


def test_recovery_writes_what_the_spool_holds_once(tmp_path):
    """A batch spooled and never written is written; one spooled again after it was written (the
    process killed before removing the file) is found written, not written twice."""
    writer, lines = _writer(tmp_path)
    writer.behind.spool(0, _rows(0))
    writer.behind.spool(1, _rows(1))
    writer.recover()
    assert _count(writer.sink_url, "site_topology") == 6 and writer.behind.spooled() == []
    writer.behind.spool(1, _rows(1))
    writer.recover()
    assert _count(writer.sink_url, "site_topology") == 6
    assert _count(writer.sink_url, "sink_batches") == 2
    assert [line.split(":")[1].strip() for line in lines] == [
        "written from the write-behind spool (left by the process before)"] * 2 + [
        "already written (left by the process before)"]


# ---------------------------------------------------------------- a SIGKILL in the window
def _sink_batches(path: Path) -> set[int]:
    conn = sqlite3.connect(path)
    try:
        return {b for (b,) in conn.execute("SELECT batch_id FROM sink_batches WHERE query_id NOT LIKE '%/progress'")}
    except sqlite3.OperationalError:            # not created yet
        return set()
    finally:
        conn.close()


def _committed(checkpoint: Path) -> set[int]:
    commits = checkpoint / "job" / "commits"
    return {int(n) for n in os.listdir(commits) if n.isdigit()} if commits.is_dir() else set()


def _wait(predicate, proc, timeout: float = 300, why: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, output(proc)[-5000:]
        assert time.monotonic() < deadline, why + output(proc)[-3000:]
        time.sleep(0.2)


def test_a_sigkill_between_sparks_commit_and_the_sink_write_loses_no_row_and_writes_none_twice(broker, tmp_path,
                                                                                                 spark):
    simulate(broker, tmp_path, "--seed", "23", "--count", "1500", *FAULTS)
    db, checkpoint = tmp_path / "killed.db", tmp_path / "c_killed"
    killed = f"sqlite:///{db}"
    proc = job(broker, killed, checkpoint, "--max-records", "300", "--outbound-topic", "none")
    try:
        _wait(lambda: _sink_batches(db), proc, why="no micro-batch written: ")
        # A reader holding the sink's write lock: the job's writes wait for it, Spark goes on
        lock = sqlite3.connect(db, timeout=60)
        lock.execute("BEGIN IMMEDIATE")
        try:
            written = _sink_batches(db)
            _wait(lambda: _committed(checkpoint) - written, proc, why="no batch committed by Spark behind the sink: ")
            crash(proc)
        finally:
            lock.rollback()
            lock.close()
    finally:
        if proc.poll() is None:
            crash(proc)
    spool = checkpoint / "job" / SPOOL_FOLDER
    left = {int(n.split(".")[0]) for n in os.listdir(spool) if n.endswith(".batch")}
    committed_unwritten = _committed(checkpoint) - _sink_batches(db)
    assert committed_unwritten and committed_unwritten <= left, (committed_unwritten, left)

    again = job(broker, killed, checkpoint, "--once", "--outbound-topic", "none")
    assert again.wait(600) == 0, output(again)[-5000:]
    assert "written from the write-behind spool (left by the process before)" in output(again)
    assert not [n for n in os.listdir(spool) if n.endswith(".batch")]

    fresh = f"sqlite:///{tmp_path}/fresh.db"
    once_in_session(spark, broker, fresh, tmp_path / "c_fresh")
    assert differences(dump(killed), dump(fresh)) == []
    assert _count(killed, "notifications") > 0
