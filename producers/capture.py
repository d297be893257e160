"""MSMQ traffic in packet captures and on a live interface, as envelopes to publish.

- TCP 1801 ([MS-MQQB] 2.1.1): each connection's two directions are reassembled (tcp_streams), cut
  into MQQB packets (streaming.wire.mqqb.PacketStream), and every UserMessage ([MS-MQMQ] 2.2.20) to
  a directory queue becomes an envelope: MQDSRP to the replication queue (MC-MQDSRP 1.9:
  <machine>\\private$\\mqis_queue$, DIRECT=OS:<machine>\\private$\\mqis_queue$, and
  REPLICATION_QUEUE_PRIVATE = PRIVATE=<QM GUID>\\1, where Nacks come back as the administration
  queue), MQCN to the notification queue (MS-MQCN 1.9: PRIVATE=<QM GUID>\\3). Other MSMQ messages
  and the session packets are counted, not published.
- UDP 1801: MQSD datagrams.
- An MQQB packet that breaks its own framing, or bytes that are no packet, is rejected: its bytes,
  position and reason go to their own topic (streaming.wire.rejected), where the job records
  them as a dead letter and a security finding.

Captures carry addresses and queue manager GUIDs, not machine names; names come from the
captured traffic itself (MachineNames): a message to DIRECT=OS:<name>... names the address it was
sent to, and a queue manager's GUID (UserHeader.SourceQueueManager, EstablishConnection GUIDs)
belongs to the address it sends from. A capture file is read whole before its envelopes are made,
so every name it holds is known; a live capture names with what it has seen so far.

Packet parsing (pcap, pcapng, link layers, IP, TCP, UDP) is scapy's; MQQB is ours (sans-IO).
"""
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

from streaming.wire import WireError
from streaming.wire import mqqb
from streaming.wire.envelope import make_envelope
from streaming.wire.rejected import rejected_record
from streaming.wire.topics import CAPTURE_KEY

from .tcp_streams import SEQ_MOD, Delivery, Direction

__all__ = ["capture_ms", "CaptureDecoder", "classify", "dissect", "envelope_of", "Flow", "live_capture",
           "MachineNames", "MSMQ_PORT", "NOTIFY_QUEUE_PRIVATE_ID", "Problem", "read_capture", "Rejected",
           "rejected_of", "Replay", "REPLICATION_QUEUE_PRIVATE_ID", "Seen"]

MSMQ_PORT = 1801
_GUID = r"\{?([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\}?"
_REPLICATION_DIRECT = re.compile(r"(?i)^(?:DIRECT=OS:)?([^\\=]+)\\private\$\\mqis_queue\$$")
_REPLICATION_BY_ADDRESS = re.compile(r"(?i)^DIRECT=(?:TCP|SPX):([^\\]+)\\private\$\\mqis_queue\$$")
_PRIVATE = re.compile(r"(?i)^PRIVATE=" + _GUID + r"\\(\d+)$")
_DIRECT_OS = re.compile(r"(?i)^DIRECT=OS:([^\\]+)\\")
REPLICATION_QUEUE_PRIVATE_ID = 1        # MC-MQDSRP 1.9
NOTIFY_QUEUE_PRIVATE_ID = 3             # MS-MQCN 1.9


@dataclass
class Problem:
    position: str
    reason: str

    def __str__(self) -> str:
        return f"{self.position}: {self.reason}"


@dataclass
class Replay:
    items: list[tuple[str, str, dict]] = field(default_factory=list)    # (protocol, key, envelope)
    problems: list[Problem] = field(default_factory=list)
    ignored: int = 0                                                     # capture packets that are not MSMQ
    skipped: Counter = field(default_factory=Counter)                    # MSMQ traffic not published, by kind
    published: int = 0                                                   # a live capture's messages sent so far
    rejected: list[dict] = field(default_factory=list)                   # MQQB packets rejected (wire.rejected),
                                                                         # published to their own topic


def classify(queue: str | None) -> tuple[str, str | None, str | None] | None:
    """(protocol, machine name or None, queue manager GUID or None) of a destination format name;
    None when it is not a directory service queue."""
    if not queue:
        return None
    if m := _REPLICATION_DIRECT.match(queue):
        return "mqdsrp", m.group(1), None
    if m := _REPLICATION_BY_ADDRESS.match(queue):
        return "mqdsrp", None, None
    if m := _PRIVATE.match(queue):
        number = int(m.group(2))
        if number == REPLICATION_QUEUE_PRIVATE_ID:
            return "mqdsrp", None, m.group(1).lower()
        if number == NOTIFY_QUEUE_PRIVATE_ID:
            return "mqcn", None, m.group(1).lower()
    return None


