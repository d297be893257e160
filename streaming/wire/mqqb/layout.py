"""[MS-MQQB] / [MS-MQMQ] 2.2.19-2.2.20 layout constants: header sizes, flag bits, queue format types and the
code tables of message classes, hash algorithms, sender identifiers and authentication levels."""
import struct
import uuid

__all__ = ["ACK_BODY_SIZE", "AUTHENTICATION_CODES", "AUTHENTICATION_LEVELS", "BASE_DH", "BASE_HEADER_SIZE",
           "BASE_IN", "BASE_PR_MASK", "BASE_SH", "BASE_TR", "CONNECTION_PARAMETERS_PACKET_SIZE",
           "ESTABLISH_CONNECTION_PACKET_SIZE", "ESTABLISH_PADDING", "HASH_ALGORITHMS", "HASH_CODES",
           "INTERNAL_CS", "MAX_LABEL_LENGTH", "MAX_PACKET_SIZE", "MESSAGE_CLASS_CODES", "MESSAGE_CLASSES",
           "MQF_ADMIN_ID", "MQF_DESTINATION_ID", "MQF_DIRECT", "MQF_DISTRIBUTION_LIST", "MQF_PRIVATE",
           "MQF_PUBLIC", "MQF_RESPONSE_ID", "MQF_SIGNATURE_ID", "MQMSG_CLASS_ACK_RECEIVE",
           "MQMSG_CLASS_NORMAL", "MQMSG_CLASS_ORDER_ACK", "MQQB_TCP_PORT", "NULL_GUID", "ORDER_QUEUE_ID",
           "ORDERING_ACK_LABEL", "PLAUSIBLE_SIGNATURE_SIZE", "PROPERTIES_FIXED", "PROTOCOL",
           "PT_CONNECTION_PARAMETERS", "PT_ESTABLISH_CONNECTION", "PT_SESSION_ACK", "Q_DIRECT", "Q_NONE",
           "Q_PRIVATE_ADMIN_HOST", "Q_PRIVATE_DESTINATION", "Q_PRIVATE_OTHER", "Q_PRIVATE_SOURCE",
           "Q_PUBLIC", "Q_SAME_AS_ADMIN", "QUEUE_TYPES", "SEC_AI", "SEC_AS_SHIFT", "SEC_AU", "SEC_DE",
           "SEC_EB", "SEC_ST_MASK", "SECURITY_SIZES", "SENDER_ID_CODES", "SENDER_ID_TYPES",
           "SESSION_ACK_PACKET_SIZE", "SESSION_HEADER_SIZE", "SESSION_LAYOUT", "SIGNATURE",
           "SIGNATURE_BYTES", "SOAP_BODY_SECTION_ID", "SOAP_HEADER_SECTION_ID", "TX_CG", "TX_FA", "TX_FM",
           "TX_ID_MASK", "TX_ID_SHIFT", "TX_LM", "UH_AH", "UH_AQ_SHIFT", "UH_CQ", "UH_DM_SHIFT",
           "UH_DQ_SHIFT", "UH_HH", "UH_JN", "UH_JP", "UH_MP", "UH_MQ", "UH_RC_MASK", "UH_RQ_SHIFT", "UH_SH",
           "UH_TH", "USER_HEADER_FIXED_SIZE", "USER_HEADER_FLAGS_OFFSET", "VERSION"]


PROTOCOL = "MQQB"
MQQB_TCP_PORT = 1801                  # MS-MQQB 2.1.1
SIGNATURE = 0x524F494C                # MS-MQMQ 2.2.19.1 BaseHeader.Signature ("LIOR" on the wire)
VERSION = 0x10                        # BaseHeader.VersionNumber
MAX_PACKET_SIZE = 0x00400000          # BaseHeader.PacketSize maximum
BASE_HEADER_SIZE = 16
SESSION_HEADER_SIZE = 16
NULL_GUID = uuid.UUID(int=0)
SIGNATURE_BYTES = struct.pack("<I", SIGNATURE)

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
PROPERTIES_FIXED = struct.Struct("<BBH20sIIIIIIII")     # 56 bytes up to ExtensionSize
MAX_LABEL_LENGTH = 0xFA

# SecurityHeader.Flags (MS-MQMQ 2.2.20.6)
SEC_ST_MASK = 0x000F
SEC_AU = 0x0010
SEC_EB = 0x0020
SEC_DE = 0x0040
SEC_AI = 0x0080
SEC_AS_SHIFT = 8
SECURITY_SIZES = (("SecurityID", "SenderIdSize", 0xFFFF), ("EncryptionKey", "EncryptionKeySize", 0xFFFF),
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
MESSAGE_CLASS_CODES = {name: code for code, name in MESSAGE_CLASSES.items()}
MQMSG_CLASS_NORMAL = 0x0000
MQMSG_CLASS_ORDER_ACK = 0x00FF
MQMSG_CLASS_ACK_RECEIVE = 0x4000
ORDERING_ACK_LABEL = "QM Ordering Ack"          # MS-MQQB 2.2.4 / 2.2.5
ORDER_QUEUE_ID = 4                              # PrivateQueueIdentifier of order_queue$ (2.2.4)
ACK_BODY_SIZE = 0x24

# MessagePropertiesHeader.HashAlgorithm (MS-MQMQ 2.2.19.3). MS-MQDMPR 3.1.7.1.31 maps 0x8003 to "MD4", a typo:
# MS-MQMQ names 0x8003 MD5.
HASH_ALGORITHMS = {0x8001: "MD2", 0x8002: "MD4", 0x8003: "MD5", 0x8004: "SHA1", 0x800C: "SHA_256", 0x800E: "SHA_512"}
HASH_CODES = {name: code for code, name in HASH_ALGORITHMS.items()}
# SecurityHeader.Flags.ST (MS-MQMQ 2.2.20.6, named as in MS-MQDMPR 3.1.7.1.31)
SENDER_ID_TYPES = {0: "None", 1: "Sid", 2: "QueueManagerIdentifier"}
SENDER_ID_CODES = {name: code for code, name in SENDER_ID_TYPES.items()}
# SecurityHeader.Flags.AS: MS-MQQB 3.1.5.8.3 sets 0x1 (MSMQ 1.0 signature), 0x3 (2.0), 0x5 (3.0), and MS-MQDMPR
# 3.1.7.1.31 maps these to Sig10 / Sig20 / Sig30. The spec gives XmlSig no code; 0x9 is MQMSG_AUTHENTICATED_SIGXML
# of the MSMQ SDK, whose SIG10/SIG20/SIG30 are the same 1/3/5.
AUTHENTICATION_LEVELS = {0x1: "Sig10", 0x3: "Sig20", 0x5: "Sig30", 0x9: "XmlSig"}
AUTHENTICATION_CODES = {name: code for code, name in AUTHENTICATION_LEVELS.items()}
PLAUSIBLE_SIGNATURE_SIZE = 128                  # an RSA-1024 signature
SESSION_LAYOUT = struct.Struct("<HHIHHHH")       # SessionHeader (MS-MQMQ 2.2.20.4)
