"""Bounds-checked little-endian reading and writing shared by the three codecs.

Every length and count on the wire is untrusted: each read checks that the bytes are
there and raises WireError naming the structure, field and offset when they are not.
"""
import codecs
import struct
import uuid

from .errors import WireError

__all__ = ["decode_utf16", "guid_text", "Reader", "u16_bytes", "u32_bytes", "utf16_text", "utf16z_bytes"]

_U16 = struct.Struct("<H").unpack_from
# the codec's own functions: bytes.decode and str.encode with "surrogatepass" go through the Python
# wrapper in encodings.utf_16_le, which takes 4 times as long as the decoding (MQCN and MQSD bodies
# and every path name are UTF-16)
_UTF16_DECODE = codecs.utf_16_le_decode
_UTF16_ENCODE = codecs.utf_16_le_encode
_U32 = struct.Struct("<I").unpack_from


class Reader:
    __slots__ = ("buf", "pos", "protocol", "structure")

    def __init__(self, buf: bytes, protocol: str, pos: int = 0):
        self.buf = buf
        self.pos = pos
        self.protocol = protocol
        self.structure = ""

    # -- errors -----------------------------------------------------------------
    def error(self, field: str, reason: str, offset: int | None = None) -> WireError:
        return WireError(self.protocol, self.structure, field, self.pos if offset is None else offset, reason)

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def need(self, field: str, size: int) -> None:
        if self.pos + size > len(self.buf):
            raise self.error(field, f"truncated: needs {size} bytes, {len(self.buf) - self.pos} remain")

    # -- fixed-size fields --------------------------------------------------------
    def u8(self, field: str) -> int:
        pos = self.pos
        if pos >= len(self.buf):
            raise self.error(field, "truncated: needs 1 byte, 0 remain")
        self.pos = pos + 1
        return self.buf[pos]

    def u16(self, field: str) -> int:
        pos = self.pos
        if pos + 2 > len(self.buf):
            raise self.error(field, f"truncated: needs 2 bytes, {len(self.buf) - pos} remain")
        self.pos = pos + 2
        return _U16(self.buf, pos)[0]

    def u32(self, field: str) -> int:
        pos = self.pos
        if pos + 4 > len(self.buf):
            raise self.error(field, f"truncated: needs 4 bytes, {len(self.buf) - pos} remain")
        self.pos = pos + 4
        return _U32(self.buf, pos)[0]

    def raw(self, field: str, size: int) -> bytes:
        pos = self.pos
        if pos + size > len(self.buf):
            raise self.error(field, f"truncated: needs {size} bytes, {len(self.buf) - pos} remain")
        self.pos = pos + size
        return self.buf[pos:pos + size]

    def guid(self, field: str) -> str:
        pos = self.pos
        if pos + 16 > len(self.buf):
            raise self.error(field, f"truncated: a GUID needs 16 bytes, {len(self.buf) - pos} remain")
        self.pos = pos + 16
        return guid_text(self.buf[pos:pos + 16])

    def seq(self, field: str) -> int:
        pos = self.pos
        if pos + 8 > len(self.buf):
            raise self.error(field, f"truncated: a SEQUENCE_NUMBER needs 8 bytes, {len(self.buf) - pos} remain")
        self.pos = pos + 8
        return int.from_bytes(self.buf[pos:pos + 8], "big")

    # -- strings ------------------------------------------------------------------
    def utf16z(self, field: str) -> str:
        """A null-terminated UTF-16LE string; the 0x0000 terminator is consumed, not returned."""
        buf, start = self.buf, self.pos
        end = buf.find(b"\x00\x00", start)
        while end != -1 and (end - start) & 1:
            end = buf.find(b"\x00\x00", end + 1)
        if end == -1:
            raise self.error(field, "unterminated UTF-16 string: no 0x0000 code unit before the end of the body")
        self.pos = end + 2
        return decode_utf16(buf[start:end], self, field, start)

    def expect_end(self, field: str = "(end)") -> None:
        if self.pos != len(self.buf):
            raise self.error(field, f"trailing garbage: {len(self.buf) - self.pos} bytes after the end of the structure")

    def count(self, field: str, value: int, min_element_size: int) -> int:
        """Reject a count whose elements could not fit in the remaining bytes, before any allocation."""
        if value * min_element_size > len(self.buf) - self.pos:
            raise self.error(
                field,
                f"count {value} needs at least {value * min_element_size} bytes, only {len(self.buf) - self.pos} remain",
                self.pos,
            )
        return value


_GUID_CACHE: dict[bytes, str] = {}
_GUID_CACHE_MAX = 200_000


def guid_text(raw: bytes) -> str:
    """Canonical lowercase text of a 16-byte MS-DTYP GUID. Directory traffic repeats the same GUIDs
    (partitions, queue managers, objects) over and over, so the text is cached."""
    text = _GUID_CACHE.get(raw)
    if text is None:
        if len(_GUID_CACHE) >= _GUID_CACHE_MAX:
            _GUID_CACHE.clear()
        text = _GUID_CACHE[bytes(raw)] = str(uuid.UUID(bytes_le=bytes(raw)))
    return text


def utf16_text(raw: bytes) -> str:
    """raw as UTF-16LE text; surrogatepass keeps lone surrogates, so decoding then encoding gives back
    the same bytes. UnicodeDecodeError for an odd length."""
    return _UTF16_DECODE(raw, "surrogatepass", True)[0]


def decode_utf16(raw: bytes, reader: Reader, field: str, offset: int) -> str:
    try:
        return utf16_text(raw)
    except UnicodeDecodeError as exc:  # only an odd length can fail with surrogatepass
        raise reader.error(field, f"invalid UTF-16LE: {exc.reason}", offset) from None


def utf16z_bytes(text: str) -> bytes:
    return _UTF16_ENCODE(text, "surrogatepass")[0] + b"\x00\x00"


u16_bytes = struct.Struct("<H").pack
u32_bytes = struct.Struct("<I").pack
