"""Packets from bytes: framing (BaseHeader.PacketSize), the internal packets and the UserMessage with its optional
headers, every length and count checked against the bytes left before it is read."""
import struct
import uuid

from ..errors import WireError
from ..reader import Reader, decode_utf16
from .layout import (
    BASE_DH, BASE_HEADER_SIZE, BASE_IN, BASE_PR_MASK, BASE_SH, BASE_TR, CONNECTION_PARAMETERS_PACKET_SIZE,
    ESTABLISH_CONNECTION_PACKET_SIZE, INTERNAL_CS, MAX_LABEL_LENGTH, MAX_PACKET_SIZE, MQF_ADMIN_ID,
    MQF_DESTINATION_ID, MQF_DIRECT, MQF_DISTRIBUTION_LIST, MQF_PRIVATE, MQF_PUBLIC, MQF_RESPONSE_ID,
    MQF_SIGNATURE_ID, PROPERTIES_FIXED, PROTOCOL, PT_CONNECTION_PARAMETERS, PT_ESTABLISH_CONNECTION,
    PT_SESSION_ACK, Q_NONE, Q_PRIVATE_ADMIN_HOST, Q_PRIVATE_DESTINATION, Q_PRIVATE_OTHER, Q_PRIVATE_SOURCE,
    Q_PUBLIC, Q_SAME_AS_ADMIN, QUEUE_TYPES, SEC_AI, SEC_AS_SHIFT, SEC_AU, SEC_DE, SEC_EB, SEC_ST_MASK,
    SECURITY_SIZES, SENDER_ID_TYPES, SESSION_ACK_PACKET_SIZE, SESSION_HEADER_SIZE, SESSION_LAYOUT, SIGNATURE,
    SOAP_BODY_SECTION_ID, SOAP_HEADER_SECTION_ID, TX_CG, TX_FA, TX_FM, TX_ID_MASK, TX_ID_SHIFT, TX_LM, UH_AH,
    UH_AQ_SHIFT, UH_CQ, UH_DM_SHIFT, UH_DQ_SHIFT, UH_HH, UH_JN, UH_JP, UH_MP, UH_MQ, UH_RC_MASK, UH_RQ_SHIFT,
    UH_SH, UH_TH, USER_HEADER_FLAGS_OFFSET, VERSION,
)
from .format_names import infer_queue_type, private_format_name, QueueContext
from .packets import (
    ConnectionParameters, DebugHeader, EstablishConnection, MultiQueueFormatHeader, Packet, SecurityHeader,
    SessionAck, SessionHeader, SoapHeader, TransactionHeader, UserMessage,
)

__all__ = ["packet_length", "parse_packet", "read_uuid"]


def packet_length(head: bytes | memoryview) -> int | None:
    """Bytes on the wire of the packet starting at head[0]; None while fewer than 16 bytes are present.

    PacketSize "MUST NOT include the SessionHeader size" (MS-MQMQ 2.2.19.1), yet the SessionAck of MS-MQQB
    4.1.8 has PacketSize 36 = BaseHeader + InternalHeader + SessionHeader in a 36-byte frame. So the trailing
    16-byte SessionHeader is added for a UserMessage (Flags.IN clear) with Flags.SH set, and an internal packet
    (Flags.IN set) is exactly PacketSize bytes.
    """
    if len(head) < BASE_HEADER_SIZE:
        return None
    version, _, flags, signature, size = struct.unpack_from("<BBHII", head)
    if version != VERSION:
        raise WireError(PROTOCOL, "BaseHeader", "VersionNumber", 0, f"must be 0x10, got 0x{version:02x}")
    if signature != SIGNATURE:
        raise WireError(PROTOCOL, "BaseHeader", "Signature", 4, f"must be 0x524F494C, got 0x{signature:08x}")
    if not BASE_HEADER_SIZE <= size <= MAX_PACKET_SIZE:
        raise WireError(PROTOCOL, "BaseHeader", "PacketSize", 8,
                        f"{size} is outside 16..0x00400000 (MS-MQMQ 2.2.19.1)")
    return size + (SESSION_HEADER_SIZE if flags & BASE_SH and not flags & BASE_IN else 0)


