"""Packets to bytes: the inverse of parsing, each header padded to 4 bytes, reserved bits written as zero."""
import struct

from .layout import (
    BASE_DH, BASE_HEADER_SIZE, BASE_IN, BASE_SH, BASE_TR, INTERNAL_CS, MAX_LABEL_LENGTH, MAX_PACKET_SIZE,
    MQF_ADMIN_ID, MQF_DESTINATION_ID, MQF_DIRECT, MQF_DISTRIBUTION_LIST, MQF_PRIVATE, MQF_PUBLIC,
    MQF_RESPONSE_ID, MQF_SIGNATURE_ID, PROPERTIES_FIXED, PT_CONNECTION_PARAMETERS, PT_ESTABLISH_CONNECTION,
    PT_SESSION_ACK, Q_DIRECT, Q_NONE, Q_PRIVATE_OTHER, Q_PUBLIC, Q_SAME_AS_ADMIN, SEC_AI, SEC_AS_SHIFT, SEC_AU,
    SEC_DE, SEC_EB, SECURITY_SIZES, SENDER_ID_TYPES, SESSION_LAYOUT, SIGNATURE, SOAP_BODY_SECTION_ID,
    SOAP_HEADER_SECTION_ID, TX_CG, TX_FA, TX_FM, TX_ID_MASK, TX_ID_SHIFT, TX_LM, UH_AH, UH_AQ_SHIFT, UH_CQ,
    UH_DM_SHIFT, UH_DQ_SHIFT, UH_HH, UH_JN, UH_JP, UH_MP, UH_MQ, UH_RC_MASK, UH_RQ_SHIFT, UH_SH, UH_TH, VERSION,
)
from .format_names import FormatName, parse_format_name, QueueContext, resolve_queue_type
from .packets import (
    ConnectionParameters, EstablishConnection, MultiQueueFormatHeader, Packet, SecurityHeader, SessionAck,
    SessionHeader, SoapHeader, TransactionHeader, UserMessage,
)

__all__ = ["encode", "user_header_bytes", "user_message_headers"]


def encode(packet: Packet) -> bytes:
    """The inverse of parse_packet: parse_packet(encode(p)) == p. Padding is written as zeros. ValueError for a
    packet that cannot be written (a field out of range, a queue text that does not fit its slot, ...)."""
    try:
        if isinstance(packet, UserMessage):
            return _encode_user_message(packet)
        if isinstance(packet, EstablishConnection):
            return _encode_establish_connection(packet)
        if isinstance(packet, ConnectionParameters):
            return _encode_connection_parameters(packet)
        if isinstance(packet, SessionAck):
            return _encode_session_ack(packet)
    except struct.error as exc:
        raise ValueError(f"{type(packet).__name__}: a field is out of range: {exc}") from None
    raise TypeError(f"not an MQQB packet: {type(packet).__name__}")


def _base_header(flags: int, reserved: int, size: int, time_to_reach_queue: int = 0xFFFFFFFF) -> bytes:
    if size > MAX_PACKET_SIZE:
        raise ValueError(f"PacketSize {size} is above the maximum 0x00400000")
    return struct.pack("<BBHIII", VERSION, reserved, flags, SIGNATURE, size, time_to_reach_queue)


def _priority(priority: int) -> int:
    if not 0 <= priority <= 7:
        raise ValueError(f"priority {priority} is outside 0..7")
    return priority


def _internal_packet(p, packet_type: int, refused: bool, body: bytes, extra_flags: int = 0) -> bytes:
    flags = _priority(p.priority) | BASE_IN | extra_flags
    internal = struct.pack("<HH", 0, packet_type | (INTERNAL_CS if refused else 0))
    return _base_header(flags, p.base_reserved, BASE_HEADER_SIZE + 4 + len(body)) + internal + body


def _encode_establish_connection(p: EstablishConnection) -> bytes:
    if len(p.padding) != 512:
        raise ValueError(f"EstablishConnection padding must be 512 bytes, got {len(p.padding)}")
    body = (p.client_guid.bytes_le + p.server_guid.bytes_le
            + struct.pack("<IHH", p.timestamp, p.operating_system, p.reserved) + p.padding)
    return _internal_packet(p, PT_ESTABLISH_CONNECTION, p.refused, body)


def _encode_connection_parameters(p: ConnectionParameters) -> bytes:
    body = struct.pack("<IIHH", p.recoverable_ack_timeout, p.ack_timeout, p.reserved, p.window_size)
    return _internal_packet(p, PT_CONNECTION_PARAMETERS, p.refused, body)


def _encode_session_ack(p: SessionAck) -> bytes:
    return _internal_packet(p, PT_SESSION_ACK, False, _session_bytes(p.session), BASE_SH)


def _session_bytes(s: SessionHeader) -> bytes:
    return SESSION_LAYOUT.pack(s.ack_sequence_number, s.recoverable_msg_ack_seq_number, s.recoverable_msg_ack_flags,
                         s.user_msg_sequence_number, s.recoverable_msg_seq_number, s.window_size, s.reserved)


