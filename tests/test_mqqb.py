"""[MS-MQQB] packets on TCP 1801 (MS-MQMQ 2.2.19 / 2.2.20 layouts): the 4.1 example frames, one test per
header built by hand with struct, round trips, robustness against malformed input, and stream deframing."""
import random
import struct
import uuid

import pytest

from streaming.wire import mqqb
from streaming.wire.errors import WireError
from streaming.wire.mqqb import (
    ConnectionParameters, DebugHeader, EstablishConnection, FinalAckBody, MultiQueueFormatHeader, OrderAckBody,
    PacketStream, SecurityHeader, SessionAck, SessionHeader, SoapHeader, TransactionHeader, UserMessage,
    encode, envelope_fields, message_class_code, message_class_name, message_identifier, packet_length,
    parse_packet, user_message_from_fields,
)

SIG = 0x524F494C
MP = 1 << 21                                        # UserHeader.Flags.MP (MS-MQMQ 2.2.19.2)
SRC = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
DST = uuid.UUID("9b2e4c1d-0a3b-4c5d-8e6f-7a8b9c0d1e2f")
OTHER = uuid.UUID("11111111-2222-3333-4444-555555555555")
NAMES = ("Normal Report AckReachQueue OrderAck AckReceive NackBadDestQueue NackPurged NackReachQueueTimeout "
         "NackQueueExceedQuota NackAccessDenied NackHopCountExceeded NackBadSignature NackBadEncryption "
         "NackCouldNotEncrypt NackNotTransactionalQueue NackNotTransactionalMessage NackUnsupportedCryptoProvider "
         "NackSourceComputerGuidChanged NackQueueDeleted NackQueuePurged NackReceiveTimeout "
         "NackReceiveTimeoutAtSender NackReceiveRejected").split()


# ============================================================================ hand builders (no encoder)
def base(flags: int, size: int, reserved: int = 0, ttrq: int = 0xFFFFFFFF) -> bytes:
    return struct.pack("<BBHIII", 0x10, reserved, flags, SIG, size, ttrq)


def wz(text: str) -> bytes:
    return text.encode("utf-16-le") + b"\x00\x00"


def pad4(data: bytes) -> bytes:
    return data + bytes(-len(data) % 4)


def uflags(dq=0, aq=0, rq=0, sh=0, th=0, mp=1, cq=0, mq=0, hh=0, rc=0, dm=0, jn=0, jp=0, ah=0) -> int:
    """UserHeader.Flags from the bit positions of MS-MQMQ 2.2.19.2."""
    return (rc | dm << 5 | jn << 8 | jp << 9 | dq << 10 | aq << 13 | rq << 16 | sh << 19 | th << 20 | mp << 21
            | cq << 22 | mq << 23 | ah << 25 | hh << 28)


def user_header(flags: int, queues: bytes = b"", src=SRC, dst=DST, sent=1_700_000_000, mid=7,
                ttbr=0xFFFFFFFF) -> bytes:
    return src.bytes_le + dst.bytes_le + struct.pack("<IIII", ttbr, sent, mid, flags) + queues


def direct(text: str) -> bytes:
    raw = wz(text)
    return pad4(struct.pack("<H", len(raw)) + raw)


def props(body=b"", label="", ext=b"", cls=0, flags=0, hash_alg=0, alloc=None, corr=bytes(20), body_type=0,
          tag=0, privacy=0, enc=0, padding=b"\x00\x00\x00") -> bytes:
    lab = wz(label) if label else b""
    fixed = struct.pack("<BBH", flags, len(lab) // 2, cls) + corr + struct.pack(
        "<8I", body_type, tag, len(body), len(body) if alloc is None else alloc, privacy, hash_alg, enc, len(ext))
    unpadded = fixed + lab + ext + body
    return unpadded + padding[:-len(unpadded) % 4]


def user_packet(*headers: bytes, base_flags: int = 0x3, session: bytes = b"", ttrq=0xFFFFFFFF) -> bytes:
    body = b"".join(headers)
    return base(base_flags, 16 + len(body), ttrq=ttrq) + body + session


def simple_packet(queues=direct("OS:h\\q"), dq=7, **props_args) -> bytes:
    return user_packet(user_header(uflags(dq=dq), queues), props(**props_args))


def wire_error(data: bytes) -> WireError:
    with pytest.raises(WireError) as info:
        parse_packet(data)
    assert info.value.protocol == "MQQB"
    return info.value


