"""Property arrays: NumberOfProperties (UCHAR), PropertyId[N] (u32 LE), PropertyValue[N].

Shared by the MQCN Notification Update (2.2.6) and the MQDSRP DirectoryChange (2.2.4).
"""
import struct
from dataclasses import dataclass
from typing import Any

from .propids import PROPIDS
from .propvariant import INT_FORMATS, VT_CLSID, VT_NAMES, decode_value, encode_value
from .reader import Reader

__all__ = ["MQDS_CN", "MQDS_ENTERPRISE", "MQDS_MACHINE", "MQDS_QUEUE", "MQDS_ROUTINGLINK", "MQDS_SITE",
           "MQDS_USER", "OBJECT_TYPE_NAMES", "object_type_of", "OBJECT_TYPES_BY_NAME", "Property",
           "property_value", "read_properties", "VALUE_READERS", "write_properties"]


@dataclass(slots=True)
class Property:
    prop_id: int
    value: Any

    # written out: mypyc compiles this one, not the one @dataclass generates (3.5 times as fast)
    def __init__(self, prop_id: int, value: Any) -> None:
        self.prop_id = prop_id
        self.value = value

    def __reduce__(self) -> tuple:
        """Copied and pickled through the constructor: mypyc's default for a compiled class needs an
        __init__ that takes no arguments."""
        return Property, (self.prop_id, self.value)

    @property
    def name(self) -> str:
        return PROPIDS[self.prop_id][0]

    @property
    def vt(self) -> int:
        return PROPIDS[self.prop_id][1]

    def to_dict(self) -> dict:
        value = self.value
        if isinstance(value, (bytes, bytearray)):
            value = value.hex()
        return {"prop_id": self.prop_id, "name": self.name, "vt": VT_NAMES[self.vt], "value": value}


# MQDS object types (MS-MQDS 2.2.8, MS-MQMQ 2.3.13.4): the DWORD a directory change and a property
# range name; 4 is MQDS_DELETEDOBJECT, which no object of the directory has
MQDS_QUEUE, MQDS_MACHINE, MQDS_SITE, MQDS_CN, MQDS_ENTERPRISE, MQDS_USER, MQDS_ROUTINGLINK = 1, 2, 3, 5, 6, 7, 8
OBJECT_TYPE_NAMES = {MQDS_QUEUE: "queue", MQDS_MACHINE: "machine", MQDS_SITE: "site", MQDS_CN: "connected_network",
                     MQDS_ENTERPRISE: "enterprise", MQDS_USER: "user", MQDS_ROUTINGLINK: "routing_link"}
OBJECT_TYPES_BY_NAME = {name: t for t, name in OBJECT_TYPE_NAMES.items()}


def object_type_of(prop_id: int) -> int:
    """MQDSRP 3.1.1.4 / MQCN 3.2.5.1: (propID - 1000) / 100 above 1000, else propID / 100."""
    return (prop_id - 1000) // 100 if prop_id > 1000 else prop_id // 100


def read_properties(r: Reader) -> list[Property]:
    n = r.u8("NumberOfProperties")
    ids_at = r.pos
    r.need("PropertyId", 4 * n)
    ids = struct.unpack_from(f"<{n}I", r.buf, ids_at)
    r.pos = ids_at + 4 * n
    props = []
    for i, prop_id in enumerate(ids):
        reader = VALUE_READERS.get(prop_id)
        if reader is None:
            raise r.error(
                f"PropertyId[{i}]",
                f"unknown PROPID {prop_id}: its type is not known, so the values from here on cannot be parsed",
                ids_at + 4 * i,
            )
        props.append(Property(prop_id, reader(r, i)))
    return props


def _fixed_reader(fmt: struct.Struct):
    size, unpack = fmt.size, fmt.unpack_from

    def read(r: Reader, i: int):
        pos = r.pos
        if pos + size > len(r.buf):
            raise r.error(f"PropertyValue[{i}]", f"truncated: needs {size} bytes, {len(r.buf) - pos} remain")
        r.pos = pos + size
        return unpack(r.buf, pos)[0]
    return read


def _guid_reader(r: Reader, i: int):
    return r.guid(f"PropertyValue[{i}]")


def _generic_reader(vt: int):
    return lambda r, i: decode_value(r, vt, f"PropertyValue[{i}]")


def _value_reader(vt: int):
    fmt = INT_FORMATS.get(vt)
    if fmt is not None:
        return _fixed_reader(fmt)
    if vt == VT_CLSID:
        return _guid_reader
    return _generic_reader(vt)


# PROPID -> a function reading its value: the type lookup is done once, not per value.
VALUE_READERS = {prop_id: _value_reader(vt) for prop_id, (_name, vt) in PROPIDS.items()}


def write_properties(props: list[Property]) -> bytes:
    if len(props) > 255:
        raise ValueError(f"NumberOfProperties is a UCHAR: {len(props)} properties do not fit")
    parts = [bytes([len(props)]), struct.pack(f"<{len(props)}I", *(p.prop_id for p in props))]
    for p in props:
        entry = PROPIDS.get(p.prop_id)
        if entry is None:
            raise ValueError(f"unknown PROPID {p.prop_id}")
        parts.append(encode_value(entry[1], p.value))
    return b"".join(parts)


def property_value(props: list[Property], prop_id: int, default=None):
    for p in props:
        if p.prop_id == prop_id:
            return p.value
    return default