def parse_packet(data: bytes) -> Packet:
    """Exactly one whole packet, as framed by packet_length; WireError otherwise."""
    data = bytes(data)
    total = packet_length(data)
    if total is None:
        raise WireError(PROTOCOL, "BaseHeader", "(header)", 0, f"truncated: needs 16 bytes, got {len(data)}")
    if len(data) != total:
        raise WireError(PROTOCOL, "BaseHeader", "PacketSize", 8,
                        f"the packet frames {total} bytes on the wire but {len(data)} were given")
    flags = struct.unpack_from("<H", data, 2)[0]
    if flags & BASE_IN:
        return _parse_internal(data, flags)
    return _parse_user_message(data, flags)


def _parse_internal(data: bytes, flags: int) -> Packet:
    r = Reader(data, PROTOCOL, BASE_HEADER_SIZE)
    r.structure = "InternalHeader"
    r.u16("Reserved")                   # MUST be ignored on receipt (MS-MQQB 2.2.1)
    internal_flags = r.u16("Flags")
    packet_type, refused = internal_flags & 0xF, bool(internal_flags & INTERNAL_CS)
    if flags & BASE_DH:
        raise WireError(PROTOCOL, "BaseHeader", "Flags", 2, "DH is set on a packet that is not a UserMessage")
    if packet_type == PT_SESSION_ACK:
        return _parse_session_ack(r, flags, refused)
    if packet_type not in (PT_ESTABLISH_CONNECTION, PT_CONNECTION_PARAMETERS):
        raise r.error("Flags", f"PT must be 0x1, 0x2 or 0x3, got 0x{packet_type:x}", 18)
    if flags & BASE_SH:
        raise WireError(PROTOCOL, "BaseHeader", "Flags", 2, "SH is set on a packet with no SessionHeader")
    if packet_type == PT_ESTABLISH_CONNECTION:
        return _parse_establish_connection(r, refused)
    return _parse_connection_parameters(r, refused)


def _check_internal_size(r: Reader, expected: int, name: str) -> None:
    if len(r.buf) != expected:
        raise WireError(PROTOCOL, "BaseHeader", "PacketSize", 8, f"a {name} packet is {expected} bytes, got {len(r.buf)}")


def _base_fields(data: bytes) -> dict:
    return {"priority": data[2] & BASE_PR_MASK, "base_reserved": data[1]}


def _parse_session_ack(r: Reader, flags: int, refused: bool) -> SessionAck:
    if not flags & BASE_SH:
        raise WireError(PROTOCOL, "BaseHeader", "Flags", 2, "a SessionAck MUST have SH set (MS-MQQB 2.2.6)")
    if refused:
        raise r.error("Flags", "CS MUST NOT be set in a SessionAck (MS-MQQB 2.2.1)", 18)
    _check_internal_size(r, SESSION_ACK_PACKET_SIZE, "SessionAck")
    return SessionAck(_read_session_header(r), **_base_fields(r.buf))


def _parse_establish_connection(r: Reader, refused: bool) -> EstablishConnection:
    _check_internal_size(r, ESTABLISH_CONNECTION_PACKET_SIZE, "EstablishConnection")
    r.structure = "EstablishConnectionHeader"
    client, server = read_uuid(r, "ClientGuid"), read_uuid(r, "ServerGuid")
    timestamp, operating_system, reserved = r.u32("TimeStamp"), r.u16("OperatingSystem"), r.u16("Reserved")
    padding = r.raw("Padding", 512)
    return EstablishConnection(client, server, timestamp, operating_system, refused, reserved, padding,
                               **_base_fields(r.buf))


