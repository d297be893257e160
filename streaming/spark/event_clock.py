"""Partitions aligned in event time: no micro-batch releases a record while another partition may
still bring an older one, and a capped micro-batch ends every raw partition at one arrival time.

Release (ReleaseGate): every micro-batch, capped or not, ends each raw partition at the earliest
arrival time among the partitions' last records (their heads), counting only live partitions: a
partition whose end offset has not moved for a while (idle_s of wall clock, IDLE_PARTITION_S by
default) no longer holds the others back. Within a live partition records arrive in event-time
order, so every record it brings later is newer than what was released (a live partition with no
record yet holds everything back): it is never behind the
watermark, however the batches were cut, whether the job ran on or was stopped and restarted in
between (a stop's no-data micro-batch moves the watermark up to the released records; the next
batch after a restart is judged against it). A partition that was idle and brings a record older
than what the others released is the one case left: its record is late only if it reaches Kafka
more than one micro-batch after the newer records (docs/design.md, "What the job assumes of its
producers"), and it is counted in late_rows.

Spark's watermark is the maximum event time seen, less the delay, over all the partitions a
micro-batch reads: a partition read far behind the others would have its rows dropped as late. So
when admission control caps a batch, the source ends every partition at one arrival time: the latest
a capped partition's share reaches at which the batch stays within the cap (aligned_cap).

Within a partition records are taken to arrive in event-time order (the producers publish in
arrival order), so the end of a partition at a time is found by binary search over its offsets,
reading one record per step (driver side, a few dozen small reads per planning).
"""
import logging
import time

from confluent_kafka import Consumer, TopicPartition

from ..wire.envelope import EnvelopeError, arrival_ms_of
from ..wire.topics import JOB_GROUP
from .kafka_offsets import BROKER_WAIT_S, READ_AHEAD, SourceError

__all__ = ["aligned_cap", "ArrivalIndex", "FETCH_TIMEOUT_S", "FETCHED_KEPT", "IDLE_PARTITION_S", "log",
           "ReleaseGate", "SCANNED_AT_MOST"]

log = logging.getLogger("dirstream.clock")
FETCH_TIMEOUT_S = 10.0              # one attempt at a record; a record is asked for again until BROKER_WAIT_S
FETCHED_KEPT = 20_000               # records read along with the one asked for, kept at most
IDLE_PARTITION_S = 5.0              # a partition whose end has not moved for this long holds no one back
SCANNED_AT_MOST = 20_000            # records read in one pass to find where partitions end at a time


