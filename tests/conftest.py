import os
import sys
from pathlib import Path

import pytest

import streaming

ROOT = Path(__file__).resolve().parents[1]
# the spec texts, kept beside the checkout (not part of the repository); DIRSTREAM_SPEC_DIR names
# another folder
SPEC = Path(os.environ["DIRSTREAM_SPEC_DIR"]) if os.environ.get("DIRSTREAM_SPEC_DIR") else ROOT.parent / "shared" / "spec"
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def spec_dir() -> Path:
    if not SPEC.is_dir():
        pytest.skip(f"spec texts not found at {SPEC}")
    return SPEC


# A test that watches calls inside the operators by replacing a module's or a class's attribute:
# compiled code calls its functions and methods directly, so only the pure-Python sources can be
# watched that way (tests/test_native_build.py runs the sans-IO tests on the other build too).
spies_on_calls = pytest.mark.skipif(streaming.build_choice()[0] == "mypyc",
                                    reason="watches calls that compiled code makes directly")


def vector(name: str) -> bytes:
    return bytes.fromhex((ROOT / "tests" / "vectors" / f"{name}.hex").read_text())


def wire_error(protocol: str, body: bytes):
    """The WireError decoding body raises (fails the test if it decodes)."""
    from streaming.wire import WireError, decode
    with pytest.raises(WireError) as info:
        decode(protocol, body)
    assert info.value.protocol == protocol.upper()
    return info.value


from infra.broker import free_port  # noqa: E402,F401  (the tests import it from here)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """One Apache Kafka broker (KRaft, logs on disk) for the whole test session."""
    from infra.broker import EmbeddedBroker
    b = EmbeddedBroker(tmp_path_factory.mktemp("kafka"), port=free_port())
    b.start()
    _first_idempotent_write(b.bootstrap)
    yield b
    b.stop()


def _first_idempotent_write(bootstrap: str) -> None:
    """A brand-new broker loads its transaction coordinator when the first idempotent producer asks
    for its producer id; seen to take over a minute on a fresh machine (the live capture test, whose
    producer must finish within 60 s of Ctrl-C, failed on it). Taken here, once per session."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "log_level": 0})
    producer.produce("dirstream-warm-up", b"1")
    producer.flush(180)


@pytest.fixture
def broker(kafka_broker):
    """The session's broker with no topics but Kafka's own: each test starts from an empty broker."""
    delete_user_topics(kafka_broker.bootstrap)
    return kafka_broker.bootstrap


def delete_user_topics(bootstrap: str, timeout: float = 60.0) -> None:
    import time
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        topics = [t for t in admin.list_topics(timeout=10).topics if not t.startswith("__")]
        if not topics:
            return
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            try:
                future.result(timeout=30)
            except Exception:          # already being deleted: the next listing tells
                pass
        time.sleep(0.2)
    raise TimeoutError(f"topics on {bootstrap} were not deleted within {timeout:.0f} s")


def consume_all(bootstrap: str, topic: str, expect: int | None = None, idle: float = 2.0, timeout: float = 60.0):
    """Every record of a topic, read by partition assignment (no group join); stops when
    `expect` records arrived, or after `idle` seconds without one."""
    import time
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tests", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 20})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    records, last, deadline = [], time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < deadline and (expect is None or len(records) < expect):
        batch = [m for m in consumer.consume(1000, 0.2) if m.error() is None]
        records.extend(batch)
        if batch:
            last = time.monotonic()
        elif time.monotonic() - last > idle:
            break
    consumer.close()
    return records


def consume_to_end(bootstrap: str, topic: str, timeout: float = 60.0):
    """Every record a topic holds now: read by partition assignment up to each partition's end
    offset at the call (no idle wait; a missing topic holds none)."""
    import time
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tests", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 20})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions or {}
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p, end in ends.items() if end > 0])
        records, deadline = [], time.monotonic() + timeout
        left = {p: end for p, end in ends.items() if end > 0}
        while left:
            assert time.monotonic() < deadline, f"{topic}: records up to {left} not read in {timeout} s"
            for m in consumer.consume(1000, 0.2):
                if m.error() is None:
                    records.append(m)
                    if m.offset() + 1 >= left.get(m.partition(), 0):
                        left.pop(m.partition(), None)
        return records
    finally:
        consumer.close()


def resident_kb(pid: int) -> int:
    """A process's resident set size (VmRSS), kB."""
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def dirstream(*args, timeout: float = 300, **kwargs):
    import shutil
    import subprocess
    import sys
    exe = shutil.which("dirstream", path=str(Path(sys.executable).parent)) or "dirstream"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, **kwargs)


@pytest.fixture(scope="session")
def operator_counts(tmp_path_factory) -> Path:
    """The folder where the session's Spark workers count what the job's operators do
    (streaming/spark/operator_counts.py): on in every test that uses the session's SparkSession."""
    return tmp_path_factory.mktemp("operator-counts")