def patch(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def diff_offsets(a: bytes, b: bytes) -> set[int]:
    return {i for i, (x, y) in enumerate(zip(a, b)) if x != y}


# ============================================================================ MS-MQQB 4.1 example frames
PRINTED_CLIENT = uuid.UUID("C626EA11-E6B6-9749-9595-9150557358D1")
PRINTED_SERVER = uuid.UUID("FCA09E90-7890-4544-8F11-394C43CD8907")
DUMP_4_1_3_HEAD = bytes.fromhex(
    "10 C0 0B 00 4C 49 4F 52 3C 02 00 00 FF FF FF FF 00 00 02 00 D1 58 73 55 50 91 95 95 49 97 B6 E6"
    "11 EA 26 C6 07 89 CD 43 4C 39 11 8F 44 45 90 78 90 9E A0 FC 4E CA DE 1D 10 03 00 00")
DUMP_4_1_4_HEAD = bytes.fromhex(
    "10 5A 0B 00 4C 49 4F 52 3C 02 00 00 FF FF FF FF 00 00 02 00 05 23 74 1F 5E BE 77 41 BC 77 C4 DD"
    "77 19 E4 74 EB 6A 3A 3C 67 F5 43 41 87 D3 85 CF 4D 68 CE B4 4E CA DE 1D 10 03 00 00")
DUMP_4_1_5 = bytes.fromhex("10 C0 0B 00 4C 49 4F 52 20 00 00 00 FF FF FF FF 00 00 03 00 D8 05 00 00 C0 D4 01 00 00 00 40 00")
DUMP_4_1_6 = DUMP_4_1_5                             # printed identical, although 4.1.6 prints WindowSize 32
DUMP_4_1_7_PRINTED = bytes.fromhex(                 # the first 1650 of 2224 bytes are printed
    "10 00 03 00 4C 49 4F 52 B0 08 00 00 00 46 05 00 D1 58 73 55 50 91 95 95 49 97 B6 E6 11 EA 26 C6"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 FF FF FF FF 4C 49 4F 52 EE 08 00 00 00 1C 28 00"
    "1A 00 4F 00 53 00 3A 00 61 00 30 00 34 00 62 00 6D 00 30 00 32 00 5C 00 71 00 00 00 01 00 1C 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 01 05 00 00 00 00 00 05 15 00 00 00 AD 4A 9E BD 36 D9 FA 3D"
    "63 A6 56 DA E8 03 00 00 0F 0F 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "08 00 00 00 00 00 00 00 D0 07 00 00 D0 07 00 00 00 00 00 00 04 80 00 00 01 68 00 00 00 00 00 00"
    "6D 00 71 00 73 00 65 00 6E 00 64 00 65 00 72 00 20 00 6C 00 61 00 62 00 65 00 6C 00 00 00") + b"a\x00" * 714
DUMP_4_1_8 = bytes.fromhex("10 CD 1B 00 4C 49 4F 52 24 00 00 00 FF FF FF FF 00 00 01 00 01 00 00 00 00 00 00 00 00 00 00 00"
                           "40 00 00 00")
SID_4_1_7 = bytes.fromhex("01 05 00 00 00 00 00 05 15 00 00 00 AD 4A 9E BD 36 D9 FA 3D 63 A6 56 DA E8 03 00 00")


def establish_frame(base_reserved: int) -> bytes:
    """4.1.3 / 4.1.4 from the printed fields. The printout labels the two 16-bit fields after TimeStamp
    "Reserved: 784 (0x310)" then "OperatingSystem: 0"; MS-MQQB 2.2.3.1 orders them OperatingSystem, Reserved and
    requires OperatingSystem.RE = 0x10, so OperatingSystem is 0x0310 and Reserved 0 (the dump agrees)."""
    return (base(0x000B, 572, reserved=base_reserved) + struct.pack("<HH", 0, 0x0002)
            + PRINTED_CLIENT.bytes_le + PRINTED_SERVER.bytes_le + struct.pack("<IHH", 501140046, 0x0310, 0)
            + b"\x5a" * 512)


@pytest.mark.parametrize("reserved, dump_head", [(0xC0, DUMP_4_1_3_HEAD), (0x5A, DUMP_4_1_4_HEAD)])
def test_4_1_3_and_4_1_4_establish_connection(reserved, dump_head):
    frame = establish_frame(reserved)
    assert packet_length(frame) == 572 == len(frame)
    p = parse_packet(frame)
    assert p == EstablishConnection(PRINTED_CLIENT, PRINTED_SERVER, 501140046, 0x0310, refused=False, reserved=0,
                                    padding=b"\x5a" * 512, priority=3, base_reserved=reserved)
    assert (p.no_ping_sent, p.server_class_os, p.quality_of_service) == (True, True, False)
    assert encode(p) == frame
    dump = dump_head + b"\x5a" * 512
    # The dumps differ from the printed fields only in the two GUIDs (bytes 20..51).
    assert diff_offsets(frame, dump) <= set(range(20, 52)) and len(dump) == len(frame)
    assert encode(parse_packet(dump)) == dump


def test_4_1_3_dump_guids_are_the_printed_ones_byte_reversed():
    # The printout shows a GUID as the 16 bytes read as one little-endian 128-bit number, not in the MS-DTYP
    # 2.3.4 layout the codec (and MS-MQMQ 2.2.18.1.1) uses.
    assert uuid.UUID(bytes=DUMP_4_1_3_HEAD[20:36][::-1]) == PRINTED_CLIENT
    assert uuid.UUID(bytes=DUMP_4_1_3_HEAD[36:52][::-1]) == PRINTED_SERVER
    assert parse_packet(DUMP_4_1_3_HEAD + b"\x5a" * 512).client_guid == uuid.UUID(bytes_le=DUMP_4_1_3_HEAD[20:36])


@pytest.mark.parametrize("window, dump, differing", [(64, DUMP_4_1_5, set()), (32, DUMP_4_1_6, {30})])
def test_4_1_5_and_4_1_6_connection_parameters(window, dump, differing):
    frame = base(0x000B, 32, reserved=0xC0) + struct.pack("<HH", 0, 0x0003) + struct.pack("<IIHH", 1496, 120000, 0, window)
    assert packet_length(frame) == 32
    p = parse_packet(frame)
    assert p == ConnectionParameters(1496, 120000, window, refused=False, reserved=0, priority=3, base_reserved=0xC0)
    assert encode(p) == frame
    assert diff_offsets(frame, dump) == differing     # 4.1.6's dump shows WindowSize 0x40, its text 32
    assert encode(parse_packet(dump)) == dump


def frame_4_1_7() -> bytes:
    """4.1.7 from the printed fields. Where the printout contradicts itself the field is taken as: SentTime
    1141966310 (the dump has 0x524F494C there), MessagePropertiesHeader.Flags 0 (all four bits printed 0; the
    dump has 0x0F), AllocationBodySize 20 (the dump has 2000), EncryptionAlgorithm RC4 = 0x6801 (printed
    "26113 (RC4 Algorithm) (0x6601)"; 0x6801 is RC4 in MS-MQMQ 2.2.19.3 and is what the dump has)."""
    queue = struct.pack("<H", 26) + wz("OS:a04bm02\\q")                       # Count 26, Padding 0 bytes
    security = struct.pack("<HHHHII", 0x0001, 28, 0, 0, 0, 0) + SID_4_1_7      # ST = SID, SenderIdSize 28
    body = ("a" * 1000).encode("utf-16-le")                                     # MessageSize 2000
    properties = (struct.pack("<BBH", 0, 15, 0) + bytes(20)
                  + struct.pack("<8I", 8, 0, 2000, 20, 0, 0x8004, 0x6801, 0) + wz("mqsender label") + body)
    properties += bytes(-len(properties) % 4)     # 2 bytes (the printout says "Padding: 1 Bytes")
    user = user_header(0x00281C00, queue, src=PRINTED_CLIENT, dst=uuid.UUID(int=0), sent=1141966310, mid=2286)
    return base(0x0003, 2224, reserved=0, ttrq=345600) + user + security + properties


def test_4_1_7_user_message():
    frame = frame_4_1_7()
    assert packet_length(frame) == 2224 == len(frame)          # no SessionHeader: BaseHeader.Flags.SH is clear
    m = parse_packet(frame)
    assert isinstance(m, UserMessage) and m.kind == "user"
    assert (m.priority, m.time_to_reach_queue, m.base_reserved, m.trace, m.session) == (3, 345600, 0, False, None)
    assert (m.source_qm, m.destination_qm, m.time_to_be_received) == (PRINTED_CLIENT, uuid.UUID(int=0), 0xFFFFFFFF)
    assert (m.sent_time, m.message_id, m.hop_count, m.delivery) == (1141966310, 2286, 0, 0)
    assert (m.destination_queue, m.admin_queue, m.response_queue) == ("DIRECT=OS:a04bm02\\q", None, None)
    assert m.security == SecurityHeader(sender_id_type=1, sender_id=SID_4_1_7)
    assert (m.transaction, m.debug, m.soap, m.multi_queue, m.connector_type) == (None,) * 5
    assert (m.acknowledgments, m.label, m.message_class, m.correlation_id) == (0, "mqsender label", 0, bytes(20))
    assert (m.body_type, m.application_tag, m.allocation_body_size, m.privacy_level) == (8, 0, 20, 0)
    assert (m.hash_algorithm, m.encryption_algorithm, m.extension) == (0x8004, 0x6801, b"")
    assert m.body == ("a" * 1000).encode("utf-16-le")
    assert encode(m) == frame
    # The printed part of the dump differs only at the printout's contradictions listed in frame_4_1_7.
    allowed = set(range(16, 32)) | set(range(52, 56)) | {136} | set(range(172, 176))
    assert diff_offsets(frame, DUMP_4_1_7_PRINTED) <= allowed
    assert DUMP_4_1_7_PRINTED[52:56] == struct.pack("<I", SIG)


def test_4_1_7_envelope():
    assert envelope_fields(parse_packet(frame_4_1_7())) == {
        "message_id": "{c626ea11-e6b6-9749-9595-9150557358d1}\\2286", "message_class": "Normal",
        "sender_identifier_type": "Sid", "sender_identifier": "S-1-5-21-3181267629-1039849782-3663111779-1000",
        "authentication_level": "None", "hash_algorithm": "SHA1",  # the field as sent, though nothing is signed
        "destination_queue": "DIRECT=OS:a04bm02\\q", "sent_time_ms": 1141966310000}


def test_4_1_8_session_ack():
    frame = base(0x001B, 36, reserved=0xCD) + struct.pack("<HH", 0, 0x0001) + struct.pack("<HHIHHHH", 1, 0, 0, 0, 0, 64, 0)
    assert frame == DUMP_4_1_8
    assert packet_length(frame) == 36        # PacketSize counts the SessionHeader of a SessionAck
    p = parse_packet(frame)
    assert p == SessionAck(SessionHeader(1, 0, 0, 0, 0, 64, 0), priority=3, base_reserved=0xCD)
    assert encode(p) == frame


# ============================================================================ BaseHeader
def test_base_header_flags_bits():
    body = user_header(uflags(dq=7), direct("OS:h\\q")) + props(b"xy")
    # PR 5, TR (bit 8) and reserved bits X9 X8 X6..X0 (bits 6, 7, 9..15), which are ignored
    data = base(0x0005 | 0x0100 | 0x00C0 | 0xFE00, 16 + len(body), reserved=0x77, ttrq=99) + body
    m = parse_packet(data)
    assert (m.priority, m.trace, m.base_reserved, m.time_to_reach_queue) == (5, True, 0x77, 99)
    assert struct.unpack_from("<H", encode(m), 2)[0] == 0x0105          # reserved bits are written as zero


def test_user_message_session_header_follows_packet_size():
    session = struct.pack("<HHIHHHH", 7, 3, 0b1011, 9, 4, 64, 0xBEEF)
    data = user_packet(user_header(uflags(dq=7), direct("OS:h\\q")), props(b"abc"), base_flags=0x0003 | 0x10,
                       session=session)
    packet_size = struct.unpack_from("<I", data, 8)[0]
    assert packet_length(data[:16]) == packet_size + 16 == len(data)
    m = parse_packet(data)
    assert m.session == SessionHeader(7, 3, 0b1011, 9, 4, 64, 0xBEEF)
    assert encode(m) == data


def test_debug_header_present_iff_dh():
    debug = struct.pack("<HH", 0x0001, 0) + OTHER.bytes_le
    data = user_packet(user_header(uflags(dq=7), direct("OS:h\\q")), props(b"x"), debug, base_flags=0x3 | 0x20 | 0x100)
    m = parse_packet(data)
    assert (m.debug, m.trace) == (DebugHeader(OTHER), True)
    assert encode(m) == data
    no_queue = user_packet(user_header(uflags(dq=7), direct("OS:h\\q")), props(b"x"), struct.pack("<HH", 0, 0),
                           base_flags=0x3 | 0x20)
    assert parse_packet(no_queue).debug == DebugHeader(None)
    bad = user_packet(user_header(uflags(dq=7), direct("OS:h\\q")), props(b"x"), struct.pack("<HH", 2, 0),
                      base_flags=0x3 | 0x20)
    err = wire_error(bad)
    assert (err.structure, err.field) == ("DebugHeader", "Flags")


@pytest.mark.parametrize("offset, value, field", [(0, 0x11, "VersionNumber"), (4, 0x4D, "Signature"),
                                                  (8, 15, "PacketSize"), (8, 0x00400001, "PacketSize")])
def test_base_header_that_cannot_start_a_packet(offset, value, field):
    data = bytearray(DUMP_4_1_5)
    if field == "PacketSize":
        struct.pack_into("<I", data, 8, value)
    else:
        data[offset] = value
    with pytest.raises(WireError) as info:
        packet_length(bytes(data))
    assert (info.value.structure, info.value.field, info.value.offset) == ("BaseHeader", field, offset)
    assert packet_length(DUMP_4_1_5[:15]) is None


def test_internal_packet_errors():
    bad_type = patch(DUMP_4_1_5, 18, "<H", 0x0004)
    assert (wire_error(bad_type).structure, wire_error(bad_type).field) == ("InternalHeader", "Flags")
    refused = parse_packet(patch(DUMP_4_1_5, 18, "<H", 0x0013))
    assert refused.refused and encode(refused)[18] == 0x13
    wrong_size = base(0x000B, 36) + struct.pack("<HH", 0, 3) + bytes(16)
    assert wire_error(wrong_size).field == "PacketSize"
    ack_without_sh = patch(DUMP_4_1_8, 2, "<H", 0x000B)
    assert wire_error(ack_without_sh).field == "Flags"


# ============================================================================ UserHeader
QUEUE_CASES = [
    # (DQ, AQ, RQ, queue bytes, destination, admin, response)
    (3, 0, 0, struct.pack("<I", 3), f"PRIVATE={DST}\\3", None, None),
    (5, 0, 0, OTHER.bytes_le, f"PUBLIC={OTHER}", None, None),
    (7, 0, 0, struct.pack("<H", 36) + wz("OS:dc1\\private$\\q") + b"\xaa\xbb",     # 2 padding bytes, any value
     "DIRECT=OS:dc1\\private$\\q", None, None),
    (3, 2, 0, struct.pack("<II", 0x1F, 0xABCDEF01), f"PRIVATE={DST}\\1f", f"PRIVATE={SRC}\\abcdef01", None),
    (3, 6, 1, struct.pack("<I", 1) + OTHER.bytes_le + struct.pack("<I", 10), f"PRIVATE={DST}\\1",
     f"PRIVATE={OTHER}\\a", f"PRIVATE={OTHER}\\a"),
    (5, 5, 7, OTHER.bytes_le + SRC.bytes_le + direct("TCP:10.0.0.1\\private$\\r"), f"PUBLIC={OTHER}",
     f"PUBLIC={SRC}", "DIRECT=TCP:10.0.0.1\\private$\\r"),
    (3, 3, 2, struct.pack("<III", 4, 5, 6), f"PRIVATE={DST}\\4", f"PRIVATE={DST}\\5", f"PRIVATE={SRC}\\6"),
    (7, 7, 3, direct("OS:a") + direct("OS:b\\c") + struct.pack("<I", 8), "DIRECT=OS:a", "DIRECT=OS:b\\c",
     f"PRIVATE={DST}\\8"),
    (3, 6, 4, struct.pack("<I", 1) + OTHER.bytes_le + struct.pack("<II", 2, 3), f"PRIVATE={DST}\\1",
     f"PRIVATE={OTHER}\\2", f"PRIVATE={OTHER}\\3"),
    (0, 0, 5, SRC.bytes_le, None, None, f"PUBLIC={SRC}"),
    (0, 0, 6, OTHER.bytes_le + struct.pack("<I", 0xFFFFFFFF), None, None, f"PRIVATE={OTHER}\\ffffffff"),
]


@pytest.mark.parametrize("dq, aq, rq, queues, destination, admin, response", QUEUE_CASES)
def test_user_header_queue_formats(dq, aq, rq, queues, destination, admin, response):
    data = user_packet(user_header(uflags(dq=dq, aq=aq, rq=rq), queues), props(b"body"))
    m = parse_packet(data)
    assert (m.destination_queue, m.admin_queue, m.response_queue) == (destination, admin, response)
    # the types are those the texts imply (RQ 0x1 when the response text is the admin text), except RQ 0x4
    assert (m.admin_queue_type, m.response_queue_type) == (None, 4 if rq == 4 else None)
    assert m.body == b"body"
    assert parse_packet(encode(m)) == m
    if b"\xaa\xbb" not in queues:
        assert encode(m) == data
    flags = struct.unpack_from("<I", encode(m), 60)[0]
    assert ((flags >> 10) & 7, (flags >> 13) & 7, (flags >> 16) & 7) == (dq, aq, rq)


def test_user_header_other_flags_and_connector_type():
    flags = uflags(dq=7, cq=1, rc=0x1D, dm=1, jn=1, jp=0, ah=1) | (1 << 7) | (1 << 24) | (3 << 26) | (7 << 29)
    data = user_packet(user_header(flags, direct("OS:h\\q") + OTHER.bytes_le, ttbr=600, sent=123, mid=0xFFFFFFFF),
                       props(b""))
    m = parse_packet(data)
    assert (m.connector_type, m.hop_count, m.delivery, m.journal_negative, m.journal_positive, m.via_http) == (
        OTHER, 0x1D, 1, True, False, True)
    assert (m.time_to_be_received, m.sent_time, m.message_id) == (600, 123, 0xFFFFFFFF)
    assert struct.unpack_from("<I", encode(m), 60)[0] == uflags(dq=7, cq=1, rc=0x1D, dm=1, jn=1, ah=1)


@pytest.mark.parametrize("flags", [uflags(dq=1), uflags(dq=2), uflags(dq=4), uflags(dq=6), uflags(dq=7, aq=1),
                                   uflags(dq=7, aq=4)])
def test_user_header_invalid_queue_types(flags):
    err = wire_error(user_packet(user_header(flags, direct("OS:h\\q") + bytes(16)), props(b"")))
    assert (err.structure, err.field, err.offset) == ("UserHeader", "Flags", 60)


def test_user_header_without_mp_is_rejected():
    err = wire_error(user_packet(user_header(uflags(dq=7, mp=0), direct("OS:h\\q")), props(b"")))
    assert (err.structure, err.field) == ("UserHeader", "Flags")


def test_rq_4_needs_a_private_admin_queue():
    err = wire_error(user_packet(user_header(uflags(dq=7, aq=7, rq=4), direct("OS:a") + direct("OS:b") + bytes(4)),
                                 props(b"")))
    assert (err.structure, err.field) == ("UserHeader", "Flags")


@pytest.mark.parametrize("count, content, reason", [
    (27, wz("OS:h\\q"), "odd Count"), (0, b"", "zero Count"), (14, wz("OS:h\\q")[:-2] + b"xx", "no terminator"),
    (14, wz("OS:\x00\\q"), "embedded null")])
def test_direct_queue_format_name_errors(count, content, reason):
    err = wire_error(user_packet(user_header(uflags(dq=7), pad4(struct.pack("<H", count) + content)), props(b"")))
    assert err.structure == "UserHeader" and err.field.startswith("DestinationQueue"), reason


# ============================================================================ MessagePropertiesHeader
def test_message_properties_header_with_label_extension_body_and_padding():
    corr = bytes(range(20))
    mph = props(b"BODY5", label="hi", ext=b"EXT", cls=0x4000, flags=0x0F, hash_alg=0x800E, alloc=64, corr=corr,
                body_type=0x11, tag=0xCAFE, privacy=3, enc=0x6610, padding=b"\xee\xee\xee")
    assert len(mph) == 72 and mph[-2:] == b"\xee\xee"       # 56 + 6 + 3 + 5 = 70, padded to 72 with any value
    m = parse_packet(user_packet(user_header(uflags(dq=7, aq=7), direct("OS:h\\q") + direct("OS:h\\admin")), mph))
    assert (m.label, m.extension, m.body, m.message_class, m.acknowledgments) == ("hi", b"EXT", b"BODY5", 0x4000, 0x0F)
    assert (m.correlation_id, m.body_type, m.application_tag, m.allocation_body_size) == (corr, 0x11, 0xCAFE, 64)
    assert (m.privacy_level, m.hash_algorithm, m.encryption_algorithm) == (3, 0x800E, 0x6610)
    assert encode(m)[-72:] == mph[:-2] + b"\x00\x00"


def test_message_properties_unpadded_extension_and_body_are_not_aligned():
    m = parse_packet(simple_packet(body=b"B", ext=b"E", label="abc"))          # label 8 bytes, E at +64, B at +65
    assert (m.label, m.extension, m.body) == ("abc", b"E", b"B")


def test_label_length_limit():
    longest = parse_packet(simple_packet(label="x" * 249))       # LabelLength 0xFA with the null
    assert longest.label == "x" * 249 and encode(longest)[81] == 0xFA
    err = wire_error(simple_packet(label="x" * 250))              # LabelLength 0xFB, all of it in the packet
    assert (err.field, err.offset) == ("LabelLength", 81) and "0xFA" in err.reason
    with pytest.raises(ValueError):
        encode(UserMessage(SRC, DST, 1, 1, "DIRECT=a", None, None, 0, b"", label="x" * 250))


@pytest.mark.parametrize("offset, value, field", [
    (81, b"\xfb", "LabelLength"),              # above 0xFA
    (140, b"x\x00", "Label"),                  # the terminator replaced
    (136, b"\x00\x00", "Label"),               # a null before the terminator
])
def test_label_errors(offset, value, field):
    data = simple_packet(body=b"1234", label="hi")            # MPH at 16 + 48 + 16 = 80, Label at 136..141
    assert data[136:142] == wz("hi")
    err = wire_error(data[:offset] + value + data[offset + len(value):])
    assert (err.structure, err.field) == ("MessagePropertiesHeader", field)


# ============================================================================ optional headers
def test_transaction_header():
    flags = 0x1 | 0x2 | 0x8 | (0xABCDE << 4) | (0xFF << 24)           # CG FA LM, ID, unused X1-X8 (ignored)
    tx = struct.pack("<IIIII", flags, 0x11223344, 0x55667788, 9, 8) + OTHER.bytes_le
    data = user_packet(user_header(uflags(dq=7, th=1, dm=1), direct("OS:h\\q")), tx, props(b"t"), base_flags=0)
    m = parse_packet(data)
    assert m.transaction == TransactionHeader(0x5566778811223344, 9, 8, 0xABCDE, True, False, True, OTHER)
    assert (m.priority, m.delivery) == (0, 1)
    assert encode(m) == data[:80] + struct.pack("<I", flags & 0xFFFFFF) + data[84:]    # X bits not kept


def security_packet(security: bytes, body=b"s") -> bytes:
    return user_packet(user_header(uflags(dq=7, sh=1), direct("OS:h\\q")), security, props(body))


def test_security_header_sid_only():
    m = parse_packet(security_packet(struct.pack("<HHHHII", 0x0001, 28, 0, 0, 0, 0) + SID_4_1_7))
    assert m.security == SecurityHeader(sender_id_type=1, sender_id=SID_4_1_7)


def test_security_header_all_items_aligned():
    provider = struct.pack("<I", 24) + wz("Microsoft Enhanced RSA")
    flags = 0x0002 | 0x0010 | 0x0020 | 0x0080 | (0x3 << 8)          # ST=2, AU, EB, AI, AS=3, DE clear
    head = struct.pack("<HHHHII", flags, 16, 7, 5, 2, len(provider))
    data_items = OTHER.bytes_le + pad4(b"KEY4567") + pad4(b"SIG05") + pad4(b"C2") + pad4(provider)
    m = parse_packet(security_packet(head + data_items))
    assert m.security == SecurityHeader(2, OTHER.bytes_le, b"KEY4567", b"SIG05", b"C2", provider, authenticated=True,
                                        encrypted=True, default_provider=False, security_info=True,
                                        authentication_signature=3)
    assert encode(m) == security_packet(head + data_items)
    assert mqqb.authentication_level(m) == "Sig20"


@pytest.mark.parametrize("head, field", [
    (struct.pack("<HHHHII", 0x0003, 0, 4, 0, 0, 0), "Flags"),               # ST 3
    (struct.pack("<HHHHII", 0x0000, 4, 0, 0, 0, 0), "SenderIdSize"),        # ST 0 with a sender id
    (struct.pack("<HHHHII", 0x0002, 20, 0, 0, 0, 0), "SenderIdSize"),       # a QM GUID is 16 bytes
    (struct.pack("<HHHHII", 0x0001, 0, 0, 0, 0, 0), "SenderIdSize"),        # all five sizes zero
    (struct.pack("<HHHHII", 0x0040, 0, 0, 0, 0, 8), "ProviderInfoSize"),    # ProviderInfo although DE is set
])
def test_security_header_errors(head, field):
    err = wire_error(security_packet(head + bytes(64)))
    assert (err.structure, err.field) == ("SecurityHeader", field)


def test_soap_header():
    soap = pad4(struct.pack("<HHI", 0x0320, 0, 5) + wz("<h/>") + struct.pack("<HHI", 0x0384, 0, 3) + wz("<b"))
    data = user_packet(user_header(uflags(dq=7, hh=1), direct("OS:h\\q")), props(b"x"), soap)
    m = parse_packet(data)
    assert m.soap == SoapHeader("<h/>", "<b")
    assert encode(m) == data
    empty = pad4(struct.pack("<HHI", 0x0320, 0, 0) + struct.pack("<HHI", 0x0384, 0, 1) + b"\x00\x00")
    assert parse_packet(user_packet(user_header(uflags(dq=7, hh=1), direct("OS:h\\q")), props(b""), empty)
                        ).soap == SoapHeader(None, "")
    wrong_id = soap[:8 + 10] + struct.pack("<H", 0x0385) + soap[20:]
    err = wire_error(user_packet(user_header(uflags(dq=7, hh=1), direct("OS:h\\q")), props(b"x"), wrong_id))
    assert (err.structure, err.field) == ("SoapHeader", "BodySectionID")


def mqf_header() -> bytes:
    """Destination list: PUBLIC (GUID right after FormatType, 2.2.18.1.7.1 states no alignment), PRIVATE (GUID on a
    4-byte boundary), DIRECT, DL (GUID on a 4-byte boundary); HeaderSize 88 counts the padding. Admin: one PUBLIC
    with HeaderSize 30 not counting its padding. Response: empty. Signature: 6 bytes + 2 padding."""
    destination = (struct.pack("<H", 1) + OTHER.bytes_le                     # 12..30
                   + struct.pack("<H", 2) + SRC.bytes_le + struct.pack("<I", 0x2A)   # 30..52, GUID at 32
                   + struct.pack("<H", 3) + wz("OS:m\\q")                     # 52..68
                   + struct.pack("<H", 6) + b"\xcc\xcc" + DST.bytes_le)       # 68..88, GUID at 72
    admin = struct.pack("<IHHI", 30, 0x00C8, 0, 1) + struct.pack("<H", 1) + SRC.bytes_le + b"\x00\x00"
    return (struct.pack("<IHHI", 12 + len(destination), 0x0064, 0, 4) + destination + admin
            + struct.pack("<IHHI", 12, 0x012C, 0, 0) + struct.pack("<HHI", 0x015E, 0, 6) + b"SIGNAT" + b"\x00\x00")


def mqf_packet(header: bytes) -> bytes:
    return user_packet(user_header(uflags(dq=7, mq=1), direct("OS:h\\q")), props(b"x"), header)


def test_multi_queue_format_header():
    m = parse_packet(mqf_packet(mqf_header()))
    assert m.multi_queue == MultiQueueFormatHeader(
        [f"PUBLIC={OTHER}", f"PRIVATE={SRC}\\2a", "DIRECT=OS:m\\q", f"DL={DST}"], [f"PUBLIC={SRC}"], [], b"SIGNAT")
    assert parse_packet(encode(m)) == m
    assert encode(m)[-len(mqf_header()):][:88] == mqf_header()[:88].replace(b"\xcc\xcc", b"\x00\x00")


@pytest.mark.parametrize("offset, fmt, value, structure, field", [
    (0, "<I", 11, "MultiQueueFormatHeader.Destination", "HeaderSize"),
    (0, "<I", 0x10000, "MultiQueueFormatHeader.Destination", "HeaderSize"),
    (0, "<I", 92, "MultiQueueFormatHeader.Destination", "HeaderSize"),        # 4 bytes after the last element
    (4, "<H", 0x00C8, "MultiQueueFormatHeader.Destination", "HeaderID"),
    (8, "<I", 0xFFFFFFFF, "MultiQueueFormatHeader.Destination", "ElementCount"),
    (12, "<H", 4, "MultiQueueFormatHeader.Destination", "FormatNameList[0].FormatType"),
    (88 + 32 + 12 + 4, "<I", 0x7FFFFFFF, "MultiQueueFormatHeader.Signature", "Size"),
    (88 + 32 + 12, "<H", 0x015F, "MultiQueueFormatHeader.Signature", "ID"),
])
def test_multi_queue_format_header_errors(offset, fmt, value, structure, field):
    err = wire_error(mqf_packet(patch(mqf_header(), offset, fmt, value)))
    assert (err.structure, err.field) == (structure, field)


# ============================================================================ QueueJumper: lengths past the packet
def rich_packet() -> tuple[bytes, dict[str, tuple[int, str]]]:
    """A packet with every length-bearing header, and where each length field sits (offset, struct format)."""
    queues = direct("OS:h\\q")                                              # Count at 64
    security = struct.pack("<HHHHII", 0x0001, 16, 4, 8, 4, 0) + OTHER.bytes_le + b"KKKK" + b"S" * 8 + b"CCCC"
    sec_at = 16 + 48 + len(queues)
    mph = props(b"BODY", label="lbl", ext=b"EX")
    mph_at = sec_at + len(security)
    soap = pad4(struct.pack("<HHI", 0x0320, 0, 3) + wz("<h") + struct.pack("<HHI", 0x0384, 0, 3) + wz("<b"))
    soap_at = mph_at + len(mph)
    data = user_packet(user_header(uflags(dq=7, sh=1, hh=1, mq=1), queues), security, mph, soap, mqf_header())
    mqf_at = soap_at + len(soap)
    fields = {"DestinationQueue.Count": (64, "<H"), "SenderIdSize": (sec_at + 2, "<H"),
              "EncryptionKeySize": (sec_at + 4, "<H"), "SignatureSize": (sec_at + 6, "<H"),
              "SenderCertSize": (sec_at + 8, "<I"), "ProviderInfoSize": (sec_at + 12, "<I"),
              "LabelLength": (mph_at + 1, "<B"), "MessageSize": (mph_at + 32, "<I"),
              "ExtensionSize": (mph_at + 52, "<I"), "HeaderDataLength": (soap_at + 4, "<I"),
              "BodyDataLength": (soap_at + 8 + 6 + 4, "<I"), "HeaderSize": (mqf_at, "<I"),
              "ElementCount": (mqf_at + 8, "<I"), "Size": (mqf_at + 88 + 32 + 12 + 4, "<I")}
    return data, fields


def test_rich_packet_is_valid():
    m = parse_packet(rich_packet()[0])
    assert (m.security.signature, m.soap, m.label, m.extension) == (b"S" * 8, SoapHeader("<h", "<b"), "lbl", b"EX")


@pytest.mark.parametrize("field", list(rich_packet()[1]))
def test_queue_jumper_length_past_the_packet(field):
    data, fields = rich_packet()
    offset, fmt = fields[field]
    maximum = {"<B": 0xFA, "<H": 0xFFFE, "<I": 0x7FFFFFF0}[fmt]
    err = wire_error(patch(data, offset, fmt, maximum))
    assert err.field == field and err.offset == offset
    assert "past the end" in err.reason or "remain" in err.reason or "count" in err.reason


def test_packet_size_must_frame_the_data():
    data = simple_packet(body=b"abc")
    assert wire_error(data + b"\x00").field == "PacketSize"
    assert wire_error(data[:-1]).field == "PacketSize"
    assert wire_error(patch(data, 8, "<I", len(data) + 4) + bytes(4)).field == "PacketSize"   # trailing bytes


# ============================================================================ round trips
def rand_uuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128))


