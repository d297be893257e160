"""[MS-MQQB] MSMQ Binary Protocol packets as they travel on a TCP 1801 stream: a sans-IO codec.

Layouts are those of [MS-MQMQ] 2.2.19 (BaseHeader, UserHeader, MessagePropertiesHeader) and 2.2.20
(UserMessage and its optional headers) plus [MS-MQQB] 2.2.1-2.2.6 (InternalHeader, ConnectionParameters,
EstablishConnection, OrderAck, FinalAck, SessionAck). Everything is little-endian (MS-MQMQ 2.2.18).

Every length and count is untrusted (CVE-2023-21554 "QueueJumper" was a length in these headers): each
is checked against the bytes left in the packet before anything is read or allocated, and a packet never
reads past its PacketSize. Malformed input raises WireError("MQQB", structure, field, offset, reason) with
the offset counted from the start of the packet.

Values the spec restricts without changing the layout (priorities, timeouts, sequence numbers, reserved
bits that "MUST be ignored on receipt") are kept as they are, not rejected; reserved bits are not kept and
are written as zero. Padding bytes ("no restrictions on the value") are skipped and written as zero.

Spec ambiguities resolved here (each is also noted where it is implemented):
- PacketSize and the SessionHeader (MS-MQMQ 2.2.19.1 vs MS-MQQB 4.1.8): a UserMessage with BaseHeader.Flags.SH
  carries its 16-byte SessionHeader after PacketSize bytes; the SessionAck packet (Flags.IN set) counts its
  SessionHeader in PacketSize (4.1.8: PacketSize 36 = 16 + 4 + 16, and the frame is 36 bytes).
- The authentication level is SecurityHeader.Flags.AS (see authentication_level()).
- Headers start on 4-byte boundaries (2.2.19.1 PacketSize "padding bytes used to align the various message
  headers"), so every header is padded to 4 bytes, also the SoapHeader and MultiQueueFormatHeader whose own
  sections say nothing; alignment relative to a header is then the same as relative to the packet.
"""
import hashlib
import re
import struct
import uuid
from dataclasses import dataclass, field

from .errors import WireError
from .reader import Reader, decode_utf16

__all__ = ["ACK_BODY_SIZE", "authentication_level", "AUTHENTICATION_LEVELS", "BASE_DH", "BASE_HEADER_SIZE",
           "BASE_IN", "BASE_PR_MASK", "BASE_SH", "BASE_TR", "canonical_format_name",
           "CONNECTION_PARAMETERS_PACKET_SIZE", "ConnectionParameters", "DebugHeader", "encode", "encode_ack_body",
           "envelope_fields", "ESTABLISH_CONNECTION_PACKET_SIZE", "ESTABLISH_PADDING", "EstablishConnection",
           "FinalAckBody", "FormatName", "HASH_ALGORITHMS", "header_offsets", "INTERNAL_CS", "MAX_LABEL_LENGTH",
           "MAX_PACKET_SIZE", "message_class_code", "message_class_name", "MESSAGE_CLASSES", "message_identifier",
           "MQF_ADMIN_ID", "MQF_DESTINATION_ID", "MQF_DIRECT", "MQF_DISTRIBUTION_LIST", "MQF_PRIVATE",
           "MQF_PUBLIC", "MQF_RESPONSE_ID", "MQF_SIGNATURE_ID", "MQMSG_CLASS_ACK_RECEIVE", "MQMSG_CLASS_NORMAL",
           "MQMSG_CLASS_ORDER_ACK", "MQQB_TCP_PORT", "MultiQueueFormatHeader", "NULL_GUID", "ORDER_QUEUE_ID",
           "OrderAckBody", "ORDERING_ACK_LABEL", "Packet", "packet_length", "PacketStream", "parse_final_ack_body",
           "parse_format_name", "parse_order_ack_body", "parse_packet", "PLAUSIBLE_SIGNATURE_SIZE",
           "private_format_name", "PROTOCOL", "PT_CONNECTION_PARAMETERS", "PT_ESTABLISH_CONNECTION",
           "PT_SESSION_ACK", "Q_DIRECT", "Q_NONE", "Q_PRIVATE_ADMIN_HOST", "Q_PRIVATE_DESTINATION",
           "Q_PRIVATE_OTHER", "Q_PRIVATE_SOURCE", "Q_PUBLIC", "Q_SAME_AS_ADMIN", "QUEUE_TYPES",
           "REJECTED_BYTES_MAX", "SEC_AI", "SEC_AS_SHIFT", "SEC_AU", "SEC_DE", "SEC_EB", "SEC_ST_MASK",
           "SecurityHeader", "SENDER_ID_TYPES", "SESSION_ACK_PACKET_SIZE", "SESSION_HEADER_SIZE", "SessionAck",
           "SessionHeader", "sid_bytes", "sid_text", "SIGNATURE", "SOAP_BODY_SECTION_ID", "SOAP_HEADER_SECTION_ID",
           "SoapHeader", "TransactionHeader", "TX_CG", "TX_FA", "TX_FM", "TX_ID_MASK", "TX_ID_SHIFT", "TX_LM",
           "UH_AH", "UH_AQ_SHIFT", "UH_CQ", "UH_DM_SHIFT", "UH_DQ_SHIFT", "UH_HH", "UH_JN", "UH_JP", "UH_MP",
           "UH_MQ", "UH_RC_MASK", "UH_RQ_SHIFT", "UH_SH", "UH_TH", "USER_HEADER_FIXED_SIZE",
           "USER_HEADER_FLAGS_OFFSET", "user_message_from_fields", "UserMessage", "VERSION"]

