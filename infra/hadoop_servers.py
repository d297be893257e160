"""Throw-away Hadoop file systems for tests of the job's checkpoint on `hdfs://` and `s3a://`, each
server in a process of its own on loopback:

- `MiniHdfs`: an HDFS mini-cluster (one namenode, one datanode) in a JVM, from Hadoop's
  `hadoop-client-minicluster` jar (its `MiniDFSClusterManager` runs until killed);
- `MotoS3`: moto's S3-compatible server (`moto[server]`, a dev dependency), data in memory.

Spark reaches `hdfs://` with the Hadoop client it bundles; `s3a://` needs `s3a_jars()` in `spark.jars`
and the `s3a_settings` of the endpoint (`spark_conf` turns both into Spark settings). `fs_shell` runs
Hadoop's FsShell in a plain JVM over the same jars, to check a server without starting Spark.
"""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from xml.sax.saxutils import escape

from . import maven
from .broker import free_port, java_binary

__all__ = ["AWS_SDK_VERSION", "fetch_minicluster_jars", "fetch_s3a_jars", "fs_shell", "HADOOP_VERSION",
           "HadoopServerError", "hdfs_settings", "MiniHdfs", "MotoS3", "S3_ACCESS_KEY", "S3_REGION",
           "S3_SECRET_KEY", "s3a_jars", "s3a_settings", "spark_conf", "spark_jars_dir"]

HADOOP_VERSION = "3.5.0"           # the Hadoop client pyspark 4.3 bundles (jars/hadoop-client-api-3.5.0.jar)
AWS_SDK_VERSION = "2.35.4"         # the SDK v2 hadoop-aws 3.5.0 is built against (hadoop-project's pom)
S3_REGION = "us-east-1"
S3_ACCESS_KEY = S3_SECRET_KEY = "test"      # moto takes any keys
_HOST = "127.0.0.1"
_SLF4J_SIMPLE = "org.slf4j:slf4j-simple:1.7.36"      # the minicluster's SLF4J is 1.7; without a binding it logs nothing
# Spark's jars folder has these (netty 4.2, SLF4J 2, newer httpclient and commons-codec): the SDK's
# own copies would only shadow or duplicate them.
_ON_SPARKS_CLASSPATH = ("io.netty:*", "org.slf4j:*", "org.apache.httpcomponents:*", "commons-codec:*",
                        "commons-logging:*")


class HadoopServerError(RuntimeError):
    pass


def _fetch(env_var: str, name: str, pom: str, cache: Path | None) -> Path:
    cache = Path(cache or maven.cache_folder(env_var, name))
    try:
        return maven.fetch(cache, pom, HADOOP_VERSION)
    except maven.MavenMissing:
        raise HadoopServerError(f"the Hadoop jars are not in {cache} and Maven (mvn) is not installed to fetch "
                                f"them: install Maven (apt-get install maven) or point {env_var} at them") from None
    except maven.MavenFailed as exc:
        raise HadoopServerError(f"fetching {name} from Maven Central failed:\n{exc}") from None


def fetch_minicluster_jars(cache: Path | None = None) -> Path:
    """hadoop-client-minicluster and what it runs on (hadoop-client-api/runtime), once, into
    $DIRSTREAM_HDFS_JARS or ~/.cache/msmq-dirstream/hadoop-minicluster-<version>."""
    pom = maven.pom("hadoop-minicluster", [
        maven.dependency(f"org.apache.hadoop:hadoop-client-minicluster:{HADOOP_VERSION}"),
        maven.dependency(_SLF4J_SIMPLE)])
    return _fetch("DIRSTREAM_HDFS_JARS", f"hadoop-minicluster-{HADOOP_VERSION}", pom, cache)


def fetch_s3a_jars(cache: Path | None = None) -> Path:
    """hadoop-aws and the AWS SDK modules S3A uses, once, into $DIRSTREAM_S3A_JARS or
    ~/.cache/msmq-dirstream/hadoop-aws-<version>. The SDK's `bundle` hadoop-aws declares is 686 MB:
    `s3` and `s3-transfer-manager` take its place (13 MB); `sts` (assumed roles) is left out."""
    pom = maven.pom("hadoop-aws", [
        maven.dependency(f"org.apache.hadoop:hadoop-aws:{HADOOP_VERSION}", ("software.amazon.awssdk:bundle",)),
        maven.dependency("software.amazon.awssdk:s3", _ON_SPARKS_CLASSPATH),
        maven.dependency("software.amazon.awssdk:s3-transfer-manager", _ON_SPARKS_CLASSPATH)],
        boms=(f"software.amazon.awssdk:bom:{AWS_SDK_VERSION}",))
    return _fetch("DIRSTREAM_S3A_JARS", f"hadoop-aws-{HADOOP_VERSION}", pom, cache)


def s3a_jars(cache: Path | None = None) -> list[Path]:
    """The jars `s3a://` needs beside Spark's own: for `spark.jars` (fetched when missing)."""
    return sorted(fetch_s3a_jars(cache).glob("*.jar"))


def s3a_settings(endpoint: str) -> dict[str, str]:
    """The Hadoop settings that point S3A at a local S3 endpoint (http://host:port), path-style."""
    return {"fs.s3a.endpoint": endpoint,
            "fs.s3a.endpoint.region": S3_REGION,
            "fs.s3a.path.style.access": "true",           # bucket in the path: no DNS name per bucket
            "fs.s3a.connection.ssl.enabled": "false",
            "fs.s3a.access.key": S3_ACCESS_KEY,
            "fs.s3a.secret.key": S3_SECRET_KEY,
            # the keys above only: the default chain would also ask the instance metadata service
            "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            "fs.s3a.attempts.maximum": "3",               # a server that is gone fails in seconds, not minutes
            "fs.s3a.retry.limit": "3"}


