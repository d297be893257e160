"""Security findings (sans-IO): what hostile or broken traffic looks like in the directory's
streams, aggregated per (kind, source, target) and time bucket.

An operator key (a replica, a queue manager) keeps a FindingLog in its state, records what it
sees while it applies its messages in arrival order, and hands on the aggregates it touched as
`security_findings` rows: each row is the whole aggregate so far (count, first and last seen, the
first and the latest evidence), so the table is the same however the micro-batches fall, and a
replay writes the same rows again.
"""
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import ClassVar

from ..wire.envelope import millis
from .python_class import python_class

__all__ = ["Aggregate", "BUCKET_MS", "evidence", "FindingLog", "FLOOD_PER_MINUTE", "KINDS", "RejectedPackets"]

BUCKET_MS = 3_600_000               # one row per (kind, source, target) and hour
# mqcn-flood: the simulator's busiest legitimate queue manager takes at most about 650 notifications
# in a minute (bursts of 100-130 changes, MS-MQCN note <3>, at the test suite's burst rate); a
# directory service sending more than twice that is not batching changes but flooding.
FLOOD_PER_MINUTE = 1_500

# kind -> (severity, why it is a finding: the spec's words or the measured rule)
KINDS: dict[str, tuple[str, str]] = {
    "mqqb-malformed": (
        "high", "an MQQB packet whose length or count fields break its own framing, or bytes on a TCP 1801 "
                "session that are no packet (the session resynchronised after them): the pattern of "
                "CVE-2023-21554 (QueueJumper), remote code execution through an MQQB length field; published "
                "by the capture producers to msmq.qb.rejected"),
    "dsrp-unsigned": (
        "high", "a replication message without a signature (AuthenticationLevel None); Windows signs every "
                "message carrying replication data (MC-MQDSRP 5.1, note <13>), and unsigned replication data "
                "can be tampered with to corrupt the directory"),
    "dsrp-unknown-sender": (
        "high", "a replication message from a machine no replica knows as a directory server of the enterprise "
                "(the server registry: machine objects with a directory service bit, the sites' PSCs, the PEC) "
                "2 minutes after it; replication data can be tampered with (MC-MQDSRP 5.1), and only the "
                "directory servers replicate"),
    "mqsd-rogue-reply": (
        "high", "a discovery reply whose responder (its address) or whose listed directory servers are no "
                "directory servers of the replicas' site and machine objects; discovery has no security, any "
                "host can answer a client and steer it to a server of its own (MS-MQSD 5.1)"),
    "mqcn-unauthenticated": (
        "medium", "a v1 change notification with AuthenticationLevel None, which the queue manager discards "
                  "(MS-MQCN 3.2.5.1); a sender that cannot sign is not the directory service"),
    "mqcn-flood": (
        "medium", "a queue manager receiving notifications from one sender faster than a directory service "
                  "sends them; notifications can be used for denial of service (MS-MQCN 5.1)"),
}


@python_class
@dataclass
class Aggregate:
    count: int
    first_ms: int
    last_ms: int
    first: dict                     # evidence of the first occurrence (Kafka coordinates, message id)
    last: dict                      # evidence of the latest
    detail: dict

    def to_tuple(self) -> tuple:
        return self.count, self.first_ms, self.last_ms, self.first, self.last, self.detail


