"""The job's checkpoint on a Hadoop filesystem: `hdfs://` on an HDFS mini-cluster and `s3a://` on an
S3-compatible server, each a process of its own (infra/hadoop_servers.py), shared by this module.

On each: `dirstream run` stopped with Ctrl-C, started again from another working directory, killed
with SIGKILL in the middle of its micro-batches and started again with --once gives the tables of a
--once run on a local checkpoint, under one query id, each batch written once; nothing of the
checkpoint lands in a local folder named after the URI."""
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from conftest import delete_user_topics, simulate
from infra.hadoop_servers import (HADOOP_VERSION, MiniHdfs, MotoS3, fs_shell, hdfs_settings, s3a_jars, s3a_settings,
                                  spark_conf)
from job_runs import KAFKA_COORDINATES, crash, differences, dump, once_in_session
from streaming.sinks import open_sink


class Filesystem(NamedTuple):
    root: str                       # a folder's URI on it
    hadoop: dict                    # the Hadoop settings that reach it
    jars: list                      # beside Spark's own

    @property
    def spark_settings(self) -> dict:
        return spark_conf(self.hadoop, self.jars)

    def shell(self, *args: str) -> subprocess.CompletedProcess:
        return fs_shell(*args, settings=self.hadoop, jars=self.jars)


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory):
    with MiniHdfs(tmp_path_factory.mktemp("hdfs")) as cluster:
        yield Filesystem(cluster.uri + "/dirstream", hdfs_settings(), [])


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with MotoS3(tmp_path_factory.mktemp("s3")) as server:
        yield Filesystem(server.create_bucket("checkpoints") + "/dirstream", s3a_settings(server.endpoint), s3a_jars())


@pytest.fixture(scope="module")
def traffic(kafka_broker, tmp_path_factory, spark):
    """A small enterprise's traffic on the session's broker, and the tables a --once run makes of it
    with a local checkpoint."""
    folder = tmp_path_factory.mktemp("traffic")
    delete_user_topics(kafka_broker.bootstrap)
    simulate(kafka_broker.bootstrap, folder, "--seed", "8", "--count", "1500", "--duplicate", "0.05",
             "--corrupt", "0.01")
    reference = f"sqlite:///{folder}/reference.db"
    once_in_session(spark, kafka_broker.bootstrap, reference, folder / "local-checkpoint", max_records=1500)
    return kafka_broker.bootstrap, dump(reference, KAFKA_COORDINATES)


