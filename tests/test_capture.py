"""MSMQ traffic from packet captures (MQQB on TCP 1801, MQSD on UDP 1801).

The simulator's traffic written as a capture (TCP segments cut, shuffled, retransmitted, several
messages per segment) reads back as the same envelopes; captures cut, mutated or filled with
garbage only ever give reported problems; other MSMQ traffic is counted, not published.
"""
import os
import random
import re
import uuid

import pytest

from producers.capture import Replay, classify, read_capture
from producers.capture_writer import CaptureWriter
from producers.simulator import Faults, Simulator
from streaming.wire import mqqb
from streaming.wire.topics import CAPTURE_KEY

FAULTS = Faults(reorder=0.1, duplicate=0.05, drop=0.02, corrupt=0.02, unauthenticated=0.05, nack=0.02)
# what the capture carries as it is; machine names come from the traffic (see _expected)


def simulated(seed: int, count: int):
    sim = Simulator(seed, faults=FAULTS, burst_rate=0.01)
    return sim, list(sim.messages(count))


def write(path, messages, seed=0, **transport) -> CaptureWriter:
    writer = CaptureWriter(str(path), seed=seed, **transport)
    for m in messages:
        writer.write(m.protocol, m.envelope)
    writer.close()
    return writer


def _expected(m, ids, writer, named) -> dict:
    """The envelope the simulator published, as a capture can tell it: machines that receive nothing
    addressed by name (DIRECT=OS:) are known by their address, queue managers by their GUID."""
    env = dict(m.envelope)
    if m.protocol != "mqsd" and env["source_machine"] not in named:
        env["source_machine"] = writer.addresses[env["source_machine"]]
    env["message_id"] = ids.get(env["message_id"], env["message_id"]) if m.protocol != "mqsd" else None
    if m.protocol == "mqcn":       # a queue manager is named by its GUID: MQCN traffic never names it
        env["destination_machine"] = classify(env["destination_queue"])[2]
    if m.protocol != "mqsd":
        env["sent_time"] = env["sent_time"] // 1000 * 1000          # UserHeader.SentTime is in seconds
    else:
        env["sent_time"] = env["arrival_time"]                        # a datagram has no sent time: captured
    return env


def _comparable(env: dict) -> tuple:
    from streaming.wire.envelope import millis
    return tuple(millis(v) if k in ("sent_time", "arrival_time") else v
                 for k, v in sorted(env.items()) if k not in ("protocol", CAPTURE_KEY))


@pytest.mark.parametrize("suffix", [".pcap", ".pcapng"])
def test_simulated_traffic_reads_back_from_a_capture_as_it_was_published(tmp_path, suffix):
    sim, messages = simulated(seed=3, count=400)
    writer = write(tmp_path / f"sim{suffix}", messages, seed=3)
    out = Replay()
    read_capture(tmp_path / f"sim{suffix}", out)
    assert out.problems == [] and out.ignored == 0
    got = sorted(_comparable(env) for _, _, env in out.items)
    named = {m.envelope["destination_machine"] for m in messages
             if m.envelope["destination_queue"].upper().startswith("DIRECT=OS:")}
    want = sorted(_comparable(_expected(m, writer.message_ids, writer, named)) for m in messages)
    assert got == want
    assert [k for _, k, _ in out.items] == [env["destination_machine"] for _, _, env in out.items]
    # where each message is in the capture (published as a record header, for the job's findings)
    assert all(re.fullmatch(rf"{re.escape(str(tmp_path / f'sim{suffix}'))}:packet \d+"
                            r"( \(TCP [\d.]+:\d+ > [\d.]+:\d+, stream byte \d+\))?", env[CAPTURE_KEY])
               for _, _, env in out.items), out.items[0][2][CAPTURE_KEY]
    assert {p for p, _, env in out.items if "stream byte" in env[CAPTURE_KEY]} == {"mqcn", "mqdsrp"}
    assert {p for p, _, _ in out.items} == {"mqcn", "mqdsrp", "mqsd"}
    assert out.skipped["MQQB EstablishConnection"] == 2 * len(writer.sessions)
    assert out.skipped["MQQB SessionAck"] > 0


