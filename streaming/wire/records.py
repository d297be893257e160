"""Turning decoded records into plain dicts: JSON for people, Avro for the topics and sinks.

Field names are the spec's names in snake_case. GUIDs are already canonical strings;
sequence numbers (every field ending in ``seq_number``) become 16-digit lowercase hex.
"""
import dataclasses

from .properties import Property
from .seqnum import seq_hex

__all__ = ["record_to_dict"]


def record_to_dict(record, binary: str = "hex") -> dict:
    """A dataclass record as a dict. binary='hex' for JSON, 'bytes' to keep raw bytes (Avro)."""
    out = {}
    for field in dataclasses.fields(record):
        name = field.name
        out[name] = _convert(getattr(record, name), name, binary)
    return out


def _convert(value, name: str, binary: str):
    if value is None:
        return None
    if name.endswith("seq_number") and isinstance(value, int):
        return seq_hex(value)
    if isinstance(value, Property):
        return _property_dict(value, binary)
    if dataclasses.is_dataclass(value):
        return record_to_dict(value, binary)
    if isinstance(value, (bytes, bytearray)):
        return value.hex() if binary == "hex" else bytes(value)
    if isinstance(value, list):
        return [_convert(v, name, binary) for v in value]
    return value


def _property_dict(prop: Property, binary: str) -> dict:
    d = prop.to_dict()
    if binary == "bytes" and isinstance(prop.value, (bytes, bytearray)):
        d["value"] = bytes(prop.value)
    return d
