"""The same job on a Spark standalone cluster (master + worker on loopback) gives the local result,
with executors whose Python does not have the project: the job ships its own code."""
from conftest import dirstream, free_port, simulate
from job_runs import once_in_session
from test_job import _dump
from test_packaging import deps_only_python

from infra.spark_standalone import StandaloneCluster


def test_standalone_cluster_matches_local_mode(broker, tmp_path, spark):
    summary, _ = simulate(broker, tmp_path, "--seed", "17", "--count", "800", "--corrupt", "0.01")
    local = f"sqlite:///{tmp_path}/local.db"
    once_in_session(spark, broker, local, tmp_path / "c_local")         # local mode: the tests' own session
    worker_python = deps_only_python(tmp_path)                     # no `streaming` importable there
    cluster = StandaloneCluster(tmp_path / "spark", free_port()).start()
    try:
        remote = f"sqlite:///{tmp_path}/cluster.db"
        done = dirstream("run", "--bootstrap", broker, "--sink", remote, "--checkpoint", str(tmp_path / "c_cluster"),
                         "--once", "--master", cluster.url, "--spark-conf", "spark.executor.memory=1g",
                         "--spark-conf", "spark.driver.host=127.0.0.1",
                         "--spark-conf", f"spark.pyspark.python={worker_python}", timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert (tmp_path / "spark" / "work").exists()            # an executor ran on the worker
        assert any((tmp_path / "spark" / "work").iterdir())
        shipped = list((tmp_path / "spark" / "work").rglob("msmq-dirstream-code-*.zip"))
        assert shipped, "the executor received the job's code archive"
        assert len(list((tmp_path / "started").iterdir())) > 1, "the executors ran the worker interpreter"
    finally:
        cluster.stop()
    a, b = _dump(local), _dump(remote)
    assert a["rows"] == b["rows"] == summary["published"]
    assert a["dead_letters"] == b["dead_letters"] and a["raw_messages_seen"] == b["raw_messages_seen"]