@python_class
class FindingLog:
    """A key's findings by (kind, source, target, bucket start). record() in arrival order; rows()
    the aggregates touched since the last call; forget(watermark) drops the buckets no message can
    reach any more (their rows are final)."""

    def __init__(self, entries: list | None = None):
        self.entries: dict[tuple, Aggregate] = {tuple(k): Aggregate(*v) for k, v in entries or []}
        self.touched: set[tuple] = set()

    def record(self, kind: str, source: str | None, target: str, at_ms: int, evidence: dict,
               detail: dict | None = None, most: dict | None = None) -> None:
        """One occurrence. detail: facts about it (the latest wins); most: figures whose largest so
        far the row keeps."""
        if kind not in KINDS:
            raise ValueError(f"unknown finding kind {kind!r}")
        key = (kind, source or "(unknown)", target, at_ms - at_ms % BUCKET_MS)
        agg = self.entries.get(key)
        if agg is None:
            agg = self.entries[key] = Aggregate(0, at_ms, at_ms, evidence, evidence, {})
        agg.count += 1
        agg.first_ms, agg.last_ms = min(agg.first_ms, at_ms), max(agg.last_ms, at_ms)
        agg.last = evidence
        agg.detail.update(detail or {})
        for name, value in (most or {}).items():
            agg.detail[name] = max(agg.detail.get(name, value), value)
        self.touched.add(key)

    def rows(self) -> list[tuple[str, dict]]:
        out = [self.row(key) for key in sorted(self.touched)]
        self.touched = set()
        return out

    def row(self, key: tuple) -> tuple[str, dict]:
        kind, source, target, bucket = key
        agg = self.entries[key]
        return ("security_findings", {
            "kind": kind, "severity": KINDS[kind][0], "bucket": _iso(bucket), "source": source, "target": target,
            "count": agg.count, "first_seen": _iso(agg.first_ms), "last_seen": _iso(agg.last_ms),
            "evidence": {"first": agg.first, "last": agg.last}, "detail": agg.detail})

    def forget(self, watermark_ms: int) -> None:
        """Buckets that ended before the watermark: no later message falls in them."""
        for key in [k for k in self.entries if k[3] + BUCKET_MS <= watermark_ms and k not in self.touched]:
            del self.entries[key]

    def to_list(self) -> list:
        return [(list(k), list(a.to_tuple())) for k, a in sorted(self.entries.items())]


class RejectedPackets:
    """mqqb-malformed findings of one sender: the packets capture producers rejected, in their
    Kafka order. A bucket that ended KEEP_MS before the latest packet's time is final and
    forgotten, decided packet by packet, so the rows are the same however the batches fall (a
    capture replayed more than a day late starts its hours' rows afresh)."""
    KEEP_MS: ClassVar[int] = 24 * BUCKET_MS

    def __init__(self, log: FindingLog | None = None, now_ms: int | None = None):
        self.log = log or FindingLog()
        self.now_ms = now_ms
        self.final: list[tuple[str, dict]] = []     # rows of buckets forgotten since the last rows()

    def record(self, packet: dict, where: dict) -> None:
        """packet: a rejected packet's record (streaming.wire.rejected)."""
        at = millis(packet["arrival_time"])
        self.log.record("mqqb-malformed", packet["source_machine"], packet["destination_machine"], at,
                        dict(where, capture=packet["capture"], position=packet["position"]),
                        detail={"reason": f"{packet['structure']}.{packet['field']} at byte "
                                          f"{packet['byte_offset']}: {packet['reason']}",
                                "destination_port": packet["destination_port"]},
                        most={"bytes": len(packet["bytes"])})
        self.now_ms = at if self.now_ms is None else max(self.now_ms, at)
        horizon = self.now_ms - self.KEEP_MS
        for key in [k for k in self.log.entries if k[3] + BUCKET_MS <= horizon]:
            if key in self.log.touched:
                self.final.append(self.log.row(key))
                self.log.touched.discard(key)
            del self.log.entries[key]

    def rows(self) -> list[tuple[str, dict]]:
        out, self.final = self.final + self.log.rows(), []
        return out

    def to_json(self) -> str:
        import json
        return json.dumps([self.log.to_list(), self.now_ms])

    @classmethod
    def from_json(cls, text: str) -> "RejectedPackets":
        import json
        entries, now_ms = json.loads(text)
        return cls(FindingLog(entries), now_ms)


def evidence(topic: str | None, partition, offset, message_id: str | None, capture: str | None = None) -> dict:
    """Where the finding's message is in Kafka; for a message a capture producer took from a capture,
    also where it is there (capture: the record's capture header, JSON: capture and position)."""
    where = {"topic": topic, "partition": None if partition is None else int(partition),
             "offset": None if offset is None else int(offset), "message_id": message_id}
    if capture:
        import json
        try:
            where.update({k: str(v) for k, v in json.loads(capture).items() if k in ("capture", "position")})
        except (ValueError, AttributeError):
            where["capture"] = capture          # a header some other producer wrote: kept as it is
    return where


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
