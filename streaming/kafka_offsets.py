"""Kafka partition discovery and true end offsets (shared by the source and the progress sink).

The embedded broker's ListOffsets high watermark counts the last record batch as one record, so
it under-reports the end. `EndOffsets.ends()` therefore reads forward from the reported (or last
known) end until the partition has nothing more: on a real Kafka cluster that read finds nothing
at once; on the embedded broker it finds the rest of the last batch.
"""
import re
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

METADATA_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 10.0

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


class EndOffsets:
    def __init__(self, conf: dict, topics: list[str] | None = None, pattern: str | None = None):
        self.conf = dict(conf)
        self.topics, self.pattern = topics, re.compile(pattern) if pattern else None
        self._consumer: Consumer | None = None
        self._known_end: dict[tuple[str, int], int] = {}

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer({**self.conf, "group.id": self.conf.get("group.id", "dirstream-offsets"),
                                       "enable.auto.commit": False, "enable.partition.eof": True,
                                       # failures surface as SourceError; no librdkafka log chatter
                                       "fetch.wait.max.ms": 10, "log_level": self.conf.get("log_level", 0)})
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def partitions(self) -> list[tuple[str, int]]:
        try:
            meta = self.consumer.list_topics(timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise SourceError(f"cannot read Kafka metadata from {self.conf.get('bootstrap.servers')}: {exc}") from None
        if self.pattern is not None:
            names = sorted(t for t in meta.topics if self.pattern.fullmatch(t))
        else:
            missing = [t for t in self.topics if t not in meta.topics]
            if missing:
                raise SourceError(f"topic(s) {', '.join(missing)} do not exist on "
                                  f"{self.conf.get('bootstrap.servers')}; create them or check --topics")
            names = self.topics
        return [(t, p) for t in names for p in sorted(meta.topics[t].partitions)]

    def low(self, tp: tuple[str, int]) -> int:
        lo, _hi = self.consumer.get_watermark_offsets(TopicPartition(*tp), timeout=METADATA_TIMEOUT_S, cached=False)
        return lo

    def ends(self, partitions: list[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        partitions = self.partitions() if partitions is None else partitions
        reported = {}
        for tp in partitions:
            _lo, hi = self.consumer.get_watermark_offsets(TopicPartition(*tp), timeout=METADATA_TIMEOUT_S,
                                                          cached=False)
            reported[tp] = max(hi, self._known_end.get(tp, 0))
        self._known_end.update(self._probe(reported))
        return {tp: self._known_end[tp] for tp in partitions}

    def _probe(self, reported: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Read from each reported end until end-of-partition; the last offset seen + 1 is the true end."""
        ends = dict(reported)
        if not reported:
            return ends
        c = self.consumer
        c.assign([TopicPartition(t, p, o) for (t, p), o in reported.items()])
        pending = set(reported)
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        while pending and time.monotonic() < deadline:
            for msg in c.consume(10_000, 0.2):
                tp = (msg.topic(), msg.partition())
                err = msg.error()
                if err is None:
                    ends[tp] = max(ends[tp], msg.offset() + 1)
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(tp)
                elif err.code() != KafkaError.OFFSET_OUT_OF_RANGE:
                    raise SourceError(f"reading {tp[0]}[{tp[1]}] failed: {err.str()}")
                else:
                    pending.discard(tp)
        c.unassign()
        return ends