def rand_text(rng: random.Random, low: int, high: int) -> str:
    alphabet = "abcXYZ019\\$:;. ée漢字"
    return "".join(rng.choice(alphabet) if rng.random() < 0.8 else chr(rng.randrange(1, 0xD800))
                   for _ in range(rng.randint(low, high)))


def rand_queue(rng: random.Random, host_choices: list[uuid.UUID]) -> str:
    kind = rng.choice(["DIRECT", "PUBLIC", "PRIVATE"])
    if kind == "DIRECT":
        return "DIRECT=" + rand_text(rng, 0, 40)
    if kind == "PUBLIC":
        return f"PUBLIC={rand_uuid(rng)}"
    return mqqb.private_format_name(rng.choice(host_choices), rng.getrandbits(32))


def rand_queues(rng: random.Random, src, dst) -> dict:
    admin = rng.choice([None, rand_queue(rng, [src, dst, rand_uuid(rng)])])
    response = rng.choice([None, admin, rand_queue(rng, [src, dst, rand_uuid(rng)])])
    out = {"admin_queue": admin, "response_queue": response}
    if admin and admin.startswith("PRIVATE=") and rng.random() < 0.3:      # RQ 0x4: on the admin queue's host
        host = uuid.UUID(admin[8:44])
        out.update(response_queue=mqqb.private_format_name(host, rng.getrandbits(32)), response_queue_type=4)
    elif admin is None and response is None and rng.random() < 0.2:         # RQ 0x1 with no admin queue
        out["response_queue_type"] = 1
    elif src == dst and admin and admin.startswith(f"PRIVATE={src}") and rng.random() < 0.5:
        out["admin_queue_type"] = 2                                          # on the source (= destination) host
    return out