def _parse_connection_parameters(r: Reader, refused: bool) -> ConnectionParameters:
    _check_internal_size(r, CONNECTION_PARAMETERS_PACKET_SIZE, "ConnectionParameters")
    r.structure = "ConnectionParametersHeader"
    recoverable, ack = r.u32("RecoverableAckTimeout"), r.u32("AckTimeout")
    reserved, window = r.u16("Reserved"), r.u16("WindowSize")
    return ConnectionParameters(recoverable, ack, window, refused, reserved, **_base_fields(r.buf))




def _read_session_header(r: Reader) -> SessionHeader:
    r.structure = "SessionHeader"
    return SessionHeader(*SESSION_LAYOUT.unpack(r.raw("(header)", SESSION_HEADER_SIZE)))


def _parse_user_message(data: bytes, flags: int) -> UserMessage:
    size = struct.unpack_from("<I", data, 8)[0]
    r = Reader(data[:size], PROTOCOL, BASE_HEADER_SIZE)
    fields, user_flags = _read_user_header(r)
    if not user_flags & UH_MP:
        raise WireError(PROTOCOL, "UserHeader", "Flags", USER_HEADER_FLAGS_OFFSET,
                        "MP MUST always be set: a UserMessage has a MessagePropertiesHeader")
    fields.update(_base_fields(data), trace=bool(flags & BASE_TR),
                  time_to_reach_queue=struct.unpack_from("<I", data, 12)[0])
    fields["transaction"] = _read_transaction_header(r) if user_flags & UH_TH else None
    fields["security"] = _read_security_header(r) if user_flags & UH_SH else None
    fields.update(_read_message_properties(r))
    fields["debug"] = _read_debug_header(r) if flags & BASE_DH else None
    fields["soap"] = _read_soap_header(r) if user_flags & UH_HH else None
    fields["multi_queue"] = _read_multi_queue_header(r) if user_flags & UH_MQ else None
    if r.pos != size:
        raise WireError(PROTOCOL, "BaseHeader", "PacketSize", 8,
                        f"the headers end at byte {r.pos} but PacketSize is {size}")
    fields["session"] = _read_session_header(Reader(data, PROTOCOL, size)) if flags & BASE_SH else None
    return UserMessage(**fields)


def read_uuid(r: Reader, field_name: str) -> uuid.UUID:
    return uuid.UUID(bytes_le=r.raw(field_name, 16))


def _take(r: Reader, size_field: str, size: int, size_at: int, data_field: str) -> bytes:
    """size bytes of data_field, whose length came from size_field at size_at: checked before reading."""
    if size > r.remaining():
        raise r.error(size_field, f"{size} bytes of {data_field} would run past the end of the packet "
                                  f"({r.remaining()} bytes remain)", size_at)
    return r.raw(data_field, size)


def _skip_padding(r: Reader, header_start: int, field_name: str = "(padding)") -> None:
    target = header_start + (-(r.pos - header_start) % 4) + (r.pos - header_start)
    if target > len(r.buf):
        raise r.error(field_name, "padding to a 4-byte boundary runs past the end of the packet")
    r.pos = target


def _align(r: Reader, header_start: int, boundary: int, field_name: str) -> None:
    r.pos += -(r.pos - header_start) % boundary
    if r.pos > len(r.buf):
        raise r.error(field_name, "alignment runs past the end of the packet", len(r.buf))


# ---------------------------------------------------------------------------- UserHeader
def _read_user_header(r: Reader) -> tuple[dict, int]:
    start = r.pos
    r.structure = "UserHeader"
    fields = {"source_qm": read_uuid(r, "SourceQueueManager"), "destination_qm": read_uuid(r, "QueueManagerAddress"),
              "time_to_be_received": r.u32("TimeToBeReceived"), "sent_time": r.u32("SentTime"),
              "message_id": r.u32("MessageID")}
    flags = r.u32("Flags")
    types = _queue_types(r, flags)
    raw = {name: _read_queue(r, name, qtype, start) for name, qtype in types.items()}
    fields["connector_type"] = read_uuid(r, "ConnectorType") if flags & UH_CQ else None
    fields.update(_user_flag_fields(flags))
    fields.update(_render_queues(r, types, raw, fields["source_qm"], fields["destination_qm"]))
    return fields, flags


