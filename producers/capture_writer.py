"""Simulated traffic written as a packet capture (`dirstream produce simulate --pcap FILE`).

MQCN and MQDSRP messages travel as MQQB UserMessages ([MS-MQMQ] 2.2.20) in TCP sessions on port
1801, one per (sender, receiver) pair, opened as [MS-MQQB] 3.1.1.7.1 does (TCP handshake,
EstablishConnection and ConnectionParameters both ways); the receiver acknowledges with SessionAck
packets. MQSD datagrams go on UDP 1801. A packet's capture time is the message's arrival time.

The transport is made as awkward as real captures are (seeded): a message is cut into several
segments (and split at the 1,460-byte MSS), consecutive messages of a session that arrive at the
same millisecond share segments, segments of a message come out of order, and some are sent twice
(retransmissions) or overlap. Only segments of the same capture time are moved, so each message
still arrives when the simulator says it does.
"""
import random
import uuid
from decimal import Decimal

from streaming.wire import mqqb
from streaming.wire.errors import WireError

from .capture import MSMQ_PORT, classify

__all__ = ["CaptureWriter", "lying_message_size", "MALFORMED_RATE", "MSS", "SOURCE_GUIDS"]

MSS = 1460
MALFORMED_RATE = 0.02          # --attack mqqb-malformed: after about one replication message in 50
SOURCE_GUIDS = uuid.UUID("5d1f4c1e-9a0b-4c55-8f7e-3f1d2b7c6a10")     # names a queue manager without a GUID


