"""Producer scripts against the real embedded broker: simulate, replay, respond, clients, failures."""
import base64
import json
import signal
import struct
import subprocess
import time

import pytest

from conftest import consume_all, dirstream, free_port, vector

from infra.broker import KAFKA_VERSION
from producers.kafka import OUTBOUND_TOPIC, TOPICS, KafkaSettings
from producers.truth_file import read_truth
from producers.publish import publish_envelope
from producers.kafka import ConfluentPublisher
from streaming.wire.envelope import decode_envelope, make_envelope
from streaming.wire import WireError, decode, encode, mqdsrp
from streaming.wire.guid import GUID_NULL
from streaming.wire.seqnum import MAX_SEQ_NUMBER, seq_from_hex


def consume_envelopes(bootstrap, protocols=("mqdsrp", "mqcn", "mqsd"), expect=None):
    out = []
    for p in protocols:
        for r in consume_all(bootstrap, TOPICS[p], expect=None if expect is None else expect.get(p)):
            out.append((p, r))
    return out


def test_broker_commands(tmp_path):
    port, state = str(free_port()), str(tmp_path / "state")
    started = dirstream("broker", "start", "--port", port, "--state-dir", state)
    try:
        assert started.returncode == 0 and "answering" in started.stdout
        status = dirstream("broker", "status", "--port", port, "--state-dir", state)
        assert status.returncode == 0 and f"127.0.0.1:{port}" in status.stdout
        assert (tmp_path / "state" / "broker.log").exists()
    finally:
        stopped = dirstream("broker", "stop", "--state-dir", state)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    after = dirstream("broker", "status", "--port", port, "--state-dir", state)
    assert after.returncode == 1 and "not running" in after.stdout


def test_broker_start_says_what_is_missing(tmp_path):
    """Without Java, or without the Kafka jars and Maven to fetch them, `broker start` says so (exit 1)."""
    import os
    import shutil
    from pathlib import Path
    port, state = str(free_port()), str(tmp_path / "state")
    no_java = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"} | {"PATH": str(tmp_path)}
    done = dirstream("broker", "start", "--port", port, "--state-dir", state, env=no_java)
    assert done.returncode == 1 and "Java (17 or later) is needed" in done.stderr
    java_home = Path(os.path.realpath(shutil.which("java"))).parents[1]
    no_maven = no_java | {"JAVA_HOME": str(java_home), "DIRSTREAM_KAFKA_JARS": str(tmp_path / "no-jars")}
    done = dirstream("broker", "start", "--port", port, "--state-dir", state, env=no_maven)
    assert done.returncode == 1 and "Maven (mvn) is not installed" in done.stderr
    assert f"kafka_2.13-{KAFKA_VERSION}.jar" in done.stderr


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_simulate_then_consume_back(broker, tmp_path, client):
    truth_file = tmp_path / "truth.json"
    done = dirstream("produce", "simulate", "--bootstrap", broker, "--client", client, "--seed", "3",
                     "--count", "2000", "--truth", str(truth_file), "--partitions", "3")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    truth = read_truth(str(truth_file))
    assert summary["published"] == summary["delivered"] == sum(truth["counts"].values())
    records = consume_envelopes(broker, expect=summary["per_protocol"])
    assert len(records) == summary["published"]
    for protocol, record in records:
        env = decode_envelope(record.value())
        assert env["protocol"] == protocol.upper()
        assert record.key().decode() == env["destination_machine"]
        assert dict(record.headers())["protocol"] == protocol.upper().encode()
        decode(protocol, env["body"])


def test_fault_run_dead_letters_match(broker, tmp_path):
    truth_file = tmp_path / "truth.json"
    done = dirstream("produce", "simulate", "--bootstrap", broker, "--seed", "9", "--count", "1500",
                     "--corrupt", "0.03", "--duplicate", "0.02", "--reorder", "0.2", "--truth", str(truth_file))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    failing = set()
    for protocol, record in consume_envelopes(broker, expect=summary["per_protocol"]):
        env = decode_envelope(record.value())
        try:
            decode(protocol, env["body"])
        except WireError:
            failing.add(env["message_id"])
    expected = {d["message_id"] for d in read_truth(str(truth_file))["dead_letters"]}
    assert expected and failing == expected