def test_the_transport_was_awkward_and_every_session_still_reassembles(tmp_path):
    """The writer really cut, reordered and retransmitted segments (else the test above proves little)."""
    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap
    _, messages = simulated(seed=5, count=300)
    write(tmp_path / "t.pcap", messages, seed=5, reorder=0.5, retransmit=0.3, overlap=0.2)
    seen, out_of_order, several = {}, 0, 0
    for p in rdpcap(str(tmp_path / "t.pcap")):
        if TCP not in p or not bytes(p[TCP].payload) or p[TCP].dport != 1801:
            continue
        flow, seq, data = (p["IP"].src, p[TCP].sport), p[TCP].seq, bytes(p[TCP].payload)
        top = seen.get(flow, seq)
        out_of_order += seq < top
        several += data.count(b"LIOR") > 1
        seen[flow] = max(top, seq + len(data))
    assert out_of_order > 20 and several > 0
    out = Replay()
    read_capture(tmp_path / "t.pcap", out)
    assert out.problems == [] and len(out.items) == len(messages)


def test_a_capture_that_starts_mid_session_recovers_every_whole_message_after_the_cut(tmp_path):
    from scapy.utils import rdpcap, wrpcap
    _, messages = simulated(seed=7, count=400)
    writer = write(tmp_path / "full.pcap", messages, seed=7, reorder=0.0, retransmit=0.0, overlap=0.0)
    packets = rdpcap(str(tmp_path / "full.pcap"))
    cut = len(packets) // 3
    wrpcap(str(tmp_path / "cut.pcap"), packets[cut:])
    full, tail = Replay(), Replay()
    read_capture(tmp_path / "full.pcap", full)
    read_capture(tmp_path / "cut.pcap", tail)
    after = float(packets[cut].time) * 1000 + 1
    wanted = {e["message_id"] or e["body"] for _, _, e in full.items if e["arrival_time"] > after}
    got = {e["message_id"] or e["body"] for _, _, e in tail.items}
    assert wanted and wanted <= got
    assert len(writer.sessions) > 1


def test_other_msmq_traffic_is_counted_and_not_published(tmp_path):
    qm = uuid.UUID(int=7)
    other = mqqb.user_message_from_fields(b"hello", source_qm=qm, destination_qm=uuid.UUID(int=0),
                                          destination_queue="DIRECT=OS:app1\\private$\\orders", sent_time_s=1_700_000_000,
                                          message_id=1)
    path = tmp_path / "other.pcap"
    _write_stream(path, [mqqb.encode(other), mqqb.encode(other)])
    out = Replay()
    read_capture(path, out)
    assert out.items == [] and out.problems == [] and out.skipped["other MSMQ messages"] == 2


def test_a_malformed_packet_is_reported_with_its_position_and_the_stream_goes_on(tmp_path):
    qm = uuid.UUID(int=9)
    good = mqqb.encode(mqqb.user_message_from_fields(
        b"\x01\x02", source_qm=qm, destination_qm=uuid.UUID(int=0),
        destination_queue="DIRECT=OS:dc1\\private$\\mqis_queue$", sent_time_s=1_700_000_000, message_id=5,
        sender_identifier_type="QueueManagerIdentifier", sender_identifier=str(qm),
        authentication_level="Sig10", hash_algorithm="MD5"))
    bad = bytearray(good)
    bad[16 + 16 + 16 + 4 + 4 + 4 + 4:16 + 16 + 16 + 4 + 4 + 4 + 4 + 4] = b"\xff\xff\xff\xff"    # UserHeader.Flags
    path = tmp_path / "bad.pcap"
    _write_stream(path, [good, bytes(bad), good])
    out = Replay()
    read_capture(path, out)
    assert len(out.items) == 2 and out.problems == []
    (rejected,) = out.rejected                  # published to its own topic: a dead letter and a finding
    assert rejected["capture"] == str(path) and rejected["position"].startswith("packet 2 (TCP 10.0.0.1:50000 > ")
    assert "stream byte" in rejected["position"]
    assert rejected["structure"] == "UserHeader" and rejected["field"] and rejected["reason"]
    assert rejected["bytes"] == bytes(bad) and rejected["arrival_time"] == 1_700_000_001_000
    assert (rejected["source_address"], rejected["destination_port"]) == ("10.0.0.1", 1801)
    assert (rejected["source_machine"], rejected["destination_machine"]) == ("10.0.0.1", "dc1")


