"""MQQB packets a capture producer could not read, as records of their own topic.

A capture's TCP 1801 stream can hold a packet whose length or count fields break its own framing
(the pattern of CVE-2023-21554, "QueueJumper") or bytes that are no packet at all, after which the
session resynchronises. Such a packet cannot become an envelope; the capture producer publishes it
whole, with where it was and why it was rejected, to REJECTED_TOPIC (schemas/mqqb_rejected.avsc),
and the job records it as a dead letter and an `mqqb-malformed` security finding.
"""
from .envelope import frame, unframe
from .errors import WireError

__all__ = ["decode_rejected", "encode_rejected", "rejected_record", "RejectedPacket", "SCHEMA"]

SCHEMA = "mqqb_rejected"


class RejectedPacket(WireError):
    """The dead letter's error of a rejected packet: the capture producer's reason, as it gave it."""

    def __init__(self, record: dict):
        super().__init__("MQQB", record["structure"], record["field"], record["byte_offset"], record["reason"])
        self.record = record


def rejected_record(error: WireError, *, capture: str, position: str, source: tuple[str, int],
                    destination: tuple[str, int], source_machine: str, destination_machine: str,
                    arrival_ms: int) -> dict:
    """The record of one packet a PacketStream rejected (error.data: its bytes)."""
    return {"capture": capture, "position": position, "source_machine": source_machine,
            "destination_machine": destination_machine, "source_address": source[0], "source_port": source[1],
            "destination_address": destination[0], "destination_port": destination[1], "arrival_time": arrival_ms,
            "structure": error.structure, "field": error.field, "byte_offset": error.offset,
            "reason": error.reason, "bytes": bytes(getattr(error, "data", b""))}


def encode_rejected(record: dict) -> bytes:
    return frame(SCHEMA, record)


def decode_rejected(value: bytes, reader_schema=None) -> dict:
    """A rejected packet's record; EnvelopeError if the value is not one."""
    return unframe(value, SCHEMA, reader_schema)[1]