PROTOCOL = "MQQB"
MQQB_TCP_PORT = 1801                  # MS-MQQB 2.1.1
SIGNATURE = 0x524F494C                # MS-MQMQ 2.2.19.1 BaseHeader.Signature ("LIOR" on the wire)
VERSION = 0x10                        # BaseHeader.VersionNumber
MAX_PACKET_SIZE = 0x00400000          # BaseHeader.PacketSize maximum
BASE_HEADER_SIZE = 16
SESSION_HEADER_SIZE = 16
NULL_GUID = uuid.UUID(int=0)
_SIGNATURE_BYTES = struct.pack("<I", SIGNATURE)

# BaseHeader.Flags (MS-MQMQ 2.2.19.1). Diagram bit n is value bit n: 4.1.3 prints 0x000B as PR=3 + IN.
BASE_PR_MASK = 0x0007
BASE_IN = 0x0008
BASE_SH = 0x0010
BASE_DH = 0x0020
BASE_TR = 0x0100

# InternalHeader.Flags (MS-MQQB 2.2.1)
PT_SESSION_ACK, PT_ESTABLISH_CONNECTION, PT_CONNECTION_PARAMETERS = 1, 2, 3
INTERNAL_CS = 0x0010
ESTABLISH_CONNECTION_PACKET_SIZE = 16 + 4 + 552
CONNECTION_PARAMETERS_PACKET_SIZE = 16 + 4 + 12
SESSION_ACK_PACKET_SIZE = 16 + 4 + 16
ESTABLISH_PADDING = b"\x5a" * 512     # MS-MQQB 2.2.3.1: a server response fills the padding with 0x5A

# UserHeader.Flags (MS-MQMQ 2.2.19.2)
UH_RC_MASK = 0x1F
UH_DM_SHIFT = 5
UH_JN = 1 << 8
UH_JP = 1 << 9
UH_DQ_SHIFT, UH_AQ_SHIFT, UH_RQ_SHIFT = 10, 13, 16
UH_SH = 1 << 19
UH_TH = 1 << 20
UH_MP = 1 << 21
UH_CQ = 1 << 22
UH_MQ = 1 << 23
UH_AH = 1 << 25
UH_HH = 1 << 28
USER_HEADER_FIXED_SIZE = 48
USER_HEADER_FLAGS_OFFSET = BASE_HEADER_SIZE + 44

# Queue format types of UserHeader.Flags.DQ / AQ / RQ (MS-MQMQ 2.2.19.2)
Q_NONE, Q_SAME_AS_ADMIN, Q_PRIVATE_SOURCE, Q_PRIVATE_DESTINATION = 0, 1, 2, 3
Q_PRIVATE_ADMIN_HOST, Q_PUBLIC, Q_PRIVATE_OTHER, Q_DIRECT = 4, 5, 6, 7
QUEUE_TYPES = {
    "DestinationQueue": frozenset({0, 3, 5, 7}),
    "AdminQueue": frozenset({0, 2, 3, 5, 6, 7}),
    "ResponseQueue": frozenset(range(8)),
}

# MessagePropertiesHeader (MS-MQMQ 2.2.19.3)
_PROPERTIES_FIXED = struct.Struct("<BBH20sIIIIIIII")     # 56 bytes up to ExtensionSize
MAX_LABEL_LENGTH = 0xFA

# SecurityHeader.Flags (MS-MQMQ 2.2.20.6)
SEC_ST_MASK = 0x000F
SEC_AU = 0x0010
SEC_EB = 0x0020
SEC_DE = 0x0040
SEC_AI = 0x0080
SEC_AS_SHIFT = 8
_SECURITY_SIZES = (("SecurityID", "SenderIdSize", 0xFFFF), ("EncryptionKey", "EncryptionKeySize", 0xFFFF),
                   ("Signature", "SignatureSize", 0xFFFF), ("SenderCert", "SenderCertSize", 0xFFFFFFFF),
                   ("ProviderInfo", "ProviderInfoSize", 0xFFFFFFFF))

# TransactionHeader.Flags (MS-MQMQ 2.2.20.5)
TX_CG, TX_FA, TX_FM, TX_LM = 0x1, 0x2, 0x4, 0x8
TX_ID_SHIFT, TX_ID_MASK = 4, 0xFFFFF

# SoapHeader (2.2.20.7), MQFAddressHeader (2.2.20.2), MQFSignatureHeader (2.2.20.3)
SOAP_HEADER_SECTION_ID = 0x0320
SOAP_BODY_SECTION_ID = 0x0384
MQF_DESTINATION_ID, MQF_ADMIN_ID, MQF_RESPONSE_ID, MQF_SIGNATURE_ID = 0x0064, 0x00C8, 0x012C, 0x015E
MQF_PUBLIC, MQF_PRIVATE, MQF_DIRECT, MQF_DISTRIBUTION_LIST = 1, 2, 3, 6