class MachineNames:
    """Machine names and queue manager GUIDs by network address, learned from the traffic."""

    def __init__(self):
        self.by_address: dict[str, str] = {}
        self.address_of_guid: dict[str, str] = {}

    def learn_message(self, msg: "mqqb.UserMessage", src: str, dst: str) -> None:
        if m := _DIRECT_OS.match(msg.destination_queue or ""):
            self.by_address.setdefault(dst, m.group(1))
        self._guid(msg.source_qm, src)

    def learn_connection(self, packet: "mqqb.EstablishConnection", initiator: str, acceptor: str) -> None:
        self._guid(packet.client_guid, initiator)
        self._guid(packet.server_guid, acceptor)

    def _guid(self, guid: uuid.UUID, address: str) -> None:
        if guid is not None and guid.int:
            self.address_of_guid.setdefault(str(guid), address)

    def name(self, address: str) -> str | None:
        return self.by_address.get(address)

    def name_of_guid(self, guid: str) -> str | None:
        address = self.address_of_guid.get(guid)
        return self.by_address.get(address) if address else None


@dataclass
class Rejected:
    """An MQQB packet a PacketStream rejected, waiting for the names of its ends."""
    error: WireError
    flow: tuple                     # (src, sport, dst, dport)
    ts_ms: int
    where: str


def rejected_of(r: Rejected, names: "MachineNames", capture: str) -> dict:
    """The rejected packet's record for REJECTED_TOPIC, its ends named as the capture names them."""
    src, sport, dst, dport = r.flow
    prefix = capture + ":"
    return rejected_record(r.error, capture=capture, position=r.where[len(prefix):] if r.where.startswith(prefix)
                           else r.where, source=(src, sport), destination=(dst, dport),
                           source_machine=names.name(src) or src, destination_machine=names.name(dst) or dst,
                           arrival_ms=r.ts_ms)


@dataclass
class Seen:
    """A UserMessage taken from a stream, waiting for its envelope."""
    msg: "mqqb.UserMessage"
    src: str
    dst: str
    ts_ms: int
    where: str


def envelope_of(seen: Seen, names: MachineNames) -> tuple[str, str, dict] | str:
    """(protocol, key, envelope) of a captured UserMessage, or why it is not published."""
    msg = seen.msg
    if msg.kind != "user":
        return f"MQQB {msg.kind}"
    target = classify(msg.destination_queue)
    if target is None:
        return "other MSMQ messages"
    protocol, machine, guid = target
    fields = mqqb.envelope_fields(msg)
    if machine is None and guid is not None:
        machine = names.name_of_guid(guid)
    dest = machine or names.name(seen.dst) or guid or seen.dst
    env = make_envelope(protocol, msg.body, source_machine=names.name(seen.src) or seen.src,
                        destination_machine=dest, destination_queue=fields["destination_queue"],
                        sent_time=fields["sent_time_ms"], arrival_time=seen.ts_ms,
                        message_class=fields["message_class"],
                        sender_identifier_type=fields["sender_identifier_type"],
                        sender_identifier=fields["sender_identifier"],
                        authentication_level=fields["authentication_level"],
                        hash_algorithm=fields["hash_algorithm"], message_id=fields["message_id"])
    env[CAPTURE_KEY] = seen.where
    return protocol, dest, env


class Flow:
    """One direction of a TCP connection on port 1801: bytes in order, then MQQB packets."""

    def __init__(self, key: tuple, initiator: bool):
        self.key = key                          # (src, sport, dst, dport)
        self.tcp = Direction()
        self.packets: mqqb.PacketStream | None = None
        self.initiator = initiator

    def deliver(self, deliveries: list[Delivery]):
        """(stream offset, packet or WireError, capture time) for every packet the bytes complete."""
        if self.packets is None:
            self.packets = mqqb.PacketStream(synced=self.tcp.synced)
        for d in deliveries:
            if d.gap_before:
                self.packets.gap(d.gap_before)
            for offset, packet in self.packets.feed(d.data):
                yield offset, packet, d.ts_ms