def _queue_types(r: Reader, flags: int) -> dict[str, int]:
    types = {"DestinationQueue": (flags >> UH_DQ_SHIFT) & 7, "AdminQueue": (flags >> UH_AQ_SHIFT) & 7,
             "ResponseQueue": (flags >> UH_RQ_SHIFT) & 7}
    for name, qtype in types.items():
        if qtype not in QUEUE_TYPES[name]:
            # "MUST be treated as an error by closing the session" (MS-MQMQ 2.2.19.2)
            raise r.error("Flags", f"{name} type 0x{qtype:x} is not one of "
                                   f"{sorted(QUEUE_TYPES[name])}", USER_HEADER_FLAGS_OFFSET)
    return types


def _user_flag_fields(flags: int) -> dict:
    return {"hop_count": flags & UH_RC_MASK, "delivery": (flags >> UH_DM_SHIFT) & 3,
            "journal_negative": bool(flags & UH_JN), "journal_positive": bool(flags & UH_JP),
            "via_http": bool(flags & UH_AH)}


def _read_queue(r: Reader, name: str, qtype: int, header_start: int):
    """The raw value of one queue field: an id, a GUID, (GUID, id) or a direct name; None when absent."""
    if qtype in (Q_NONE, Q_SAME_AS_ADMIN):
        return None
    if qtype in (Q_PRIVATE_SOURCE, Q_PRIVATE_DESTINATION, Q_PRIVATE_ADMIN_HOST):
        return r.u32(name)                                  # PrivateQueueFormatNameId (2.2.18.1.5.1)
    if qtype == Q_PUBLIC:
        return read_uuid(r, name)                               # PublicQueueFormatName (2.2.18.1.7.1)
    if qtype == Q_PRIVATE_OTHER:                            # PrivateQueueFormatName (2.2.18.1.7.2)
        _align(r, header_start, 4, name)
        return read_uuid(r, name), r.u32(name)
    return _read_direct_name(r, name, header_start)


def _read_direct_name(r: Reader, name: str, header_start: int) -> str:
    """DirectQueueFormatName (2.2.18.1.5.2): Count (bytes, with the null) + WCHARs, padded to 4 bytes
    relative to the start of the header."""
    count_at = r.pos
    count = r.u16(f"{name}.Count")
    if count < 2 or count % 2:
        raise r.error(f"{name}.Count", f"{count} is not the byte length of a null-terminated WCHAR string", count_at)
    raw = _take(r, f"{name}.Count", count, count_at, name)
    text = _utf16_terminated(r, raw, name, count_at + 2)
    _skip_padding(r, header_start, name)
    return text


def _utf16_terminated(r: Reader, raw: bytes, name: str, offset: int) -> str:
    if raw[-2:] != b"\x00\x00":
        raise r.error(name, "the string does not end with a null WCHAR", offset + len(raw) - 2)
    text = decode_utf16(raw[:-2], r, name, offset)
    if "\x00" in text:
        first = next(i for i in range(0, len(raw), 2) if raw[i:i + 2] == b"\x00\x00")
        raise r.error(name, "a null WCHAR before the terminating one", offset + first)
    return text