def _pad4(data: bytes) -> bytes:
    return data + bytes(-len(data) % 4)


def _encode_user_message(m: UserMessage) -> bytes:
    headers = b"".join(user_message_headers(m).values())
    flags = (_priority(m.priority) | (BASE_SH if m.session else 0) | (BASE_DH if m.debug else 0)
             | (BASE_TR if m.trace else 0))
    base = _base_header(flags, m.base_reserved, BASE_HEADER_SIZE + len(headers), m.time_to_reach_queue)
    return base + headers + (_session_bytes(m.session) if m.session else b"")


def user_message_headers(m: UserMessage) -> dict[str, bytes]:
    """Each header's bytes, in packet order (MS-MQMQ 2.2.20); each is a multiple of 4 bytes long."""
    headers = {"UserHeader": user_header_bytes(m)}
    if m.transaction:
        headers["TransactionHeader"] = _transaction_bytes(m.transaction)
    if m.security:
        headers["SecurityHeader"] = _security_bytes(m.security)
    headers["MessagePropertiesHeader"] = _properties_bytes(m)
    if m.debug:
        headers["DebugHeader"] = struct.pack("<HH", 1 if m.debug.queue_id else 0, 0) + (
            m.debug.queue_id.bytes_le if m.debug.queue_id else b"")
    if m.soap:
        headers["SoapHeader"] = _soap_bytes(m.soap)
    if m.multi_queue:
        headers["MultiQueueFormatHeader"] = _multi_queue_bytes(m.multi_queue)
    return headers


def user_header_bytes(m: UserMessage) -> bytes:
    context = QueueContext(m.source_qm, m.destination_qm, m.admin_queue)
    types = {"DestinationQueue": resolve_queue_type("DestinationQueue", m.destination_queue, None, context),
             "AdminQueue": resolve_queue_type("AdminQueue", m.admin_queue, m.admin_queue_type, context),
             "ResponseQueue": resolve_queue_type("ResponseQueue", m.response_queue, m.response_queue_type, context)}
    texts = {"DestinationQueue": m.destination_queue, "AdminQueue": m.admin_queue, "ResponseQueue": m.response_queue}
    fixed = struct.pack("<16s16sIIII", m.source_qm.bytes_le, m.destination_qm.bytes_le, m.time_to_be_received,
                        m.sent_time, m.message_id, _user_flags(m, types))
    queues = b"".join(_queue_bytes(types[slot], texts[slot]) for slot in types)
    return fixed + queues + (m.connector_type.bytes_le if m.connector_type else b"")


def _user_flags(m: UserMessage, types: dict[str, int]) -> int:
    if not 0 <= m.hop_count <= UH_RC_MASK or not 0 <= m.delivery <= 3:
        raise ValueError(f"hop_count {m.hop_count} / delivery {m.delivery} do not fit UserHeader.Flags")
    bits = ((m.journal_negative, UH_JN), (m.journal_positive, UH_JP), (m.security, UH_SH),
            (m.transaction, UH_TH), (True, UH_MP), (m.connector_type, UH_CQ), (m.multi_queue, UH_MQ),
            (m.via_http, UH_AH), (m.soap, UH_HH))
    flags = m.hop_count | m.delivery << UH_DM_SHIFT | sum(bit for present, bit in bits if present)
    return (flags | types["DestinationQueue"] << UH_DQ_SHIFT | types["AdminQueue"] << UH_AQ_SHIFT
            | types["ResponseQueue"] << UH_RQ_SHIFT)


def _queue_bytes(qtype: int, text: str | None) -> bytes:
    if qtype in (Q_NONE, Q_SAME_AS_ADMIN):
        return b""
    name = parse_format_name(text)
    if qtype == Q_DIRECT:
        raw = _utf16z(name.direct)
        if len(raw) > 0xFFFF:
            raise ValueError(f"direct format name of {len(raw)} bytes does not fit its 16-bit Count")
        return _pad4(struct.pack("<H", len(raw)) + raw)
    if qtype == Q_PUBLIC:
        return name.guid.bytes_le
    if qtype == Q_PRIVATE_OTHER:
        return name.guid.bytes_le + struct.pack("<I", name.number)
    return struct.pack("<I", name.number)


def _utf16z(text: str) -> bytes:
    return text.encode("utf-16-le", "surrogatepass") + b"\x00\x00"


def _transaction_bytes(t: TransactionHeader) -> bytes:
    if not 0 <= t.transaction_id <= TX_ID_MASK:
        raise ValueError(f"transaction_id {t.transaction_id} does not fit 20 bits")
    flags = ((TX_CG if t.connector_qm else 0) | (TX_FA if t.final_ack_required else 0)
             | (TX_FM if t.first_in_transaction else 0) | (TX_LM if t.last_in_transaction else 0)
             | t.transaction_id << TX_ID_SHIFT)
    fixed = struct.pack("<IQII", flags, t.tx_sequence_id, t.tx_sequence_number, t.previous_tx_sequence_number)
    return fixed + (t.connector_qm.bytes_le if t.connector_qm else b"")