def rand_security(rng: random.Random) -> SecurityHeader | None:
    if rng.random() < 0.4:
        return None
    st = rng.randrange(3)
    sender = {0: b"", 1: rng.randbytes(rng.randrange(1, 41)), 2: rng.randbytes(16)}[st]
    default_provider = rng.random() < 0.5
    items = [rng.randbytes(rng.choice([0, 0, rng.randrange(1, 140)])) for _ in range(3)]
    provider = b"" if default_provider else rng.randbytes(rng.choice([0, rng.randrange(1, 30)]))
    if not (sender or any(items) or provider):
        items[1] = rng.randbytes(128)
    return SecurityHeader(st, sender, *items, provider, rng.random() < 0.5, rng.random() < 0.5, default_provider,
                          rng.random() < 0.5, rng.randrange(16))


def rand_transaction(rng: random.Random) -> TransactionHeader | None:
    if rng.random() < 0.6:
        return None
    return TransactionHeader(rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(32), rng.getrandbits(20),
                             rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.5,
                             rng.choice([None, rand_uuid(rng)]))


def rand_multi_queue(rng: random.Random) -> MultiQueueFormatHeader | None:
    if rng.random() < 0.7:
        return None

    def names():
        out = []
        for _ in range(rng.randrange(4)):
            kind = rng.random()
            out.append(f"DL={rand_uuid(rng)}" if kind < 0.2 else rand_queue(rng, [rand_uuid(rng)]))
        return out
    return MultiQueueFormatHeader(names(), names(), names(), rng.randbytes(rng.randrange(0, 20)))


