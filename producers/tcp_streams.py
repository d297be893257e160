"""TCP stream reassembly for captures (sans-IO: fed segments, gives ordered bytes).

One `Direction` per (source, source port, destination, destination port). Segments may come out of
order, twice (retransmissions), overlapping, or from a connection whose start the capture missed;
the bytes come out once each, in sequence order, with the capture time of the segment that made
them available. A hole the capture never fills (a lost segment) is skipped when too much data waits
behind it or when the connection ends, and reported as a gap, so the layer above resynchronises.
"""
from dataclasses import dataclass, field

__all__ = ["Delivery", "Direction", "MAX_PENDING", "SEQ_MOD"]

SEQ_MOD = 1 << 32
# Bytes held behind a hole before it is declared lost (MQQB packets are at most 4 MiB, MS-MQMQ 2.2.19.1).
MAX_PENDING = 8 << 20


@dataclass
class Delivery:
    """Contiguous stream bytes: `data` starts at stream offset `offset` (`gap_before` bytes were lost
    just before it); `ts_ms` is the capture time of the segment that completed it."""
    offset: int
    data: bytes
    ts_ms: int
    gap_before: int = 0


@dataclass
class Direction:
    synced: bool = False          # the SYN was seen: the stream starts at its first byte
    base: int | None = None       # sequence number of stream offset 0
    next: int = 0                 # next stream offset expected
    pending: dict[int, tuple[bytes, int]] = field(default_factory=dict)   # offset -> (data, ts_ms)
    pending_bytes: int = 0
    closed: bool = False

    def segment(self, seq: int, payload: bytes, ts_ms: int, syn: bool = False, fin: bool = False) -> list[Delivery]:
        if syn:
            if self.base is not None:           # a SYN again (retransmitted, or a new connection on the same ports)
                return []
            self.base, self.synced = (seq + 1) % SEQ_MOD, True
            return []
        if self.base is None:                   # the capture starts mid-connection
            self.base = seq
        out = self._accept(self._offset(seq), payload, ts_ms) if payload else []
        if fin:
            self.closed = True
        return out

    def _offset(self, seq: int) -> int:
        """Stream offset of a sequence number, unwrapped around the expected one (RFC 793 modular arithmetic)."""
        delta = (seq - self.base - self.next) % SEQ_MOD
        if delta >= SEQ_MOD // 2:
            delta -= SEQ_MOD
        return self.next + delta

    def _accept(self, offset: int, data: bytes, ts_ms: int) -> list[Delivery]:
        if offset < self.next:                  # a retransmission, or an overlap: keep only the new bytes
            data = data[self.next - offset:]
            offset = self.next
        if not data:
            return []
        held = self.pending.get(offset)
        if held is None or len(held[0]) < len(data):
            self.pending_bytes += len(data) - (len(held[0]) if held else 0)
            self.pending[offset] = (data, ts_ms)
        out = self._drain()
        if self.pending_bytes > MAX_PENDING:
            out += self.skip_hole()
        return out

    def _drain(self, gap: int = 0) -> list[Delivery]:
        out = []
        while True:
            ready = [o for o in self.pending if o <= self.next]
            if not ready:
                return out
            for o in sorted(ready):
                data, ts = self.pending.pop(o)
                self.pending_bytes -= len(data)
                fresh = data[self.next - o:] if o < self.next else data
                if fresh:
                    out.append(Delivery(self.next, fresh, ts, gap))
                    self.next += len(fresh)
                    gap = 0

    def skip_hole(self) -> list[Delivery]:
        """Give up on the bytes missing before the first held segment; deliver what follows it."""
        if not self.pending:
            return []
        first = min(self.pending)
        gap, self.next = first - self.next, first
        return self._drain(gap)

    def finish(self) -> list[Delivery]:
        """The capture (or connection) ended: whatever waits behind holes comes out, with its gaps."""
        out = []
        while self.pending:
            out += self.skip_hole()
        return out
