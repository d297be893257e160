"""[MC-MQDSRP] replication messages (2.2.2-2.2.6): every structure and all eight messages.

Byte-packed, little-endian except SEQUENCE_NUMBER, which is an unsigned 64-bit big-endian
value (digest §3.1). Layouts lost in the PDF extraction follow the digest's reconstruction
(SyncRequest, BSCAck, PSCAck, AlreadyPurged: digest §3.8).
"""
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .changes import MIN_CHANGE_SIZE, read_target, target_bytes
from .guid import guid_to_bytes
from .properties import Property, read_properties, write_properties
from .reader import Reader, guid_text, u16_bytes, u32_bytes, utf16z_bytes
from .records import rebuilt_by_init
from .seqnum import seq_to_bytes

__all__ = ["AlreadyPurgedMessage", "BASE_HEADER_SIZE", "BaseReplicationHeader", "BSCAckMessage",
           "ChangePropagationMessage", "ChangeReplyMessage", "ChangeRequestHeader", "ChangeRequestMessage",
           "CMD_CREATE", "CMD_DELETE", "CMD_SYNC", "CMD_UPDATE", "COMMANDS", "decode", "DirectoryChange", "encode",
           "encode_directory_change", "new_message", "OP_ALREADY_PURGED", "OP_BSC_ACK", "OP_CHANGE_PROPAGATION",
           "OP_CHANGE_REPLY", "OP_CHANGE_REQUEST", "OP_PSC_ACK", "OP_SYNC_REPLY", "OP_SYNC_REQUEST", "OPERATIONS",
           "PARTITION_SEQ_NUMBERS_SIZE", "PartitionSeqNumbers", "PROTOCOL", "PSCAckMessage",
           "read_directory_change", "ReplicationMessage", "SeqNumberHeader", "SYNC_REPLY_HEADER_SIZE",
           "SyncReplyHeader", "SyncReplyMessage", "SyncRequestMessage"]

PROTOCOL = "MQDSRP"
BASE_HEADER_SIZE = 18
SYNC_REPLY_HEADER_SIZE = 66
PARTITION_SEQ_NUMBERS_SIZE = 32

OP_CHANGE_PROPAGATION = 0x00
OP_CHANGE_REQUEST = 0x01
OP_SYNC_REQUEST = 0x02
OP_SYNC_REPLY = 0x03
OP_CHANGE_REPLY = 0x04
OP_ALREADY_PURGED = 0x05
OP_PSC_ACK = 0x06
OP_BSC_ACK = 0x07
OPERATIONS = {
    OP_CHANGE_PROPAGATION: "ChangePropagation", OP_CHANGE_REQUEST: "ChangeRequest",
    OP_SYNC_REQUEST: "SyncRequest", OP_SYNC_REPLY: "SyncReply", OP_CHANGE_REPLY: "ChangeReply",
    OP_ALREADY_PURGED: "AlreadyPurged", OP_PSC_ACK: "PSCAck", OP_BSC_ACK: "BSCAck",
}
COMMANDS = {0x00: "create", 0x01: "update", 0x02: "delete", 0x03: "synchronization"}
CMD_CREATE, CMD_UPDATE, CMD_DELETE, CMD_SYNC = 0x00, 0x01, 0x02, 0x03


@dataclass(slots=True)
class BaseReplicationHeader:
    version: int
    site_id: str
    operation: int

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, version: int, site_id: str, operation: int) -> None:
        self.version = version
        self.site_id = site_id
        self.operation = operation

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class DirectoryChange:
    command: int
    use_guid: int
    path_name: str | None
    guid_identifier: str | None
    partition_id: str
    previous_seq_number: int
    seq_number: int
    purged_seq_number: int
    properties: list[Property]

    # written out: mypyc compiles this one, not the one @dataclass generates (3.5 times as fast)
    def __init__(self, command: int, use_guid: int, path_name: str | None, guid_identifier: str | None,
                 partition_id: str, previous_seq_number: int, seq_number: int, purged_seq_number: int,
                 properties: list[Property]) -> None:
        self.command, self.use_guid, self.path_name = command, use_guid, path_name
        self.guid_identifier = guid_identifier
        self.partition_id, self.previous_seq_number, self.seq_number = partition_id, previous_seq_number, seq_number
        self.purged_seq_number, self.properties = purged_seq_number, properties

    def __reduce__(self) -> tuple:
        """Copied and pickled through the constructor (see Property.__reduce__)."""
        return DirectoryChange, (self.command, self.use_guid, self.path_name, self.guid_identifier, self.partition_id,
                                 self.previous_seq_number, self.seq_number, self.purged_seq_number, self.properties)