def _security_bytes(s: SecurityHeader) -> bytes:
    items = (s.sender_id, s.encryption_key, s.signature, s.sender_cert, s.provider_info)
    _check_security(s, items)
    flags = (s.sender_id_type | (SEC_AU if s.authenticated else 0) | (SEC_EB if s.encrypted else 0)
             | (SEC_DE if s.default_provider else 0) | (SEC_AI if s.security_info else 0)
             | s.authentication_signature << SEC_AS_SHIFT)
    head = struct.pack("<HHHHII", flags, *(len(item) for item in items))
    return head + b"".join(_pad4(item) for item in items)


def _check_security(s: SecurityHeader, items: tuple) -> None:
    for item, (data_field, _, limit) in zip(items, SECURITY_SIZES):
        if len(item) > limit:
            raise ValueError(f"SecurityHeader {data_field} of {len(item)} bytes is above {limit}")
    if s.sender_id_type not in SENDER_ID_TYPES or not 0 <= s.authentication_signature <= 0xF:
        raise ValueError(f"SecurityHeader ST {s.sender_id_type} / AS {s.authentication_signature} out of range")
    if (s.sender_id_type == 0 and s.sender_id) or (s.sender_id_type == 2 and len(s.sender_id) != 16):
        raise ValueError("SecurityHeader sender_id does not fit its type (none for 0, a 16-byte GUID for 2)")
    if not any(items):
        raise ValueError("a SecurityHeader needs at least one SecurityData item (MS-MQMQ 2.2.20.6)")
    if s.default_provider and s.provider_info:
        raise ValueError("SecurityHeader provider_info MUST NOT be included when default_provider (DE) is set")


def _label_bytes(label: str) -> bytes:
    if not label:
        return b""
    raw = _utf16z(label)
    if "\x00" in label or len(raw) // 2 > MAX_LABEL_LENGTH:
        raise ValueError(f"label must have no null and at most 249 WCHARs: {label!r}")
    return raw


def _properties_bytes(m: UserMessage) -> bytes:
    if len(m.correlation_id) != 20:
        raise ValueError(f"correlation_id must be 20 bytes, got {len(m.correlation_id)}")
    label = _label_bytes(m.label)
    allocation = len(m.body) if m.allocation_body_size is None else m.allocation_body_size
    fixed = PROPERTIES_FIXED.pack(m.acknowledgments, len(label) // 2, m.message_class, m.correlation_id,
                                   m.body_type, m.application_tag, len(m.body), allocation, m.privacy_level,
                                   m.hash_algorithm, m.encryption_algorithm, len(m.extension))
    return _pad4(fixed + label + m.extension + m.body)


def _soap_bytes(s: SoapHeader) -> bytes:
    return _pad4(_soap_section(SOAP_HEADER_SECTION_ID, s.header) + _soap_section(SOAP_BODY_SECTION_ID, s.body))


def _soap_section(section_id: int, text: str | None) -> bytes:
    raw = b"" if text is None else _utf16z(text)
    return struct.pack("<HHI", section_id, 0, len(raw) // 2) + raw


def _multi_queue_bytes(h: MultiQueueFormatHeader) -> bytes:
    signature = _pad4(struct.pack("<HHI", MQF_SIGNATURE_ID, 0, len(h.signature)) + h.signature)
    return (_mqf_address_bytes(MQF_DESTINATION_ID, h.destinations) + _mqf_address_bytes(MQF_ADMIN_ID, h.admin)
            + _mqf_address_bytes(MQF_RESPONSE_ID, h.response) + signature)


def _mqf_address_bytes(header_id: int, names: list[str]) -> bytes:
    elements = bytearray()
    for text in names:
        _append_mqf_element(elements, parse_format_name(text), 12)
    elements += bytes(-(12 + len(elements)) % 4)
    return struct.pack("<IHHI", 12 + len(elements), header_id, 0, len(names)) + elements


def _append_mqf_element(out: bytearray, name: FormatName, offset: int) -> None:
    """Appends one MQFFormatNameElement; offset is where `out` starts inside its MQFAddressHeader."""
    format_type = {"PUBLIC": MQF_PUBLIC, "PRIVATE": MQF_PRIVATE, "DIRECT": MQF_DIRECT, "DL": MQF_DISTRIBUTION_LIST}
    out += struct.pack("<H", format_type[name.kind])
    if name.kind in ("PRIVATE", "DL"):
        out += bytes(-(offset + len(out)) % 4)
    if name.kind == "DIRECT":
        out += _utf16z(name.direct)
    else:
        out += name.guid.bytes_le + (struct.pack("<I", name.number) if name.kind == "PRIVATE" else b"")