def test_injected_lying_packets_are_each_rejected_and_the_traffic_reads_back_the_same(tmp_path):
    """`produce simulate --attack mqqb-malformed --pcap`: replication packets sent again with a
    MessageSize past the end of the packet (CVE-2023-21554's pattern); a replay rejects each one,
    naming the two directory servers the truth lists, and reads every message as without them."""
    _, messages = simulated(seed=5, count=3000)
    clean, attacked = Replay(), Replay()
    write(tmp_path / "clean.pcap", messages, seed=5)
    writer = write(tmp_path / "attacked.pcap", messages, seed=5, malformed=True)
    read_capture(tmp_path / "clean.pcap", clean)
    read_capture(tmp_path / "attacked.pcap", attacked)
    assert len(writer.attacks) >= 5 and clean.rejected == [] and attacked.problems == clean.problems == []
    assert sorted((r["source_machine"], r["destination_machine"], r["arrival_time"]) for r in attacked.rejected) == \
        sorted((a["source"], a["target"], a["arrival_ms"]) for a in writer.attacks)
    assert {(r["structure"], r["field"]) for r in attacked.rejected} == {("MessagePropertiesHeader", "MessageSize")}
    assert all("would run past the end of the packet" in r["reason"] for r in attacked.rejected)
    assert [(p, k, _comparable(e)) for p, k, e in attacked.items] == \
        [(p, k, _comparable(e)) for p, k, e in clean.items]                # (their positions differ)


def test_random_and_mutated_captures_only_ever_give_reported_problems(tmp_path):
    _, messages = simulated(seed=9, count=120)
    write(tmp_path / "base.pcap", messages, seed=9)
    base = (tmp_path / "base.pcap").read_bytes()
    rng = random.Random(9)
    reported = 0
    for case in range(20):
        data = bytearray(base)
        if case % 3 == 0:
            data = data[:rng.randrange(24, len(data))]
        for _ in range(rng.randint(1, 40)):
            i = rng.randrange(24, len(data))
            data[i] = rng.getrandbits(8)
        if case % 5 == 0:
            data = data[:24] + bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 3000)))
        path = tmp_path / f"m{case}.pcap"
        path.write_bytes(bytes(data))
        out = Replay()
        read_capture(path, out)                      # never raises
        assert all(p.position and p.reason for p in out.problems)
        assert all(r["position"] and r["reason"] and r["bytes"] for r in out.rejected)
        reported += bool(out.problems or out.rejected)
    assert reported >= 7                            # the damage was seen, not silently swallowed