@dataclass(slots=True)
class PartitionSeqNumbers:
    partition_id: str
    last_seq_number: int
    purged_seq_number: int

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, partition_id: str, last_seq_number: int, purged_seq_number: int) -> None:
        self.partition_id = partition_id
        self.last_seq_number = last_seq_number
        self.purged_seq_number = purged_seq_number

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class SeqNumberHeader:
    count: int
    machine_name: str | None = None                 # MUST NOT be present if Count is 0
    partition_seq_numbers: list[PartitionSeqNumbers] = field(default_factory=list)

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, count: int, machine_name: str | None = None,
                 partition_seq_numbers: list[PartitionSeqNumbers] | None = None) -> None:
        self.count = count
        self.machine_name = machine_name
        self.partition_seq_numbers = [] if partition_seq_numbers is None else partition_seq_numbers

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class ChangePropagationMessage:
    flush: int
    count: int
    directory_changes: list[DirectoryChange]
    seq_number_header: SeqNumberHeader

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, flush: int, count: int, directory_changes: list[DirectoryChange],
                 seq_number_header: SeqNumberHeader) -> None:
        self.flush = flush
        self.count = count
        self.directory_changes = directory_changes
        self.seq_number_header = seq_number_header

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class ChangeRequestHeader:
    partition_id: str
    request_identifier: int
    psc_name_offset: int                            # in WCHARs from the start of RequesterName; 0 = no PSCName
    requester_name: str
    psc_name: str | None = None

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, partition_id: str, request_identifier: int, psc_name_offset: int, requester_name: str,
                 psc_name: str | None = None) -> None:
        self.partition_id = partition_id
        self.request_identifier = request_identifier
        self.psc_name_offset = psc_name_offset
        self.requester_name = requester_name
        self.psc_name = psc_name

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class ChangeRequestMessage:
    change_request_header: ChangeRequestHeader
    directory_change: DirectoryChange

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, change_request_header: ChangeRequestHeader, directory_change: DirectoryChange) -> None:
        self.change_request_header = change_request_header
        self.directory_change = directory_change

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class SyncRequestMessage:
    partition_id: str
    from_seq_number: int
    to_seq_number: int
    known_purged_seq_number: int
    is_sync0: int
    scope: int
    requester_name: str

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, partition_id: str, from_seq_number: int, to_seq_number: int, known_purged_seq_number: int,
                 is_sync0: int, scope: int, requester_name: str) -> None:
        self.partition_id = partition_id
        self.from_seq_number = from_seq_number
        self.to_seq_number = to_seq_number
        self.known_purged_seq_number = known_purged_seq_number
        self.is_sync0 = is_sync0
        self.scope = scope
        self.requester_name = requester_name

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class SyncReplyHeader:
    partition_id: str
    from_seq_number: int
    to_seq_number: int
    purged_seq_number: int
    count: int
    complete_sync0: int

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, partition_id: str, from_seq_number: int, to_seq_number: int, purged_seq_number: int,
                 count: int, complete_sync0: int) -> None:
        self.partition_id = partition_id
        self.from_seq_number = from_seq_number
        self.to_seq_number = to_seq_number
        self.purged_seq_number = purged_seq_number
        self.count = count
        self.complete_sync0 = complete_sync0

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class SyncReplyMessage:
    sync_reply_header: SyncReplyHeader
    directory_changes: list[DirectoryChange]

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, sync_reply_header: SyncReplyHeader, directory_changes: list[DirectoryChange]) -> None:
        self.sync_reply_header = sync_reply_header
        self.directory_changes = directory_changes

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class ChangeReplyMessage:
    request_identifier: int
    result: int                                     # HRESULT as an unsigned 32-bit value
    requester_name: str

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, request_identifier: int, result: int, requester_name: str) -> None:
        self.request_identifier = request_identifier
        self.result = result
        self.requester_name = requester_name

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class AlreadyPurgedMessage:
    partition_id: str
    purged_seq_number: int

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, partition_id: str, purged_seq_number: int) -> None:
        self.partition_id = partition_id
        self.purged_seq_number = purged_seq_number

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class PSCAckMessage:
    psc_site_id: str                                # 3.3.7.4 calls it PSCPartitionID (digest §3.8)
    acked_partition_id: str
    acked_seq_number: int
    psc_name: str

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, psc_site_id: str, acked_partition_id: str, acked_seq_number: int, psc_name: str) -> None:
        self.psc_site_id = psc_site_id
        self.acked_partition_id = acked_partition_id
        self.acked_seq_number = acked_seq_number
        self.psc_name = psc_name

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class BSCAckMessage:
    bsc_machine_id: str
    bsc_name: str

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, bsc_machine_id: str, bsc_name: str) -> None:
        self.bsc_machine_id = bsc_machine_id
        self.bsc_name = bsc_name

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class ReplicationMessage:
    """BaseReplicationMessage: the header and the one message its Operation names."""
    header: BaseReplicationHeader
    operation_name: str
    change_propagation: ChangePropagationMessage | None = None
    change_request: ChangeRequestMessage | None = None
    sync_request: SyncRequestMessage | None = None
    sync_reply: SyncReplyMessage | None = None
    change_reply: ChangeReplyMessage | None = None
    already_purged: AlreadyPurgedMessage | None = None
    psc_ack: PSCAckMessage | None = None
    bsc_ack: BSCAckMessage | None = None
    flags: list[str] = field(default_factory=list)

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, header: BaseReplicationHeader, operation_name: str,
                 change_propagation: ChangePropagationMessage | None = None,
                 change_request: ChangeRequestMessage | None = None, sync_request: SyncRequestMessage | None = None,
                 sync_reply: SyncReplyMessage | None = None, change_reply: ChangeReplyMessage | None = None,
                 already_purged: AlreadyPurgedMessage | None = None, psc_ack: PSCAckMessage | None = None,
                 bsc_ack: BSCAckMessage | None = None, flags: list[str] | None = None) -> None:
        self.header = header
        self.operation_name = operation_name
        self.change_propagation = change_propagation
        self.change_request = change_request
        self.sync_request = sync_request
        self.sync_reply = sync_reply
        self.change_reply = change_reply
        self.already_purged = already_purged
        self.psc_ack = psc_ack
        self.bsc_ack = bsc_ack
        self.flags = [] if flags is None else flags

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)

    @property
    def message(self) -> Any:
        return getattr(self, _SLOT_BY_OPERATION[self.header.operation]) \
            if self.header.operation in _SLOT_BY_OPERATION else None


