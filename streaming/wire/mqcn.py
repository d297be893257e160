"""[MS-MQCN] Change Notification Message (2.2.4), v1 Notification Updates (2.2.6) and the
v2 Notification Body (2.2.5). The MSMQ body is the message plus one unused byte (3.3.5.3).
"""
import re
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from .changes import MIN_CHANGE_SIZE, read_target, target_bytes
from .guid import guid_to_bytes
from .properties import Property, read_properties, write_properties
from .reader import Reader, utf16_text
from .records import rebuilt_by_init

__all__ = ["body_text", "ChangeNotificationMessage", "Command", "COMMANDS", "decode", "encode", "encode_update",
           "Event", "EVENTS", "MAX_DC_NAME", "new_update", "new_v1", "new_v2", "NotificationBody",
           "NotificationUpdate", "PROTOCOL", "RESERVED_SIZE", "VERSION_DS", "VERSION_QM"]

PROTOCOL = "MQCN"
VERSION_DS = 0x01            # sent by the MSMQ Directory Service: Notification Updates
VERSION_QM = 0x02            # sent by a queue manager: one Notification Body


class Command(IntEnum):
    """A Notification Update's Command (2.2.6); a decoded update keeps the plain int."""
    CREATE = 0x00
    UPDATE = 0x01
    DELETE = 0x02


class Event(StrEnum):
    """A Notification Body's Event (2.2.5), as its text; a decoded body keeps the plain str."""
    CREATE_QUEUE = "1"
    CHANGE_QUEUE = "2"
    DELETE_QUEUE = "3"
    CHANGE_MACHINE = "4"


COMMANDS: dict[int, str] = {Command.CREATE: "creation", Command.UPDATE: "change", Command.DELETE: "deletion"}
# What each event does, in the words of the outcome rows (the machine object is the queue manager's, 3.2.5.2)
EVENTS: dict[Any, str] = {Event.CREATE_QUEUE: "create queue", Event.CHANGE_QUEUE: "change queue", Event.DELETE_QUEUE: "delete queue",
          Event.CHANGE_MACHINE: "change queue manager"}
RESERVED_SIZE = 24
MAX_DC_NAME = 256            # DirectoryServiceServer = 1*256(VCHAR)


@dataclass(slots=True)
class NotificationUpdate:
    command: int
    use_guid: int
    path_name: str | None
    guid_identifier: str | None
    guid_master_id: str
    reserved: bytes                     # 2.2.6: MUST be ignored by the server; kept for exact re-encoding
    properties: list[Property]
    flags: list[str] = field(default_factory=list)

    # written out: mypyc compiles this one, not the one @dataclass generates (3.5 times as fast)
    def __init__(self, command: int, use_guid: int, path_name: str | None, guid_identifier: str | None,
                 guid_master_id: str, reserved: bytes, properties: list[Property],
                 flags: list[str] | None = None) -> None:
        self.command, self.use_guid, self.path_name = command, use_guid, path_name
        self.guid_identifier = guid_identifier
        self.guid_master_id, self.reserved, self.properties = guid_master_id, reserved, properties
        self.flags = [] if flags is None else flags

    def __reduce__(self) -> tuple:
        """Copied and pickled through the constructor (see Property.__reduce__)."""
        return NotificationUpdate, (self.command, self.use_guid, self.path_name, self.guid_identifier,
                                    self.guid_master_id, self.reserved, self.properties, self.flags)


@dataclass(slots=True)
class NotificationBody:
    text: str                           # the exact UTF-16 string, so re-encoding gives back the same bytes
    event: str
    object_guid: str                    # canonical lowercase
    domain_controller: str
    null_terminated: bool               # whether a 0x0000 followed </Notification> (unspecified, B.11.3)
    flags: list[str] = field(default_factory=list)

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, text: str, event: str, object_guid: str, domain_controller: str, null_terminated: bool,
                 flags: list[str] | None = None) -> None:
        self.text = text
        self.event = event
        self.object_guid = object_guid
        self.domain_controller = domain_controller
        self.null_terminated = null_terminated
        self.flags = [] if flags is None else flags

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class ChangeNotificationMessage:
    version: int
    number_of_update_notifications: int
    updates: list[NotificationUpdate] | None = None     # version 0x01
    body: NotificationBody | None = None                # version 0x02
    unused_byte: bytes = b"\x00"                        # 3.3.5.3: the extra byte after the message
    flags: list[str] = field(default_factory=list)

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, version: int, number_of_update_notifications: int,
                 updates: list[NotificationUpdate] | None = None, body: NotificationBody | None = None,
                 unused_byte: bytes = b"\x00", flags: list[str] | None = None) -> None:
        self.version = version
        self.number_of_update_notifications = number_of_update_notifications
        self.updates = updates
        self.body = body
        self.unused_byte = unused_byte
        self.flags = [] if flags is None else flags

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