def _run(bootstrap: str, sink: str, checkpoint: str, conf: dict, cwd: Path, *extra) -> subprocess.Popen:
    cwd.mkdir(exist_ok=True)
    exe = str(Path(sys.executable).parent / "dirstream")
    settings = [a for key, value in conf.items() for a in ("--spark-conf", f"{key}={value}")]
    log = open(cwd / f"job-{time.monotonic_ns()}.log", "w")
    proc = subprocess.Popen([exe, "run", "--bootstrap", bootstrap, "--sink", sink, "--checkpoint", checkpoint,
                             "--master", "local[2]", "--pec-name", "pec0", "--outbound-topic", "none",
                             "--metrics-port", "0", "--log-format", "plain", *settings, *extra],
                            cwd=cwd, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    proc.log_path = log.name
    return proc


def _batches(sink: str) -> list[tuple[str, int]]:
    s = open_sink(sink)
    try:
        return [(r["query_id"], r["batch_id"]) for r in s.query(
            "SELECT query_id, batch_id FROM pipeline_progress WHERE query_name = 'dirstream' ORDER BY batch_id")]
    finally:
        s.close()


def _wait_for_batches(sink: str, count: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while len(_batches(sink)) < count:
        assert proc.poll() is None, open(proc.log_path).read()[-5000:]
        assert time.monotonic() < deadline, f"fewer than {count} batches in {timeout:.0f} s"
        time.sleep(0.2)


def _stopped_killed_and_finished(bootstrap: str, checkpoint: str, conf: dict, tmp_path: Path) -> str:
    sink = f"sqlite:///{tmp_path}/sink.db"
    steady = ("--trigger", "300ms", "--max-records", "300")
    first = _run(bootstrap, sink, checkpoint, conf, tmp_path / "first", *steady)
    _wait_for_batches(sink, 2, first)
    first.send_signal(signal.SIGINT)                     # Ctrl-C: stops after the batch in flight
    assert first.wait(300) == 0, open(first.log_path).read()[-5000:]
    written = len(_batches(sink))
    second = _run(bootstrap, sink, checkpoint, conf, tmp_path / "second", *steady)
    _wait_for_batches(sink, written + 1, second)
    crash(second)                   # micro-batches run back to back: the kill lands in one
    last = _run(bootstrap, sink, checkpoint, conf, tmp_path / "second", "--once", "--max-records", "300")
    assert last.wait(600) == 0, open(last.log_path).read()[-5000:]
    return sink


def _no_local_trace_of(checkpoint: str, *folders: Path) -> None:
    scheme = checkpoint.partition("://")[0]
    for folder in folders:
        assert not list(folder.glob(f"{scheme}:*")), f"a local folder named after {checkpoint} in {folder}"


@pytest.mark.parametrize("filesystem", ["hdfs", "s3"])
def test_a_checkpoint_on_a_hadoop_filesystem_survives_stop_moves_and_sigkill(filesystem, traffic, tmp_path, request):
    bootstrap, expected = traffic
    fs = request.getfixturevalue(filesystem)
    checkpoint = f"{fs.root}/{tmp_path.name}"
    sink = _stopped_killed_and_finished(bootstrap, checkpoint, fs.spark_settings, tmp_path)
    assert differences(expected, dump(sink, KAFKA_COORDINATES)) == []
    batches = _batches(sink)
    assert len({query for query, _ in batches}) == 1            # the query id, read back from the filesystem
    assert [b for _, b in batches] == list(range(len(batches)))   # each batch once, none lost
    _no_local_trace_of(checkpoint, tmp_path / "first", tmp_path / "second", Path.cwd())
    listing = fs.shell("-ls", "-R", checkpoint)
    assert f"{checkpoint}/job/dirstream-query-id" in listing.stdout, listing.stderr[-2000:]


def test_a_checkpoint_of_the_earlier_layout_on_hdfs_is_refused_in_one_line(hdfs, traffic, tmp_path):
    checkpoint = f"{hdfs.root}/{tmp_path.name}"
    assert hdfs.shell("-mkdir", "-p", f"{checkpoint}/replication/offsets").returncode == 0
    proc = _run(traffic[0], f"sqlite:///{tmp_path}/sink.db", checkpoint, hdfs.spark_settings, tmp_path / "job")
    assert proc.wait(300) == 2
    said = [line for line in open(proc.log_path) if "earlier version" in line]
    assert len(said) == 1 and checkpoint in said[0]


def test_a_checkpoint_on_a_filesystem_spark_cannot_reach_is_one_line_naming_the_jars(traffic, tmp_path):
    proc = _run(traffic[0], f"sqlite:///{tmp_path}/sink.db", "s3a://checkpoints/dirstream", {}, tmp_path / "job")
    assert proc.wait(300) == 2
    out = open(proc.log_path).read()
    said = [line for line in out.splitlines() if "s3a://checkpoints/dirstream" in line and "spark.jars" in line]
    assert len(said) == 1 and "Traceback" not in out, out[-3000:]


def test_the_job_log_of_a_remote_checkpoint_is_in_the_working_directory(tmp_path):
    """Named in the console's first line, before anything starts (here a bad --trigger stops it)."""
    proc = _run("127.0.0.1:1", f"sqlite:///{tmp_path}/sink.db", "hdfs://127.0.0.1:1/dirstream", {},
                tmp_path / "job", "--trigger", "1x")
    assert proc.wait(120) == 2
    assert f"log in {tmp_path / 'job' / 'dirstream-run.log'}" in open(proc.log_path).read()
    assert (tmp_path / "job" / "dirstream-run.log").exists()


def test_deploying_names_the_s3a_jars_for_sparks_hadoop():
    text = (Path(__file__).parent.parent / "docs" / "deploying.md").read_text()
    assert f"hadoop-aws:{HADOOP_VERSION}" in text and "fs.s3a.endpoint" in text