class ArrivalIndex:
    """Driver side: the arrival time of the record at an offset (one small read, cached), and the
    offset a partition's range ends at to stop at an event time (binary search)."""

    def __init__(self, conf: dict, fetch_timeout_s: float = FETCH_TIMEOUT_S, broker_wait_s: float = BROKER_WAIT_S):
        self.conf = conf
        self.fetch_timeout_s, self.broker_wait_s = fetch_timeout_s, broker_wait_s
        self._consumer: Consumer | None = None
        self._arrivals: dict[tuple[str, int, int], int | None] = {}
        self._fetched: dict[tuple[str, int, int], bytes | None] = {}    # read along, not decoded yet

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer({**READ_AHEAD, **self.conf,       # one record at a time: no 64 MB ahead
                                       "group.id": self.conf.get("group.id", JOB_GROUP),
                                       "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                                       "log_level": self.conf.get("log_level", 0)})
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def release_end(self, tp: tuple[str, int], start: int, end: int, until_ms: int | None) -> int:
        """The first offset in [start, end) whose record arrives after until_ms (end: none does)."""
        if until_ms is None or start >= end or self.arrival_or_early(tp, self._last_record(tp, start, end)) <= until_ms:
            return end
        lo, hi = start, end - 1                 # the record at hi arrives after until_ms
        while lo < hi:
            mid = (lo + hi) // 2
            if self.arrival_or_early(tp, mid) <= until_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def known(self, tp: tuple[str, int], offset: int) -> bool:
        return (tp[0], tp[1], offset) in self._arrivals

    def heads(self, ends: dict) -> dict:
        """The arrival time of each partition's last record (at ends[tp] - 1, or just before the
        commit marker that ends a transactional producer's partition; None: undecodable), the ones
        not known yet read in one pass over every partition."""
        wanted = {tp: end - 1 for tp, end in ends.items()}
        self.scan({tp: (at, at + 1) for tp, at in wanted.items() if not self.known(tp, at)})
        return {tp: self.arrival_at(tp, self._last_record(tp, 0, ends[tp])) for tp in wanted}

    def scan(self, ranges: dict) -> None:
        """Reads the records of ranges ({tp: (start, stop)}) in one pass with one client assigned to
        every partition, and keeps their arrival times: the cheap way to a live batch's few thousand
        records (a binary search costs a fetch per partition and step). What the pass does not bring
        within fetch_timeout_s is left to arrival_at, which waits for the broker."""
        ranges = {tp: (self._first_unknown(tp, *r), r[1]) for tp, r in ranges.items()}
        ranges = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
        if not ranges:
            return
        consumer = self.consumer
        consumer.assign([TopicPartition(tp[0], tp[1], start) for tp, (start, _) in ranges.items()])
        left, deadline = dict(ranges), time.monotonic() + self.fetch_timeout_s
        while left and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                tp = (msg.topic(), msg.partition())
                if msg.error() is not None or tp not in left:
                    continue
                offset = msg.offset()
                if offset < left[tp][1]:
                    self._remember(tp, offset, msg.value())
                if offset + 1 >= left[tp][1]:
                    del left[tp]
                    consumer.incremental_unassign([TopicPartition(tp[0], tp[1])])
            for tp, (start, stop) in list(left.items()):
                if self._position(tp) >= stop:      # the rest were transaction markers: no records
                    for offset in range(start, stop):
                        if not self.known(tp, offset):
                            self._remember(tp, offset, None)
                    del left[tp]
                    consumer.incremental_unassign([TopicPartition(tp[0], tp[1])])

    def _first_unknown(self, tp: tuple[str, int], start: int, stop: int) -> int:
        while start < stop and self.known(tp, start):
            start += 1
        return start

    def _remember(self, tp: tuple[str, int], offset: int, value: bytes | None) -> None:
        if len(self._arrivals) > 100_000:
            self._arrivals.clear()
        try:
            self._arrivals[(tp[0], tp[1], offset)] = arrival_ms_of(value) if value else None
        except EnvelopeError:
            self._arrivals[(tp[0], tp[1], offset)] = None

    def _last_record(self, tp: tuple[str, int], start: int, end: int, markers: int = 4) -> int:
        """The offset of the range's last record, passing over the few offsets at its end that hold
        none (a transactional producer's commit marker ends each of its transactions)."""
        last = end - 1
        while last > start and end - last <= markers and self.arrival_at(tp, last) is None:
            last -= 1
        return last

    def arrival_or_early(self, tp: tuple[str, int], offset: int) -> int:
        arrival = self.arrival_at(tp, offset)
        return arrival if arrival is not None else -1       # undecodable: a dead letter, released at once

    def arrival_at(self, tp: tuple[str, int], offset: int) -> int | None:
        key = (tp[0], tp[1], offset)
        if key not in self._arrivals:
            self._remember(tp, offset, self._fetched.pop(key) if key in self._fetched else self.value_at(tp, offset))
        return self._arrivals[key]

    def value_at(self, tp: tuple[str, int], offset: int) -> bytes | None:
        """The record's value; None if the partition holds no record there (a transaction marker).
        A read costs tens of milliseconds (assigning the partition, then the fetch), and the fetch
        brings the records after it too: those are kept, undecoded, for the binary search's later
        steps, which come ever closer. A fetch that brings nothing (a broker restarting, or slow on a
        loaded machine) is tried again, never taken for a missing record: a record taken as arriving
        early would end its partition past the others, and their rows behind the watermark would be
        dropped as late."""
        started = time.monotonic()
        while True:
            found, value = self._fetch(tp, offset)
            if found:
                return value
            waited = time.monotonic() - started
            if waited >= self.broker_wait_s:
                raise SourceError(f"cannot read {tp[0]}[{tp[1]}] at offset {offset} from "
                                  f"{self.conf.get('bootstrap.servers')}: no record came for {waited:.0f} s; start "
                                  f"the broker, then run the job again: it resumes from its checkpoint")
            log.warning("%s[%d] at offset %d: no record after %.0f s; asking again (up to %.0f s)",
                        tp[0], tp[1], offset, waited, self.broker_wait_s)
            self.close()                        # a client that saw the broker go may hold stale metadata

    def _fetch(self, tp: tuple[str, int], offset: int) -> tuple[bool, bytes | None]:
        """(True, value) once the partition answers at offset ((True, None): no record there), else
        (False, None) after fetch_timeout_s."""
        self.consumer.assign([TopicPartition(tp[0], tp[1], offset)])
        deadline = time.monotonic() + self.fetch_timeout_s
        while time.monotonic() < deadline:
            msg = self.consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                if self._position(tp) > offset:
                    return True, None           # consumed past it: no record there (transaction markers)
                continue
            if msg.offset() >= offset:
                self._keep_fetched(tp)
                return True, (msg.value() if msg.offset() == offset else None)
        return self._position(tp) > offset, None

    def _position(self, tp: tuple[str, int]) -> int:
        (position,) = self.consumer.position([TopicPartition(tp[0], tp[1])])
        return position.offset

    def _keep_fetched(self, tp: tuple[str, int]) -> None:
        if len(self._fetched) > FETCHED_KEPT:
            self._fetched.clear()
        for msg in self.consumer.consume(FETCHED_KEPT, 0):
            if msg.error() is None and (msg.topic(), msg.partition()) == tp:
                self._fetched[(tp[0], tp[1], msg.offset())] = msg.value()


class ReleaseGate:
    """Driver side: where each partition's release ends so that no live partition can still bring a
    record older than one released (module docstring)."""

    def __init__(self, index: ArrivalIndex, idle_s: float = IDLE_PARTITION_S, clock=time.monotonic):
        self.index, self.idle_s, self.clock = index, idle_s, clock
        self._moved: dict[tuple[str, int], tuple[int, float]] = {}     # end offset, when it last moved

    def live(self, ends: dict) -> set:
        """The partitions whose end offset moved within idle_s (or that this gate saw first within it)."""
        now = self.clock()
        for tp, end in ends.items():
            if self._moved.get(tp, (None,))[0] != end:
                self._moved[tp] = (end, now)
        return {tp for tp in ends if now - self._moved[tp][1] < self.idle_s}

    def release(self, begin: dict, ends: dict, lows: dict, planned: dict | None = None) -> dict:
        """Each partition's end within planned (default: ends, the partitions' end offsets): up to the
        earliest head among the live partitions. A live partition holding no record yet (its first
        one may come behind the others') holds every release back."""
        planned = ends if planned is None else planned
        live = self.live(ends)
        if any(ends[tp] <= lows.get(tp, 0) for tp in live):
            return dict(begin)
        heads = [ms for ms in self.index.heads({tp: ends[tp] for tp in live}).values() if ms is not None]
        if not heads:
            return planned
        until = min(heads)
        ahead = {tp: (begin[tp], planned[tp]) for tp in planned if planned[tp] > begin[tp]}
        if sum(stop - start for start, stop in ahead.values()) <= SCANNED_AT_MOST:
            self.index.scan({tp: r for tp, r in ahead.items() if self.index.arrival_or_early(tp, r[1] - 1) > until})
        return {tp: self.index.release_end(tp, begin[tp], planned[tp], until) if tp in ahead else planned[tp]
                for tp in planned}


def aligned_cap(index: ArrivalIndex, begin: dict, ends: dict, shares: dict, max_rows: int) -> dict:
    """Admission control at one common event time: `shares` caps each partition's range (in
    proportion to its backlog); the micro-batch instead ends every partition at one time, so no
    partition runs ahead of another in event time (Spark's watermark is the maximum over all of
    them: a partition behind it would have its rows dropped). The time is the latest of the times
    the capped shares reach at which the whole batch stays within max_rows: the earliest of them
    always does, but cut there a batch took about a quarter of max_rows (partitions differ in how
    much time a share covers), and every micro-batch has a fixed price."""
    capped = [tp for tp in ends if shares[tp] < ends[tp]]
    if not capped:
        return ends
    reached = sorted({_reached_ms(index, tp, begin[tp], shares[tp]) for tp in capped})
    # a partition asked for more than max_rows records makes the batch too big whatever the others:
    # each binary search stops there
    bound = {tp: min(ends[tp], begin[tp] + max_rows + 1) for tp in ends}

    def released(until: int) -> dict:
        return {tp: index.release_end(tp, begin[tp], bound[tp], until) for tp in ends}

    best, lo, hi = released(reached[0]), 1, len(reached) - 1
    while lo <= hi:                             # the batch grows with the time: binary search
        mid = (lo + hi) // 2
        candidate = released(reached[mid])
        if sum(candidate[tp] - begin[tp] for tp in ends) <= max_rows:
            best, lo = candidate, mid + 1
        else:
            hi = mid - 1
    return best if any(best[tp] > begin[tp] for tp in ends) else shares


def _reached_ms(index: ArrivalIndex, tp: tuple[str, int], begin: int, share: int) -> int:
    """The event time a partition's capped range reaches: its last record's; a range left empty
    (the gate holds it) reaches just before its first unread record."""
    if share > begin:
        return index.arrival_or_early(tp, share - 1)
    return index.arrival_or_early(tp, begin) - 1
