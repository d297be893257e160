"""The same job on a Spark standalone cluster (master + worker on loopback) gives the local result,
with executors whose Python does not have the project: the job ships its own code."""
from conftest import dirstream, free_port, simulate
from job_runs import once_in_session
from job_runs import raw_tables
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
        # the executors import the archive's sources: the tables below are the pure-Python build's,
        # the local run's the session's (the compiled build under make test)
        assert "dirstream run: on the executors, the codecs run as pure Python (the job's code archive ships " \
               "the sources only)" in done.stdout + done.stderr
    finally:
        cluster.stop()
    a, b = raw_tables(local), raw_tables(remote)
    assert a["rows"] == b["rows"] == summary["published"]
    assert a["dead_letters"] == b["dead_letters"] and a["raw_messages_seen"] == b["raw_messages_seen"]


def documented_spark_submit() -> str:
    """The spark-submit command of docs/deploying.md, as written there (continuation lines joined)."""
    import re
    from test_packaging import ROOT
    text = (ROOT / "docs" / "deploying.md").read_text()
    (block,) = [b for b in re.findall(r"```sh\n(.*?)```", text, re.DOTALL) if "spark-submit --master" in b]
    lines = block.split("\n# a Spark application, by spark-submit")[1].split("\n")[1:]     # after that comment line
    command = "\n".join(line for line in lines if not line.startswith("#"))
    return " ".join(command.replace("\\\n", " ").split())


def test_spark_submit_runs_the_job_as_documented_from_the_built_wheel_on_the_cluster(broker, tmp_path):
    """docs/deploying.md's spark-submit command, its hosts, paths and memory replaced by the test's:
    the built wheel (installed where it is submitted, and on --py-files), the job's entry point, the
    executors' Python with only the third-party dependencies, the master spark-submit's; its
    spark.sql.shuffle.partitions wins over the job's default, and so does a spark-defaults.conf."""
    import sqlite3
    import subprocess
    import sys
    import zipfile
    from pathlib import Path
    from test_packaging import ROOT, clean_env
    from test_spark_settings import checkpoint_conf
    summary, _ = simulate(broker, tmp_path, "--seed", "18", "--count", "600")
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), str(ROOT)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    python = deps_only_python(tmp_path)              # the executors': no `streaming` importable there
    (tmp_path / "driver").mkdir()
    driver = deps_only_python(tmp_path / "driver")   # the submitting machine's, with the wheel installed
    installed = subprocess.run([str(driver), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert zipfile.ZipFile(wheel).read("streaming/apps/spark_main.py")
    import pyspark
    spark_home = str(Path(pyspark.__file__).parent)       # pyspark's own Spark, as an activated venv finds it
    conf_dir = tmp_path / "conf"                         # the cluster on loopback: the driver's address
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.driver.host 127.0.0.1\nspark.ui.enabled true\n"
                                                  "spark.ui.port 0\n")
    (tmp_path / "kafka.properties").write_text("# the embedded broker needs no settings\n")
    cluster = StandaloneCluster(tmp_path / "spark", free_port()).start()
    documented = documented_spark_submit()
    command = documented
    for doc, ours in (("spark://spark-master:7077", cluster.url), ("msmq_dirstream-0.1.0-py3-none-any.whl", str(wheel)),
                      ("/opt/dirstream-deps/bin/python", str(python)),
                      ("/opt/msmq-dirstream/.venv/bin/python", str(driver)),
                      ("--executor-memory 4g --driver-memory 4g", "--executor-memory 1g --driver-memory 1g"),
                      ("kafka1:9092,kafka2:9092", broker), ("/etc/dirstream/kafka.properties",
                                                            str(tmp_path / "kafka.properties")),
                      ("postgresql://dirstream@db:5432/dirstream", f"sqlite:///{tmp_path}/submitted.db"),
                      ("/mnt/dirstream/checkpoint", str(tmp_path / "ckpt"))):
        assert documented.count(doc) >= 1, doc
        command = command.replace(doc, ours)
    try:
        done = subprocess.run(
            ["bash", "-c", command + " --once --metrics-port 0 --log-format plain"], cwd=tmp_path,
            capture_output=True, text=True, timeout=900,
            env={**clean_env(), "SPARK_HOME": spark_home, "SPARK_CONF_DIR": str(conf_dir),
                 "PATH": f"{driver.parent}:{Path(sys.executable).parent}:/usr/bin:/bin"})
        assert done.returncode == 0, (command, (done.stdout + done.stderr)[:6000])
        assert any((tmp_path / "spark" / "work").iterdir())            # an executor ran on the worker
    finally:
        cluster.stop()
    with sqlite3.connect(tmp_path / "submitted.db") as db:
        read = db.execute("SELECT SUM(input_rows) FROM pipeline_progress WHERE query_name = 'dirstream'").fetchone()[0]
        assert read == summary["published"]
        assert db.execute("SELECT COUNT(*) FROM notification_batches").fetchone()[0] > 0     # the operators ran
    conf = checkpoint_conf(tmp_path / "ckpt")
    assert conf["spark.sql.shuffle.partitions"] == "16"             # spark-submit's --conf, not the job's 4