class CaptureDecoder:
    """Turns captured IP packets into Seen messages, MQSD items, rejected MQQB packets and problems (no I/O)."""

    def __init__(self, out: Replay, names: MachineNames, on_seen, on_rejected=lambda rejected: None):
        self.out, self.names, self.on_seen, self.on_rejected = out, names, on_seen, on_rejected
        self.flows: dict[tuple, Flow] = {}

    def udp(self, ts_ms: int, where: str, src: str, sport: int, dst: str, dport: int, payload: bytes) -> None:
        if MSMQ_PORT not in (sport, dport):
            self.out.ignored += 1
            return
        env = make_envelope("mqsd", payload, source_machine=src, destination_machine=dst,
                            destination_queue=f"udp:{dport}", sent_time=ts_ms)
        env[CAPTURE_KEY] = where
        self.out.items.append(("mqsd", dst, env))

    def tcp(self, ts_ms: int, where: str, key: tuple, seq: int, payload: bytes, flags: str) -> None:
        src, sport, dst, dport = key
        if MSMQ_PORT not in (sport, dport):
            self.out.ignored += 1
            return
        flow = self.flows.get(key)
        if flow is None or ("S" in flags and flow.tcp.base not in (None, (seq + 1) % SEQ_MOD)):   # a new connection
            if flow is not None:
                self._flush(flow, where)
            flow = self.flows[key] = Flow(key, initiator=dport == MSMQ_PORT)
        deliveries = flow.tcp.segment(seq, payload, ts_ms, syn="S" in flags, fin="F" in flags or "R" in flags)
        self._packets(flow, deliveries, where)

    def finish(self, where: str) -> None:
        for flow in self.flows.values():
            self._flush(flow, where)
        self.flows.clear()

    def _flush(self, flow: Flow, where: str) -> None:
        self._packets(flow, flow.tcp.finish(), where)
        stream = flow.packets
        if stream is not None and stream.synced and stream.buffered:
            src, sport, dst, dport = flow.key
            self.out.problems.append(Problem(where, f"TCP {src}:{sport} > {dst}:{dport}: the connection ended "
                                                    f"{stream.buffered} bytes into an MQQB packet (stream byte "
                                                    f"{flow.tcp.next - stream.buffered})"))

    def _packets(self, flow: Flow, deliveries: list[Delivery], where: str) -> None:
        src, sport, dst, dport = flow.key
        for d in deliveries:
            if d.gap_before:
                self.out.problems.append(Problem(where, f"TCP {src}:{sport} > {dst}:{dport}: {d.gap_before} bytes "
                                                        f"before stream byte {d.offset} were not captured"))
        for offset, packet, ts_ms in flow.deliver(deliveries):
            at = f"{where} (TCP {src}:{sport} > {dst}:{dport}, stream byte {offset})"
            if isinstance(packet, WireError):      # not a problem of the capture: hostile or broken traffic
                self.on_rejected(Rejected(packet, flow.key, ts_ms, at))
            elif isinstance(packet, mqqb.UserMessage):
                self.names.learn_message(packet, src, dst)
                self.on_seen(Seen(packet, src, dst, ts_ms, at))
            else:
                if isinstance(packet, mqqb.EstablishConnection):
                    self.names.learn_connection(packet, *((src, dst) if flow.initiator else (dst, src)))
                self.out.skipped[f"MQQB {type(packet).__name__}"] += 1


# ---------------------------------------------------------------------------- scapy adapter
def _layers():
    """scapy's layers; importing them registers the link types a capture reader dissects (Ethernet,
    802.1Q, Linux cooked, raw IP), so this comes before any reading."""
    import importlib
    importlib.import_module("scapy.layers.l2")         # registers Ethernet, 802.1Q, Linux cooked capture
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.packet import Padding
    return IP, IPv6, TCP, UDP, Padding


def capture_ms(packet) -> int:
    return int((Decimal(str(packet.time)) * 1000).to_integral_value())


def dissect(packet, decoder: CaptureDecoder, where: str) -> None:
    """One captured frame (a scapy packet) into the decoder; malformed frames become problems."""
    from scapy.packet import Raw
    if type(packet) is Raw:               # scapy could not read the link-layer header (or knows no such link type)
        decoder.out.problems.append(Problem(where, f"frame of {len(packet)} bytes: no readable link-layer header"))
        return
    try:
        _dissect(packet, decoder, where)
    except Exception as exc:              # noqa: BLE001 -- a frame scapy dissected oddly is reported, never fatal
        decoder.out.problems.append(Problem(where, f"frame not understood: {type(exc).__name__}: {exc}"))


def _dissect(packet, decoder: CaptureDecoder, where: str) -> None:
    IP, IPv6, TCP, UDP, Padding = _layers()
    ts_ms = capture_ms(packet)
    ip = packet.getlayer(IP) or packet.getlayer(IPv6)
    if ip is None:
        if _says_ip(packet):
            decoder.out.problems.append(Problem(where, "truncated IP header"))
        else:
            decoder.out.ignored += 1
        return
    src, dst = str(ip.src), str(ip.dst)
    proto = ip.proto if ip.version == 4 else ip.nh
    if ip.version == 4 and (ip.frag or ip.flags.MF):
        decoder.out.ignored += 1          # IP fragments are not reassembled (MSMQ sends within the MSS)
        return
    # exactly TCP or UDP: an ICMP error quotes a datagram as TCPerror/UDPerror (subclasses), not traffic
    layer = next((x for x in (packet.getlayer(TCP), packet.getlayer(UDP)) if type(x) in (TCP, UDP)), None)
    if layer is None:
        if proto in (6, 17):
            decoder.out.problems.append(Problem(where, f"truncated {'TCP' if proto == 6 else 'UDP'} header"))
        else:
            decoder.out.ignored += 1
        return
    payload = bytes(layer.payload)
    pad = packet.getlayer(Padding)
    if pad is not None and pad.load:
        payload = payload[:len(payload) - len(pad.load)]
    if isinstance(layer, UDP):
        decoder.udp(ts_ms, where, src, layer.sport, dst, layer.dport, payload)
    else:
        decoder.tcp(ts_ms, where, (src, layer.sport, dst, layer.dport), layer.seq, payload, str(layer.flags))