# MS-MQMQ 2.2.18.1.6 MESSAGE_CLASS_VALUES, named as in MS-MQDMPR 3.1.1.12 / 3.1.7.1.31. 0x8008, 0x800C and
# 0xC003 are not in the MS-MQMQ enumeration; their codes are those of MC-MQAC 2.2.2.9 MQMSGCLASS.
MESSAGE_CLASSES = {
    0x0000: "Normal", 0x0001: "Report", 0x0002: "AckReachQueue", 0x00FF: "OrderAck", 0x4000: "AckReceive",
    0x8000: "NackBadDestQueue", 0x8001: "NackPurged", 0x8002: "NackReachQueueTimeout",
    0x8003: "NackQueueExceedQuota", 0x8004: "NackAccessDenied", 0x8005: "NackHopCountExceeded",
    0x8006: "NackBadSignature", 0x8007: "NackBadEncryption", 0x8008: "NackCouldNotEncrypt",
    0x8009: "NackNotTransactionalQueue", 0x800A: "NackNotTransactionalMessage",
    0x800B: "NackUnsupportedCryptoProvider", 0x800C: "NackSourceComputerGuidChanged",
    0xC000: "NackQueueDeleted", 0xC001: "NackQueuePurged", 0xC002: "NackReceiveTimeout",
    0xC003: "NackReceiveTimeoutAtSender", 0xC004: "NackReceiveRejected",
}
_MESSAGE_CLASS_CODES = {name: code for code, name in MESSAGE_CLASSES.items()}
MQMSG_CLASS_NORMAL = 0x0000
MQMSG_CLASS_ORDER_ACK = 0x00FF
MQMSG_CLASS_ACK_RECEIVE = 0x4000
ORDERING_ACK_LABEL = "QM Ordering Ack"          # MS-MQQB 2.2.4 / 2.2.5
ORDER_QUEUE_ID = 4                              # PrivateQueueIdentifier of order_queue$ (2.2.4)
ACK_BODY_SIZE = 0x24

# MessagePropertiesHeader.HashAlgorithm (MS-MQMQ 2.2.19.3). MS-MQDMPR 3.1.7.1.31 maps 0x8003 to "MD4", a typo:
# MS-MQMQ names 0x8003 MD5.
HASH_ALGORITHMS = {0x8001: "MD2", 0x8002: "MD4", 0x8003: "MD5", 0x8004: "SHA1", 0x800C: "SHA_256", 0x800E: "SHA_512"}
_HASH_CODES = {name: code for code, name in HASH_ALGORITHMS.items()}
# SecurityHeader.Flags.ST (MS-MQMQ 2.2.20.6, named as in MS-MQDMPR 3.1.7.1.31)
SENDER_ID_TYPES = {0: "None", 1: "Sid", 2: "QueueManagerIdentifier"}
_SENDER_ID_CODES = {name: code for code, name in SENDER_ID_TYPES.items()}
# SecurityHeader.Flags.AS: MS-MQQB 3.1.5.8.3 sets 0x1 (MSMQ 1.0 signature), 0x3 (2.0), 0x5 (3.0), and MS-MQDMPR
# 3.1.7.1.31 maps these to Sig10 / Sig20 / Sig30. The spec gives XmlSig no code; 0x9 is MQMSG_AUTHENTICATED_SIGXML
# of the MSMQ SDK, whose SIG10/SIG20/SIG30 are the same 1/3/5.
AUTHENTICATION_LEVELS = {0x1: "Sig10", 0x3: "Sig20", 0x5: "Sig30", 0x9: "XmlSig"}
_AUTHENTICATION_CODES = {name: code for code, name in AUTHENTICATION_LEVELS.items()}
PLAUSIBLE_SIGNATURE_SIZE = 128                  # an RSA-1024 signature

_GUID_RE = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
_PRIVATE_RE = re.compile(rf"({_GUID_RE})\\([0-9A-Fa-f]{{1,8}})")      # MS-MQMQ 2.1.4
_GUID_ONLY_RE = re.compile(_GUID_RE)
_SID_RE = re.compile(r"S-1-(\d+|0[xX][0-9A-Fa-f]{12})((?:-\d+)*)")


# ============================================================================ packets
@dataclass(slots=True)
class SessionHeader:
    """MS-MQMQ 2.2.20.4, 16 bytes."""
    ack_sequence_number: int = 0
    recoverable_msg_ack_seq_number: int = 0
    recoverable_msg_ack_flags: int = 0
    user_msg_sequence_number: int = 0
    recoverable_msg_seq_number: int = 0
    window_size: int = 0x0040
    reserved: int = 0


@dataclass(slots=True)
class EstablishConnection:
    """MS-MQQB 2.2.3: BaseHeader + InternalHeader (PT 0x2) + EstablishConnectionHeader (552 bytes)."""
    client_guid: uuid.UUID
    server_guid: uuid.UUID
    timestamp: int                      # milliseconds since the initiator's OS started
    operating_system: int               # 2.2.3.1 OperatingSystem: RE (low byte, 0x10), SE, OS, QS bits
    refused: bool = False               # InternalHeader.Flags.CS
    reserved: int = 0
    padding: bytes = ESTABLISH_PADDING  # kept as seen: 0x5A in a response, anything in a request
    priority: int = 3
    base_reserved: int = 0              # BaseHeader.Reserved, "any arbitrary value"

    @property
    def no_ping_sent(self) -> bool:     # SE
        return bool(self.operating_system & 0x0100)

    @property
    def server_class_os(self) -> bool:  # OS
        return bool(self.operating_system & 0x0200)

    @property
    def quality_of_service(self) -> bool:  # QS
        return bool(self.operating_system & 0x0400)


@dataclass(slots=True)
class ConnectionParameters:
    """MS-MQQB 2.2.2: BaseHeader + InternalHeader (PT 0x3) + ConnectionParametersHeader (12 bytes)."""
    recoverable_ack_timeout: int
    ack_timeout: int
    window_size: int
    refused: bool = False               # InternalHeader.Flags.CS
    reserved: int = 0
    priority: int = 3
    base_reserved: int = 0


@dataclass(slots=True)
class SessionAck:
    """MS-MQQB 2.2.6: BaseHeader (IN, SH) + InternalHeader (PT 0x1) + SessionHeader."""
    session: SessionHeader
    priority: int = 3
    base_reserved: int = 0


