"""Kafka partition discovery and end offsets (shared by the source and the progress sink)."""
import logging
import re
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ..wire.topics import JOB_GROUP

__all__ = ["BROKER_WAIT_S", "EndOffsets", "flatten", "log", "METADATA_TIMEOUT_S", "nest", "patiently",
           "READ_AHEAD", "RETRY_PAUSE_S", "SourceError", "TopicPartitions"]

METADATA_TIMEOUT_S = 10.0
# How long the source waits for an unreachable broker (stopped, restarting, network down) before
# it fails the query with a clear message; while it waits no micro-batch starts.
BROKER_WAIT_S = 180.0
RETRY_PAUSE_S = 2.0
# A reader wants a bounded range, or one record, but librdkafka fetches ahead of it into its queue:
# by default up to 100,000 records or 64 MB per consumer, read past what was asked for and thrown
# away at the next assign. In steady traffic the log ends just after; catching up, every reading
# Python worker held about 75 MB more and spent longer on each range. A bounded queue,
# fetched again soon after it drains, reads as fast. A kafka.* option of the same name overrides it.
READ_AHEAD = {"queued.max.messages.kbytes": 4096, "fetch.queue.backoff.ms": 10}
LATEST, EARLIEST = -1, -2               # ListOffsets' timestamps for the end of a partition and its start

log = logging.getLogger("dirstream.source")

TopicPartitions = dict[str, dict[str, int]]        # {"topic": {"0": offset, ...}}: Spark's offset JSON


class SourceError(RuntimeError):
    """A clear, actionable failure of the Kafka source (missing topic, deleted offsets, no broker)."""


def flatten(offsets: TopicPartitions) -> dict[tuple[str, int], int]:
    return {(t, int(p)): o for t, parts in offsets.items() for p, o in parts.items()}


def nest(flat: dict[tuple[str, int], int]) -> TopicPartitions:
    out: TopicPartitions = {}
    for (t, p), o in sorted(flat.items()):
        out.setdefault(t, {})[str(p)] = o
    return out


def patiently(call, what: str, bootstrap: str, transient, wait_s: float = BROKER_WAIT_S, before_retry=None,
              fatal: tuple = ()):
    """call(), retried every RETRY_PAUSE_S while it raises one of `transient` (the broker does not
    answer), for up to wait_s, logging `Kafka at … does not answer` at once and every 30 s; then a
    SourceError saying what to do. `fatal` exceptions (a subclass of transient that retrying cannot
    mend) pass through; before_retry() runs before each retry (and may raise to end the wait)."""
    started, warned_at = time.monotonic(), None
    while True:
        try:
            return call()
        except fatal:
            raise
        except transient as exc:
            waited = time.monotonic() - started
            if waited >= wait_s:
                raise SourceError(f"cannot read {what} from {bootstrap}: {exc} (the broker did not answer for "
                                  f"{waited:.0f} s); start the broker, then run the job again: it resumes from "
                                  f"its checkpoint") from None
            if warned_at is None or waited - warned_at >= 30:
                log.warning("Kafka at %s does not answer (%s); waiting up to %.0f s", bootstrap, exc, wait_s)
                warned_at = waited
            if before_retry is not None:
                before_retry()
            time.sleep(RETRY_PAUSE_S)


class EndOffsets:
    def __init__(self, conf: dict, topics: list[str] | None = None, pattern: str | None = None,
                 broker_wait_s: float = BROKER_WAIT_S, optional: tuple[str, ...] = ()):
        self.conf = dict(conf)
        self.topics, self.pattern = topics, re.compile(pattern) if pattern else None
        self.optional = tuple(optional)     # read once they exist (a producer creates them when it has something)
        self.broker_wait_s = broker_wait_s
        self._consumer: Consumer | None = None

    def _ask(self, what: str, call):
        """call(), retried while the broker does not answer, for up to broker_wait_s. A client that
        saw the broker go can keep stale metadata ("Unknown partition") for minutes after it is
        back: each retry asks with a fresh one."""
        return patiently(call, what, self.conf.get("bootstrap.servers"), KafkaException, self.broker_wait_s,
                         before_retry=self.close)

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer({**self.conf, "group.id": self.conf.get("group.id", JOB_GROUP),
                                       "enable.auto.commit": False,
                                       # failures surface as SourceError; no librdkafka log chatter
                                       "fetch.wait.max.ms": 10, "log_level": self.conf.get("log_level", 0)})
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def partitions(self) -> list[tuple[str, int]]:
        meta = self._ask("Kafka metadata", lambda: self.consumer.list_topics(timeout=METADATA_TIMEOUT_S))
        if self.pattern is not None:
            names = sorted(t for t in meta.topics if self.pattern.fullmatch(t))
        else:
            missing = [t for t in self.topics if t not in meta.topics]
            if missing:
                raise SourceError(f"topic(s) {', '.join(missing)} do not exist on "
                                  f"{self.conf.get('bootstrap.servers')}; create them or check --topics")
            names = list(self.topics) + [t for t in self.optional if t in meta.topics and t not in self.topics]
        return [(t, p) for t in names for p in sorted(meta.topics[t].partitions)]

    def bounds(self, partitions: list[tuple[str, int]] | None = None) -> dict[tuple[str, int], tuple[int, int]]:
        """Each partition's (low, high) watermarks: its first offset still held and the one after its last."""
        partitions = self.partitions() if partitions is None else partitions
        lows, highs = self.lows(partitions), self._offsets(partitions, LATEST)
        return {tp: (lows[tp], highs[tp]) for tp in partitions}

    def low(self, tp: tuple[str, int]) -> int:
        return self.lows([tp])[tp]

    def lows(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Each partition's first offset still held."""
        return self._offsets(partitions, EARLIEST)

    def ends(self, partitions: list[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        """Each partition's high watermark: the offset after its last committed record."""
        partitions = self.partitions() if partitions is None else partitions
        return self._offsets(partitions, LATEST)

    def _offsets(self, partitions: list[tuple[str, int]], which: int) -> dict[tuple[str, int], int]:
        """The EARLIEST or LATEST offset of every partition in one ListOffsets request per broker (the
        protocol's timestamps -2 and -1), under the consumer's isolation level, as get_watermark_offsets
        asks for them one partition at a time: a micro-batch asked about 3 times per partition, a broker
        round trip each, while the driver alone ran."""
        if not partitions:
            return {}

        def ask() -> dict[tuple[str, int], int]:
            found = self.consumer.offsets_for_times([TopicPartition(t, p, which) for t, p in partitions],
                                                    timeout=METADATA_TIMEOUT_S)
            for tp in found:                # an unknown partition comes back with an error, not an offset
                if tp.error is not None:
                    raise KafkaException(KafkaError(tp.error.code(), f"{tp.topic}[{tp.partition}]: {tp.error.str()}"))
            return {(tp.topic, tp.partition): tp.offset for tp in found}
        what = (f"the offsets of {partitions[0][0]}[{partitions[0][1]}]" if len(partitions) == 1
                else f"the offsets of {len(partitions)} partitions")
        return self._ask(what, ask)
