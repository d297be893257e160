import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT.parent / "shared" / "spec"
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def spec_dir() -> Path:
    if not SPEC.is_dir():
        pytest.skip(f"spec texts not found at {SPEC}")
    return SPEC


def vector(name: str) -> bytes:
    return bytes.fromhex((ROOT / "tests" / "vectors" / f"{name}.hex").read_text())


def wire_error(protocol: str, body: bytes):
    """The WireError decoding body raises (fails the test if it decodes)."""
    from streaming.wire import WireError, decode
    with pytest.raises(WireError) as info:
        decode(protocol, body)
    assert info.value.protocol == protocol.upper()
    return info.value


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def broker(tmp_path):
    """A fresh embedded broker (tansu, memory storage) on its own loopback port."""
    from infra.broker import EmbeddedBroker
    b = EmbeddedBroker(tmp_path / "broker", port=free_port())
    b.start()
    yield b.bootstrap
    b.stop()


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


def dirstream(*args, timeout: float = 300, **kwargs):
    import shutil
    import subprocess
    import sys
    exe = shutil.which("dirstream", path=str(Path(sys.executable).parent)) or "dirstream"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, **kwargs)