@dataclass(slots=True)
class TransactionHeader:
    """MS-MQMQ 2.2.20.5."""
    tx_sequence_id: int                 # TxSequenceID as one 64-bit value: TimeStamp << 32 | Ordinal (2.2.18.1.2)
    tx_sequence_number: int
    previous_tx_sequence_number: int = 0
    transaction_id: int = 0             # Flags.ID, 20 bits
    final_ack_required: bool = False    # Flags.FA
    first_in_transaction: bool = False  # Flags.FM
    last_in_transaction: bool = False   # Flags.LM
    connector_qm: uuid.UUID | None = None   # Flags.CG + ConnectorQMGuid


@dataclass(slots=True)
class SecurityHeader:
    """MS-MQMQ 2.2.20.6. The SecurityData items are kept as bytes; an empty one is absent (its size is 0)."""
    sender_id_type: int = 0             # Flags.ST: 0 none, 1 SID, 2 queue manager GUID
    sender_id: bytes = b""              # SecurityData.SecurityID
    encryption_key: bytes = b""
    signature: bytes = b""
    sender_cert: bytes = b""
    provider_info: bytes = b""          # ProviderType (4) + null-terminated ProviderName, kept whole
    authenticated: bool = False         # Flags.AU ("MUST be set to 0")
    encrypted: bool = False             # Flags.EB
    default_provider: bool = False      # Flags.DE
    security_info: bool = False         # Flags.AI
    authentication_signature: int = 0   # Flags.AS, 4 bits: the authentication level (see authentication_level())


@dataclass(slots=True)
class DebugHeader:
    """MS-MQMQ 2.2.20.8: QT 0x0 (no queue) or 0x1 (a public queue GUID)."""
    queue_id: uuid.UUID | None = None


@dataclass(slots=True)
class SoapHeader:
    """MS-MQMQ 2.2.20.7. None is a section of DataLength 0; a string is sent with its terminating null."""
    header: str | None = None
    body: str | None = None


@dataclass(slots=True)
class MultiQueueFormatHeader:
    """MS-MQMQ 2.2.20.1: three MQFAddressHeaders of format name texts and an MQFSignatureHeader."""
    destinations: list[str] = field(default_factory=list)
    admin: list[str] = field(default_factory=list)
    response: list[str] = field(default_factory=list)
    signature: bytes = b""


@dataclass(slots=True)
class UserMessage:
    """MS-MQMQ 2.2.20 UserMessage Packet; also OrderAck / FinalAck (MS-MQQB 2.2.4 / 2.2.5), see `kind`.

    Queue fields are format name texts (MS-MQMQ 2.1): "DIRECT=<name>", "PUBLIC=<guid>", "PRIVATE=<guid>\\<hex id>".
    admin_queue_type / response_queue_type are None when the UserHeader.Flags.AQ / RQ value is the one the
    text implies (see _infer_queue_type); otherwise they hold the value, so that every packet round-trips.
    allocation_body_size None means equal to len(body).
    """
    source_qm: uuid.UUID                # UserHeader.SourceQueueManager
    destination_qm: uuid.UUID           # UserHeader.QueueManagerAddress
    sent_time: int                      # UserHeader.SentTime, seconds since 1970
    message_id: int                     # UserHeader.MessageID
    destination_queue: str | None
    admin_queue: str | None
    response_queue: str | None
    message_class: int                  # MessagePropertiesHeader.MessageClass
    body: bytes
    hash_algorithm: int = 0
    security: SecurityHeader | None = None
    transaction: TransactionHeader | None = None
    session: SessionHeader | None = None
    priority: int = 3                   # BaseHeader.Flags.PR
    delivery: int = 0                   # UserHeader.Flags.DM: 0 express, 1 recoverable
    time_to_reach_queue: int = 0xFFFFFFFF
    time_to_be_received: int = 0xFFFFFFFF
    label: str = ""
    correlation_id: bytes = bytes(20)
    body_type: int = 0
    application_tag: int = 0
    privacy_level: int = 0
    encryption_algorithm: int = 0
    extension: bytes = b""
    acknowledgments: int = 0            # MessagePropertiesHeader.Flags: PA 0x1, PR 0x2, NA 0x4, NR 0x8
    allocation_body_size: int | None = None
    hop_count: int = 0                  # UserHeader.Flags.RC
    journal_negative: bool = False      # UserHeader.Flags.JN
    journal_positive: bool = False      # UserHeader.Flags.JP
    via_http: bool = False              # UserHeader.Flags.AH
    trace: bool = False                 # BaseHeader.Flags.TR
    connector_type: uuid.UUID | None = None     # UserHeader.Flags.CQ + ConnectorType
    debug: DebugHeader | None = None
    soap: SoapHeader | None = None
    multi_queue: MultiQueueFormatHeader | None = None
    admin_queue_type: int | None = None
    response_queue_type: int | None = None
    base_reserved: int = 0

    @property
    def kind(self) -> str:
        """ "order_ack", "final_ack" or "user", per MS-MQQB 3.1.5.1.1. MessageClass alone decides an OrderAck
        (MQMSG_CLASS_ORDER_ACK is used by nothing else); a FinalAck's classes (>= 0x4000) are also those of
        administration acknowledgments, so it also needs the "QM Ordering Ack" label and order_queue$."""
        if self.message_class == MQMSG_CLASS_ORDER_ACK:
            return "order_ack"
        if self.message_class >= 0x4000 and self.label == ORDERING_ACK_LABEL and _addresses_order_queue(self):
            return "final_ack"
        return "user"


Packet = EstablishConnection | ConnectionParameters | SessionAck | UserMessage


@dataclass(slots=True)
class OrderAckBody:
    """MS-MQQB 2.2.4.1, 36 bytes."""
    tx_sequence_id: int
    tx_sequence_number: int
    tx_previous_sequence_number: int
    reserved: bytes = bytes(20)