# ---------------------------------------------------------------------------- decoding
def decode(body: bytes) -> ChangeNotificationMessage:
    r = Reader(body, PROTOCOL)
    r.structure = "ChangeNotificationMessage"
    version = r.u8("Version")
    count = r.u8("NumberOfUpdateNotifications")
    msg = ChangeNotificationMessage(version, count)
    if version == VERSION_DS:
        r.count("NumberOfUpdateNotifications", count, MIN_CHANGE_SIZE)
        msg.updates = [_read_update(r, i) for i in range(count)]
        r.structure = "ChangeNotificationMessage"
        _read_unused_byte(r, msg)
    elif version == VERSION_QM:
        if count != 1:
            raise r.error("NumberOfUpdateNotifications", f"must be 0x01 when Version is 0x02, got {count}", 1)
        msg.body = _read_body(r)
        _read_unused_byte(r, msg, allow_terminator=True)
    else:
        # 2.2.4 defines only 0x01 and 0x02; note <4>: other messages are ignored. Nothing after the
        # Version can be interpreted, so the body is rejected (and lands in dead letters, kept whole).
        raise r.error("Version", f"must be 0x01 (directory service) or 0x02 (queue manager), got 0x{version:02x}; "
                                 "other versions are ignored (note <4>)", 0)
    return msg


def _read_update(r: Reader, index: int) -> NotificationUpdate:
    r.structure = f"NotificationUpdate[{index}]"
    command, use_guid, path_name, guid_identifier = read_target(r, COMMANDS)
    master = r.guid("GuidMasterId")
    reserved = bytes(r.raw("Reserved", RESERVED_SIZE))
    update = NotificationUpdate(command, use_guid, path_name, guid_identifier, master, reserved, read_properties(r))
    if any(reserved):
        update.flags.append("reserved_nonzero")      # MUST be ignored (2.2.6); MQDSRP puts sequence numbers here
    return update


def _read_unused_byte(r: Reader, msg: ChangeNotificationMessage, allow_terminator: bool = False) -> None:
    """3.3.5.3: one unused byte follows the message. A missing byte is flagged; more is garbage."""
    rest = r.buf[r.pos:]
    if allow_terminator and msg.body is not None and len(rest) in (2, 3) and rest[:2] == b"\x00\x00":
        msg.body.null_terminated = True
        rest = rest[2:]
        r.pos += 2
    if len(rest) > 1:
        raise r.error("(end)", f"trailing garbage: {len(rest)} bytes after the message, only 1 unused byte allowed")
    msg.unused_byte = bytes(rest)
    r.pos += len(rest)
    if not rest:
        msg.flags.append("unused_byte_missing")


_GUID_TEXT = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
_CLOSE = "</notification>"


def _read_body(r: Reader) -> NotificationBody:
    """2.2.5 (R17 grammar), tolerant of the quirks in digest B.4: tags in any case, the
    grammar's "</ObjectGuid >" or the informal "</ObjectGuid>", GUID hex in any case, and an
    optional 0x0000 after </Notification>."""
    r.structure = "NotificationBody"
    start = r.pos
    available = utf16_text(r.buf[start: len(r.buf) - ((len(r.buf) - start) & 1)])
    fast = _BODY.match(available)
    text = available[: fast.end()] if fast is not None else ""
    if fast is not None and text.isascii() and len(fast[3]) <= MAX_DC_NAME:
        # The match ends at the first closing tag in any case: no group holds a "<". ASCII text keeps
        # its length under lower(), so this is the text the search below finds.
        event, guid_text, dc = fast.groups()
    else:
        end = available.lower().find(_CLOSE)
        if end < 0:
            raise r.error("Notification", "no </Notification> closing tag in the body")
        text = available[: end + len(_CLOSE)]
        event, guid_text, dc = _read_body_slowly(r, text, start)
    r.pos = start + 2 * len(text)
    body = NotificationBody(text, event, guid_text.lower(), dc, False)
    if event not in EVENTS:
        body.flags.append(f"unknown_event:{event}")          # note <10>: the message is ignored
    if not (dc.isascii() and dc.isprintable()) or " " in dc:
        body.flags.append("domain_controller_not_vchar")      # B.11.4: VCHAR is %x21-7E
    return body


# The whole grammar in one match (the common case); a body it does not take is walked token by token,
# which says where it breaks. ASCII-only case folding accepts a subset of what the walk accepts
# (str.lower), so the two agree on every body the fast path takes.
_BODY = re.compile(r"<Notification><Event>([^<]+)</Event><ObjectGuid>(" + _GUID_TEXT.pattern + r")</ObjectGuid ?>"
                   r"<DomainController>([^<]+)</DomainController></Notification>", re.IGNORECASE | re.ASCII)