def _says_ip(packet) -> bool:
    ethertype = getattr(packet, "type", None)
    return ethertype in (0x0800, 0x86DD) or getattr(packet, "proto", None) in (0x0800, 0x86DD)


def read_capture(path, out: Replay) -> None:
    """Every MSMQ message of a pcap or pcapng file into `out`, named with all the file teaches."""
    _layers()
    from scapy.error import Scapy_Exception
    from scapy.utils import PcapReader
    names, seen, rejected = MachineNames(), [], []
    decoder = CaptureDecoder(out, names, seen.append, rejected.append)
    number = 0
    try:
        reader = PcapReader(str(path))
    except (Scapy_Exception, OSError, ValueError, EOFError) as exc:
        out.problems.append(Problem(str(path), f"not a readable capture: {exc}"))
        return
    with reader:
        while True:
            number += 1
            where = f"{path}:packet {number}"
            try:
                packet = reader.read_packet()
            except EOFError:
                break
            except (Scapy_Exception, ValueError, OSError, IndexError, KeyError, TypeError) as exc:
                out.problems.append(Problem(where, f"unreadable capture record, the rest of the file is "
                                                   f"skipped: {type(exc).__name__}: {exc}"))
                break
            if packet is None:
                break
            dissect(packet, decoder, where)
    decoder.finish(f"{path}:end")
    for s in seen:
        _publishable(s, names, out)
    out.rejected += [rejected_of(r, names, str(path)) for r in rejected]


def _publishable(s: Seen, names: MachineNames, out: Replay) -> tuple[str, str, dict] | None:
    try:
        item = envelope_of(s, names)
    except WireError as exc:
        out.problems.append(Problem(s.where, str(exc)))
        return None
    if isinstance(item, str):
        out.skipped[item] += 1
        return None
    out.items.append(item)
    return item


def live_capture(interface: str, bpf: str | None, publish, stop=lambda: False,
                 on_progress=lambda replay: None, on_start=lambda: None,
                 publish_rejected=lambda record: None) -> Replay:
    """Capture on `interface` until stop() or Ctrl-C, publishing each message as it completes and
    each rejected MQQB packet as it is found. Raises OSError when the interface cannot be opened
    (no such interface, no permission)."""
    _layers()
    from scapy.error import Scapy_Exception
    from scapy.sendrecv import AsyncSniffer
    out, names = Replay(), MachineNames()
    frames = [0]

    def publish_new(start: int) -> None:
        if len(out.items) > start:
            publish(out.items[start:])
            out.published += len(out.items) - start
            del out.items[start:]

    def on_seen(s: Seen) -> None:
        start = len(out.items)
        _publishable(s, names, out)
        publish_new(start)

    def on_rejected(r: Rejected) -> None:
        publish_rejected(rejected_of(r, names, interface))

    decoder = CaptureDecoder(out, names, on_seen, on_rejected)

    def on_packet(packet) -> None:
        frames[0] += 1
        start = len(out.items)
        dissect(packet, decoder, f"{interface}:packet {frames[0]}")
        publish_new(start)                      # MQSD datagrams: at once

    extra = {}
    if _is_loopback(interface):
        # a listening socket sees every loopback packet twice (going out, coming in); libpcap drops the
        # outgoing copy on loopback, and so does scapy's plain L2 socket
        from scapy.config import conf
        extra["L2socket"] = conf.L2socket
    sniffer = AsyncSniffer(iface=interface, filter=bpf, prn=on_packet, store=False, started_callback=on_start,
                           **extra)
    sniffer.start()
    try:
        while not stop() and sniffer.thread.is_alive():
            sniffer.join(0.5)                   # raises what the capture thread raised (no such interface, ...)
            on_progress(out)
    except KeyboardInterrupt:
        pass
    finally:
        if sniffer.thread.is_alive():
            try:
                sniffer.stop()
            except Scapy_Exception:
                pass
    start = len(out.items)
    decoder.finish(f"{interface}:end")
    publish_new(start)
    return out


def _is_loopback(interface: str) -> bool:
    """Linux: the interface's hardware type is ARPHRD_LOOPBACK (772)."""
    try:
        with open(f"/sys/class/net/{interface}/type") as fh:
            return fh.read().strip() == "772"
    except OSError:
        return False