@dataclass(slots=True)
class FinalAckBody:
    """MS-MQQB 2.2.5.1, 36 bytes."""
    tx_sequence_id: int
    tx_sequence_number: int
    tx_previous_sequence_number: int
    source_guid: uuid.UUID
    message_id: int


# ============================================================================ framing
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


# ============================================================================ internal packets
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
    client, server = _uuid(r, "ClientGuid"), _uuid(r, "ServerGuid")
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


_SESSION = struct.Struct("<HHIHHHH")


def _read_session_header(r: Reader) -> SessionHeader:
    r.structure = "SessionHeader"
    return SessionHeader(*_SESSION.unpack(r.raw("(header)", SESSION_HEADER_SIZE)))


# ============================================================================ UserMessage parsing
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


def _uuid(r: Reader, field_name: str) -> uuid.UUID:
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
    fields = {"source_qm": _uuid(r, "SourceQueueManager"), "destination_qm": _uuid(r, "QueueManagerAddress"),
              "time_to_be_received": r.u32("TimeToBeReceived"), "sent_time": r.u32("SentTime"),
              "message_id": r.u32("MessageID")}
    flags = r.u32("Flags")
    types = _queue_types(r, flags)
    raw = {name: _read_queue(r, name, qtype, start) for name, qtype in types.items()}
    fields["connector_type"] = _uuid(r, "ConnectorType") if flags & UH_CQ else None
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
        return _uuid(r, name)                               # PublicQueueFormatName (2.2.18.1.7.1)
    if qtype == Q_PRIVATE_OTHER:                            # PrivateQueueFormatName (2.2.18.1.7.2)
        _align(r, header_start, 4, name)
        return _uuid(r, name), r.u32(name)
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
    context = _QueueContext(source, destination, admin)
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


def _override(slot: str, actual: int, text: str | None, context: "_QueueContext") -> int | None:
    return None if _infer_queue_type(slot, text, context) == actual else actual


# ---------------------------------------------------------------------------- optional headers
def _read_transaction_header(r: Reader) -> TransactionHeader:
    r.structure = "TransactionHeader"
    # Flags bits X1-X8 "MUST be ignored on receipt"; the sentence "Any value not specified in the table MUST be
    # treated as an error" is taken to mean the defined bits (2.2.20.5 is ambiguous), so nothing is rejected.
    flags = r.u32("Flags")
    seq_id = int.from_bytes(r.raw("TxSequenceID", 8), "little")
    seq, previous = r.u32("TxSequenceNumber"), r.u32("PreviousTxSequenceNumber")
    connector = _uuid(r, "ConnectorQMGuid") if flags & TX_CG else None
    return TransactionHeader(seq_id, seq, previous, (flags >> TX_ID_SHIFT) & TX_ID_MASK, bool(flags & TX_FA),
                             bool(flags & TX_FM), bool(flags & TX_LM), connector)


def _read_security_header(r: Reader) -> SecurityHeader:
    start = r.pos
    r.structure = "SecurityHeader"
    flags = r.u16("Flags")
    sizes = [(r.pos, r.u16(size_field) if limit == 0xFFFF else r.u32(size_field))
             for _, size_field, limit in _SECURITY_SIZES]
    _check_security_sizes(r, flags, [size for _, size in sizes], start)
    items = []
    for (data_field, size_field, _), (size_at, size) in zip(_SECURITY_SIZES, sizes):
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
    r.need("(fixed part)", _PROPERTIES_FIXED.size)
    (acks, label_length, message_class, correlation, body_type, tag, body_size, allocation, privacy,
     hash_algorithm, encryption, extension_size) = _PROPERTIES_FIXED.unpack_from(r.buf, r.pos)
    r.pos += _PROPERTIES_FIXED.size
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
    return DebugHeader(_uuid(r, "QueueIdentifier") if queue_type else None)


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
        return f"PUBLIC={_uuid(r, name)}"
    if format_type == MQF_PRIVATE:
        _align(r, header_start, 4, name)
        return private_format_name(_uuid(r, name), r.u32(name))
    if format_type == MQF_DIRECT:
        _align(r, header_start, 2, name)
        return "DIRECT=" + r.utf16z(name)
    if format_type == MQF_DISTRIBUTION_LIST:
        _align(r, header_start, 4, name)
        return f"DL={_uuid(r, name)}"
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


# ============================================================================ format names
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
class _QueueContext:
    source: uuid.UUID
    destination: uuid.UUID
    admin: str | None


def _infer_queue_type(slot: str, text: str | None, context: _QueueContext) -> int:
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


def _resolve_queue_type(slot: str, text: str | None, override: int | None, context: _QueueContext) -> int:
    inferred = _infer_queue_type(slot, text, context)
    if override is None or override == inferred:
        return inferred
    if override not in QUEUE_TYPES[slot] or not _fits_queue_type(override, text, context):
        raise ValueError(f"{slot} type {override} does not fit {text!r}")
    return override


def _fits_queue_type(qtype: int, text: str | None, context: _QueueContext) -> bool:
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


def _addresses_order_queue(msg: UserMessage) -> bool:
    """order_queue$ as MS-MQQB 2.2.4 addresses it: DQ 0x3 with id 4, or DQ 0x7 "...\\PRIVATE$\\order_queue$"."""
    text = msg.destination_queue or ""
    if text.upper().startswith("DIRECT="):
        return text.upper().endswith("\\PRIVATE$\\ORDER_QUEUE$")
    return text == private_format_name(msg.destination_qm, ORDER_QUEUE_ID)


# ============================================================================ encoding
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
    return _SESSION.pack(s.ack_sequence_number, s.recoverable_msg_ack_seq_number, s.recoverable_msg_ack_flags,
                         s.user_msg_sequence_number, s.recoverable_msg_seq_number, s.window_size, s.reserved)


