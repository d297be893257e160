"""Reading recorded messages for `dirstream produce replay`.

Formats, detected per path:
- JSON lines: one envelope per line, `body` in base64 (any envelope field may be given; the rest default);
- hex lines (needs --protocol): one body per line as hex digits;
- a directory (needs --protocol): every regular file, in name order, is one raw body;
- pcap / pcapng captures: MQSD packets on UDP port 1801 (Ethernet, Linux cooked, raw IP; IPv4 or IPv6).
Every bad line or packet becomes a Problem with its position and is skipped; the rest still goes out.
"""
import base64
import binascii
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

from streaming.wire.envelope import PROTOCOL_NAMES, make_envelope

MQSD_UDP_PORT = 1801
PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
               b"\x4d\x3c\xb2\xa1": ("<", 1e-9), b"\xa1\xb2\x3c\x4d": (">", 1e-9)}
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL, LINKTYPE_IPV4, LINKTYPE_IPV6 = 1, 101, 113, 228, 229


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
    ignored: int = 0                                                     # capture packets that are not MQSD


def read_paths(paths: list[str], protocol: str | None = None, now_ms: int = 0) -> Replay:
    out = Replay()
    for path in map(Path, paths):
        if path.is_dir():
            _read_directory(path, protocol, out, now_ms)
            continue
        try:
            head = path.open("rb").read(4)
        except OSError as exc:
            out.problems.append(Problem(str(path), f"cannot read: {exc.strerror}"))
            continue
        if head in PCAP_MAGICS:
            _read_pcap(path, out)
        elif head == PCAPNG_MAGIC:
            _read_pcapng(path, out)
        else:
            _read_lines(path, protocol, out, now_ms)
    return out


def _envelope(protocol: str, body: bytes, sent_ms: int, **fields) -> dict:
    return make_envelope(protocol, body, source_machine=fields.pop("source_machine", "replay"),
                         destination_machine=fields.pop("destination_machine", "unknown"),
                         destination_queue=fields.pop("destination_queue", ""), sent_time=sent_ms, **fields)


def _need_protocol(protocol: str | None, where: str) -> str:
    if protocol is None:
        raise ValueError(f"{where}: raw bodies carry no protocol; pass --protocol")
    return protocol


def _read_directory(path: Path, protocol: str | None, out: Replay, now_ms: int) -> None:
    protocol = _need_protocol(protocol, str(path))
    for file in sorted(p for p in path.iterdir() if p.is_file()):
        env = _envelope(protocol, file.read_bytes(), now_ms)
        out.items.append((protocol, env["destination_machine"], env))


def _read_lines(path: Path, protocol: str | None, out: Replay, now_ms: int) -> None:
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{path}:{number}"
        try:
            item = _json_line(text, now_ms) if text.startswith("{") else _hex_line(text, protocol, where, now_ms)
        except ValueError as exc:
            out.problems.append(Problem(where, str(exc)))
            continue
        out.items.append(item)


_JSON_FIELDS = ("message_id", "message_class", "sender_identifier_type", "sender_identifier", "authentication_level",
                "hash_algorithm", "source_machine", "destination_machine", "destination_queue")


def _json_line(text: str, now_ms: int) -> tuple[str, str, dict]:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg} at column {exc.colno}") from None
    protocol = str(record.get("protocol", "")).lower()
    if protocol not in PROTOCOL_NAMES:
        raise ValueError(f"protocol must be one of MQCN, MQDSRP, MQSD, got {record.get('protocol')!r}")
    try:
        body = base64.b64decode(record["body"], validate=True)
    except KeyError:
        raise ValueError("no body field") from None
    except (binascii.Error, TypeError) as exc:
        raise ValueError(f"body is not base64: {exc}") from None
    fields = {k: record[k] for k in _JSON_FIELDS if record.get(k) is not None}
    sent = record.get("sent_time", now_ms)
    env = _envelope(protocol, body, sent, arrival_time=record.get("arrival_time", sent), **fields)
    return protocol, env["destination_machine"], env


def _hex_line(text: str, protocol: str | None, where: str, now_ms: int) -> tuple[str, str, dict]:
    protocol = _need_protocol(protocol, where)
    try:
        body = bytes.fromhex("".join(text.split()))
    except ValueError as exc:
        raise ValueError(f"not hexadecimal: {exc}") from None
    env = _envelope(protocol, body, now_ms)
    return protocol, env["destination_machine"], env


# ---------------------------------------------------------------------------- captures
def _read_pcap(path: Path, out: Replay) -> None:
    data = path.read_bytes()
    endian, tick = PCAP_MAGICS[data[:4]]
    if len(data) < 24:
        out.problems.append(Problem(f"{path}", "truncated pcap global header"))
        return
    linktype = struct.unpack_from(endian + "I", data, 20)[0] & 0x0FFFFFFF
    pos, number = 24, 0
    while pos < len(data):
        number += 1
        if pos + 16 > len(data):
            out.problems.append(Problem(f"{path}:packet {number}", "truncated record header"))
            return
        sec, frac, caplen, _ = struct.unpack_from(endian + "IIII", data, pos)
        if pos + 16 + caplen > len(data):
            out.problems.append(Problem(f"{path}:packet {number}", f"captured length {caplen} runs past the file"))
            return
        frame = data[pos + 16:pos + 16 + caplen]
        _packet(frame, linktype, int((sec + frac * tick) * 1000), f"{path}:packet {number}", out)
        pos += 16 + caplen