def test_unreachable_broker_fails_fast_and_clearly():
    done = dirstream("produce", "simulate", "--bootstrap", f"127.0.0.1:{free_port()}", "--count", "5")
    assert done.returncode == 1 and "cannot reach Kafka" in done.stderr
    assert " within " not in done.stderr, done.stderr       # refused at once, not waited for until a deadline
    assert "Traceback" not in done.stderr


def test_bad_kafka_option_is_a_usage_error(broker):
    done = dirstream("produce", "simulate", "--bootstrap", broker, "--kafka-option", "novalue")
    assert done.returncode == 2 and "key=value" in done.stderr


def test_ctrl_c_flushes_everything_sent(broker, tmp_path):
    # SIGINT once this producer itself reports 100 messages sent (its progress lines on standard
    # error), not once the broker holds 100 records: a SIGINT while it still starts up stops it
    # before it publishes, and whatever else writes to the broker cannot hasten it
    import re
    errors = tmp_path / "stderr.txt"
    with errors.open("wb") as err:
        # SIGINT's default action restored: a suite started in the background of a shell inherits it ignored
        proc = subprocess.Popen([*_exe(), "produce", "simulate", "--bootstrap", broker, "--rate", "500",
                                 "--duration", "60"], stdout=subprocess.PIPE, stderr=err,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def stderr() -> str:
        return errors.read_text("utf-8", "replace")

    def sent() -> int:
        counts = re.findall(r"sent (\d+) messages", stderr())
        return int(counts[-1]) if counts else 0
    deadline = time.monotonic() + 300                 # only a hang takes this long
    while sent() <= 100:                              # a loaded machine starts it late
        assert proc.poll() is None and time.monotonic() < deadline, stderr()[-3000:] or "no progress"
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=600)
    assert out.strip(), f"no summary (exit {proc.returncode}); standard error:\n{stderr()[-3000:]}"
    summary = json.loads(out)
    assert summary["interrupted"] and summary["published"] > 100
    assert summary["delivered"] == summary["published"]
    assert len(consume_envelopes(broker, expect=summary["per_protocol"])) == summary["published"]


class _InterruptedOnReturn(ConfluentPublisher):
    """A Ctrl-C that arrives while the client's produce call runs: CPython raises it as the call
    returns, the message already in the client's hands."""

    def __init__(self, settings, at: int):
        super().__init__(settings)
        self.at = at

    def send(self, topic, key, value, headers):
        super().send(topic, key, value, headers)
        if self.sent == self.at:
            signal.raise_signal(signal.SIGINT)


def test_a_ctrl_c_as_the_client_takes_a_message_leaves_it_counted(broker):
    import uuid
    from producers.kafka import ensure_topics
    from producers.publish import publish_all
    topic = f"ctrl-c-{uuid.uuid4().hex[:8]}"
    ensure_topics(KafkaSettings(broker), {topic: 1})
    items = ((p, "pec0", make_envelope(p, bytes([n % 256]) * 8, source_machine="psc1", destination_machine="pec0",
                                       destination_queue="q", sent_time=n)) for n, p in
             enumerate(["mqdsrp"] * 50))
    pub = _InterruptedOnReturn(KafkaSettings(broker), at=20)
    # Python's own SIGINT handler, as in a command's process (a test before may have set another here)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        stats = publish_all(pub, items, progress=None, topics={"mqdsrp": topic})
    finally:
        signal.signal(signal.SIGINT, previous)
    pub.close()
    assert stats.interrupted and pub.delivered == pub.sent
    assert stats.total == pub.sent == len(consume_all(broker, topic, expect=stats.total + 1)) == 20


def _exe():
    import shutil
    import sys
    from pathlib import Path
    return [shutil.which("dirstream", path=str(Path(sys.executable).parent))]


# ---------------------------------------------------------------------------- replay
def _pcap(frames: list[bytes]) -> bytes:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for i, frame in enumerate(frames):
        out += struct.pack("<IIII", 1_700_000_000 + i, 0, len(frame), len(frame)) + frame
    return out