_SLOT_BY_OPERATION = {
    OP_CHANGE_PROPAGATION: "change_propagation", OP_CHANGE_REQUEST: "change_request",
    OP_SYNC_REQUEST: "sync_request", OP_SYNC_REPLY: "sync_reply", OP_CHANGE_REPLY: "change_reply",
    OP_ALREADY_PURGED: "already_purged", OP_PSC_ACK: "psc_ack", OP_BSC_ACK: "bsc_ack",
}


# ---------------------------------------------------------------------------- decoding
def decode(body: bytes) -> ReplicationMessage:
    r = Reader(body, PROTOCOL)
    r.structure = "BaseReplicationHeader"
    if not body:
        raise r.error("Version", "empty body: not a replication message")
    header = BaseReplicationHeader(r.u8("Version"), r.guid("SiteID"), r.u8("Operation"))
    msg = ReplicationMessage(header, OPERATIONS.get(header.operation, "Unknown"))
    # 3.1.5.1: a Version other than 0x00 or an unknown Operation: "take no further action". The rest
    # of such a body has no defined layout, so it is rejected (and lands in dead letters, kept whole).
    if header.version != 0x00:
        raise r.error("Version", f"must be 0x00, got 0x{header.version:02x}; such messages are ignored (3.1.5.1)", 0)
    if header.operation not in OPERATIONS:
        raise r.error("Operation", f"unknown operation 0x{header.operation:02x}: must be 0x00 to 0x07; such messages "
                                   "are ignored (3.1.5.1)", 17)
    setattr(msg, _SLOT_BY_OPERATION[header.operation], _READERS[header.operation](r))
    r.expect_end()
    return msg