def random_message(seed: int) -> UserMessage:
    rng = random.Random(seed)
    src = rand_uuid(rng)
    dst = src if rng.random() < 0.1 else rand_uuid(rng)
    body = rng.randbytes(rng.randrange(0, 300))
    return UserMessage(
        src, dst, rng.getrandbits(32), rng.getrandbits(32), rng.choice([None, rand_queue(rng, [dst])]),
        message_class=rng.choice([0, 1, 0xFF, 0x4000, 0x8006, 0xC004, rng.getrandbits(16)]), body=body,
        hash_algorithm=rng.choice([0, 0x8004, 0x800E, rng.getrandbits(32)]), security=rand_security(rng),
        transaction=rand_transaction(rng),
        session=rng.choice([None, SessionHeader(*(rng.getrandbits(16) for _ in range(2)), rng.getrandbits(32),
                                                *(rng.getrandbits(16) for _ in range(4)))]),
        priority=rng.randrange(8), delivery=rng.randrange(4), time_to_reach_queue=rng.getrandbits(32),
        time_to_be_received=rng.getrandbits(32), label=rng.choice(["", rand_text(rng, 1, 249)]),
        correlation_id=rng.randbytes(20), body_type=rng.getrandbits(32), application_tag=rng.getrandbits(32),
        privacy_level=rng.choice([0, 1, 3, 5]), encryption_algorithm=rng.getrandbits(32),
        extension=rng.randbytes(rng.choice([0, rng.randrange(1, 30)])), acknowledgments=rng.getrandbits(8),
        allocation_body_size=rng.choice([None, len(body) + rng.randrange(1, 50)]), hop_count=rng.randrange(32),
        journal_negative=rng.random() < 0.5, journal_positive=rng.random() < 0.5, via_http=rng.random() < 0.2,
        trace=rng.random() < 0.2, connector_type=rng.choice([None, rand_uuid(rng)]),
        debug=rng.choice([None, DebugHeader(None), DebugHeader(rand_uuid(rng))]),
        soap=rng.choice([None, SoapHeader(rng.choice([None, rand_text(rng, 0, 30)]),
                                          rng.choice([None, rand_text(rng, 0, 30)]))]),
        multi_queue=rand_multi_queue(rng), base_reserved=rng.randrange(256), **rand_queues(rng, src, dst))


