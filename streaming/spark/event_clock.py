"""Partitions aligned in event time: a capped micro-batch ends every raw partition at one arrival time.

Spark's watermark is the maximum event time seen, less the delay, over all the partitions a
micro-batch reads: a partition read far behind the others would have its rows dropped as late. So
when admission control caps a batch, the source ends every partition at the earliest arrival time a
capped partition's share reaches (aligned_cap).

Within a partition records are taken to arrive in event-time order (the producers publish in
arrival order), so the end of a partition at a time is found by binary search over its offsets,
reading one record per step (driver side, a few dozen small reads per planning).
"""
import logging

from confluent_kafka import Consumer, TopicPartition

from ..wire.envelope import EnvelopeError, decode_envelope, millis
from .kafka_offsets import READ_AHEAD

log = logging.getLogger("dirstream.clock")
FETCH_TIMEOUT_S = 10.0


class ArrivalIndex:
    """Driver side: the arrival time of the record at an offset (one small read, cached), and the
    offset a partition's range ends at to stop at an event time (binary search)."""

    def __init__(self, conf: dict):
        self.conf = conf
        self._consumer: Consumer | None = None
        self._arrivals: dict[tuple[str, int, int], int | None] = {}

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer({**READ_AHEAD, **self.conf,       # one record at a time: no 64 MB ahead
                                       "group.id": self.conf.get("group.id", "dirstream-clock"),
                                       "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                                       "log_level": self.conf.get("log_level", 0)})
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def release_end(self, tp: tuple[str, int], start: int, end: int, until_ms: int | None) -> int:
        """The first offset in [start, end) whose record arrives after until_ms (end: none does)."""
        if until_ms is None or start >= end or self.arrival_or_early(tp, end - 1) <= until_ms:
            return end
        lo, hi = start, end - 1                 # the record at hi arrives after until_ms
        while lo < hi:
            mid = (lo + hi) // 2
            if self.arrival_or_early(tp, mid) <= until_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def arrival_or_early(self, tp: tuple[str, int], offset: int) -> int:
        arrival = self.arrival_at(tp, offset)
        return arrival if arrival is not None else -1       # undecodable: a dead letter, released at once

    def arrival_at(self, tp: tuple[str, int], offset: int) -> int | None:
        key = (tp[0], tp[1], offset)
        if key not in self._arrivals:
            if len(self._arrivals) > 100_000:
                self._arrivals.clear()
            value = self.value_at(tp, offset)
            try:
                self._arrivals[key] = millis(decode_envelope(value)["arrival_time"]) if value else None
            except EnvelopeError:
                self._arrivals[key] = None
        return self._arrivals[key]

    def value_at(self, tp: tuple[str, int], offset: int) -> bytes | None:
        self.consumer.assign([TopicPartition(tp[0], tp[1], offset)])
        for _ in range(int(FETCH_TIMEOUT_S / 0.5)):
            msg = self.consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            if msg.offset() >= offset:
                return msg.value() if msg.offset() == offset else None
        return None


def aligned_cap(index: ArrivalIndex, begin: dict, ends: dict, shares: dict) -> dict:
    """Admission control at one common event time: `shares` caps each partition's range (in
    proportion to its backlog); the micro-batch instead ends every partition at the earliest time a
    capped partition's share reaches, so no partition runs ahead of another in event time (Spark's
    watermark is the maximum over all of them: a partition behind it would have its rows dropped)."""
    capped = [tp for tp in ends if shares[tp] < ends[tp]]
    if not capped:
        return ends
    until = min(_reached_ms(index, tp, begin[tp], shares[tp]) for tp in capped)
    aligned = {tp: index.release_end(tp, begin[tp], ends[tp], until) for tp in ends}
    return aligned if any(aligned[tp] > begin[tp] for tp in ends) else shares


def _reached_ms(index: ArrivalIndex, tp: tuple[str, int], begin: int, share: int) -> int:
    """The event time a partition's capped range reaches: its last record's; a range left empty
    (the gate holds it) reaches just before its first unread record."""
    if share > begin:
        return index.arrival_or_early(tp, share - 1)
    return index.arrival_or_early(tp, begin) - 1