def hdfs_settings() -> dict[str, str]:
    """One datanode holds one copy: the client's default of 3 leaves every block under-replicated."""
    return {"dfs.replication": "1"}


def spark_conf(hadoop: dict[str, str], jars: list[Path] = ()) -> dict[str, str]:
    """Spark settings carrying Hadoop settings (`spark.hadoop.` prefix) and extra jars."""
    conf = {f"spark.hadoop.{key}": value for key, value in hadoop.items()}
    if jars:
        conf["spark.jars"] = ",".join(str(j) for j in jars)
    return conf


def spark_jars_dir() -> Path:
    """pyspark's jars folder (its Hadoop client among them), found without importing pyspark."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise HadoopServerError("pyspark is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "jars"


def _core_site(folder: Path, settings: dict[str, str]) -> None:
    """FsShell refuses to run without a core-site.xml on its classpath (it turns quiet mode off)."""
    props = "".join(f"<property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
                    for k, v in settings.items())
    (folder / "core-site.xml").write_text(f'<?xml version="1.0"?>\n<configuration>\n{props}</configuration>\n')


def fs_shell(*args: str, settings: dict[str, str] | None = None, jars: list[Path] = (),
             timeout: float = 120.0) -> subprocess.CompletedProcess:
    """`hadoop fs <args>` in a plain JVM on pyspark's jars plus `jars`, with Hadoop `settings`."""
    with tempfile.TemporaryDirectory(prefix="fs-shell-") as conf:
        _core_site(Path(conf), settings or {})
        classpath = os.pathsep.join([conf, f"{spark_jars_dir()}/*", *map(str, jars)])
        return subprocess.run([java_binary("Hadoop's FsShell"), "-Xmx256m", "-XX:TieredStopAtLevel=1",
                               "-cp", classpath, "org.apache.hadoop.fs.FsShell", *args],
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


class _Server:
    """A server process in a session of its own, its output in `log`."""
    name = "server"

    def __init__(self, directory: Path, port: int | None = None):
        self.directory, self.port = Path(directory), port or free_port(_HOST)
        self.process: subprocess.Popen | None = None

    @property
    def log(self) -> Path:
        return self.directory / f"{self.name}.log"

    def _spawn(self, command: list[str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)

    def _wait(self, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise HadoopServerError(f"{self.name} exited with status {self.process.returncode}; see {self.log}")
            if ready():
                return
            time.sleep(0.1)
        self.stop()
        raise HadoopServerError(f"{self.name} was not ready within {timeout:.0f} s; see {self.log}")

    def stop(self, timeout: float = 30.0) -> bool:
        """True if a running server was stopped (SIGTERM to its session, SIGKILL after `timeout`)."""
        if self.process is None or self.process.poll() is not None:
            self.process = None
            return False
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None
        return True

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class MiniHdfs(_Server):
    """An HDFS mini-cluster whose data lives under `directory`: formatted on the first start, kept
    (with the port, so the same URI) when it is stopped and started again."""
    name = "minicluster"

    def __init__(self, directory: Path, port: int | None = None, heap: str = "512m"):
        super().__init__(directory, port)
        self.heap = heap

    @property
    def uri(self) -> str:
        return f"hdfs://{_HOST}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    def start(self, timeout: float = 120.0) -> str:
        """Starts the namenode and datanode; returns the namenode's URI once both are up."""
        details = self.directory / "details.json"
        details.unlink(missing_ok=True)
        self._spawn(self._command(details))
        self._wait(lambda: self._written_port(details) == self.port, timeout)
        return self.uri

    def _command(self, details: Path) -> list[str]:
        formatted = (self.data_dir / "name-0-1" / "current" / "VERSION").exists()
        return [java_binary("the HDFS mini-cluster"), f"-Xmx{self.heap}", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", f"{fetch_minicluster_jars()}/*", "org.apache.hadoop.test.MiniDFSClusterManager",
                *(() if formatted else ("-format",)), "-nnport", str(self.port), "-datanodes", "1",
                "-writeDetails", str(details),
                "-D", f"hdfs.minidfs.basedir={self.data_dir.resolve()}",
                "-D", "dfs.replication=1",
                "-D", "dfs.namenode.safemode.extension=0"]      # a restart leaves safe mode at once

    @staticmethod
    def _written_port(details: Path) -> int | None:
        """The namenode port the manager writes once the cluster is active (None before, or half-written)."""
        try:
            return json.loads(details.read_text())["namenode_port"]
        except (OSError, ValueError, KeyError):
            return None


class MotoS3(_Server):
    """moto's S3-compatible server; its buckets and objects live in its memory (gone when it stops)."""
    name = "moto"

    @property
    def endpoint(self) -> str:
        return f"http://{_HOST}:{self.port}"

    def start(self, timeout: float = 60.0) -> str:
        """Starts the server; returns its endpoint once it answers HTTP."""
        self._spawn([sys.executable, "-m", "moto.server", "-H", _HOST, "-p", str(self.port)])
        self._wait(self._answers, timeout)
        return self.endpoint

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1.0):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def create_bucket(self, name: str) -> str:
        """Creates a bucket; returns its s3a:// URI."""
        import boto3
        boto3.client("s3", endpoint_url=self.endpoint, region_name=S3_REGION, aws_access_key_id=S3_ACCESS_KEY,
                     aws_secret_access_key=S3_SECRET_KEY).create_bucket(Bucket=name)
        return f"s3a://{name}"