@pytest.fixture(scope="session")
def spark(operator_counts):
    """One SparkSession for the whole test session (2 local cores), counting its operators' work."""
    from streaming.spark.operator_counts import COUNTS_ENV
    from streaming.spark.pipeline import build_spark
    session = build_spark("local[2]", conf={"spark.sql.shuffle.partitions": "2",
                                             "spark.driver.memory": "2g",
                                             f"spark.executorEnv.{COUNTS_ENV}": str(operator_counts)},
                          local_checkpoint=True)           # as `dirstream run` with a checkpoint folder
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server of the test session's own: a fresh cluster in a temporary directory on a
    free loopback port, trust authentication, stopped at the end (infra/postgres.py). The directory
    is not under pytest's base temp: another pytest session resets that to mode 0700, and the server
    runs as the `postgres` user when the tests run as root."""
    yield from temporary_postgres("dirstream-pg-")


def temporary_postgres(prefix: str):
    """A started TemporaryPostgres for a fixture to yield, stopped and removed afterwards."""
    import shutil
    import tempfile
    from infra.postgres import PostgresError, TemporaryPostgres
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        server = TemporaryPostgres(directory, port=free_port())
        server.start()
    except PostgresError as exc:
        pytest.fail(f"PostgreSQL is needed for this test: {exc}")
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def pg_url(postgres_server):
    """A fresh PostgreSQL database on the session's server."""
    import uuid
    return postgres_server.create_database(f"dirstream_test_{uuid.uuid4().hex[:10]}")


def simulate(bootstrap: str, tmp_path, *args) -> tuple[dict, dict]:
    """Run `dirstream produce simulate`; returns (summary, truth)."""
    import json
    truth = tmp_path / f"truth-{len(list(tmp_path.glob('truth-*')))}.json"
    done = dirstream("produce", "simulate", "--bootstrap", bootstrap, "--truth", str(truth), *args)
    assert done.returncode == 0, done.stderr
    from producers.truth_file import read_truth
    return json.loads(done.stdout), read_truth(str(truth))


# Tests that start a Spark job (in the session's SparkSession, or `dirstream run`, spark-submit and the
# soak as processes) run one after the other on one pytest-xdist worker (`make test` runs two,
# --dist loadgroup): two Spark jobs never share the machine's cores and memory at once. The tests
# that need only a broker or a database (the modules below: producers, captures, topics, the sinks'
# own tests) run one after the other in a second group, beside the Spark tests, as the pure-Python
# tests do; that worker starts its own broker and database. A test that starts Spark belongs in a
# module outside SPARK_FREE_MODULES, or is marked starts_spark (a test that runs `dirstream run` beside
# services of its own module).
SERVICE_FIXTURES = {"spark", "kafka_broker", "broker", "secured", "postgres_server", "pg_url", "own_postgres"}
SPARK_MODULES = {"test_soak.py", "test_distributed.py"}      # they start their own broker and job
SPARK_FREE_MODULES = {"test_capture.py", "test_clock.py", "test_console.py", "test_docs.py", "test_producers.py",
                      "test_sink_outage.py", "test_topics.py", "test_typed_rows.py"}


def serial_group(item) -> str | None:
    """The xdist group an item runs in: "spark", "services" or none (any worker, in parallel)."""
    fixtures = set(getattr(item, "fixturenames", ()))
    if "spark" in fixtures or item.path.name in SPARK_MODULES or item.get_closest_marker("starts_spark"):
        return "spark"
    if SERVICE_FIXTURES & fixtures:
        return "services" if item.path.name in SPARK_FREE_MODULES else "spark"
    return None


# Set by tests/test_native_build.py, which runs the sans-IO tests again on the other build beside
# the session: only the tests of no serial group, so that no second Spark job or service starts.
WITHOUT_SERVICES_ENV = "DIRSTREAM_TESTS_WITHOUT_SERVICES"


@pytest.hookimpl(tryfirst=True)        # before pytest-xdist's own hook reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    if os.environ.get(WITHOUT_SERVICES_ENV):
        grouped = [item for item in items if serial_group(item)]
        config.hook.pytest_deselected(items=grouped)
        items[:] = [item for item in items if not serial_group(item)]
    for item in items:
        group = serial_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_configure(config):
    config.addinivalue_line("markers", "starts_spark: the test runs a Spark job (the serial Spark group)")


def pytest_collection_finish(session):
    """On a worker of `--dist loadgroup`: every grouped test's node id must carry its group, or the
    groups are lost and Spark tests would run side by side (pytest 9.2 keeps node ids that
    pytest-xdist 3.8 can no longer suffix: pytest-dev/pytest-xdist#1386); then each such test fails
    with the reason instead of running."""
    if getattr(session.config.option, "loadgroup", False):          # set on the workers of --dist loadgroup
        lost = [item for item in session.items if serial_group(item) and "@" not in item.nodeid]
        session.config.stash[UNGROUPED] = len(lost)


UNGROUPED = pytest.StashKey[int]()


def pytest_runtest_setup(item):
    lost = item.config.stash.get(UNGROUPED, 0)
    if lost and serial_group(item):
        pytest.fail(f"pytest-xdist did not group {lost} tests that must run one at a time: with pytest "
                    f"{pytest.__version__} its --dist loadgroup does not work (`make setup` installs a pytest that "
                    "it does)", pytrace=False)
