"""The OrderAck and FinalAck message bodies (MS-MQQB 2.2.4.1 / 2.2.5.1), 36 bytes each."""
import struct

from ..reader import Reader
from .layout import ACK_BODY_SIZE, PROTOCOL
from .packets import FinalAckBody, OrderAckBody
from .parsing import read_uuid

__all__ = ["encode_ack_body", "parse_final_ack_body", "parse_order_ack_body"]


def parse_order_ack_body(body: bytes) -> OrderAckBody:
    r = _ack_body_reader(body, "OrderAckBody")
    seq_id = int.from_bytes(r.raw("TxSequenceID", 8), "little")
    return OrderAckBody(seq_id, r.u32("TxSequenceNumber"), r.u32("TxPreviousSequenceNumber"), r.raw("Reserved", 20))


def parse_final_ack_body(body: bytes) -> FinalAckBody:
    r = _ack_body_reader(body, "FinalAckBody")
    seq_id = int.from_bytes(r.raw("TxSequenceID", 8), "little")
    return FinalAckBody(seq_id, r.u32("TxSequenceNumber"), r.u32("TxPreviousSequenceNumber"),
                        read_uuid(r, "SourceGUID"), r.u32("MessageID"))


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