def _render_queues(r: Reader, types: dict, raw: dict, source: uuid.UUID, destination: uuid.UUID) -> dict:
    hosts = {Q_PRIVATE_SOURCE: source, Q_PRIVATE_DESTINATION: destination}
    dest = _render_queue(types["DestinationQueue"], raw["DestinationQueue"], hosts)
    admin = _render_queue(types["AdminQueue"], raw["AdminQueue"], hosts)
    hosts[Q_PRIVATE_ADMIN_HOST] = _admin_host(types["AdminQueue"], raw["AdminQueue"], hosts)
    rtype = types["ResponseQueue"]
    if rtype == Q_PRIVATE_ADMIN_HOST and hosts[Q_PRIVATE_ADMIN_HOST] is None:
        raise r.error("Flags", "RQ 0x4 (private queue on the administration queue's host) needs a private "
                               "administration queue to name that host", USER_HEADER_FLAGS_OFFSET)
    response = admin if rtype == Q_SAME_AS_ADMIN else _render_queue(rtype, raw["ResponseQueue"], hosts)
    context = QueueContext(source, destination, admin)
    return {"destination_queue": dest, "admin_queue": admin, "response_queue": response,
            "admin_queue_type": _override("AdminQueue", types["AdminQueue"], admin, context),
            "response_queue_type": _override("ResponseQueue", rtype, response, context)}


def _admin_host(admin_type: int, admin_raw, hosts: dict) -> uuid.UUID | None:
    if admin_type in (Q_PRIVATE_SOURCE, Q_PRIVATE_DESTINATION):
        return hosts[admin_type]
    if admin_type == Q_PRIVATE_OTHER:
        return admin_raw[0]
    return None


def _render_queue(qtype: int, value, hosts: dict) -> str | None:
    if qtype == Q_NONE:
        return None
    if qtype in hosts:
        return private_format_name(hosts[qtype], value)
    if qtype == Q_PUBLIC:
        return f"PUBLIC={value}"
    if qtype == Q_PRIVATE_OTHER:
        return private_format_name(*value)
    return "DIRECT=" + value


def _override(slot: str, actual: int, text: str | None, context: "QueueContext") -> int | None:
    return None if infer_queue_type(slot, text, context) == actual else actual


# ---------------------------------------------------------------------------- optional headers
def _read_transaction_header(r: Reader) -> TransactionHeader:
    r.structure = "TransactionHeader"
    # Flags bits X1-X8 "MUST be ignored on receipt"; the sentence "Any value not specified in the table MUST be
    # treated as an error" is taken to mean the defined bits (2.2.20.5 is ambiguous), so nothing is rejected.
    flags = r.u32("Flags")
    seq_id = int.from_bytes(r.raw("TxSequenceID", 8), "little")
    seq, previous = r.u32("TxSequenceNumber"), r.u32("PreviousTxSequenceNumber")
    connector = read_uuid(r, "ConnectorQMGuid") if flags & TX_CG else None
    return TransactionHeader(seq_id, seq, previous, (flags >> TX_ID_SHIFT) & TX_ID_MASK, bool(flags & TX_FA),
                             bool(flags & TX_FM), bool(flags & TX_LM), connector)


def _read_security_header(r: Reader) -> SecurityHeader:
    start = r.pos
    r.structure = "SecurityHeader"
    flags = r.u16("Flags")
    sizes = [(r.pos, r.u16(size_field) if limit == 0xFFFF else r.u32(size_field))
             for _, size_field, limit in SECURITY_SIZES]
    _check_security_sizes(r, flags, [size for _, size in sizes], start)
    items = []
    for (data_field, size_field, _), (size_at, size) in zip(SECURITY_SIZES, sizes):
        items.append(_take(r, size_field, size, size_at, data_field))
        _skip_padding(r, start, data_field)      # "Each field MUST be aligned up to the next 4-byte boundary"
    return SecurityHeader(flags & SEC_ST_MASK, *items, authenticated=bool(flags & SEC_AU),
                          encrypted=bool(flags & SEC_EB), default_provider=bool(flags & SEC_DE),
                          security_info=bool(flags & SEC_AI), authentication_signature=(flags >> SEC_AS_SHIFT) & 0xF)