def _read_pcapng(path: Path, out: Replay) -> None:
    data = path.read_bytes()
    pos, number, endian = 0, 0, "<"
    interfaces: list[tuple[int, float]] = []      # (linktype, seconds per timestamp unit)
    while pos + 12 <= len(data):
        if data[pos:pos + 4] == PCAPNG_MAGIC:
            endian = "<" if data[pos + 8:pos + 12] == b"\x4d\x3c\x2b\x1a" else ">"
        block_type, length = struct.unpack_from(endian + "II", data, pos)
        if length < 12 or pos + length > len(data):
            out.problems.append(Problem(f"{path}:byte {pos}", f"block length {length} is invalid"))
            return
        body = data[pos + 8:pos + length - 4]
        if block_type == 1:                       # Interface Description Block
            interfaces.append((struct.unpack_from(endian + "H", body, 0)[0], _if_tsresol(body, endian)))
        elif block_type in (6, 3):                # Enhanced / Simple Packet Block
            number += 1
            where = f"{path}:packet {number}"
            if block_type == 6:
                iface, hi, lo, caplen = struct.unpack_from(endian + "IIII", body, 0)
                frame = body[20:20 + caplen]
            else:
                iface, hi, lo, frame = 0, 0, 0, body[4:4 + struct.unpack_from(endian + "I", body, 0)[0]]
            if iface >= len(interfaces):
                out.problems.append(Problem(where, f"interface {iface} was not described"))
            else:
                linktype, unit = interfaces[iface]
                _packet(frame, linktype, int(((hi << 32) | lo) * unit * 1000), where, out)
        pos += length


def _if_tsresol(body: bytes, endian: str) -> float:
    pos = 8
    while pos + 4 <= len(body):
        code, size = struct.unpack_from(endian + "HH", body, pos)
        if code == 0:
            break
        if code == 9 and size >= 1:
            v = body[pos + 4]
            return 2.0 ** -(v & 0x7F) if v & 0x80 else 10.0 ** -v
        pos += 4 + ((size + 3) & ~3)
    return 1e-6


def _packet(frame: bytes, linktype: int, ts_ms: int, where: str, out: Replay) -> None:
    try:
        ip = _network_layer(frame, linktype)
        if ip is None:
            out.ignored += 1
            return
        udp = _udp(ip)
        if udp is None:
            out.ignored += 1
            return
        src, dst, sport, dport, payload = udp
    except ValueError as exc:
        out.problems.append(Problem(where, str(exc)))
        return
    if MQSD_UDP_PORT not in (sport, dport):
        out.ignored += 1
        return
    env = _envelope("mqsd", payload, ts_ms, source_machine=src, destination_machine=dst,
                    destination_queue=f"udp:{dport}")
    out.items.append(("mqsd", dst, env))


def _network_layer(frame: bytes, linktype: int) -> bytes | None:
    if linktype == LINKTYPE_ETHERNET:
        if len(frame) < 14:
            raise ValueError("truncated Ethernet header")
        ethertype, offset = struct.unpack_from(">H", frame, 12)[0], 14
        while ethertype == 0x8100 and len(frame) >= offset + 4:              # 802.1Q VLAN tags
            ethertype, offset = struct.unpack_from(">H", frame, offset + 2)[0], offset + 4
        return frame[offset:] if ethertype in (0x0800, 0x86DD) else None
    if linktype == LINKTYPE_LINUX_SLL:
        if len(frame) < 16:
            raise ValueError("truncated Linux cooked header")
        return frame[16:] if struct.unpack_from(">H", frame, 14)[0] in (0x0800, 0x86DD) else None
    if linktype in (LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6):
        return frame
    raise ValueError(f"link type {linktype} is not supported (Ethernet, Linux cooked or raw IP)")


def _udp(ip: bytes):
    if not ip:
        raise ValueError("empty IP packet")
    version = ip[0] >> 4
    if version == 4:
        ihl = (ip[0] & 0x0F) * 4
        if len(ip) < 20 or ihl < 20 or len(ip) < ihl:
            raise ValueError("truncated IPv4 header")
        if ip[9] != 17:
            return None
        total = struct.unpack_from(">H", ip, 2)[0]
        src, dst = ".".join(map(str, ip[12:16])), ".".join(map(str, ip[16:20]))
        segment = ip[ihl:max(total, ihl)] if total else ip[ihl:]
    elif version == 6:
        if len(ip) < 40:
            raise ValueError("truncated IPv6 header")
        if ip[6] != 17:
            return None
        import ipaddress
        src, dst = str(ipaddress.IPv6Address(ip[8:24])), str(ipaddress.IPv6Address(ip[24:40]))
        segment = ip[40:40 + struct.unpack_from(">H", ip, 4)[0]]
    else:
        raise ValueError(f"IP version {version} is not 4 or 6")
    if len(segment) < 8:
        raise ValueError("truncated UDP header")
    sport, dport, length = struct.unpack_from(">HHH", segment, 0)
    if length < 8 or length > len(segment):
        raise ValueError(f"UDP length {length} does not fit the {len(segment)}-byte segment")
    return src, dst, sport, dport, segment[8:length]
