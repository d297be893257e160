"""PROPVALUE encodings of [MS-MQCN] 2.2.3 (also used by MQDSRP DirectoryChange, digest §3.3).

Only the value is on the wire: no VARTYPE tag, no padding, little-endian numbers. The
type comes from the PROPID (see propids.py).
"""
import struct
import uuid

from .reader import Reader, u32_bytes, utf16z_bytes

__all__ = ["decode_value", "encode_value", "INT_FORMATS", "VARIANT_FALSE", "VARIANT_TRUE", "VT_BLOB", "VT_BOOL",
           "VT_BY_NAME", "VT_CLSID", "VT_CLSID_VECTOR", "VT_I1", "VT_I2", "VT_I4", "VT_I8", "VT_LPWSTR",
           "VT_LPWSTR_VECTOR", "VT_NAMES", "VT_UI1", "VT_UI2", "VT_UI4", "VT_UI4_VECTOR", "VT_UI8", "VT_VECTOR"]

VT_I2 = 0x0002
VT_I4 = 0x0003
VT_BOOL = 0x000B
VT_I1 = 0x0010
VT_UI1 = 0x0011
VT_UI2 = 0x0012
VT_UI4 = 0x0013
VT_I8 = 0x0014
VT_UI8 = 0x0015
VT_LPWSTR = 0x001F
VT_BLOB = 0x0041
VT_CLSID = 0x0048
VT_VECTOR = 0x1000
VT_UI4_VECTOR = VT_UI4 | VT_VECTOR
VT_CLSID_VECTOR = VT_CLSID | VT_VECTOR
VT_LPWSTR_VECTOR = VT_LPWSTR | VT_VECTOR

VT_NAMES = {
    VT_I2: "VT_I2", VT_I4: "VT_I4", VT_BOOL: "VT_BOOL", VT_I1: "VT_I1", VT_UI1: "VT_UI1",
    VT_UI2: "VT_UI2", VT_UI4: "VT_UI4", VT_I8: "VT_I8", VT_UI8: "VT_UI8", VT_LPWSTR: "VT_LPWSTR",
    VT_BLOB: "VT_BLOB", VT_CLSID: "VT_CLSID", VT_UI4_VECTOR: "VT_UI4|VT_VECTOR",
    VT_CLSID_VECTOR: "VT_CLSID|VT_VECTOR", VT_LPWSTR_VECTOR: "VT_LPWSTR|VT_VECTOR",
}
VT_BY_NAME = {name: vt for vt, name in VT_NAMES.items()}

VARIANT_TRUE = 0xFFFF
VARIANT_FALSE = 0x0000

# Fixed-size integer types: (struct format, size).
INT_FORMATS = {
    VT_I1: struct.Struct("<b"), VT_UI1: struct.Struct("<B"), VT_I2: struct.Struct("<h"),
    VT_UI2: struct.Struct("<H"), VT_I4: struct.Struct("<i"), VT_UI4: struct.Struct("<I"),
    VT_I8: struct.Struct("<q"), VT_UI8: struct.Struct("<Q"),
}


def decode_value(r: Reader, vt: int, field: str):
    """Read one PROPVALUE of type vt at the reader's position."""
    fmt = INT_FORMATS.get(vt)
    if fmt is not None:
        pos = r.pos
        r.need(field, fmt.size)
        r.pos = pos + fmt.size
        return fmt.unpack_from(r.buf, pos)[0]
    if vt == VT_CLSID:
        return r.guid(field)
    if vt == VT_LPWSTR:
        return r.utf16z(field)
    if vt == VT_BLOB:
        size = r.u32(field + ".Size")
        return bytes(r.raw(field + ".Data", size))
    if vt == VT_BOOL:
        pos = r.pos
        value = r.u16(field)
        if value not in (VARIANT_TRUE, VARIANT_FALSE):
            raise r.error(field, f"VT_BOOL must be 0xFFFF or 0x0000, got 0x{value:04x}", pos)
        return value == VARIANT_TRUE
    if vt == VT_UI4_VECTOR:
        n = r.count(field + ".Size", r.u32(field + ".Size"), 4)
        return list(struct.unpack_from(f"<{n}I", r.raw(field, 4 * n)))
    if vt == VT_CLSID_VECTOR:
        n = r.count(field + ".Size", r.u32(field + ".Size"), 16)
        return [r.guid(f"{field}[{i}]") for i in range(n)]
    if vt == VT_LPWSTR_VECTOR:
        n = r.count(field + ".Size", r.u32(field + ".Size"), 2)
        return [r.utf16z(f"{field}[{i}]") for i in range(n)]
    raise r.error(field, f"unsupported VARTYPE 0x{vt:04x}")


def encode_value(vt: int, value) -> bytes:
    """The wire bytes of one PROPVALUE; ValueError if value does not fit vt."""
    fmt = INT_FORMATS.get(vt)
    try:
        if fmt is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{VT_NAMES[vt]} needs an int, got {type(value).__name__}")
            return fmt.pack(value)
        if vt == VT_CLSID:
            return uuid.UUID(value).bytes_le
        if vt == VT_LPWSTR:
            _check_no_nul(value)
            return utf16z_bytes(value)
        if vt == VT_BLOB:
            return u32_bytes(len(value)) + bytes(value)
        if vt == VT_BOOL:
            if not isinstance(value, bool):
                raise ValueError(f"VT_BOOL needs a bool, got {type(value).__name__}")
            return struct.pack("<H", VARIANT_TRUE if value else VARIANT_FALSE)
        if vt == VT_UI4_VECTOR:
            return u32_bytes(len(value)) + struct.pack(f"<{len(value)}I", *value)
        if vt == VT_CLSID_VECTOR:
            return u32_bytes(len(value)) + b"".join(uuid.UUID(g).bytes_le for g in value)
        if vt == VT_LPWSTR_VECTOR:
            for s in value:
                _check_no_nul(s)
            return u32_bytes(len(value)) + b"".join(utf16z_bytes(s) for s in value)
    except (struct.error, TypeError, AttributeError) as exc:
        raise ValueError(f"{VT_NAMES.get(vt, hex(vt))} cannot hold {value!r}: {exc}") from None
    raise ValueError(f"unsupported VARTYPE 0x{vt:04x}")


def _check_no_nul(text: str) -> None:
    if not isinstance(text, str):
        raise ValueError(f"VT_LPWSTR needs a str, got {type(text).__name__}")
    if "\x00" in text:
        raise ValueError("VT_LPWSTR value contains a NUL character, which would end the string early")
