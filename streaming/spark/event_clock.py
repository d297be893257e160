"""The notification query's clock never outruns the replication query.

The MQCN operator reads the directory "as of" a time from the versions the replication query
derives. So its source releases traffic (MQCN, and MQSD which only moves its clock) only up to the
replication query's progress: the arrival time just before the first record of the replication
topic that query has not processed yet. The replication query publishes its processed end offsets
to the progress topic after each micro-batch, once the versions that batch derived are confirmed
in Kafka; when it has processed everything in its topic, the gate is open.

        msmq.dsrp.raw --> replication --> msmq.dsrp.objects --------------+
                              |                                            v
                              +--> msmq.dsrp.progress --> gate --> notifications
        msmq.cn.raw, msmq.sd.raw ------------------------------^  (released up to the gate)

Within a partition records are taken to arrive in event-time order (the producers publish in
arrival order), so the release point of a gated partition is found by binary search over its
offsets, reading one record per step (driver side, a few dozen small reads per planning).
"""
import json
import logging

from confluent_kafka import Consumer, TopicPartition

from ..wire.envelope import EnvelopeError, decode_envelope, millis
from .kafka_offsets import READ_AHEAD, EndOffsets

log = logging.getLogger("dirstream.clock")
FETCH_TIMEOUT_S = 10.0
SCAN_UNDECODABLE = 20          # records skipped past when looking for an arrival time
PROGRESS_CHUNK = 200           # progress records read at a time, from the end backwards


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

    def first_arrival(self, tp: tuple[str, int], first: int, end: int) -> int | None:
        """The arrival time of the first decodable record at or after `first` (None: none within reach)."""
        for offset in range(first, min(end, first + SCAN_UNDECODABLE)):
            arrival = self.arrival_at(tp, offset)
            if arrival is not None:
                return arrival
        return None

    def values(self, tp: tuple[str, int], start: int, end: int) -> list[bytes | None]:
        """The values of the records in [start, end), in order."""
        self.consumer.assign([TopicPartition(tp[0], tp[1], start)])
        out, misses = [], 0
        while misses < int(FETCH_TIMEOUT_S / 0.5):
            batch = self.consumer.consume(max(1, end - start), 0.5)
            misses = misses + 1 if not batch else 0
            for msg in batch:
                if msg.error() is None and start <= msg.offset() < end:
                    out.append(msg.value())
                if msg.error() is None and msg.offset() >= end - 1:
                    return out
        return out

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


class EventClockGate:
    """Driver side: the time up to which the upstream query has processed its topics."""

    def __init__(self, index: ArrivalIndex, conf: dict, progress_topic: str, upstream_topics: list[str],
                 upstream_query_id: str | None = None):
        self.index, self.conf = index, conf
        self.progress_topic = progress_topic
        self.upstream = EndOffsets(conf, upstream_topics)
        self.upstream_query_id = upstream_query_id      # another job's progress on the same topic is not ours

    def close(self) -> None:
        self.upstream.close()

    def gate_ms(self, record: dict | None) -> int | None:
        """The arrival time through which the upstream query had processed its topics when it wrote
        this progress record (None: it has written none, so nothing); None when that is everything
        in them (the gate is open)."""
        processed = _processed_ends(record)
        firsts = []
        for tp, end in self.upstream.ends().items():
            done = max(processed.get(tp, 0), self.upstream.low(tp))
            if end > done:
                first = self.index.first_arrival(tp, done, end)
                if first is not None:
                    firsts.append(first)
        return min(firsts) - 1 if firsts else None

    def latest(self, accept=lambda record: True) -> dict | None:
        """The upstream query's latest progress record that `accept`s (read backwards from the end,
        a chunk at a time)."""
        ends = EndOffsets(self.conf, [self.progress_topic])
        try:
            (tp, end), = ends.ends().items()
            low = ends.low(tp)
        finally:
            ends.close()
        while end > low:
            start = max(low, end - PROGRESS_CHUNK)
            for value in reversed(self.index.values(tp, start, end)):
                record = self._progress(value)
                if record is not None and accept(record):
                    return record
            end = start
        return None

    def _progress(self, value: bytes | None) -> dict | None:
        try:
            record = json.loads(value)
            if self.upstream_query_id is None or record.get("query_id") == self.upstream_query_id:
                record["ends"].items()
                return record
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("unreadable progress record in %s (%s): skipped", self.progress_topic, exc)
        return None


def _processed_ends(record: dict | None) -> dict[tuple[str, int], int]:
    if record is None:
        return {}
    return {(t, int(p)): int(o) for t, parts in record["ends"].items() for p, o in parts.items()}


def objects_within(record: dict, plain_ends: dict[tuple[str, int], int]) -> bool:
    """Whether every directory version published before this progress record lies below plain_ends
    (the record's "objects_end": the versions topic's end once the batch's versions were confirmed)."""
    return all(int(o) <= plain_ends.get((t, int(p)), int(o))
               for t, parts in record["objects_end"].items() for p, o in parts.items())