_CHANGE_MIDDLE = struct.Struct(">16sQQQ")          # PartitionID, then three big-endian SEQUENCE_NUMBERs


def read_directory_change(r: Reader, index: int | None = None) -> DirectoryChange:
    r.structure = "DirectoryChange" if index is None else f"DirectoryChange[{index}]"
    command, use_guid, path_name, guid_identifier = read_target(r, COMMANDS)
    pos = r.pos
    if pos + _CHANGE_MIDDLE.size <= len(r.buf):         # the common case: one unpack for the fixed middle
        partition, previous, seq, purged = _CHANGE_MIDDLE.unpack_from(r.buf, pos)
        r.pos = pos + _CHANGE_MIDDLE.size
        partition = guid_text(partition)
    else:                                               # field by field, to name the truncated one
        partition, previous, seq, purged = r.guid("PartitionID"), r.seq("PreviousSeqNumber"), r.seq("SeqNumber"), \
            r.seq("PurgedSeqNumber")
    return DirectoryChange(command, use_guid, path_name, guid_identifier, partition, previous, seq, purged,
                           read_properties(r))


def _read_changes(r: Reader, count: int) -> list[DirectoryChange]:
    return [read_directory_change(r, i) for i in range(count)]


def _read_flag(r: Reader, field_name: str, allowed: tuple[int, ...]) -> int:
    at = r.pos
    value = r.u8(field_name)
    if value not in allowed:
        raise r.error(field_name, f"must be one of {', '.join(f'0x{a:02x}' for a in allowed)}, got 0x{value:02x}", at)
    return value


def _read_change_propagation(r: Reader) -> ChangePropagationMessage:
    r.structure = "ChangePropagationMessage"
    flush = _read_flag(r, "Flush", (0x00, 0x01))
    count = r.count("Count", r.u16("Count"), MIN_CHANGE_SIZE)
    changes = _read_changes(r, count)
    return ChangePropagationMessage(flush, count, changes, _read_seq_number_header(r))


def _read_seq_number_header(r: Reader) -> SeqNumberHeader:
    r.structure = "SeqNumberHeader"
    count = r.u16("Count")
    if count == 0:
        return SeqNumberHeader(0)
    name = r.utf16z("MachineName")
    r.count("PartitionSeqNumbers", count, PARTITION_SEQ_NUMBERS_SIZE)
    entries = [PartitionSeqNumbers(r.guid(f"PartitionSeqNumbers[{i}].PartitionID"),
                                   r.seq(f"PartitionSeqNumbers[{i}].LastSeqNumber"),
                                   r.seq(f"PartitionSeqNumbers[{i}].PurgedSeqNumber")) for i in range(count)]
    return SeqNumberHeader(count, name, entries)


def _read_change_request(r: Reader) -> ChangeRequestMessage:
    r.structure = "ChangeRequestHeader"
    partition_id = r.guid("PartitionID")
    request_identifier = r.u32("RequestIdentifier")
    offset_at = r.pos
    psc_offset = r.u32("PSCNameOffset")
    requester = r.utf16z("RequesterName")
    header = ChangeRequestHeader(partition_id, request_identifier, psc_offset, requester)
    if psc_offset:
        # 2.2.5.2: offset in WCHARs from the start of RequesterName; PSCName follows it directly.
        if psc_offset != len(requester) + 1:
            raise r.error("PSCNameOffset", f"{psc_offset} WCHARs does not point just past RequesterName "
                                           f"({len(requester) + 1} WCHARs with its null)", offset_at)
        header.psc_name = r.utf16z("PSCName")
    return ChangeRequestMessage(header, read_directory_change(r))