def _pcapng(frames: list[bytes]) -> bytes:
    def block(kind, body):
        body += b"\x00" * (-len(body) % 4)
        return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)
    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(1, struct.pack("<HHI", 1, 0, 65535))
    for i, frame in enumerate(frames):
        ts = (1_700_000_000 + i) * 1_000_000
        out += block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(frame), len(frame)) + frame)
    return out


def _udp_frame(payload: bytes, sport=1801, dport=1801, src=(10, 0, 0, 5), dst=(10, 0, 255, 255)) -> bytes:
    udp = struct.pack(">HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, bytes(src), bytes(dst)) + udp
    return b"\xff" * 6 + b"\x02" * 6 + b"\x08\x00" + ip


def test_replay_every_format(broker, tmp_path):
    request, local, remote = vector("mqsd_4_request"), vector("mqsd_4_reply_local"), vector("mqsd_4_reply_remote")
    env = make_envelope("mqdsrp", b"\x00" * 3, source_machine="a", destination_machine="psc1",
                        destination_queue="q", sent_time=1)
    (tmp_path / "msgs.jsonl").write_text("\n".join([
        json.dumps({"protocol": "MQSD", "body": base64.b64encode(request).decode(), "destination_machine": "pec0"}),
        "{not json",
        json.dumps({"protocol": "MQDSRP", "body": base64.b64encode(env["body"]).decode()}),
        json.dumps({"protocol": "MQXX", "body": ""}),
    ]) + "\n")
    (tmp_path / "bodies.hex").write_text(f"{local.hex()}\nzz-not-hex\n# a comment\n{remote.hex(' ')}\n")
    raw_dir = tmp_path / "raw"
    raw_dir.mkdir()
    (raw_dir / "a.bin").write_bytes(request)
    (raw_dir / "b.bin").write_bytes(local)
    frames = [_udp_frame(request), _udp_frame(remote, sport=40000), _udp_frame(b"dns", sport=53, dport=53),
              b"\x00" * 10]
    (tmp_path / "cap.pcap").write_bytes(_pcap(frames))
    (tmp_path / "cap.pcapng").write_bytes(_pcapng(frames[:2]))

    done = dirstream("produce", "replay", "--bootstrap", broker, str(tmp_path / "msgs.jsonl"))
    assert done.returncode == 1 and json.loads(done.stdout)["published"] == 2
    assert "msgs.jsonl:2: not JSON" in done.stderr and "msgs.jsonl:4: protocol must be" in done.stderr

    done = dirstream("produce", "replay", "--bootstrap", broker, "--protocol", "mqsd", str(tmp_path / "bodies.hex"),
                     str(raw_dir), str(tmp_path / "cap.pcap"), str(tmp_path / "cap.pcapng"))
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert result == {"published": 2 + 2 + 2 + 2, "skipped": 2, "rejected_packets_published": 0,
                      "ignored_capture_packets": 1, "msmq_not_published": {}}
    assert "bodies.hex:2: not hexadecimal" in done.stderr and "cap.pcap:packet 4" in done.stderr

    bodies = sorted(decode_envelope(r.value())["body"] for r in consume_all(broker, TOPICS["mqsd"], expect=9))
    assert bodies == sorted([request, local, remote, request, local, request, remote, request, remote])
    captured = [decode_envelope(r.value()) for r in consume_all(broker, TOPICS["mqsd"], expect=9)]
    from_capture = [e for e in captured if e["source_machine"] == "10.0.0.5"]
    assert len(from_capture) == 4 and all(e["destination_machine"] == "10.0.255.255" for e in from_capture)
    assert {int(e["sent_time"].timestamp()) for e in from_capture} == {1_700_000_000, 1_700_000_001}


def test_replay_without_problems_exits_0(broker, tmp_path):
    (tmp_path / "ok.hex").write_text(vector("mqsd_4_request").hex() + "\n")
    done = dirstream("produce", "replay", "--bootstrap", broker, "--protocol", "mqsd", str(tmp_path / "ok.hex"))
    assert done.returncode == 0 and json.loads(done.stdout)["published"] == 1


# ---------------------------------------------------------------------------- responder
def test_responder_answers_sync_requests_over_kafka(broker, tmp_path):
    truth_file = tmp_path / "truth.json"
    assert dirstream("produce", "simulate", "--bootstrap", broker, "--seed", "4", "--count", "1500",
                     "--truth", str(truth_file)).returncode == 0
    truth = read_truth(str(truth_file))
    site = truth["servers"]["psc1"]["site_id"]
    purged = seq_from_hex(truth["partitions"][GUID_NULL]["purged_seq_number"])      # known: no AlreadyPurged
    request = mqdsrp.new_message(site, mqdsrp.SyncRequestMessage(GUID_NULL, 0, MAX_SEQ_NUMBER, purged, 0, 1, "psc1"))
    pub = ConfluentPublisher(KafkaSettings(broker))
    from producers.kafka import ensure_topics
    ensure_topics(KafkaSettings(broker), {OUTBOUND_TOPIC: 1})
    publish_envelope(pub, "mqdsrp", "pec0", make_envelope(
        "mqdsrp", encode("mqdsrp", request), source_machine="psc1", destination_machine="pec0",
        destination_queue="q", sent_time=1), {"mqdsrp": OUTBOUND_TOPIC})
    pub.close()
    done = dirstream("produce", "respond", "--bootstrap", broker, "--truth", str(truth_file), "--idle-exit", "3")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sync_replies"] >= 1
    # The simulator sends no SyncReply: every one on the topic is the responder's (partitions
    # interleave, so they are found by content, not by position).
    records = consume_all(broker, TOPICS["mqdsrp"])
    replies = [decode("mqdsrp", decode_envelope(r.value())["body"]).sync_reply for r in records
               if r.key() == b"psc1"]
    replies = sorted((r for r in replies if r is not None), key=lambda r: r.sync_reply_header.to_seq_number)
    changes = [c for r in replies for c in r.directory_changes]
    enterprise = truth["partitions"][GUID_NULL]
    assert {c.guid_identifier for c in changes if c.command == mqdsrp.CMD_SYNC} == set(enterprise["objects"])
    assert replies[-1].sync_reply_header.to_seq_number == seq_from_hex(enterprise["last_seq_number"])


def test_both_clients_publish_idempotently_and_retry_as_long(broker):
    """The same guarantees whichever client publishes (docs/running.md): idempotence, acks from
    every in-sync replica, each record retried for up to the same delivery timeout."""
    from producers.kafka import DELIVERY_TIMEOUT_MS, KafkaPythonPublisher, KafkaSettings
    pub = KafkaPythonPublisher(KafkaSettings(broker))
    try:
        config = pub.producer.config
        assert config["enable_idempotence"] is True and config["acks"] in ("all", -1)
        assert config["delivery_timeout_ms"] == DELIVERY_TIMEOUT_MS
    finally:
        pub.close(10)


def test_a_recording_replayed_at_its_pace_is_redated_to_now_and_handed_over_when_due():
    """produce replay --wall-clock: the first message at once, each later one when as much wall time
    has passed as the recording says, every time moved by the same amount (a fake clock)."""
    from producers.publish import at_recorded_pace
    now = {"s": 2_000_000.0}
    slept = []

    def sleep(s):
        slept.append(round(s, 3))
        now["s"] += s
    recorded = [("mqcn", "qm1", {"sent_time": 995, "arrival_time": 1_000}),
                ("mqcn", "qm1", {"sent_time": 1_200, "arrival_time": 1_250}),
                ("mqqb-rejected", "psc1", {"arrival_time": 1_250}),
                ("mqdsrp", "psc2", {"sent_time": 3_000, "arrival_time": 4_000})]
    out = list(at_recorded_pace(recorded, clock=lambda: now["s"], sleep=sleep))
    start = 2_000_000_000 - 1_000
    assert [f["arrival_time"] for _p, _k, f in out] == [start + 1_000, start + 1_250, start + 1_250, start + 4_000]
    assert [f.get("sent_time") for _p, _k, f in out] == [start + 995, start + 1_200, None, start + 3_000]
    assert slept == [0.25, 2.75] and recorded[0][2]["arrival_time"] == 1_000       # the recording untouched