class CaptureWriter:
    def __init__(self, path: str, seed: int = 0, *, reorder: float = 0.2, retransmit: float = 0.1,
                 overlap: float = 0.05, max_cuts: int = 3, malformed: bool = False):
        from scapy.utils import PcapNgWriter, PcapWriter
        self.path = str(path)
        writer = PcapNgWriter if self.path.endswith(".pcapng") else PcapWriter
        self.out = writer(self.path, linktype=1, sync=False) if writer is PcapWriter else writer(self.path)
        self.rng = random.Random(seed)
        self.reorder, self.retransmit, self.overlap, self.max_cuts = reorder, retransmit, overlap, max_cuts
        self.addresses: dict[str, str] = {}
        self.guids: dict[str, uuid.UUID] = {}
        self.ordinals: dict[uuid.UUID, int] = {}
        self.message_ids: dict[str, str] = {}          # the simulator's id -> the MSMQ MessageIdentifier
        self.sessions: dict[tuple[str, str], "_Session"] = {}
        self.held: tuple["_Session", bytearray, int] | None = None
        self.packets = 0
        # --attack mqqb-malformed: its own draws, so the capture's other bytes are the same without it
        self.malformed_rng = random.Random(seed * 7_919 + 11) if malformed else None
        self.receivers: set[str] = set()               # machines named by a DIRECT=OS replication message
        self.attacks: list[dict] = []                  # what was injected, for the truth's `attacks`

    # ------------------------------------------------------------------ messages
    def write(self, protocol: str, envelope: dict) -> None:
        arrival = int(envelope["arrival_time"])
        if protocol == "mqsd":
            self._flush()
            self._udp(envelope["source_machine"], envelope["destination_machine"], envelope["body"], arrival)
            return
        src, dst = self.address(envelope["source_machine"]), self.address(envelope["destination_machine"])
        msg = self._user_message(envelope)
        data = mqqb.encode(msg)
        session = self._session(src, dst, msg, arrival)
        if self.held and (self.held[0] is not session or self.held[2] != arrival):
            self._flush()
        if self.held:
            self.held[1].extend(data)
        else:
            self.held = (session, bytearray(data), arrival)
        session.unacked += 1
        if protocol == "mqdsrp":
            self._maybe_malformed(envelope, msg, arrival)
        if session.unacked >= 8:
            self._flush()
            session.acknowledge(self, arrival)

    def _maybe_malformed(self, env: dict, msg: "mqqb.UserMessage", arrival: int) -> None:
        """Now and then, after a replication message, the same packet again with a MessageSize that
        lies (far more bytes than the packet holds: CVE-2023-21554's pattern). Its PacketSize is
        true, so the session goes on; a capture producer rejects it. Only between directory servers
        the capture names (both were sent replication messages), so the finding names them too."""
        source, target = env["source_machine"], env["destination_machine"]
        self.receivers.add(target)
        if self.malformed_rng is None or source not in self.receivers \
                or self.malformed_rng.random() >= MALFORMED_RATE:
            return
        self.held[1].extend(lying_message_size(mqqb.encode(msg)))
        self.attacks.append({"kind": "mqqb-malformed", "source": source, "target": target, "message_id": None,
                             "copies": 1, "arrival_ms": arrival})

    def _user_message(self, env: dict) -> "mqqb.UserMessage":
        source = self._guid_of(env)
        target = classify(env["destination_queue"])
        destination_qm = uuid.UUID(target[2]) if target and target[2] else uuid.UUID(int=0)
        sim_id = env.get("message_id")
        ordinal = self.ordinals.get(source, 0) + 1
        if sim_id in self.message_ids:
            ordinal = int(self.message_ids[sim_id].rsplit("\\", 1)[1])    # a duplicate: the same message again
        else:
            self.ordinals[source] = ordinal
        msg = mqqb.user_message_from_fields(
            env["body"], source_qm=source, destination_qm=destination_qm,
            destination_queue=env["destination_queue"], sent_time_s=int(env["sent_time"]) // 1000,
            message_id=ordinal, message_class=env["message_class"],
            sender_identifier_type=env["sender_identifier_type"], sender_identifier=env["sender_identifier"],
            authentication_level=env["authentication_level"], hash_algorithm=env["hash_algorithm"])
        if sim_id is not None:
            self.message_ids[sim_id] = mqqb.message_identifier(msg)
        return msg

    def _guid_of(self, env: dict) -> uuid.UUID:
        name = env["source_machine"]
        if name not in self.guids:
            ident = env.get("sender_identifier")
            try:
                guid = uuid.UUID(ident) if env.get("sender_identifier_type") == "QueueManagerIdentifier" else None
            except (TypeError, ValueError):
                guid = None
            self.guids[name] = guid or uuid.uuid5(SOURCE_GUIDS, name)
        return self.guids[name]

    def address(self, machine: str) -> str:
        if machine not in self.addresses:
            n = len(self.addresses)
            self.addresses[machine] = f"172.16.{n // 250}.{n % 250 + 1}"
        return self.addresses[machine]

    def _session(self, src: str, dst: str, msg, at_ms: int) -> "_Session":
        session = self.sessions.get((src, dst))
        if session is None:
            self._flush()
            session = self.sessions[(src, dst)] = _Session(src, dst, 49152 + len(self.sessions), self.rng)
            session.open(self, msg.source_qm, msg.destination_qm, at_ms)
        return session

    # ------------------------------------------------------------------ frames
    def _flush(self) -> None:
        if self.held:
            session, data, at_ms = self.held
            self.held = None
            self.segments(session, bytes(data), at_ms)

    def segments(self, session: "_Session", data: bytes, at_ms: int) -> None:
        """The client's bytes as TCP segments: cut, shuffled, some twice or overlapping."""
        start = session.client_seq
        cuts = sorted(self.rng.sample(range(1, len(data)), min(self.rng.randint(0, self.max_cuts), len(data) - 1)))
        bounds = [0, *cuts, len(data)]
        pieces = []
        for lo, hi in zip(bounds, bounds[1:]):
            pieces += [(a, min(a + MSS, hi)) for a in range(lo, hi, MSS)]
        if len(pieces) > 1 and self.rng.random() < self.reorder:
            self.rng.shuffle(pieces)
        if pieces and self.rng.random() < self.retransmit:
            pieces.append(self.rng.choice(pieces))
        if len(pieces) > 1 and self.rng.random() < self.overlap:
            a, b = sorted(self.rng.sample(range(len(data) + 1), 2))
            pieces.insert(self.rng.randrange(len(pieces)), (a, min(b, a + MSS)))
        for lo, hi in pieces:
            self.tcp(session, client=True, seq=start + lo, payload=data[lo:hi], at_ms=at_ms)
        session.client_seq = start + len(data)

    def tcp(self, session: "_Session", *, client: bool, seq: int, payload: bytes = b"", at_ms: int,
            flags: str = "PA", ack: int | None = None) -> None:
        from scapy.layers.inet import IP, TCP
        from scapy.layers.l2 import Ether
        src, dst = (session.client, session.server) if client else (session.server, session.client)
        sport, dport = (session.port, MSMQ_PORT) if client else (MSMQ_PORT, session.port)
        if ack is None:
            ack = session.server_seq if client else session.client_seq
        frame = Ether(src=_mac(src), dst=_mac(dst)) / IP(src=src, dst=dst) / \
            TCP(sport=sport, dport=dport, seq=seq % (1 << 32), ack=ack % (1 << 32), flags=flags, window=65535) / payload
        self._frame(frame, at_ms)

    def _udp(self, src: str, dst: str, body: bytes, at_ms: int) -> None:
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether
        self._frame(Ether(src=_mac(src), dst=_mac(dst)) / IP(src=src, dst=dst) /
                    UDP(sport=MSMQ_PORT, dport=MSMQ_PORT) / body, at_ms)

    def _frame(self, frame, at_ms: int) -> None:
        frame.time = Decimal(at_ms) / 1000
        self.out.write(frame)
        self.packets += 1

    def close(self) -> None:
        self._flush()
        self.out.close()