def test_random_user_messages_round_trip():
    kinds = set()
    for seed in range(300):
        m = random_message(seed)
        data = encode(m)
        assert len(data) % 4 == 0 and packet_length(data) == len(data)
        parsed = parse_packet(data)
        assert parsed == m, seed
        assert encode(parsed) == data
        kinds.add((m.security is not None, m.multi_queue is not None, m.response_queue_type, m.admin_queue_type))
    assert len(kinds) > 8        # the generator reaches the optional headers and the queue type overrides


def test_internal_packets_round_trip():
    rng = random.Random(7)
    for _ in range(100):
        packets = [
            EstablishConnection(rand_uuid(rng), rand_uuid(rng), rng.getrandbits(32), rng.getrandbits(16),
                                rng.random() < 0.5, rng.getrandbits(16), rng.randbytes(512), rng.randrange(8),
                                rng.randrange(256)),
            ConnectionParameters(rng.getrandbits(32), rng.getrandbits(32), rng.getrandbits(16), rng.random() < 0.5,
                                 rng.getrandbits(16), rng.randrange(8), rng.randrange(256)),
            SessionAck(SessionHeader(*(rng.getrandbits(16) for _ in range(2)), rng.getrandbits(32),
                                     *(rng.getrandbits(16) for _ in range(4))), rng.randrange(8), rng.randrange(256))]
        for p in packets:
            assert parse_packet(encode(p)) == p