def _read_body_slowly(r: Reader, text: str, start: int) -> tuple[str, str, str]:
    """Token by token: a WireError at the first place the body breaks the grammar."""
    cursor = _TextCursor(r, text, start)
    cursor.expect("<Notification>")
    cursor.expect("<Event>")
    event = cursor.until("<", "Event")
    cursor.expect("</Event>")
    cursor.expect("<ObjectGuid>")
    guid_at = cursor.pos
    guid_text = cursor.until("<", "ObjectGuid")
    if not _GUID_TEXT.fullmatch(guid_text):
        raise r.error("ObjectGuid", f"{guid_text!r} is not 8-4-4-4-12 hex digits (R17 2.2.5 object-guid)",
                      start + 2 * guid_at)
    cursor.expect("</ObjectGuid", "</ObjectGuid>")
    cursor.accept(" ")
    cursor.expect(">", "</ObjectGuid>")
    cursor.expect("<DomainController>")
    dc_at = cursor.pos
    dc = cursor.until("<", "DomainController")
    if not 1 <= len(dc) <= MAX_DC_NAME:
        raise r.error("DomainController", f"name must be 1 to 256 characters, got {len(dc)}", start + 2 * dc_at)
    cursor.expect("</DomainController>")
    cursor.expect("</Notification>")
    return event, guid_text, dc


class _TextCursor:
    """Walks the body text, turning a mismatch into a WireError at the byte offset of the mismatch."""

    def __init__(self, r: Reader, text: str, byte_start: int):
        self.r, self.text, self.byte_start, self.pos = r, text, byte_start, 0

    def expect(self, token: str, field_name: str | None = None) -> None:
        got = self.text[self.pos:self.pos + len(token)]
        if got.lower() != token.lower():
            raise self.r.error(field_name or token.strip("</>"), f"expected {token!r}, found {got!r}",
                               self.byte_start + 2 * self.pos)
        self.pos += len(token)

    def accept(self, token: str) -> None:
        if self.text.startswith(token, self.pos):
            self.pos += len(token)

    def until(self, stop: str, field_name: str) -> str:
        end = self.text.find(stop, self.pos)
        if end < 0:
            raise self.r.error(field_name, f"no {stop!r} after the value", self.byte_start + 2 * self.pos)
        value = self.text[self.pos:end]
        if not value:
            raise self.r.error(field_name, "empty value", self.byte_start + 2 * self.pos)
        self.pos = end
        return value


# ---------------------------------------------------------------------------- encoding
def encode(msg: ChangeNotificationMessage) -> bytes:
    head = bytes([msg.version, msg.number_of_update_notifications])
    if msg.updates is not None:
        return head + b"".join(encode_update(u) for u in msg.updates) + msg.unused_byte
    if msg.body is not None:
        text = msg.body.text.encode("utf-16-le", "surrogatepass")
        return head + text + (b"\x00\x00" if msg.body.null_terminated else b"") + msg.unused_byte
    raise ValueError(f"a version 0x{msg.version:02x} message has neither updates nor a body")


def encode_update(u: NotificationUpdate) -> bytes:
    if len(u.reserved) != RESERVED_SIZE:
        raise ValueError(f"Reserved must be {RESERVED_SIZE} bytes, got {len(u.reserved)}")
    return (target_bytes(u.command, u.use_guid, u.path_name, u.guid_identifier) + guid_to_bytes(u.guid_master_id)
            + u.reserved + write_properties(u.properties))


# ---------------------------------------------------------------------------- builders
def body_text(event: str, object_guid: str, domain_controller: str) -> str:
    # Senders emit "</ObjectGuid>" without the grammar's stray space (digest B.11.1).
    return (f"<Notification><Event>{event}</Event><ObjectGuid>{object_guid}</ObjectGuid>"
            f"<DomainController>{domain_controller}</DomainController></Notification>")


def new_v2(event: int, object_guid: str, domain_controller: str) -> ChangeNotificationMessage:
    """A queue manager's notification (3.3.5.1): Version 0x02, one body, plus the unused byte."""
    text = body_text(str(event), object_guid, domain_controller)
    body = NotificationBody(text, str(event), object_guid.lower(), domain_controller, False)
    return ChangeNotificationMessage(VERSION_QM, 1, body=body)


def new_update(command: int, properties: list[Property], guid_master_id: str, *, path_name: str | None = None,
               guid_identifier: str | None = None) -> NotificationUpdate:
    """3.3.5.2: creates use the PathName (UseGuid 0x00), everything else the GUID (0x01)."""
    use_guid = 0x00 if guid_identifier is None else 0x01
    return NotificationUpdate(command, use_guid, path_name, guid_identifier, guid_master_id,
                              bytes(RESERVED_SIZE), properties)


def new_v1(updates: list[NotificationUpdate]) -> ChangeNotificationMessage:
    if len(updates) > 255:
        raise ValueError("NumberOfUpdateNotifications is a UCHAR: at most 255 updates per message")
    return ChangeNotificationMessage(VERSION_DS, len(updates), updates=list(updates))