def _write_stream(path, packets: list[bytes]) -> None:
    """One TCP session carrying `packets` from 10.0.0.1 to 10.0.0.2:1801, a segment each."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap
    frames, seq = [], 1000
    for i, data in enumerate(packets):
        f = Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=50000, dport=1801, seq=seq, flags="PA") / data
        f.time = 1_700_000_000 + i
        frames.append(f)
        seq += len(data)
    wrpcap(str(path), frames)


@pytest.mark.skipif(os.geteuid() != 0, reason="a live capture needs root or CAP_NET_RAW")
def test_a_live_capture_publishes_what_crosses_the_interface_until_ctrl_c(broker):
    """`produce capture --interface lo --bpf ...`: a real MQQB session and an MQSD datagram on the
    loopback interface; Ctrl-C ends it with the same summary as a replay."""
    import json
    import shutil
    import signal
    import socket
    import subprocess
    import sys
    import threading
    import time
    from pathlib import Path

    from conftest import consume_all
    from producers.capture_writer import lying_message_size
    from streaming.wire.envelope import decode_envelope
    from streaming.wire.rejected import decode_rejected
    from streaming.wire.topics import REJECTED_TOPIC, TOPICS
    exe = shutil.which("dirstream", path=str(Path(sys.executable).parent))
    # Ctrl-C as a terminal delivers it, even when the suite itself was started in the background
    # (a non-interactive shell starts background commands with SIGINT ignored, and Python keeps that)
    proc = subprocess.Popen([exe, "produce", "capture", "--bootstrap", broker, "--interface", "lo",
                             "--bpf", "tcp port 1801 or udp port 1801"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        line = proc.stderr.readline()
        while "capturing on lo" not in line and time.monotonic() < deadline and proc.poll() is None:
            line = proc.stderr.readline()
        assert "capturing on lo" in line, proc.stderr.read() if proc.poll() is not None else line
        qm, dc = uuid.UUID(int=0xA1), uuid.UUID(int=0xB2)
        messages = [mqqb.user_message_from_fields(
            body, source_qm=qm, destination_qm=dest_qm, destination_queue=queue, sent_time_s=1_700_000_000,
            message_id=n, sender_identifier_type="QueueManagerIdentifier", sender_identifier=str(qm),
            authentication_level="Sig10", hash_algorithm="MD5")
            for n, (body, dest_qm, queue) in enumerate([
                (b"\x00dsrp", uuid.UUID(int=0), "DIRECT=OS:dc1\\private$\\mqis_queue$"),
                (b"\x01cn", dc, f"PRIVATE={dc}\\3"),
                (b"app", uuid.UUID(int=0), "DIRECT=OS:dc1\\private$\\orders")], 1)]
        server = socket.create_server(("127.0.0.1", 1801))
        received = bytearray()
        accepted = threading.Thread(target=lambda: _drain(server, received), daemon=True)
        accepted.start()
        lying = lying_message_size(mqqb.encode(messages[0]))
        with socket.create_connection(("127.0.0.1", 1801)) as client:
            client.sendall(mqqb.encode(mqqb.EstablishConnection(qm, uuid.UUID(int=0), 1, 0x1000)))
            for m in messages:
                client.sendall(mqqb.encode(m))
            client.sendall(lying)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.sendto(vector_mqsd(), ("127.0.0.1", 1801))
        accepted.join(10)
        server.close()
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["published"] == 3 and summary["skipped"] == 0, (summary, err)
    assert summary["rejected_packets_published"] == 1 and "rejected lo:packet " in err
    (rejected,) = [decode_rejected(r.value()) for r in consume_all(broker, REJECTED_TOPIC, expect=1)]
    assert rejected["capture"] == "lo" and rejected["bytes"] == lying and rejected["field"] == "MessageSize"
    assert (rejected["source_machine"], rejected["destination_port"]) == ("dc1", 1801)
    assert summary["msmq_not_published"] == {"MQQB EstablishConnection": 1, "other MSMQ messages": 1}
    dsrp = [decode_envelope(r.value()) for r in consume_all(broker, TOPICS["mqdsrp"], expect=1)]
    cn = [decode_envelope(r.value()) for r in consume_all(broker, TOPICS["mqcn"], expect=1)]
    sd = [decode_envelope(r.value()) for r in consume_all(broker, TOPICS["mqsd"], expect=1)]
    assert [e["body"] for e in dsrp] == [b"\x00dsrp"] and dsrp[0]["destination_machine"] == "dc1"
    assert dsrp[0]["message_id"] == f"{{{qm}}}\\1" and dsrp[0]["authentication_level"] == "Sig10"
    assert [e["body"] for e in cn] == [b"\x01cn"] and cn[0]["destination_queue"] == f"PRIVATE={dc}\\3"
    assert [e["body"] for e in sd] == [vector_mqsd()] and sd[0]["source_machine"] == "127.0.0.1"


def vector_mqsd() -> bytes:
    from conftest import vector
    return vector("mqsd_4_request")


def _drain(server, into: bytearray) -> None:
    conn, _ = server.accept()
    with conn:
        while chunk := conn.recv(65536):
            into.extend(chunk)
