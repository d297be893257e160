"""Avro schemas in schemas/, Confluent-style framing, and the Kafka record envelope.

A framed value is: magic byte 0x00, the schema id as a 4-byte big-endian integer, then the
Avro binary encoding. The ids are fixed (SCHEMA_IDS), so a Schema Registry user can register
the .avsc files under the same ids and read the topics as they are.
"""
import io
import json
import os
import struct
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from pathlib import Path

import fastavro

from . import record_to_dict

__all__ = ["arrival_ms_of", "decode_envelope", "encode_envelope", "EnvelopeError", "frame", "MAGIC",
           "make_envelope", "millis", "PROTOCOL_NAMES", "record_to_avro", "schema", "SCHEMA_IDS", "SCHEMA_NAMES",
           "schema_text", "schemas_dir", "unframe", "validate_record"]

SCHEMA_IDS = {"envelope": 1, "mqcn": 2, "mqdsrp": 3, "mqsd": 4, "mqqb_rejected": 5}
SCHEMA_NAMES = {v: k for k, v in SCHEMA_IDS.items()}
MAGIC = 0
PROTOCOL_NAMES = {"mqcn": "MQCN", "mqdsrp": "MQDSRP", "mqsd": "MQSD"}
_FRAME = struct.Struct(">bI")


class EnvelopeError(ValueError):
    """A Kafka value that is not a framed Avro envelope."""

    def __init__(self, field: str, offset: int, reason: str):
        self.protocol, self.structure, self.field, self.offset, self.reason = "AVRO", "MsmqEnvelope", field, offset, reason
        super().__init__(f"AVRO MsmqEnvelope.{field} at byte {offset}: {reason}")

    def as_dict(self) -> dict:
        return {"protocol": self.protocol, "structure": self.structure, "field": self.field,
                "offset": self.offset, "reason": self.reason}


def schemas_dir():
    """Where the .avsc files are: $DIRSTREAM_SCHEMAS; else the installed package's streaming/schemas
    (importlib.resources: a wheel, or the zip the job ships to Spark executors); else schemas/ at the
    top of a source checkout (an editable install)."""
    if os.environ.get("DIRSTREAM_SCHEMAS"):
        return Path(os.environ["DIRSTREAM_SCHEMAS"])
    packaged = resources.files("streaming").joinpath("schemas")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "schemas"


def schema_text(name: str) -> str:
    return schemas_dir().joinpath(f"{name}.avsc").read_text(encoding="utf-8")


@lru_cache(maxsize=None)
def schema(name: str):
    return fastavro.parse_schema(json.loads(schema_text(name)))


def frame(name: str, datum: dict) -> bytes:
    buf = io.BytesIO()
    buf.write(_FRAME.pack(MAGIC, SCHEMA_IDS[name]))
    fastavro.schemaless_writer(buf, schema(name), datum)
    return buf.getvalue()


def unframe(data: bytes, expected: str | None = None, reader_schema=None) -> tuple[str, dict]:
    """(schema name, datum) of a framed value; EnvelopeError says what is wrong and where.
    reader_schema replaces the parsed .avsc (the decode stage passes one without logical types)."""
    if data is None or len(data) < 5:
        raise EnvelopeError("(frame)", 0, f"value of {0 if data is None else len(data)} bytes is shorter than "
                                          "the 5-byte Confluent frame header")
    magic, schema_id = _FRAME.unpack_from(data, 0)
    if magic != MAGIC:
        raise EnvelopeError("(magic)", 0, f"magic byte must be 0x00, got 0x{magic & 0xff:02x}")
    name = SCHEMA_NAMES.get(schema_id)
    if name is None or (expected is not None and name != expected):
        raise EnvelopeError("(schema id)", 1, f"schema id {schema_id} is not "
                                              f"{expected or 'one of ' + str(sorted(SCHEMA_NAMES))}")
    buf = io.BytesIO(data)
    buf.seek(5)
    try:
        datum = fastavro.schemaless_reader(buf, reader_schema or schema(name), None)
    except Exception as exc:  # fastavro raises many types for corrupt input
        raise EnvelopeError("(avro)", buf.tell(), f"not valid Avro for schema {name}: {type(exc).__name__}: {exc}") \
            from None
    if buf.tell() != len(data):
        raise EnvelopeError("(avro)", buf.tell(), f"{len(data) - buf.tell()} bytes left after the Avro datum")
    return name, datum


def make_envelope(protocol: str, body: bytes, *, source_machine: str, destination_machine: str,
                  destination_queue: str, sent_time: datetime | int, arrival_time: datetime | int | None = None,
                  message_class: str = "Normal", sender_identifier_type: str = "None",
                  sender_identifier: str | None = None, authentication_level: str = "None",
                  hash_algorithm: str | None = None, message_id: str | None = None) -> dict:
    return {
        "protocol": PROTOCOL_NAMES[protocol.lower()], "message_id": message_id, "message_class": message_class,
        "sender_identifier_type": sender_identifier_type, "sender_identifier": sender_identifier,
        "authentication_level": authentication_level, "hash_algorithm": hash_algorithm,
        "source_machine": source_machine, "destination_machine": destination_machine,
        "destination_queue": destination_queue, "sent_time": millis(sent_time),
        "arrival_time": millis(sent_time if arrival_time is None else arrival_time), "body": bytes(body),
    }


def encode_envelope(envelope: dict) -> bytes:
    return frame("envelope", envelope)


def decode_envelope(data: bytes) -> dict:
    return unframe(data, "envelope")[1]


def arrival_ms_of(data: bytes) -> int:
    """The arrival time of a raw topic's record: an envelope's, or a rejected MQQB packet's capture time."""
    name, datum = unframe(data)
    if "arrival_time" not in datum:
        raise EnvelopeError("(schema id)", 1, f"a bare {name} record has no arrival time")
    return millis(datum["arrival_time"])


def millis(value: datetime | int) -> int:
    """Milliseconds since 1970 of an envelope time (a decoded timestamp-millis datetime, or already an int)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return int(value.timestamp() * 1000)
    return int(value)


def record_to_avro(record) -> dict:
    """A decoded record as the datum of its protocol's schema (raw bytes kept, VT_UI8 as a decimal string)."""
    datum = record_to_dict(record, binary="bytes")
    _stringify_ui8(datum)
    return datum


def _stringify_ui8(node) -> None:
    # Avro's long is signed; a VT_UI8 value can exceed it.
    if isinstance(node, dict):
        if node.get("vt") == "VT_UI8" and isinstance(node.get("value"), int):
            node["value"] = str(node["value"])
        for v in node.values():
            _stringify_ui8(v)
    elif isinstance(node, list):
        for v in node:
            _stringify_ui8(v)


def validate_record(protocol: str, record) -> bool:
    """True if the decoded record is a valid datum of schemas/<protocol>.avsc (raises otherwise)."""
    return fastavro.validation.validate(record_to_avro(record), schema(protocol.lower()), raise_errors=True)