def lying_message_size(packet: bytes) -> bytes:
    """The UserMessage packet with its MessagePropertiesHeader.MessageSize set past the end of the
    packet (its BaseHeader's PacketSize untouched)."""
    body_size = len(mqqb.parse_packet(packet).body)
    for at in range(0, len(packet) - 3, 4):
        if int.from_bytes(packet[at:at + 4], "little") != body_size:
            continue
        candidate = packet[:at] + (0x7FFF_FFF0).to_bytes(4, "little") + packet[at + 4:]
        try:
            mqqb.parse_packet(candidate)
        except WireError as exc:
            if exc.field == "MessageSize":
                return candidate
    raise ValueError("no MessageSize field found in the packet")


class _Session:
    """One MQQB session: a TCP connection from `client` to `server`:1801 ([MS-MQQB] 2.1.1)."""

    def __init__(self, client: str, server: str, port: int, rng: random.Random):
        self.client, self.server, self.port = client, server, port
        self.client_seq = rng.getrandbits(32)
        self.server_seq = rng.getrandbits(32)
        self.unacked = 0
        self.received = 0

    def open(self, w: CaptureWriter, client_guid: uuid.UUID, server_guid: uuid.UUID, at_ms: int) -> None:
        """TCP handshake, then the EstablishConnection and ConnectionParameters exchanges (3.1.1.7.1)."""
        t = at_ms - 3
        w.tcp(self, client=True, seq=self.client_seq, flags="S", ack=0, at_ms=t)
        w.tcp(self, client=False, seq=self.server_seq, flags="SA", ack=self.client_seq + 1, at_ms=t)
        self.client_seq += 1
        self.server_seq += 1
        w.tcp(self, client=True, seq=self.client_seq, flags="A", at_ms=t)
        # MS-MQQB 2.2.3.1: the acceptor's response repeats the request's GUIDs and time stamp
        establish = mqqb.encode(mqqb.EstablishConnection(client_guid=client_guid, server_guid=server_guid,
                                                         timestamp=at_ms & 0xFFFFFFFF, operating_system=0x1000 | 0x0200))
        self.send(w, True, establish, t + 1)
        self.send(w, False, establish, t + 1)
        params = mqqb.ConnectionParameters(recoverable_ack_timeout=500, ack_timeout=20000, window_size=64)
        self.send(w, True, mqqb.encode(params), t + 2)
        self.send(w, False, mqqb.encode(params), t + 2)

    def send(self, w: CaptureWriter, client: bool, data: bytes, at_ms: int) -> None:
        if client:
            w.segments(self, data, at_ms)
        else:
            w.tcp(self, client=False, seq=self.server_seq, payload=data, at_ms=at_ms)
            self.server_seq += len(data)

    def acknowledge(self, w: CaptureWriter, at_ms: int) -> None:
        self.received += self.unacked
        # MS-MQMQ 2.2.20.4: AckSequenceNumber acknowledges the user messages received so far (express here)
        ack = mqqb.SessionAck(session=mqqb.SessionHeader(ack_sequence_number=self.received & 0xFFFF))
        self.unacked = 0
        self.send(w, False, mqqb.encode(ack), at_ms)


def _mac(ip: str) -> str:
    return "02:00:" + ":".join(f"{int(octet):02x}" for octet in ip.split("."))
