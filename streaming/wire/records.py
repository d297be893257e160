"""Turning decoded records into plain dicts: JSON for people, Avro for the topics and sinks.

Field names are the spec's names in snake_case. GUIDs are already canonical strings;
sequence numbers (every field ending in ``seq_number``) become 16-digit lowercase hex.
"""
import dataclasses

from .properties import Property
from .seqnum import seq_hex

__all__ = ["rebuilt_by_init", "record_to_dict"]

_INIT_FIELDS: dict[type, tuple[str, ...]] = {}


def rebuilt_by_init(record) -> tuple:
    """A record's __reduce__ when its written-out __init__ takes its fields in order: copied and pickled
    through the constructor, since mypyc's default for a compiled class needs an __init__ without arguments."""
    cls = type(record)
    names = _INIT_FIELDS.get(cls)
    if names is None:
        names = _INIT_FIELDS[cls] = tuple(f.name for f in dataclasses.fields(record))
    return cls, tuple([getattr(record, name) for name in names])


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
