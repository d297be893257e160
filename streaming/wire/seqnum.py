"""SEQUENCE_NUMBER ([MC-MQDSRP] 2.2.2): UCHAR[8].

The spec's Increment starts at element 8 and Compare decides at the first differing
element from 1, so the eight bytes are an unsigned 64-bit big-endian integer (digest
§3.1), although the rest of MQDSRP is little-endian. Values here are Python ints in
[0, 2**64); every operation wraps modulo 2**64 exactly as the byte-wise definitions do.
"""

__all__ = ["add", "compare", "decrement", "eighth_byte", "increment", "MAX_SEQ_NUMBER", "MIN_SEQ_NUMBER",
           "seq_from_bytes", "seq_from_hex", "seq_hex", "seq_to_bytes", "subtract"]

MIN_SEQ_NUMBER = 0
MAX_SEQ_NUMBER = (1 << 64) - 1
_MOD = 1 << 64


def seq_from_bytes(raw: bytes) -> int:
    return int.from_bytes(raw, "big")


def seq_to_bytes(value: int) -> bytes:
    if not 0 <= value <= MAX_SEQ_NUMBER:
        raise ValueError(f"sequence number {value} is outside 0..2**64-1")
    return value.to_bytes(8, "big")


def seq_hex(value: int) -> str:
    """16-digit lowercase hex, the form used in JSON, Avro records and sink tables."""
    return format(value, "016x")


def seq_from_hex(text: str) -> int:
    value = int(text, 16)
    if not 0 <= value <= MAX_SEQ_NUMBER:
        raise ValueError(f"sequence number {text!r} does not fit in 8 bytes")
    return value


def increment(sn: int) -> int:
    """2.2.2 Increment: add one to element 8, carrying towards element 1; MAX wraps to MIN."""
    return (sn + 1) % _MOD


def decrement(sn: int) -> int:
    """2.2.2 Decrement: subtract one from element 8, borrowing towards element 1; MIN wraps to MAX."""
    return (sn - 1) % _MOD


def add(sn: int, n: int) -> int:
    """2.2.2 Addition: Increment applied n times."""
    return (sn + n) % _MOD


def subtract(sn: int, n: int) -> int:
    """2.2.2 Subtraction: Decrement applied n times."""
    return (sn - n) % _MOD


def compare(sn1: int, sn2: int) -> int:
    """2.2.2 Compare: -1, 0 or 1; the first differing element from element 1 decides."""
    return (sn1 > sn2) - (sn1 < sn2)


def eighth_byte(sn: int) -> int:
    """Element 8 (the last byte on the wire), e.g. for the PSC ack rule of 3.1.7.2.3."""
    return sn & 0xFF