def _check_security_sizes(r: Reader, flags: int, sizes: list[int], start: int) -> None:
    sender_type, sender_size, provider_size = flags & SEC_ST_MASK, sizes[0], sizes[4]
    if sender_type not in SENDER_ID_TYPES:
        raise r.error("Flags", f"ST must be 0x0, 0x1 or 0x2, got 0x{sender_type:x}", start)
    if sender_type == 0 and sender_size:
        raise r.error("SenderIdSize", "MUST be 0x0000 when ST is 0x0", start + 2)
    if sender_type == 2 and sender_size != 16:
        raise r.error("SenderIdSize", f"a queue manager GUID is 16 bytes, got {sender_size}", start + 2)
    if not any(sizes):
        raise r.error("SenderIdSize", "at least one of the five sizes MUST be nonzero", start + 2)
    if flags & SEC_DE and provider_size:
        # ProviderInfo is included only when DE is clear ("otherwise it MUST NOT be included").
        raise r.error("ProviderInfoSize", "ProviderInfo is present although DE (default provider) is set", start + 12)


def _read_message_properties(r: Reader) -> dict:
    start = r.pos
    r.structure = "MessagePropertiesHeader"
    r.need("(fixed part)", PROPERTIES_FIXED.size)
    (acks, label_length, message_class, correlation, body_type, tag, body_size, allocation, privacy,
     hash_algorithm, encryption, extension_size) = PROPERTIES_FIXED.unpack_from(r.buf, r.pos)
    r.pos += PROPERTIES_FIXED.size
    label = _read_label(r, label_length, start + 1)
    extension = _take(r, "ExtensionSize", extension_size, start + 52, "ExtensionData")
    body = _take(r, "MessageSize", body_size, start + 32, "MessageBody")
    _skip_padding(r, start)                 # "MUST be a multiple of 4 bytes in length"
    return {"acknowledgments": acks, "message_class": message_class, "correlation_id": correlation,
            "body_type": body_type, "application_tag": tag, "privacy_level": privacy,
            "hash_algorithm": hash_algorithm, "encryption_algorithm": encryption, "label": label,
            "extension": extension, "body": body,
            "allocation_body_size": None if allocation == body_size else allocation}


def _read_label(r: Reader, count: int, count_at: int) -> str:
    """LabelLength WCHARs including the null; label = 0*249(%x0001-FFFF) 0x0000 (2.2.19.3). No padding follows:
    ExtensionData and MessageBody "are not guaranteed to be on 4-byte boundaries" (and 4.1.7 has none)."""
    if count == 0:
        return ""
    if count > MAX_LABEL_LENGTH:
        raise r.error("LabelLength", f"{count} is above 0xFA", count_at)
    start = r.pos
    return _utf16_terminated(r, _take(r, "LabelLength", 2 * count, count_at, "Label"), "Label", start)


def _read_debug_header(r: Reader) -> DebugHeader:
    r.structure = "DebugHeader"
    flags_at = r.pos
    queue_type = r.u16("Flags") & 0x3
    r.u16("Reserved")
    if queue_type not in (0, 1):
        raise r.error("Flags", f"QT must be 0x0 or 0x1, got 0x{queue_type:x}", flags_at)
    return DebugHeader(read_uuid(r, "QueueIdentifier") if queue_type else None)


def _read_soap_header(r: Reader) -> SoapHeader:
    """2.2.20.7 places BodySectionID right after the Header string (no padding is specified between the two
    sections); the SoapHeader as a whole is padded to 4 bytes like every header (2.2.19.1)."""
    start = r.pos
    r.structure = "SoapHeader"
    header = _read_soap_section(r, "HeaderSectionID", SOAP_HEADER_SECTION_ID, "HeaderDataLength", "Header")
    body = _read_soap_section(r, "BodySectionID", SOAP_BODY_SECTION_ID, "BodyDataLength", "Body")
    _skip_padding(r, start)
    return SoapHeader(header, body)


def _read_soap_section(r: Reader, id_field: str, expected: int, length_field: str, data_field: str) -> str | None:
    id_at = r.pos
    section_id = r.u16(id_field)
    if section_id != expected:
        raise r.error(id_field, f"must be 0x{expected:04x}, got 0x{section_id:04x}", id_at)
    r.u16("Reserved")
    length_at = r.pos
    length = r.u32(length_field)        # a count of WCHARs, the null included
    if length == 0:
        return None
    data_at = r.pos
    return _utf16_terminated(r, _take(r, length_field, 2 * length, length_at, data_field), data_field, data_at)