def _pad4(data: bytes) -> bytes:
    return data + bytes(-len(data) % 4)


def _encode_user_message(m: UserMessage) -> bytes:
    headers = b"".join(_user_message_headers(m).values())
    flags = (_priority(m.priority) | (BASE_SH if m.session else 0) | (BASE_DH if m.debug else 0)
             | (BASE_TR if m.trace else 0))
    base = _base_header(flags, m.base_reserved, BASE_HEADER_SIZE + len(headers), m.time_to_reach_queue)
    return base + headers + (_session_bytes(m.session) if m.session else b"")


def _user_message_headers(m: UserMessage) -> dict[str, bytes]:
    """Each header's bytes, in packet order (MS-MQMQ 2.2.20); each is a multiple of 4 bytes long."""
    headers = {"UserHeader": _user_header_bytes(m)}
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


def _user_header_bytes(m: UserMessage) -> bytes:
    context = _QueueContext(m.source_qm, m.destination_qm, m.admin_queue)
    types = {"DestinationQueue": _resolve_queue_type("DestinationQueue", m.destination_queue, None, context),
             "AdminQueue": _resolve_queue_type("AdminQueue", m.admin_queue, m.admin_queue_type, context),
             "ResponseQueue": _resolve_queue_type("ResponseQueue", m.response_queue, m.response_queue_type, context)}
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
    for item, (data_field, _, limit) in zip(items, _SECURITY_SIZES):
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
    fixed = _PROPERTIES_FIXED.pack(m.acknowledgments, len(label) // 2, m.message_class, m.correlation_id,
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


# ============================================================================ ack bodies
def parse_order_ack_body(body: bytes) -> OrderAckBody:
    r = _ack_body_reader(body, "OrderAckBody")
    seq_id = int.from_bytes(r.raw("TxSequenceID", 8), "little")
    return OrderAckBody(seq_id, r.u32("TxSequenceNumber"), r.u32("TxPreviousSequenceNumber"), r.raw("Reserved", 20))


def parse_final_ack_body(body: bytes) -> FinalAckBody:
    r = _ack_body_reader(body, "FinalAckBody")
    seq_id = int.from_bytes(r.raw("TxSequenceID", 8), "little")
    return FinalAckBody(seq_id, r.u32("TxSequenceNumber"), r.u32("TxPreviousSequenceNumber"),
                        _uuid(r, "SourceGUID"), r.u32("MessageID"))


def _ack_body_reader(body: bytes, structure: str) -> Reader:
    r = Reader(bytes(body), PROTOCOL)
    r.structure = structure
    if len(body) != ACK_BODY_SIZE:
        raise r.error("(body)", f"must be 0x24 bytes (MessageSize 0x00000024), got {len(body)}", 0)
    return r


def encode_ack_body(body: OrderAckBody | FinalAckBody) -> bytes:
    head = struct.pack("<QII", body.tx_sequence_id, body.tx_sequence_number, body.tx_previous_sequence_number)
    if isinstance(body, FinalAckBody):
        return head + body.source_guid.bytes_le + struct.pack("<I", body.message_id)
    if len(body.reserved) != 20:
        raise ValueError("OrderAckBody reserved must be 20 bytes")
    return head + body.reserved


# ============================================================================ envelope
def message_identifier(msg: UserMessage) -> str:
    """MS-MQMQ 2.2.18.1.3 MessageIdentifier as MSMQ shows it: "{guid}\\ordinal"."""
    return f"{{{msg.source_qm}}}\\{msg.message_id}"


def message_class_name(code: int) -> str | None:
    return MESSAGE_CLASSES.get(code)


def message_class_code(name: str) -> int:
    try:
        return _MESSAGE_CLASS_CODES[name]
    except KeyError:
        raise ValueError(f"unknown message class {name!r}: expected one of {', '.join(_MESSAGE_CLASS_CODES)}") from None


def header_offsets(msg: UserMessage) -> dict[str, int]:
    """Where each header of msg starts in its encoding (UserHeader at 16), for error offsets."""
    offsets, position = {}, BASE_HEADER_SIZE
    for name, data in _user_message_headers(msg).items():
        offsets[name] = position
        position += len(data)
    return offsets


def _envelope_error(msg: UserMessage, structure: str, field_name: str, delta: int, reason: str) -> WireError:
    try:
        offset = header_offsets(msg).get(structure, 0) + delta
    except ValueError:
        offset = 0
    return WireError(PROTOCOL, structure, field_name, offset, reason)


def authentication_level(msg: UserMessage) -> str:
    """"None" | "Sig10" | "Sig20" | "Sig30" | "XmlSig".

    The level is SecurityHeader.Flags.AS (MS-MQMQ 2.2.20.6, "the authentication signature type"; 4.1.7 prints it
    as LevelOfAuthentication): 0x1 Sig10, 0x3 Sig20, 0x5 Sig30 as MS-MQQB 3.1.5.8.3 sets them and MS-MQDMPR
    3.1.7.1.31 reads them (its table is headed "Flags.AU", a 1-bit field that cannot hold 0x3 or 0x5, so it
    means AS), 0x9 XmlSig (SDK MQMSG_AUTHENTICATED_SIGXML). 2.2.20.6 also says AS "MUST be set to 0" by a
    sender; for such a packet the kind of signature shows only by where it is: SecurityData.Signature is
    checked first as an MSMQ 2.0 signature (3.1.5.8.3) -> "Sig20", else MultiQueueFormatHeader.Signature is an
    MSMQ 3.0 signature -> "Sig30". No SecurityHeader, or no signature at all, is "None".
    """
    security = msg.security
    if security is None:
        return "None"
    if security.authentication_signature:
        level = AUTHENTICATION_LEVELS.get(security.authentication_signature)
        if level is None:
            raise _envelope_error(msg, "SecurityHeader", "Flags", 0,
                                  f"AS 0x{security.authentication_signature:x} is no known authentication level")
        return level
    if security.signature:
        return "Sig20"
    if msg.multi_queue and msg.multi_queue.signature:
        return "Sig30"
    return "None"


def _sender_identifier(msg: UserMessage) -> tuple[str, str | None]:
    security = msg.security
    if security is None or security.sender_id_type == 0:
        return "None", None
    if security.sender_id_type == 1:
        return "Sid", sid_text(security.sender_id) or security.sender_id.hex()
    if security.sender_id_type == 2 and len(security.sender_id) == 16:
        return "QueueManagerIdentifier", str(uuid.UUID(bytes_le=security.sender_id))
    raise _envelope_error(msg, "SecurityHeader", "Flags", 0,
                          f"ST {security.sender_id_type} with a {len(security.sender_id)}-byte SecurityID")


def _hash_name(msg: UserMessage, level: str) -> str | None:
    """MessagePropertiesHeader.HashAlgorithm as the message carries it (every message has the field); an
    unknown value is an error only for a signed message (MS-MQMQ 2.2.19.3), else it is no algorithm."""
    if msg.hash_algorithm == 0:
        return None
    name = HASH_ALGORITHMS.get(msg.hash_algorithm)
    if name is None and level != "None":
        raise _envelope_error(msg, "MessagePropertiesHeader", "HashAlgorithm", 44,
                              f"0x{msg.hash_algorithm:08x} is not a hash algorithm of MS-MQMQ 2.2.19.3")
    return name


def envelope_fields(msg: UserMessage) -> dict:
    """The fields the Kafka envelope carries, in its vocabulary."""
    class_name = message_class_name(msg.message_class)
    if class_name is None:
        raise _envelope_error(msg, "MessagePropertiesHeader", "MessageClass", 2,
                              f"0x{msg.message_class:04x} is not a message class of MS-MQMQ 2.2.18.1.6")
    if msg.destination_queue is None:
        raise _envelope_error(msg, "UserHeader", "DestinationQueue", USER_HEADER_FIXED_SIZE,
                              "no destination queue (Flags.DQ is 0x0)")
    sender_type, sender = _sender_identifier(msg)
    level = authentication_level(msg)
    return {"message_id": message_identifier(msg), "message_class": class_name,
            "sender_identifier_type": sender_type, "sender_identifier": sender, "authentication_level": level,
            "hash_algorithm": _hash_name(msg, level), "destination_queue": msg.destination_queue,
            "sent_time_ms": msg.sent_time * 1000}


def user_message_from_fields(body: bytes, *, source_qm, destination_qm, destination_queue: str, sent_time_s: int,
                             message_id: int, message_class: str = "Normal", sender_identifier_type: str = "None",
                             sender_identifier: str | None = None, authentication_level: str = "None",
                             hash_algorithm: str | None = None, session: SessionHeader | None = None) -> UserMessage:
    """The inverse of envelope_fields, for writing simulated traffic: envelope_fields of the result gives back
    the arguments (message_id becomes message_identifier; texts come back in canonical form, see
    canonical_format_name; a SID given in hex, only allowed for a malformed one, comes back lower case). A signed message gets a deterministic 128-byte
    signature in SecurityData.Signature with AS set to the level (see authentication_level()). A signed message
    without hash_algorithm is accepted and written with HashAlgorithm 0 so any envelope can be written back,
    though a receiver treats that as an authentication failure (MS-MQMQ 2.2.19.3)."""
    if hash_algorithm is not None and hash_algorithm not in _HASH_CODES:
        raise ValueError(f"unknown hash_algorithm {hash_algorithm!r}: expected one of {', '.join(_HASH_CODES)}")
    source, destination = _as_uuid(source_qm), _as_uuid(destination_qm)
    msg = UserMessage(source, destination, sent_time_s, message_id, canonical_format_name(destination_queue),
                      None, None, message_class_code(message_class), bytes(body),
                      hash_algorithm=_HASH_CODES.get(hash_algorithm, 0), session=session)
    seed = b"%s|%d|%d|" % (source.bytes, message_id, sent_time_s) + msg.body
    msg.security = _security_from_fields(sender_identifier_type, sender_identifier, authentication_level, seed)
    _user_header_bytes(msg)             # raises ValueError now for a destination that cannot be written
    return msg


def _as_uuid(value) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value).strip("{}"))


