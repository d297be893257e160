"""Sans-IO deframing of one direction of a reassembled TCP 1801 byte stream."""
import struct

from ..errors import WireError
from .layout import (
    BASE_HEADER_SIZE, BASE_IN, CONNECTION_PARAMETERS_PACKET_SIZE, ESTABLISH_CONNECTION_PACKET_SIZE,
    MAX_PACKET_SIZE, PROPERTIES_FIXED, SESSION_ACK_PACKET_SIZE, SIGNATURE_BYTES, USER_HEADER_FIXED_SIZE, VERSION,
)
from .packets import Packet
from .parsing import packet_length, parse_packet

__all__ = ["PacketStream", "REJECTED_BYTES_MAX"]


# the bytes a rejected packet's WireError keeps as evidence (its `data`)
REJECTED_BYTES_MAX = 65_536


class PacketStream:
    """Sans-IO deframer for one direction of a reassembled TCP 1801 byte stream.

    feed() returns (stream offset, packet or WireError) for each packet it completes. Offsets count the bytes
    fed (plus any `lost` declared to gap()). A packet whose BaseHeader frames it but whose content is malformed
    yields its WireError and the stream goes on after it. A BaseHeader that cannot start a packet loses the
    stream: one WireError is reported at its offset, then the stream is scanned for the next plausible
    BaseHeader (VersionNumber 0x10, the signature, a PacketSize a packet of its kind can have). Each
    WireError keeps the rejected bytes as `data` (at most REJECTED_BYTES_MAX).
    """

    def __init__(self, synced: bool = True):
        self._buf = bytearray()
        self._base = 0                      # stream offset of _buf[0]
        self._scanning = not synced

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def synced(self) -> bool:
        return not self._scanning

    def feed(self, data: bytes) -> list[tuple[int, Packet | WireError]]:
        self._buf += data
        out: list[tuple[int, Packet | WireError]] = []
        pos = 0
        while True:
            if self._scanning:
                found, pos = self._scan(pos)
                if not found:
                    break
                self._scanning = False
            next_pos = self._next_packet(pos, out)
            if next_pos is None:
                break
            pos = next_pos
        del self._buf[:pos]
        self._base += pos
        return out

    def gap(self, lost: int = 0) -> None:
        """Bytes were lost (a hole in the TCP sequence): drop the partial packet and resync by scanning."""
        self._base += len(self._buf) + lost
        self._buf.clear()
        self._scanning = True

    def _next_packet(self, pos: int, out: list) -> int | None:
        """Emits the packet at pos if it is complete; the position after it, or None to wait for more bytes."""
        try:
            total = packet_length(bytes(self._buf[pos:pos + BASE_HEADER_SIZE]))
        except WireError as err:
            err.data = bytes(self._buf[pos:pos + REJECTED_BYTES_MAX])     # the broken header and what follows it
            out.append((self._base + pos, err))
            self._scanning = True
            return pos + 1
        if total is None or len(self._buf) - pos < total:
            return None
        try:
            result = parse_packet(bytes(self._buf[pos:pos + total]))
        except WireError as err:
            err.data = bytes(self._buf[pos:pos + min(total, REJECTED_BYTES_MAX)])
            result = err
        out.append((self._base + pos, result))
        return pos + total

    def _scan(self, pos: int) -> tuple[bool, int]:
        """(True, start of a plausible BaseHeader) or (False, where to keep the buffer from while waiting)."""
        buf = self._buf
        while True:
            found = buf.find(SIGNATURE_BYTES, pos + 4)
            if found < 0:
                return False, max(pos, len(buf) - 11)
            start = found - 4
            if len(buf) - start < 12:
                return False, start
            if _plausible_base_header(buf, start):
                return True, start
            pos = start + 1


def _plausible_base_header(buf: bytearray, start: int) -> bool:
    version, _, flags, _, size = struct.unpack_from("<BBHII", buf, start)
    if version != VERSION:
        return False
    if flags & BASE_IN:
        return size in (ESTABLISH_CONNECTION_PACKET_SIZE, CONNECTION_PARAMETERS_PACKET_SIZE, SESSION_ACK_PACKET_SIZE)
    return BASE_HEADER_SIZE + USER_HEADER_FIXED_SIZE + PROPERTIES_FIXED.size <= size <= MAX_PACKET_SIZE
