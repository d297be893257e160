"""The embedded broker: Apache Kafka in KRaft mode, one combined broker and controller on loopback.

The jars come from Maven Central (`org.apache.kafka:kafka_2.13` and its dependencies), copied
once into a cache by `mvn dependency:copy-dependencies` (`fetch_jars`; `make setup` does it).
`start` formats the log directory under the state dir on first use, launches the JVM with a capped
heap, waits until the broker answers Kafka metadata requests, and records its pid; `stop` ends it
(SIGTERM, a controlled shutdown, then SIGKILL); `status` says whether it runs and answers. The logs
live on disk, so a restarted broker keeps its topics and records. `security="sasl_ssl"` gives it a
SASL_SSL listener instead of PLAINTEXT (infra/broker_security.py); the state directory remembers
the choice made when it was formatted. `acls=True` (with sasl_ssl) also runs KRaft's
StandardAuthorizer: only the admin user may do anything until ACLs are granted (`add_user`, `grant`).
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from base64 import urlsafe_b64encode
from dataclasses import dataclass
from pathlib import Path

from . import maven

__all__ = ["answers", "BrokerError", "BrokerStatus", "DEFAULT_BOOTSTRAP", "DEFAULT_HEAP", "DEFAULT_HOST",
           "DEFAULT_PORT", "default_state_dir", "EmbeddedBroker", "fetch_jars", "free_port", "jar_cache",
           "java_binary", "java_major", "JAVA_MINIMUM", "KAFKA_VERSION"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 19092
DEFAULT_BOOTSTRAP = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
DEFAULT_HEAP = "768m"
KAFKA_VERSION = "4.4.0"
# Kafka 4 logs through SLF4J 1.7; this binding routes it to log4j2, configured by `_LOG4J2`.
_LOG4J2_BINDING = ("org.apache.logging.log4j", "log4j-slf4j-impl", "2.25.5")

_LOG4J2 = """status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = warn
logger.apache.name = org.apache.kafka
logger.apache.level = warn
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
"""


class BrokerError(RuntimeError):
    pass


def default_state_dir() -> Path:
    return Path(os.environ.get("DIRSTREAM_STATE", "var")) / "broker"


def jar_cache() -> Path:
    """Where the Kafka jars are kept ($DIRSTREAM_KAFKA_JARS, else ~/.cache/msmq-dirstream/kafka-<version>)."""
    return maven.cache_folder("DIRSTREAM_KAFKA_JARS", f"kafka-{KAFKA_VERSION}")


def fetch_jars(cache: Path | None = None) -> Path:
    """The Kafka jars, fetched once from Maven Central with Maven; later calls return the cache."""
    cache = Path(cache or jar_cache())
    pom = maven.pom("embedded-kafka", [maven.dependency(f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}"),
                                       maven.dependency(":".join(_LOG4J2_BINDING))])
    try:
        return maven.fetch(cache, pom, KAFKA_VERSION)
    except maven.MavenMissing:
        raise BrokerError(f"the Kafka jars are not in {cache} and Maven (mvn) is not installed to fetch them: "
                          "install Maven (apt-get install maven) or point DIRSTREAM_KAFKA_JARS at a folder "
                          f"holding kafka_2.13-{KAFKA_VERSION}.jar and its dependencies") from None
    except maven.MavenFailed as exc:
        raise BrokerError(f"fetching Kafka {KAFKA_VERSION} from Maven Central failed:\n{exc}") from None


JAVA_MINIMUM = 17          # Spark 4 and Kafka 4's broker (Debian's default-jre-headless: 17 on 12, 21 on 13)


def java_binary(needed_for: str = "the embedded Kafka broker") -> str:
    """The Java that JAVA_HOME names, else `java` on the PATH: 17 or later, else a BrokerError."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise BrokerError(f"Java (17 or later) is needed for {needed_for} and was not found: "
                          "install it (apt-get install default-jre-headless) or set JAVA_HOME")
    major = java_major(java)
    if major is not None and major < JAVA_MINIMUM:
        raise BrokerError(f"Java (17 or later) is needed for {needed_for}; {java} is Java {major}: "
                          "install a later one (apt-get install default-jre-headless) or set JAVA_HOME to it")
    return java