def _security_from_fields(sender_type: str, sender: str | None, level: str, seed: bytes) -> SecurityHeader | None:
    if sender_type not in _SENDER_ID_CODES:
        raise ValueError(f"unknown sender_identifier_type {sender_type!r}")
    if level != "None" and level not in _AUTHENTICATION_CODES:
        raise ValueError(f"unknown authentication_level {level!r}")
    if (sender_type == "None") != (sender is None):
        raise ValueError("sender_identifier must be given exactly when sender_identifier_type is not 'None'")
    if sender_type == "None" and level == "None":
        return None
    signature = _plausible_signature(seed) if level != "None" else b""
    # DE is set with a signature: "When clear and SignatureSize is nonzero, ProviderName MUST specify" one.
    return SecurityHeader(_SENDER_ID_CODES[sender_type], _sender_id_bytes(sender_type, sender), signature=signature,
                          default_provider=bool(signature), security_info=True,
                          authentication_signature=_AUTHENTICATION_CODES.get(level, 0))


def _sender_id_bytes(sender_type: str, sender: str | None) -> bytes:
    if sender_type == "QueueManagerIdentifier":
        return _as_uuid(sender).bytes_le
    if sender_type == "Sid" and sender.upper().startswith("S-"):
        return sid_bytes(sender)
    if sender_type == "Sid":
        raw = bytes.fromhex(sender)
        if not raw or sid_text(raw):
            raise ValueError(f"give a well-formed SID as S-1-... text (hex is for malformed ones): {sender!r}")
        return raw
    return b""