SENDERS = {"None": None, "Sid": "S-1-5-21-3181267629-1039849782-3663111779-1000",
           "QueueManagerIdentifier": "6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}
LEVELS = ["None", "Sig10", "Sig20", "Sig30", "XmlSig"]
HASHES = [None, "MD2", "MD4", "MD5", "SHA1", "SHA_256", "SHA_512"]


def test_fields_round_trip_every_class_sender_and_level():
    destinations = ["DIRECT=OS:dc1\\private$\\mqis_queue$", f"PRIVATE={DST}\\3", f"PUBLIC={OTHER}"]
    for i, (name, (sender_type, sender), level) in enumerate(
            (n, s, lv) for n in NAMES for s in SENDERS.items() for lv in LEVELS):
        hash_name = None if level == "None" else HASHES[i % len(HASHES)]
        given = dict(message_class=name, sender_identifier_type=sender_type, sender_identifier=sender,
                     authentication_level=level, hash_algorithm=hash_name, destination_queue=destinations[i % 3])
        m = user_message_from_fields(b"payload %d" % i, source_qm=SRC, destination_qm=DST, sent_time_s=1_700_000_000 + i,
                                     message_id=i, **given)
        parsed = parse_packet(encode(m))
        assert parsed == m
        assert envelope_fields(parsed) == {**given, "message_id": f"{{{SRC}}}\\{i}",
                                           "sent_time_ms": (1_700_000_000 + i) * 1000}
        assert (m.security is None) == (sender_type == "None" and level == "None")
        if level != "None":
            assert len(m.security.signature) == 128 and m.security.default_provider and not m.security.authenticated


def test_fields_builder_is_deterministic_and_spec_shaped():
    args = dict(source_qm=str(SRC), destination_qm=f"{{{DST}}}", destination_queue=f"private={str(DST).upper()}\\A",
                sent_time_s=5, message_id=6, authentication_level="Sig30", hash_algorithm="SHA_512")
    a, b = user_message_from_fields(b"x", **args), user_message_from_fields(b"x", **args)
    assert encode(a) == encode(b)
    assert a.destination_queue == f"PRIVATE={DST}\\a"
    assert struct.unpack_from("<I", encode(a), 60)[0] == uflags(dq=3, sh=1)
    assert a.security.sender_id_type == 0 and a.security.authentication_signature == 5


@pytest.mark.parametrize("kwargs", [
    dict(sender_identifier_type="Sid"),                                # a type without an identifier
    dict(sender_identifier="S-1-5-18"),                                # an identifier without a type
    dict(message_class="Urgent"), dict(authentication_level="Sig40"), dict(hash_algorithm="SHA3", authentication_level="Sig20"),
    dict(destination_queue=f"PRIVATE={OTHER}\\3"),                     # DQ has no "private on another host"
    dict(destination_queue=f"DL={OTHER}"), dict(destination_queue="FORMATNAME:x"),
    dict(sender_identifier_type="Sid", sender_identifier="010100000000000512000000"),   # a valid SID given in hex
])
def test_fields_builder_rejects(kwargs):
    args = dict(source_qm=SRC, destination_qm=DST, destination_queue="DIRECT=OS:h\\q", sent_time_s=1, message_id=1)
    with pytest.raises(ValueError):
        user_message_from_fields(b"", **{**args, **kwargs})


def test_an_unknown_hash_algorithm_is_an_error_only_on_a_signed_message():
    unsigned = UserMessage(SRC, DST, 1, 1, "DIRECT=OS:h\\q", None, None, 0, b"", hash_algorithm=0x1234)
    assert envelope_fields(parse_packet(encode(unsigned)))["hash_algorithm"] is None
    signed = UserMessage(SRC, DST, 1, 1, "DIRECT=OS:h\\q", None, None, 0, b"", hash_algorithm=0x1234,
                         security=SecurityHeader(2, OTHER.bytes_le, signature=b"s" * 8, authentication_signature=1))
    with pytest.raises(WireError, match="HashAlgorithm"):
        envelope_fields(parse_packet(encode(signed)))


def test_malformed_sid_is_rendered_in_hex():
    m = user_message_from_fields(b"", source_qm=SRC, destination_qm=DST, destination_queue="DIRECT=OS:h\\q",
                                 sent_time_s=1, message_id=1, sender_identifier_type="Sid", sender_identifier="02ff00")
    assert envelope_fields(parse_packet(encode(m)))["sender_identifier"] == "02ff00"
    assert mqqb.sid_text(mqqb.sid_bytes("s-1-0x00ffFFFFFFFF-1")) == "S-1-0x00FFFFFFFFFF-1"


# ============================================================================ envelope vocabulary
def test_message_classes():
    assert [message_class_name(message_class_code(name)) for name in NAMES] == NAMES
    assert (message_class_code("OrderAck"), message_class_code("NackPurged"), message_class_code("NackQueuePurged")) == (
        0x00FF, 0x8001, 0xC001)
    assert (message_class_code("NackCouldNotEncrypt"), message_class_code("NackSourceComputerGuidChanged"),
            message_class_code("NackReceiveTimeoutAtSender"), message_class_code("NackReceiveRejected")) == (
        0x8008, 0x800C, 0xC003, 0xC004)
    assert message_class_name(0x0003) is None and message_class_name(0xE1FF) is None
    with pytest.raises(ValueError):
        message_class_code("normal")


def test_envelope_rejects_an_unknown_message_class():
    m = parse_packet(simple_packet(cls=0x1234, body=b"q"))
    with pytest.raises(WireError) as info:
        envelope_fields(m)
    assert (info.value.structure, info.value.field, info.value.offset) == ("MessagePropertiesHeader", "MessageClass",
                                                                            16 + 48 + 16 + 2)


def test_message_identifier_and_mqcn_notification_queue():
    m = user_message_from_fields(b"", source_qm=SRC, destination_qm=DST, destination_queue=f"PRIVATE={DST}\\3",
                                 sent_time_s=1, message_id=4_000_000_000)
    assert message_identifier(m) == "{0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0}\\4000000000"
    assert envelope_fields(parse_packet(encode(m)))["destination_queue"] == (
        "PRIVATE=9b2e4c1d-0a3b-4c5d-8e6f-7a8b9c0d1e2f\\3")


@pytest.mark.parametrize("as_code, signature, mqf_signature, level", [
    (0, b"", b"", "None"), (1, b"s", b"", "Sig10"), (3, b"s", b"", "Sig20"), (5, b"", b"m", "Sig30"),
    (9, b"s", b"", "XmlSig"), (0, b"s", b"", "Sig20"), (0, b"", b"m", "Sig30"), (0, b"s", b"m", "Sig20")])
def test_authentication_level_from_the_wire(as_code, signature, mqf_signature, level):
    security = SecurityHeader(2, OTHER.bytes_le, signature=signature, authentication_signature=as_code)
    m = UserMessage(SRC, DST, 1, 1, "DIRECT=OS:h\\q", None, None, 0, b"", hash_algorithm=0x8003, security=security,
                    multi_queue=MultiQueueFormatHeader(signature=mqf_signature) if mqf_signature else None)
    fields = envelope_fields(parse_packet(encode(m)))
    assert fields["authentication_level"] == level
    assert fields["hash_algorithm"] == "MD5"                 # MessagePropertiesHeader.HashAlgorithm as sent
    assert (fields["sender_identifier_type"], fields["sender_identifier"]) == ("QueueManagerIdentifier", str(OTHER))


def test_envelope_rejects_unknown_as_and_hash():
    unknown_as = UserMessage(SRC, DST, 1, 1, "DIRECT=OS:h\\q", None, None, 0, b"",
                             security=SecurityHeader(signature=b"s", authentication_signature=2))
    with pytest.raises(WireError) as info:
        envelope_fields(unknown_as)
    assert (info.value.structure, info.value.field) == ("SecurityHeader", "Flags")
    unknown_hash = UserMessage(SRC, DST, 1, 1, "DIRECT=OS:h\\q", None, None, 0, b"", hash_algorithm=0x8005,
                               security=SecurityHeader(signature=b"s", authentication_signature=3))
    with pytest.raises(WireError) as info:
        envelope_fields(unknown_hash)
    assert (info.value.structure, info.value.field) == ("MessagePropertiesHeader", "HashAlgorithm")


def test_format_name_texts_are_accepted_case_insensitively():
    m = UserMessage(SRC, DST, 1, 1, "direct=OS:h\\q", "Private=" + str(SRC).upper() + "\\0000000A",
                    "public=" + str(OTHER).upper(), 0, b"")
    parsed = parse_packet(encode(m))
    assert (parsed.destination_queue, parsed.admin_queue, parsed.response_queue) == (
        "DIRECT=OS:h\\q", f"PRIVATE={SRC}\\a", f"PUBLIC={OTHER}")
    flags = struct.unpack_from("<I", encode(m), 60)[0]
    assert ((flags >> 10) & 7, (flags >> 13) & 7, (flags >> 16) & 7) == (7, 2, 5)
    with pytest.raises(ValueError):
        encode(UserMessage(SRC, DST, 1, 1, f"PRIVATE={OTHER}\\1", None, None, 0, b""))
    with pytest.raises(ValueError):
        encode(UserMessage(SRC, DST, 1, 1, "DIRECT=x", "DIRECT=y", None, 0, b"", admin_queue_type=5))


def ack_message(cls: int, destination: str, label: str = "QM Ordering Ack") -> UserMessage:
    return UserMessage(SRC, DST, 1, 1, destination, None, None, cls, bytes(0x24), label=label, priority=0)


def test_packet_kinds():
    order_queue = f"PRIVATE={DST}\\4"
    assert ack_message(0x00FF, order_queue).kind == "order_ack"
    assert ack_message(0x00FF, "DIRECT=OS:x\\q", label="").kind == "order_ack"
    assert ack_message(0x4000, order_queue).kind == "final_ack"
    assert ack_message(0xC002, "DIRECT=TCP:10.1.2.3\\PRIVATE$\\order_queue$").kind == "final_ack"
    assert ack_message(0x4000, "DIRECT=OS:admin\\q").kind == "user"              # an administration ack
    assert ack_message(0x8006, order_queue, label="my label").kind == "user"
    assert ack_message(0x0000, order_queue).kind == "user"
    assert parse_packet(encode(ack_message(0xC001, order_queue))).kind == "final_ack"


def test_ack_bodies():
    order = OrderAckBody(0x0000000200000001, 8, 7)
    raw = struct.pack("<IIII", 1, 2, 8, 7) + bytes(20)
    assert mqqb.encode_ack_body(order) == raw and mqqb.parse_order_ack_body(raw) == order
    final = FinalAckBody(5, 6, 5, SRC, 99)
    raw = struct.pack("<QII", 5, 6, 5) + SRC.bytes_le + struct.pack("<I", 99)
    assert mqqb.encode_ack_body(final) == raw and mqqb.parse_final_ack_body(raw) == final
    with pytest.raises(WireError):
        mqqb.parse_final_ack_body(raw[:-1])


# ============================================================================ robustness
def sample_packets() -> list[bytes]:
    packets = [encode(random_message(seed)) for seed in range(25)]
    return packets + [rich_packet()[0], mqf_packet(mqf_header()), frame_4_1_7(), DUMP_4_1_5, DUMP_4_1_8,
                      establish_frame(0)]


def parse_or_error(data: bytes):
    try:
        return parse_packet(data)
    except WireError as err:
        return err


def test_every_truncation_gives_a_wire_error():
    structures = set()
    for packet in sample_packets():
        for end in range(len(packet)):
            assert isinstance(parse_or_error(packet[:end]), WireError)
            if end >= 16:                    # PacketSize fitted to the truncation: the headers' own bounds checks
                result = parse_or_error(patch(packet[:end], 8, "<I", end))
                assert isinstance(result, (WireError, UserMessage, SessionAck, EstablishConnection, ConnectionParameters))
                structures.add(getattr(result, "structure", None))
    assert len(structures) > 8               # the truncations reach the checks of many headers


def test_random_one_byte_mutations_give_a_packet_or_a_wire_error():
    rng = random.Random(1801)
    packets = sample_packets()
    outcomes = {"packet": 0, "error": 0}
    for _ in range(4000):
        packet = bytearray(rng.choice(packets))
        packet[rng.randrange(len(packet))] = rng.randrange(256)
        result = parse_or_error(bytes(packet))
        outcomes["error" if isinstance(result, WireError) else "packet"] += 1
        if not isinstance(result, WireError):
            assert parse_packet(encode(result)) == result
    assert outcomes["packet"] > 100 and outcomes["error"] > 100


def test_random_garbage_gives_a_wire_error():
    rng = random.Random(21554)
    for i in range(1500):
        size = rng.randrange(16, 400)
        garbage = rng.randbytes(size)
        if i % 2:                            # a valid BaseHeader in front, so the garbage reaches the headers
            flags = rng.choice([0x3, 0x13, 0x23, 0xB, 0x1B, rng.getrandbits(16)])
            garbage = base(flags, size - (16 if flags & 0x18 == 0x10 else 0)) + garbage[16:]
        result = parse_or_error(garbage)
        assert isinstance(result, (WireError, UserMessage, SessionAck, EstablishConnection, ConnectionParameters))
        stream = PacketStream(synced=bool(i % 2))
        for _, item in stream.feed(garbage):
            assert isinstance(item, (WireError, UserMessage, SessionAck, EstablishConnection, ConnectionParameters))


# ============================================================================ PacketStream
def stream_packets() -> list[bytes]:
    return [establish_frame(0xC0), DUMP_4_1_5, encode(random_message(3)), DUMP_4_1_8, encode(random_message(4)),
            frame_4_1_7()]


def offsets_of(packets: list[bytes], start: int = 0) -> list[int]:
    out, position = [], start
    for packet in packets:
        out.append(position)
        position += len(packet)
    return out


def test_stream_several_packets_in_one_feed():
    packets = stream_packets()
    results = PacketStream().feed(b"".join(packets))
    assert [offset for offset, _ in results] == offsets_of(packets)
    assert [encode(p) for _, p in results] == packets


def test_stream_packet_split_at_every_byte_boundary():
    packets = stream_packets()[1:4]
    data = b"".join(packets)
    expected = [(offset, parse_packet(p)) for offset, p in zip(offsets_of(packets), packets)]
    for cut in range(len(data) + 1):
        stream = PacketStream()
        assert stream.feed(data[:cut]) + stream.feed(data[cut:]) == expected
    stream = PacketStream()
    assert [item for byte in range(len(data)) for item in stream.feed(data[byte:byte + 1])] == expected


def test_stream_unsynced_skips_garbage_without_errors():
    rng = random.Random(5)
    packets = stream_packets()
    fake = b"\x10\x00\x03\x00LIOR\x05\x00\x00\x00"             # version and signature, implausible PacketSize
    garbage = rng.randbytes(300) + fake + rng.randbytes(50) + packets[0][100:]          # ... and a packet's tail
    results = PacketStream(synced=False).feed(garbage + b"".join(packets))
    assert not any(isinstance(item, WireError) for _, item in results)
    assert [offset for offset, _ in results] == offsets_of(packets, len(garbage))


def test_stream_corrupt_base_header_in_the_middle():
    packets = stream_packets()
    corrupt = bytearray(packets[2])
    corrupt[0] = 0x11                                      # VersionNumber
    data = b"".join(packets[:2]) + bytes(corrupt) + b"".join(packets[3:])
    results = PacketStream().feed(data)
    errors = [(offset, item) for offset, item in results if isinstance(item, WireError)]
    assert len(errors) == 1
    assert errors[0][0] == len(packets[0]) + len(packets[1]) and errors[0][1].field == "VersionNumber"
    found = [offset for offset, item in results if not isinstance(item, WireError)]
    assert found == [o for i, o in enumerate(offsets_of(packets)) if i != 2]


def test_stream_malformed_content_is_reported_and_skipped():
    packets = stream_packets()
    bad = patch(packets[2], 60, "<I", uflags(dq=1))        # an invalid DQ: framed by PacketSize, content broken
    results = PacketStream().feed(b"".join(packets[:2]) + bad + b"".join(packets[3:]))
    assert [type(item).__name__ for _, item in results] == [
        "EstablishConnection", "ConnectionParameters", "WireError", "SessionAck", "UserMessage", "UserMessage"]
    assert results[2][1].field == "Flags"


def test_stream_gap_drops_the_partial_packet_and_resyncs():
    packets = stream_packets()
    stream = PacketStream()
    first = stream.feed(packets[0] + packets[2][:40])
    assert [offset for offset, _ in first] == [0]
    stream.gap(lost=100)
    tail = packets[2][140:]
    results = stream.feed(tail + packets[3] + packets[4])
    assert not any(isinstance(item, WireError) for _, item in results)
    restart = len(packets[0]) + 40 + 100 + len(tail)
    assert [offset for offset, _ in results] == [restart, restart + len(packets[3])]


def test_stream_buffers_at_most_one_maximum_packet():
    stream = PacketStream()
    header = base(0x0003 | 0x10, 0x00400000)               # the largest packet, plus a SessionHeader
    assert stream.feed(header + bytes(1 << 20)) == []
    stream.feed(bytes(0x00400000 + 16 - (1 << 20) - 17))
    assert stream.buffered == 0x00400000 + 16 - 1
    scanning = PacketStream(synced=False)
    assert scanning.feed(random.Random(9).randbytes(100_000)) == [] and scanning.buffered <= 11