def _read_multi_queue_header(r: Reader) -> MultiQueueFormatHeader:
    destinations = _read_mqf_address(r, "Destination", MQF_DESTINATION_ID)
    admin = _read_mqf_address(r, "Administration", MQF_ADMIN_ID)
    response = _read_mqf_address(r, "Response", MQF_RESPONSE_ID)
    return MultiQueueFormatHeader(destinations, admin, response, _read_mqf_signature(r))


def _read_mqf_address(r: Reader, name: str, expected_id: int) -> list[str]:
    """MQFAddressHeader (2.2.20.2). Whether HeaderSize counts the padding that rounds FormatNameList up to 4
    bytes is not said; both are accepted (at most 3 bytes may follow the last element inside HeaderSize), and
    the encoder counts it."""
    start = r.pos
    r.structure = f"MultiQueueFormatHeader.{name}"
    size = r.u32("HeaderSize")
    if size < 12:
        raise r.error("HeaderSize", f"{size} is below 0x0000000C", start)
    if size > len(r.buf) - start:
        raise r.error("HeaderSize", f"{size} bytes run past the end of the packet ({len(r.buf) - start} remain)", start)
    header_id = r.u16("HeaderID")
    if header_id != expected_id:
        raise r.error("HeaderID", f"must be 0x{expected_id:04x} for {name}, got 0x{header_id:04x}", start + 4)
    r.u16("Reserved")
    count = r.u32("ElementCount")
    inner = Reader(r.buf[:start + size], PROTOCOL, r.pos)
    inner.structure = r.structure
    if count * 4 > inner.remaining():          # an element is at least FormatType + one WCHAR
        raise r.error("ElementCount", f"{count} elements need at least {4 * count} bytes, "
                                      f"{inner.remaining()} remain in the header", start + 8)
    names = [_read_mqf_element(inner, index, start) for index in range(count)]
    if start + size - inner.pos > 3:
        raise r.error("HeaderSize", f"{start + size - inner.pos} bytes follow the last element", start)
    r.pos = start + size
    _skip_padding(r, start, "HeaderSize")
    return names


def _read_mqf_element(r: Reader, index: int, header_start: int) -> str:
    """MQFFormatNameElement (2.2.18.1.4). Alignments are those each structure states: the Private GUID and the
    DL GUID start on a 4-byte boundary, the direct name on 2; PublicQueueFormatName (2.2.18.1.7.1) states none,
    so its GUID follows FormatType directly."""
    name = f"FormatNameList[{index}]"
    type_at = r.pos
    format_type = r.u16(f"{name}.FormatType")
    if format_type == MQF_PUBLIC:
        return f"PUBLIC={read_uuid(r, name)}"
    if format_type == MQF_PRIVATE:
        _align(r, header_start, 4, name)
        return private_format_name(read_uuid(r, name), r.u32(name))
    if format_type == MQF_DIRECT:
        _align(r, header_start, 2, name)
        return "DIRECT=" + r.utf16z(name)
    if format_type == MQF_DISTRIBUTION_LIST:
        _align(r, header_start, 4, name)
        return f"DL={read_uuid(r, name)}"
    raise r.error(f"{name}.FormatType", f"must be 0x0001, 0x0002, 0x0003 or 0x0006, got 0x{format_type:04x}", type_at)


def _read_mqf_signature(r: Reader) -> bytes:
    start = r.pos
    r.structure = "MultiQueueFormatHeader.Signature"
    signature_id = r.u16("ID")
    if signature_id != MQF_SIGNATURE_ID:
        raise r.error("ID", f"must be 0x015e, got 0x{signature_id:04x}", start)
    r.u16("Reserved")
    size = r.u32("Size")
    signature = _take(r, "Size", size, start + 4, "Signature")
    _skip_padding(r, start, "Signature")
    return signature
