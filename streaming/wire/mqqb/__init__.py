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
from .layout import (
    ACK_BODY_SIZE, AUTHENTICATION_LEVELS, BASE_DH, BASE_HEADER_SIZE, BASE_IN, BASE_PR_MASK, BASE_SH, BASE_TR,
    CONNECTION_PARAMETERS_PACKET_SIZE, ESTABLISH_CONNECTION_PACKET_SIZE, ESTABLISH_PADDING, HASH_ALGORITHMS,
    INTERNAL_CS, MAX_LABEL_LENGTH, MAX_PACKET_SIZE, MESSAGE_CLASSES, MQF_ADMIN_ID, MQF_DESTINATION_ID,
    MQF_DIRECT, MQF_DISTRIBUTION_LIST, MQF_PRIVATE, MQF_PUBLIC, MQF_RESPONSE_ID, MQF_SIGNATURE_ID,
    MQMSG_CLASS_ACK_RECEIVE, MQMSG_CLASS_NORMAL, MQMSG_CLASS_ORDER_ACK, MQQB_TCP_PORT, NULL_GUID,
    ORDER_QUEUE_ID, ORDERING_ACK_LABEL, PLAUSIBLE_SIGNATURE_SIZE, PROTOCOL, PT_CONNECTION_PARAMETERS,
    PT_ESTABLISH_CONNECTION, PT_SESSION_ACK, Q_DIRECT, Q_NONE, Q_PRIVATE_ADMIN_HOST, Q_PRIVATE_DESTINATION,
    Q_PRIVATE_OTHER, Q_PRIVATE_SOURCE, Q_PUBLIC, Q_SAME_AS_ADMIN, QUEUE_TYPES, SEC_AI, SEC_AS_SHIFT, SEC_AU,
    SEC_DE, SEC_EB, SEC_ST_MASK, SENDER_ID_TYPES, SESSION_ACK_PACKET_SIZE, SESSION_HEADER_SIZE, SIGNATURE,
    SOAP_BODY_SECTION_ID, SOAP_HEADER_SECTION_ID, TX_CG, TX_FA, TX_FM, TX_ID_MASK, TX_ID_SHIFT, TX_LM, UH_AH,
    UH_AQ_SHIFT, UH_CQ, UH_DM_SHIFT, UH_DQ_SHIFT, UH_HH, UH_JN, UH_JP, UH_MP, UH_MQ, UH_RC_MASK, UH_RQ_SHIFT,
    UH_SH, UH_TH, USER_HEADER_FIXED_SIZE, USER_HEADER_FLAGS_OFFSET, VERSION,
)
from .format_names import canonical_format_name, FormatName, parse_format_name, private_format_name
from .packets import (
    ConnectionParameters, DebugHeader, EstablishConnection, FinalAckBody, MultiQueueFormatHeader, OrderAckBody,
    Packet, SecurityHeader, SessionAck, SessionHeader, SoapHeader, TransactionHeader, UserMessage,
)
from .parsing import packet_length, parse_packet
from .encoding import encode
from .acks import encode_ack_body, parse_final_ack_body, parse_order_ack_body
from .envelope import (
    authentication_level, envelope_fields, header_offsets, message_class_code, message_class_name,
    message_identifier, sid_bytes, sid_text, user_message_from_fields,
)
from .stream import PacketStream, REJECTED_BYTES_MAX

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
