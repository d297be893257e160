"""Reading recorded messages for `dirstream produce replay`.

Formats, detected per path:
- JSON lines: one envelope per line, `body` in base64 (any envelope field may be given; the rest default);
- hex lines (needs --protocol): one body per line as hex digits;
- a directory (needs --protocol): every regular file, in name order, is one raw body;
- pcap / pcapng captures (producers/capture.py): MQCN and MQDSRP in MQQB sessions on TCP port 1801,
  MQSD datagrams on UDP port 1801.
Every bad line or packet becomes a Problem with its position and is skipped; the rest still goes out.
"""
import base64
import binascii
import json
from pathlib import Path

from streaming.wire.envelope import PROTOCOL_NAMES, make_envelope

from .capture import Problem, Replay

__all__ = ["CAPTURE_MAGICS", "read_paths"]

# pcap (both byte orders, micro- and nanosecond) and pcapng magic numbers: the capture reader takes these
CAPTURE_MAGICS = {b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d",
                  b"\x0a\x0d\x0d\x0a"}


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
        if head in CAPTURE_MAGICS:
            _read_capture(path, out)
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
def _read_capture(path: Path, out: Replay) -> None:
    from .capture import read_capture
    read_capture(path, out)