def _read_sync_request(r: Reader) -> SyncRequestMessage:
    r.structure = "SyncRequestMessage"
    return SyncRequestMessage(r.guid("PartitionID"), r.seq("FromSeqNumber"), r.seq("ToSeqNumber"),
                              r.seq("KnownPurgedSeqNumber"), _read_flag(r, "IsSync0", (0x00, 0x01)),
                              _read_flag(r, "Scope", (0x00, 0x01)), r.utf16z("RequesterName"))


def _read_sync_reply(r: Reader) -> SyncReplyMessage:
    r.structure = "SyncReplyHeader"
    partition_id, first, last, purged = r.guid("PartitionID"), r.seq("FromSeqNumber"), r.seq("ToSeqNumber"), \
        r.seq("PurgedSeqNumber")
    count = r.u32("Count")
    complete = r.u32("CompleteSync0")
    if complete not in (0, 1, 2):
        raise r.error("CompleteSync0", f"must be 0, 1 or 2, got {complete}", r.pos - 4)
    if count * MIN_CHANGE_SIZE > r.remaining():
        raise r.error("Count", f"count {count} needs at least {count * MIN_CHANGE_SIZE} bytes of DirectoryChanges, "
                               f"only {r.remaining()} remain", SYNC_REPLY_HEADER_SIZE - 8)
    header = SyncReplyHeader(partition_id, first, last, purged, count, complete)
    return SyncReplyMessage(header, _read_changes(r, count))


def _read_change_reply(r: Reader) -> ChangeReplyMessage:
    r.structure = "ChangeReplyMessage"
    return ChangeReplyMessage(r.u32("RequestIdentifier"), r.u32("Result"), r.utf16z("RequesterName"))


def _read_already_purged(r: Reader) -> AlreadyPurgedMessage:
    r.structure = "AlreadyPurgedMessage"
    return AlreadyPurgedMessage(r.guid("PartitionID"), r.seq("PurgedSeqNumber"))


def _read_psc_ack(r: Reader) -> PSCAckMessage:
    r.structure = "PSCAckMessage"
    return PSCAckMessage(r.guid("PSCSiteID"), r.guid("AckedPartitionID"), r.seq("AckedSeqNumber"),
                         r.utf16z("PSCName"))


def _read_bsc_ack(r: Reader) -> BSCAckMessage:
    r.structure = "BSCAckMessage"
    return BSCAckMessage(r.guid("BSCMachineID"), r.utf16z("BSCName"))


_READERS = {
    OP_CHANGE_PROPAGATION: _read_change_propagation, OP_CHANGE_REQUEST: _read_change_request,
    OP_SYNC_REQUEST: _read_sync_request, OP_SYNC_REPLY: _read_sync_reply, OP_CHANGE_REPLY: _read_change_reply,
    OP_ALREADY_PURGED: _read_already_purged, OP_PSC_ACK: _read_psc_ack, OP_BSC_ACK: _read_bsc_ack,
}


# ---------------------------------------------------------------------------- encoding
def encode(msg: ReplicationMessage) -> bytes:
    h = msg.header
    head = bytes([h.version]) + guid_to_bytes(h.site_id) + bytes([h.operation])
    inner = msg.message
    if inner is None:
        raise ValueError(f"operation 0x{h.operation:02x} names none of the eight messages")
    return head + _WRITERS[type(inner)](inner)


def encode_directory_change(c: DirectoryChange) -> bytes:
    return (target_bytes(c.command, c.use_guid, c.path_name, c.guid_identifier) + guid_to_bytes(c.partition_id)
            + seq_to_bytes(c.previous_seq_number) + seq_to_bytes(c.seq_number) + seq_to_bytes(c.purged_seq_number)
            + write_properties(c.properties))


def _write_seq_number_header(h: SeqNumberHeader) -> bytes:
    if not h.partition_seq_numbers:
        return u16_bytes(0)
    return (u16_bytes(len(h.partition_seq_numbers)) + utf16z_bytes(h.machine_name or "")
            + b"".join(guid_to_bytes(p.partition_id) + seq_to_bytes(p.last_seq_number)
                       + seq_to_bytes(p.purged_seq_number) for p in h.partition_seq_numbers))


