"""The [MS-MQQB] packets as records: the internal packets of 2.2.2-2.2.6, the UserMessage of MS-MQMQ 2.2.20 with
its optional headers, and the OrderAck / FinalAck bodies."""
import uuid
from dataclasses import dataclass, field

from .layout import ESTABLISH_PADDING, MQMSG_CLASS_ORDER_ACK, ORDER_QUEUE_ID, ORDERING_ACK_LABEL
from .format_names import private_format_name

__all__ = ["ConnectionParameters", "DebugHeader", "EstablishConnection", "FinalAckBody",
           "MultiQueueFormatHeader", "OrderAckBody", "Packet", "SecurityHeader", "SessionAck",
           "SessionHeader", "SoapHeader", "TransactionHeader", "UserMessage"]


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
    text implies (see infer_queue_type); otherwise they hold the value, so that every packet round-trips.
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


def _addresses_order_queue(msg: UserMessage) -> bool:
    """order_queue$ as MS-MQQB 2.2.4 addresses it: DQ 0x3 with id 4, or DQ 0x7 "...\\PRIVATE$\\order_queue$"."""
    text = msg.destination_queue or ""
    if text.upper().startswith("DIRECT="):
        return text.upper().endswith("\\PRIVATE$\\ORDER_QUEUE$")
    return text == private_format_name(msg.destination_qm, ORDER_QUEUE_ID)
