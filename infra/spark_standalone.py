"""A Spark standalone master and worker on loopback, started from the installed pyspark (for tests
and for trying the job on a cluster: `dirstream run --master spark://127.0.0.1:PORT`)."""
import os
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["StandaloneCluster"]


def _spark_class() -> str:
    import pyspark
    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _wait_port(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.2)
    return False


class StandaloneCluster:
    def __init__(self, workdir: Path, master_port: int, cores: int = 2, memory: str = "2g"):
        self.workdir, self.master_port, self.cores, self.memory = Path(workdir), master_port, cores, memory
        self.procs: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=str(self.workdir / "work"))
        log = open(self.workdir / f"{name}.log", "wb")
        proc = subprocess.Popen([_spark_class(), *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def start(self, timeout: float = 60.0) -> "StandaloneCluster":
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.master_port), "--webui-port", "0")
        if not _wait_port(self.master_port, timeout):
            self.stop()
            raise RuntimeError(f"Spark master did not listen on {self.master_port}; see {self.workdir}/master.log")
        self._spawn("worker", "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                    "--cores", str(self.cores), "--memory", self.memory, "--webui-port", "0")
        deadline = time.monotonic() + timeout
        log = self.workdir / "worker.log"
        while time.monotonic() < deadline:
            if log.exists() and b"Successfully registered with master" in log.read_bytes():
                return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"Spark worker did not register with {self.url}; see {log}")

    def stop(self) -> None:
        import signal
        for proc in reversed(self.procs):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)
        self.procs.clear()
