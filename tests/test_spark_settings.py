"""The job's Spark settings are defaults: a setting the user gave (spark-defaults.conf, spark-submit's
--conf, --spark-conf) wins. A checkpoint's first micro-batch records the settings it fixes for good
(spark.sql.shuffle.partitions): read from its offsets log."""
import json

from conftest import dirstream, simulate
from streaming.spark.pipeline import job_spark_defaults, spark_defaults_file, user_spark_settings


def checkpoint_conf(checkpoint) -> dict:
    """The Spark settings the checkpoint's first micro-batch recorded (offsets/0's metadata line)."""
    (offsets,) = [p for p in checkpoint.rglob("offsets/0")]
    return json.loads(offsets.read_text().splitlines()[1])["conf"]


def test_spark_defaults_conf_is_read_as_spark_submit_reads_it(tmp_path, monkeypatch):
    (tmp_path / "spark-defaults.conf").write_text(
        "# comment\nspark.sql.shuffle.partitions   3\nspark.ui.enabled=true\n\n  spark.executor.memory : 2g\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert spark_defaults_file() == {"spark.sql.shuffle.partitions": "3", "spark.ui.enabled": "true",
                                     "spark.executor.memory": "2g"}
    given = user_spark_settings({"spark.ui.enabled": "false"})          # --spark-conf over the file
    assert given["spark.ui.enabled"] == "false" and given["spark.sql.shuffle.partitions"] == "3"
    defaults = job_spark_defaults("local[2]", given, pretouch=False)
    assert defaults["spark.sql.shuffle.partitions"] == "2"              # the job's, applied only where unset
    assert {k for k in defaults if k not in given} >= {"spark.sql.session.timeZone", "spark.python.worker.reuse"}


def test_a_setting_in_spark_defaults_conf_and_one_by_spark_conf_reach_the_job(broker, tmp_path):
    simulate(broker, tmp_path, "--seed", "3", "--count", "300")
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.sql.shuffle.partitions 3\n")
    import os
    env = {**os.environ, "SPARK_CONF_DIR": str(conf_dir)}
    for name, extra, partitions in (("file", (), "3"),
                                    ("flag", ("--spark-conf", "spark.sql.shuffle.partitions=5"), "5")):
        done = dirstream("run", "--bootstrap", broker, "--sink", f"sqlite:///{tmp_path}/{name}.db", "--checkpoint",
                         str(tmp_path / f"ckpt-{name}"), "--once", "--metrics-port", "0", "--log-format", "plain",
                         "--outbound-topic", "none", *extra, timeout=600, env=env)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert checkpoint_conf(tmp_path / f"ckpt-{name}")["spark.sql.shuffle.partitions"] == partitions


def test_a_local_checkpoint_is_written_through_the_filesystem_api_and_another_filesystems_is_not():
    key = "spark.sql.streaming.checkpointFileManagerClass"
    local = job_spark_defaults("local[2]", {}, pretouch=False, local_checkpoint=True)
    assert local[key].endswith(".FileSystemBasedCheckpointFileManager")
    assert key not in job_spark_defaults("local[2]", {}, pretouch=False, local_checkpoint=False)
    assert key not in job_spark_defaults("local[2]", {}, pretouch=False)          # Spark's own unless told


def test_writing_a_local_checkpoint_runs_no_readlink_process(broker, tmp_path):
    """Hadoop's FileContext asks for a local file's link status by running `readlink` (without its native
    library): Spark's default checkpoint writer did so twice for every file it renamed into place. A
    `readlink` and a `chmod` first on the PATH record each call: Hadoop still runs `chmod` to set a new
    file's permissions, which shows the wrappers are the ones it runs."""
    import os
    import shutil
    simulate(broker, tmp_path, "--seed", "3", "--count", "300")
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("readlink", "chmod"):          # chmod: Hadoop still runs it, so the wrappers are the ones run
        (tools / tool).write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / tool}-calls\nexec {shutil.which(tool)} "$@"\n')
        (tools / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    checkpoint = tmp_path / "ckpt"
    done = dirstream("run", "--bootstrap", broker, "--sink", f"sqlite:///{tmp_path}/sink.db", "--checkpoint",
                     str(checkpoint), "--once", "--max-records", "100", "--metrics-port", "0", "--log-format", "plain",
                     "--outbound-topic", "none", timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert len(list(checkpoint.rglob("commits/*"))) >= 3                  # several micro-batches committed

    def naming_the_checkpoint(tool: str) -> list[str]:
        calls = tmp_path / f"{tool}-calls"
        return [line for line in (calls.read_text().splitlines() if calls.exists() else []) if str(checkpoint) in line]
    assert naming_the_checkpoint("chmod")       # new checkpoint files' permissions: the wrappers were run
    assert naming_the_checkpoint("readlink") == []
