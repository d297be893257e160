"""The throw-away file systems for checkpoint tests (infra/hadoop_servers.py) start, answer Hadoop's
FsShell (the client Spark bundles) and stop, leaving no process; no Spark is started here."""
import re
from pathlib import Path

from infra.hadoop_servers import (HADOOP_VERSION, fs_shell, hdfs_settings, MiniHdfs, MotoS3, s3a_jars, s3a_settings,
                                  spark_conf, spark_jars_dir)


def _shell(*args: str, **options) -> str:
    done = fs_shell(*args, **options)
    assert done.returncode == 0, f"hadoop fs {' '.join(args)}: {done.stderr[-2000:]}"
    return done.stdout


def _round_trip(root: str, tmp_path: Path, **options) -> None:
    """A checkpoint file's way: written under a temporary name, renamed, listed, read back."""
    batch = tmp_path / "batch"
    batch.write_text('v1\n{"batchWatermarkMs":0}\n')
    _shell("-mkdir", "-p", f"{root}/offsets", **options)
    _shell("-put", str(batch), f"{root}/offsets/.0.tmp", **options)
    _shell("-mv", f"{root}/offsets/.0.tmp", f"{root}/offsets/0", **options)
    listing = _shell("-ls", "-R", root, **options)
    assert f"{root}/offsets/0" in listing and ".0.tmp" not in listing
    assert _shell("-cat", f"{root}/offsets/0", **options) == batch.read_text()


def _session_members(leader: int) -> list[int]:
    """The processes still in the session the server was started in (its own: start_new_session)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[3]) == leader:
            found.append(int(stat.parent.name))
    return found


def test_the_hdfs_mini_cluster_takes_a_checkpoint_file_and_stops(tmp_path):
    hdfs = MiniHdfs(tmp_path / "hdfs")
    with hdfs:
        pid = hdfs.process.pid
        assert hdfs.uri == f"hdfs://127.0.0.1:{hdfs.port}"
        _round_trip(f"{hdfs.uri}/checkpoint", tmp_path, settings=hdfs_settings())
    assert hdfs.process is None and _session_members(pid) == []


def test_the_s3_server_takes_a_checkpoint_file_through_s3a_and_stops(tmp_path):
    s3 = MotoS3(tmp_path / "s3")
    with s3:
        pid = s3.process.pid
        bucket = s3.create_bucket("checkpoints")
        _round_trip(f"{bucket}/job", tmp_path, settings=s3a_settings(s3.endpoint), jars=s3a_jars())
    assert s3.process is None and _session_members(pid) == []


def _artifact(jar: Path) -> str:
    return re.sub(r"-\d[\w.-]*\.jar$", "", jar.name)


def test_the_s3a_jars_are_hadoop_aws_for_sparks_hadoop_without_the_sdk_bundle_or_sparks_own_jars():
    spark = {_artifact(j) for j in spark_jars_dir().glob("*.jar")}
    assert f"hadoop-client-api-{HADOOP_VERSION}.jar" in {j.name for j in spark_jars_dir().glob("*.jar")}
    ours = {_artifact(j) for j in s3a_jars()}
    assert {"hadoop-aws", "s3", "s3-transfer-manager"} <= ours and "bundle" not in ours
    assert ours & spark == set()


def test_spark_conf_prefixes_the_hadoop_settings_and_lists_the_jars():
    conf = spark_conf({"fs.s3a.endpoint": "http://127.0.0.1:1"}, [Path("/j/a.jar"), Path("/j/b.jar")])
    assert conf == {"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:1", "spark.jars": "/j/a.jar,/j/b.jar"}