def java_major(java: str) -> int | None:
    """The major version `java -version` reports (1.8 is 8), None if it says none."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if not found:
        return None
    major = int(found.group(1))
    return int(found.group(2)) if major == 1 and found.group(2) else major


@dataclass
class BrokerStatus:
    running: bool
    answering: bool
    pid: int | None
    bootstrap: str | None
    log: Path
    client_properties: Path | None = None        # a secured broker's --kafka-config for clients

    def describe(self) -> str:
        if not self.running:
            return f"broker not running (state in {self.log.parent})"
        state = "answering" if self.answering else "NOT answering"
        text = (f"broker running: Apache Kafka {KAFKA_VERSION} (KRaft), pid {self.pid}, {self.bootstrap}, {state}; "
                f"logs in {self.log.parent / 'logs'}; log {self.log}")
        if self.client_properties is not None:
            text += (f"\nSASL_SSL (SCRAM-SHA-512, user dirstream, CA {self.client_properties.parent / 'tls' / 'ca.pem'}):"
                     f" clients take --kafka-config {self.client_properties}")
        return text


class EmbeddedBroker:
    def __init__(self, state_dir: Path | None = None, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 heap: str = DEFAULT_HEAP, security: str | None = None, acls: bool = False):
        """security: plaintext or sasl_ssl; None: as the state directory was formatted (else plaintext).
        acls: enforce Kafka's ACLs (StandardAuthorizer); needs sasl_ssl, whose users they name. Not kept
        in the state directory: a start without it runs without the authorizer."""
        self.state_dir = Path(state_dir or default_state_dir())
        self.host, self.port, self.heap = host, port, heap
        recorded = self._security_file.read_text().strip() if self._security_file.exists() else None
        if security and recorded and security != recorded:
            raise BrokerError(f"the broker in {self.state_dir} was formatted with --security {recorded}; "
                              f"use another --state-dir for {security}")
        self.security = security or recorded or "plaintext"
        if acls and not self.secured:
            raise BrokerError("ACLs need the sasl_ssl listener: its users are what they grant to")
        self.acls = acls

    @property
    def _security_file(self) -> Path:
        return self.state_dir / "security"

    @property
    def secured(self) -> bool:
        return self.security == "sasl_ssl"

    @property
    def client_properties(self) -> Path:
        return self.state_dir / "client.properties"

    def client_options(self) -> dict[str, str]:
        """What a client of this broker needs besides bootstrap.servers."""
        if not self.secured:
            return {}
        from .broker_security import read_client_properties
        return read_client_properties(self.client_properties)

    def admin_options(self) -> dict[str, str]:
        """A client of this secured broker as its admin user (a super user under the authorizer)."""
        from .broker_security import ADMIN_USER
        return {**self.client_options(), "sasl.username": ADMIN_USER, "sasl.password": self._secrets().admin_password}

    def add_user(self, name: str, password: str, timeout: float = 30.0) -> dict[str, str]:
        """A SCRAM user of the running secured broker (the admin's own request), once the broker takes
        its credentials; returns the user's client options."""
        from .broker_security import add_scram_user
        add_scram_user(self.bootstrap, self.admin_options(), name, password)
        options = {**self.client_options(), "sasl.username": name, "sasl.password": password}
        deadline = time.monotonic() + timeout
        while not answers(self.bootstrap, timeout=2.0, options=options):
            if time.monotonic() > deadline:
                raise BrokerError(f"the broker did not take user {name}'s credentials within {timeout:.0f} s")
            time.sleep(0.1)
        return options

    def grant(self, user: str, acls) -> None:
        """Allow `user` the (operation, resource type, name, pattern) ACLs (broker_security.grant)."""
        from .broker_security import grant
        grant(self.bootstrap, self.admin_options(), user, acls)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "broker.log"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    def _recorded(self) -> tuple[int | None, str | None]:
        try:
            pid_text, bootstrap = self.pid_file.read_text().split()
            return int(pid_text), bootstrap
        except (OSError, ValueError):
            return None, None

    def status(self) -> BrokerStatus:
        pid, bootstrap = self._recorded()
        running = pid is not None and _alive(pid)
        answering = running and answers(bootstrap, timeout=2.0, options=self._options_if_ready())
        return BrokerStatus(running, answering, pid if running else None, bootstrap if running else None,
                            self.log_file, self.client_properties if self.secured else None)

    def _options_if_ready(self) -> dict[str, str]:
        return self.client_options() if not self.secured or self.client_properties.exists() else {}

    def start(self, timeout: float = 90.0) -> BrokerStatus:
        current = self.status()
        if current.running:
            if current.bootstrap != self.bootstrap:
                raise BrokerError(f"a broker from {self.state_dir} already runs on {current.bootstrap}")
            return current
        if _port_in_use(self.host, self.port):
            raise BrokerError(f"port {self.port} on {self.host} is already in use; choose another with --port")
        java, jars = java_binary(), fetch_jars()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        config = self._write_config(java)
        classpath = f"{jars}/*"
        if not (self.log_dir / "meta.properties").exists():
            self._format(java, classpath, config)
            self._security_file.write_text(self.security + "\n")
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                # The heap is fixed (-Xms = -Xmx) and touched whole at start (AlwaysPreTouch): otherwise
                # its pages become resident one G1 region at a time over the first hour, which reads as
                # growth of the broker's memory (the soak).
                [java, f"-Xmx{self.heap}", f"-Xms{self.heap}", "-XX:+AlwaysPreTouch", "-XX:+UseG1GC",
                 "-Djava.awt.headless=true",
                 f"-Dlog4j2.configurationFile={self.state_dir / 'log4j2.properties'}",
                 "-cp", classpath, "kafka.Kafka", str(config)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid_file.write_text(f"{proc.pid} {self.bootstrap}\n")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise BrokerError(f"broker exited with status {proc.returncode}; see {self.log_file}")
            if answers(self.bootstrap, timeout=1.0, options=self.client_options()):
                return self.status()
            time.sleep(0.2)
        self.stop()
        raise BrokerError(f"broker did not answer on {self.bootstrap} within {timeout:.0f} s; see {self.log_file}")

    def _listeners(self, controller: str, java: str) -> list[str]:
        if not self.secured:
            return [f"listeners=PLAINTEXT://{self.bootstrap},CONTROLLER://{controller}",
                    f"advertised.listeners=PLAINTEXT://{self.bootstrap}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"]
        from . import broker_security as sec
        tls = self.state_dir / "tls"
        secret = self._secrets()
        try:
            sec.ensure_tls(tls, self.host, java, secret.store_password)
        except sec.SecurityError as exc:
            raise BrokerError(str(exc)) from None
        sec.write_client_properties(self.client_properties, sec.client_options(tls, secret))
        return sec.listener_config(self.bootstrap, controller, tls, secret) + (sec.AUTHORIZER if self.acls else [])

    def _secrets(self):
        from .broker_security import Secrets
        return Secrets.load_or_create(self.state_dir / "secrets.properties")

    def _write_config(self, java: str) -> Path:
        """server.properties for a single node; the controller listens on a free port of its own.
        Mode 0600: a secured broker's holds the keystore and admin passwords."""
        controller = f"{self.host}:{free_port(self.host)}"
        (self.state_dir / "log4j2.properties").write_text(_LOG4J2)
        config = self.state_dir / "server.properties"
        from .broker_security import write_private
        write_private(config, "\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{controller}",
            *self._listeners(controller, java),
            f"log.dirs={self.log_dir.resolve()}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=4",
            "transaction.state.log.num.partitions=4",      # idempotent producers wait for its coordinator
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "message.max.bytes=16777216",
            "", ]))
        return config

    def _format(self, java: str, classpath: str, config: Path) -> None:
        cluster_id = urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        users = []
        if self.secured:
            from .broker_security import scram_format_arguments
            users = scram_format_arguments(self._secrets())
        done = subprocess.run([java, "-Xmx256m", f"-Dlog4j2.configurationFile={self.state_dir / 'log4j2.properties'}",
                               "-cp", classpath, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                               "-c", str(config), *users], capture_output=True, text=True)
        if done.returncode != 0:
            raise BrokerError(f"formatting {self.log_dir} failed: {(done.stdout + done.stderr).strip()[-2000:]}")

    def stop(self, timeout: float = 30.0) -> bool:
        """True if a running broker was stopped (a controlled shutdown, SIGKILL after `timeout`)."""
        pid, _ = self._recorded()
        if pid is None or not _alive(pid):
            self.pid_file.unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)
        return True


def answers(bootstrap: str | None, timeout: float = 2.0, options: dict | None = None) -> bool:
    """Whether a Kafka broker at bootstrap answers a metadata request (with the client `options`)."""
    if not bootstrap:
        return False
    host, _, port = bootstrap.rpartition(":")
    if not _port_in_use(host, int(port)):
        return False
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    try:
        meta = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **(options or {})}
                           ).list_topics(timeout=timeout)
        return bool(meta.brokers)
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


def free_port(host: str = DEFAULT_HOST) -> int:
    """A TCP port nothing listens on now (the controller's, and the tests' brokers and servers)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