def _plausible_signature(seed: bytes) -> bytes:
    first = hashlib.sha512(b"mqqb-signature-1|" + seed).digest()
    return (first + hashlib.sha512(b"mqqb-signature-2|" + seed).digest())[:PLAUSIBLE_SIGNATURE_SIZE]


# ---------------------------------------------------------------------------- SIDs (MS-DTYP 2.4.2)
def sid_text(raw: bytes) -> str | None:
    """MS-DTYP 2.4.2.2 SID bytes as S-1-<authority>-<sub>...; None when raw is not a well-formed SID."""
    if len(raw) < 8 or raw[0] != 1 or raw[1] > 15 or len(raw) != 8 + 4 * raw[1]:
        return None
    authority = int.from_bytes(raw[2:8], "big")
    authority_text = str(authority) if authority < 1 << 32 else f"0x{authority:012X}"
    subs = struct.unpack_from(f"<{raw[1]}I", raw, 8)
    return "S-1-" + authority_text + "".join(f"-{sub}" for sub in subs)


def sid_bytes(text: str) -> bytes:
    match = _SID_RE.fullmatch(text.strip().upper().replace("0X", "0x"))
    subs = [int(part) for part in match[2].split("-")[1:]] if match else []
    authority = int(match[1], 16 if match[1].startswith("0x") else 10) if match else -1
    if not match or len(subs) > 15 or not 0 <= authority < 1 << 48 or any(sub >= 1 << 32 for sub in subs):
        raise ValueError(f"not a SID in S-1-... form: {text!r}")
    return bytes([1, len(subs)]) + authority.to_bytes(6, "big") + struct.pack(f"<{len(subs)}I", *subs)


# ============================================================================ stream deframing
# the bytes a rejected packet's WireError keeps as evidence (its `data`)
REJECTED_BYTES_MAX = 65_536


class PacketStream:
    """Sans-IO deframer for one direction of a reassembled TCP 1801 byte stream.

    feed() returns (stream offset, packet or WireError) for each packet it completes. Offsets count the bytes
    fed (plus any `lost` declared to gap()). A packet whose BaseHeader frames it but whose content is malformed
    yields its WireError and the stream goes on after it. A BaseHeader that cannot start a packet loses the
    stream: one WireError is reported at its offset, then the stream is scanned for the next plausible
    BaseHeader (VersionNumber 0x10, the signature, a PacketSize a packet of its kind can have). Each
    WireError keeps the rejected bytes as `data` (at most REJECTED_BYTES_MAX).
    """

    def __init__(self, synced: bool = True):
        self._buf = bytearray()
        self._base = 0                      # stream offset of _buf[0]
        self._scanning = not synced

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def synced(self) -> bool:
        return not self._scanning

    def feed(self, data: bytes) -> list[tuple[int, Packet | WireError]]:
        self._buf += data
        out: list[tuple[int, Packet | WireError]] = []
        pos = 0
        while True:
            if self._scanning:
                found, pos = self._scan(pos)
                if not found:
                    break
                self._scanning = False
            next_pos = self._next_packet(pos, out)
            if next_pos is None:
                break
            pos = next_pos
        del self._buf[:pos]
        self._base += pos
        return out

    def gap(self, lost: int = 0) -> None:
        """Bytes were lost (a hole in the TCP sequence): drop the partial packet and resync by scanning."""
        self._base += len(self._buf) + lost
        self._buf.clear()
        self._scanning = True

    def _next_packet(self, pos: int, out: list) -> int | None:
        """Emits the packet at pos if it is complete; the position after it, or None to wait for more bytes."""
        try:
            total = packet_length(bytes(self._buf[pos:pos + BASE_HEADER_SIZE]))
        except WireError as err:
            err.data = bytes(self._buf[pos:pos + REJECTED_BYTES_MAX])     # the broken header and what follows it
            out.append((self._base + pos, err))
            self._scanning = True
            return pos + 1
        if total is None or len(self._buf) - pos < total:
            return None
        try:
            result = parse_packet(bytes(self._buf[pos:pos + total]))
        except WireError as err:
            err.data = bytes(self._buf[pos:pos + min(total, REJECTED_BYTES_MAX)])
            result = err
        out.append((self._base + pos, result))
        return pos + total

    def _scan(self, pos: int) -> tuple[bool, int]:
        """(True, start of a plausible BaseHeader) or (False, where to keep the buffer from while waiting)."""
        buf = self._buf
        while True:
            found = buf.find(_SIGNATURE_BYTES, pos + 4)
            if found < 0:
                return False, max(pos, len(buf) - 11)
            start = found - 4
            if len(buf) - start < 12:
                return False, start
            if _plausible_base_header(buf, start):
                return True, start
            pos = start + 1


def _plausible_base_header(buf: bytearray, start: int) -> bool:
    version, _, flags, _, size = struct.unpack_from("<BBHII", buf, start)
    if version != VERSION:
        return False
    if flags & BASE_IN:
        return size in (ESTABLISH_CONNECTION_PACKET_SIZE, CONNECTION_PARAMETERS_PACKET_SIZE, SESSION_ACK_PACKET_SIZE)
    return BASE_HEADER_SIZE + USER_HEADER_FIXED_SIZE + _PROPERTIES_FIXED.size <= size <= MAX_PACKET_SIZE