def _write_change_propagation(m: ChangePropagationMessage) -> bytes:
    return (bytes([m.flush]) + u16_bytes(len(m.directory_changes))
            + b"".join(encode_directory_change(c) for c in m.directory_changes)
            + _write_seq_number_header(m.seq_number_header))


def _write_change_request(m: ChangeRequestMessage) -> bytes:
    h = m.change_request_header
    psc = utf16z_bytes(h.psc_name) if h.psc_name is not None else b""
    offset = len(h.requester_name) + 1 if h.psc_name is not None else 0
    return (guid_to_bytes(h.partition_id) + u32_bytes(h.request_identifier) + u32_bytes(offset)
            + utf16z_bytes(h.requester_name) + psc + encode_directory_change(m.directory_change))


def _write_sync_request(m: SyncRequestMessage) -> bytes:
    return (guid_to_bytes(m.partition_id) + seq_to_bytes(m.from_seq_number) + seq_to_bytes(m.to_seq_number)
            + seq_to_bytes(m.known_purged_seq_number) + bytes([m.is_sync0, m.scope]) + utf16z_bytes(m.requester_name))


def _write_sync_reply(m: SyncReplyMessage) -> bytes:
    h = m.sync_reply_header
    return (guid_to_bytes(h.partition_id) + seq_to_bytes(h.from_seq_number) + seq_to_bytes(h.to_seq_number)
            + seq_to_bytes(h.purged_seq_number) + u32_bytes(len(m.directory_changes)) + u32_bytes(h.complete_sync0)
            + b"".join(encode_directory_change(c) for c in m.directory_changes))


def _write_change_reply(m: ChangeReplyMessage) -> bytes:
    return u32_bytes(m.request_identifier) + u32_bytes(m.result) + utf16z_bytes(m.requester_name)


def _write_already_purged(m: AlreadyPurgedMessage) -> bytes:
    return guid_to_bytes(m.partition_id) + seq_to_bytes(m.purged_seq_number)


def _write_psc_ack(m: PSCAckMessage) -> bytes:
    return (guid_to_bytes(m.psc_site_id) + guid_to_bytes(m.acked_partition_id) + seq_to_bytes(m.acked_seq_number)
            + utf16z_bytes(m.psc_name))


def _write_bsc_ack(m: BSCAckMessage) -> bytes:
    return guid_to_bytes(m.bsc_machine_id) + utf16z_bytes(m.bsc_name)


_WRITERS: dict[type, Callable[[Any], bytes]] = {
    ChangePropagationMessage: _write_change_propagation, ChangeRequestMessage: _write_change_request,
    SyncRequestMessage: _write_sync_request, SyncReplyMessage: _write_sync_reply,
    ChangeReplyMessage: _write_change_reply, AlreadyPurgedMessage: _write_already_purged,
    PSCAckMessage: _write_psc_ack, BSCAckMessage: _write_bsc_ack,
}
_OPERATION_BY_TYPE = {
    ChangePropagationMessage: OP_CHANGE_PROPAGATION, ChangeRequestMessage: OP_CHANGE_REQUEST,
    SyncRequestMessage: OP_SYNC_REQUEST, SyncReplyMessage: OP_SYNC_REPLY, ChangeReplyMessage: OP_CHANGE_REPLY,
    AlreadyPurgedMessage: OP_ALREADY_PURGED, PSCAckMessage: OP_PSC_ACK, BSCAckMessage: OP_BSC_ACK,
}


def new_message(site_id: str, inner) -> ReplicationMessage:
    """Wrap one of the eight messages in its BaseReplicationHeader (Version 0x00, 2.2.5.1)."""
    operation = _OPERATION_BY_TYPE[type(inner)]
    msg = ReplicationMessage(BaseReplicationHeader(0x00, site_id, operation), OPERATIONS[operation])
    setattr(msg, _SLOT_BY_OPERATION[operation], inner)
    return msg
