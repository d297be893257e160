"""A UserMessage's envelope as flat fields (the capture topic's columns) and back, its authentication level, and
SIDs (MS-DTYP 2.4.2)."""
import hashlib
import re
import struct
import uuid

from ..errors import WireError
from .layout import (
    AUTHENTICATION_CODES, AUTHENTICATION_LEVELS, BASE_HEADER_SIZE, HASH_ALGORITHMS, HASH_CODES,
    MESSAGE_CLASS_CODES, MESSAGE_CLASSES, PLAUSIBLE_SIGNATURE_SIZE, PROTOCOL, SENDER_ID_CODES,
    USER_HEADER_FIXED_SIZE,
)
from .format_names import canonical_format_name
from .packets import SecurityHeader, SessionHeader, UserMessage
from .encoding import user_header_bytes, user_message_headers

__all__ = ["authentication_level", "envelope_fields", "header_offsets", "message_class_code",
           "message_class_name", "message_identifier", "sid_bytes", "sid_text", "user_message_from_fields"]


_SID_RE = re.compile(r"S-1-(\d+|0[xX][0-9A-Fa-f]{12})((?:-\d+)*)")


def message_identifier(msg: UserMessage) -> str:
    """MS-MQMQ 2.2.18.1.3 MessageIdentifier as MSMQ shows it: "{guid}\\ordinal"."""
    return f"{{{msg.source_qm}}}\\{msg.message_id}"


def message_class_name(code: int) -> str | None:
    return MESSAGE_CLASSES.get(code)


def message_class_code(name: str) -> int:
    try:
        return MESSAGE_CLASS_CODES[name]
    except KeyError:
        raise ValueError(f"unknown message class {name!r}: expected one of {', '.join(MESSAGE_CLASS_CODES)}") from None


def header_offsets(msg: UserMessage) -> dict[str, int]:
    """Where each header of msg starts in its encoding (UserHeader at 16), for error offsets."""
    offsets, position = {}, BASE_HEADER_SIZE
    for name, data in user_message_headers(msg).items():
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
    if hash_algorithm is not None and hash_algorithm not in HASH_CODES:
        raise ValueError(f"unknown hash_algorithm {hash_algorithm!r}: expected one of {', '.join(HASH_CODES)}")
    source, destination = _as_uuid(source_qm), _as_uuid(destination_qm)
    msg = UserMessage(source, destination, sent_time_s, message_id, canonical_format_name(destination_queue),
                      None, None, message_class_code(message_class), bytes(body),
                      hash_algorithm=HASH_CODES.get(hash_algorithm, 0), session=session)
    seed = b"%s|%d|%d|" % (source.bytes, message_id, sent_time_s) + msg.body
    msg.security = _security_from_fields(sender_identifier_type, sender_identifier, authentication_level, seed)
    user_header_bytes(msg)             # raises ValueError now for a destination that cannot be written
    return msg


def _as_uuid(value) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value).strip("{}"))


def _security_from_fields(sender_type: str, sender: str | None, level: str, seed: bytes) -> SecurityHeader | None:
    if sender_type not in SENDER_ID_CODES:
        raise ValueError(f"unknown sender_identifier_type {sender_type!r}")
    if level != "None" and level not in AUTHENTICATION_CODES:
        raise ValueError(f"unknown authentication_level {level!r}")
    if (sender_type == "None") != (sender is None):
        raise ValueError("sender_identifier must be given exactly when sender_identifier_type is not 'None'")
    if sender_type == "None" and level == "None":
        return None
    signature = _plausible_signature(seed) if level != "None" else b""
    # DE is set with a signature: "When clear and SignatureSize is nonzero, ProviderName MUST specify" one.
    return SecurityHeader(SENDER_ID_CODES[sender_type], _sender_id_bytes(sender_type, sender), signature=signature,
                          default_provider=bool(signature), security_info=True,
                          authentication_signature=AUTHENTICATION_CODES.get(level, 0))


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
