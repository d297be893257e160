"""MS-MQMQ 2.1 format names (DIRECT=, PUBLIC=, PRIVATE=<guid>\\<hex id>, DL=) and the UserHeader.Flags.DQ / AQ /
RQ queue type each is written with (MS-MQMQ 2.2.19.2)."""
import re
import uuid
from dataclasses import dataclass

from .layout import (
    Q_DIRECT, Q_NONE, Q_PRIVATE_ADMIN_HOST, Q_PRIVATE_DESTINATION, Q_PRIVATE_OTHER, Q_PRIVATE_SOURCE, Q_PUBLIC,
    Q_SAME_AS_ADMIN, QUEUE_TYPES,
)

__all__ = ["canonical_format_name", "FormatName", "infer_queue_type", "parse_format_name",
           "private_format_name", "QueueContext", "resolve_queue_type"]


_GUID_RE = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
_PRIVATE_RE = re.compile(rf"({_GUID_RE})\\([0-9A-Fa-f]{{1,8}})")      # MS-MQMQ 2.1.4
_GUID_ONLY_RE = re.compile(_GUID_RE)


@dataclass(frozen=True, slots=True)
class FormatName:
    """One format name text taken apart: kind "DIRECT" | "PUBLIC" | "PRIVATE" | "DL"."""
    kind: str
    guid: uuid.UUID | None = None
    number: int | None = None
    direct: str | None = None


def private_format_name(host: uuid.UUID, queue_id: int) -> str:
    """MS-MQMQ 2.1.4: PrivateName = "PRIVATE=" ComputerGuid "\\" 1*8HEXDIG. The id is written in hexadecimal as
    the grammar says (lower case, no leading zeros), so the MQCN notification queue is "PRIVATE=<guid>\\3"."""
    return f"PRIVATE={host}\\{queue_id:x}"


def parse_format_name(text: str) -> FormatName:
    """A format name text back into its parts; prefixes are case-insensitive. ValueError if not one of ours."""
    prefix, _, rest = text.partition("=")
    kind = prefix.upper()
    if kind == "DIRECT" and "\x00" not in rest:
        return FormatName("DIRECT", direct=rest)
    if kind in ("PUBLIC", "DL") and _GUID_ONLY_RE.fullmatch(rest):
        return FormatName(kind, guid=uuid.UUID(rest))
    match = _PRIVATE_RE.fullmatch(rest) if kind == "PRIVATE" else None
    if match:
        return FormatName("PRIVATE", guid=uuid.UUID(match[1]), number=int(match[2], 16))
    raise ValueError(f"not a DIRECT=, PUBLIC=, PRIVATE=<guid>\\<hex id> or DL= format name: {text!r}")


def canonical_format_name(text: str) -> str:
    """The text parse_packet renders for the queue `text` names."""
    name = parse_format_name(text)
    if name.kind == "DIRECT":
        return "DIRECT=" + name.direct
    if name.kind == "PRIVATE":
        return private_format_name(name.guid, name.number)
    return f"{name.kind}={name.guid}"


@dataclass(frozen=True, slots=True)
class QueueContext:
    source: uuid.UUID
    destination: uuid.UUID
    admin: str | None


def infer_queue_type(slot: str, text: str | None, context: QueueContext) -> int:
    """The UserHeader.Flags.DQ/AQ/RQ value a format name text is written with unless overridden."""
    if text is None:
        return Q_NONE
    if slot == "ResponseQueue" and text == context.admin:
        return Q_SAME_AS_ADMIN
    name = parse_format_name(text)
    if name.kind in ("DIRECT", "PUBLIC"):
        return Q_DIRECT if name.kind == "DIRECT" else Q_PUBLIC
    if name.kind == "PRIVATE" and name.guid == context.destination:
        return Q_PRIVATE_DESTINATION
    if name.kind == "PRIVATE" and slot != "DestinationQueue":
        return Q_PRIVATE_SOURCE if name.guid == context.source else Q_PRIVATE_OTHER
    raise ValueError(f"{slot} {text!r} cannot be written in a UserHeader (DQ allows DIRECT=, PUBLIC= and "
                     f"PRIVATE= on the destination queue manager {context.destination})")


def resolve_queue_type(slot: str, text: str | None, override: int | None, context: QueueContext) -> int:
    inferred = infer_queue_type(slot, text, context)
    if override is None or override == inferred:
        return inferred
    if override not in QUEUE_TYPES[slot] or not _fits_queue_type(override, text, context):
        raise ValueError(f"{slot} type {override} does not fit {text!r}")
    return override


def _fits_queue_type(qtype: int, text: str | None, context: QueueContext) -> bool:
    if qtype == Q_SAME_AS_ADMIN:
        return text == context.admin
    if text is None:
        return qtype == Q_NONE
    name = parse_format_name(text)
    hosts = {Q_PRIVATE_SOURCE: context.source, Q_PRIVATE_DESTINATION: context.destination,
             Q_PRIVATE_ADMIN_HOST: _text_host(context.admin)}
    if qtype in hosts:
        return name.kind == "PRIVATE" and name.guid == hosts[qtype]
    return name.kind == {Q_PUBLIC: "PUBLIC", Q_PRIVATE_OTHER: "PRIVATE", Q_DIRECT: "DIRECT"}.get(qtype)


def _text_host(text: str | None) -> uuid.UUID | None:
    if text is None:
        return None
    name = parse_format_name(text)
    return name.guid if name.kind == "PRIVATE" else None
