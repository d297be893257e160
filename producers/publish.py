"""Publishing envelopes to the raw topics: keying, headers, rate limit, progress, clean shutdown."""
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from streaming.wire.envelope import encode_envelope
from streaming.wire.rejected import encode_rejected
from streaming.wire.topics import REJECTED_TOPIC

from streaming.wire.topics import CAPTURE_HEADER, CAPTURE_KEY, capture_header
from .kafka import PROTOCOL_HEADER, TOPICS, Publisher

__all__ = ["at_recorded_pace", "CountedHandOver", "in_time_order", "ProgressBar", "publish_all", "publish_envelope",
           "publish_rejected", "PublishStats", "REJECTED"]


@dataclass
class PublishStats:
    per_protocol: Counter = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)
    interrupted: bool = False

    @property
    def total(self) -> int:
        return sum(self.per_protocol.values())

    def rate(self) -> float:
        return self.total / max(time.monotonic() - self.started, 1e-9)

    def line(self) -> str:
        parts = " ".join(f"{p}={n}" for p, n in sorted(self.per_protocol.items()))
        return f"{self.total} messages ({parts}) at {self.rate():,.0f} msg/s"


def publish_envelope(pub: Publisher, protocol: str, key: str, envelope: dict, topics: dict[str, str] = TOPICS) -> None:
    """Value: the framed Avro envelope; key: the destination machine; the protocol also in a header,
    and for a message taken from a capture its position there."""
    headers = [(PROTOCOL_HEADER, envelope["protocol"].encode("ascii"))]
    if envelope.get(CAPTURE_KEY):                 # taken from a capture: where, for the job's findings
        headers.append((CAPTURE_HEADER, capture_header(envelope[CAPTURE_KEY])))
    pub.send(topics[protocol], key.encode("utf-8"), encode_envelope(envelope), headers)


REJECTED = "mqqb-rejected"          # publish_all's protocol of a rejected packet's record


def in_time_order(items: list, rejected: list[dict]) -> Iterable:
    """A capture's messages and its rejected packets' records as publish_all items, merged by time,
    so that a rejected packet reaches Kafka with the messages of its time and the job, whose event
    time follows what it has read, does not take it as late."""
    import heapq
    from streaming.wire.envelope import millis
    tagged = ((REJECTED, r["source_machine"], r) for r in rejected)
    return heapq.merge(items, tagged, key=lambda item: millis(item[2]["arrival_time"]))


def at_recorded_pace(items: Iterable, clock=time.time, sleep=time.sleep) -> Iterable:
    """publish_all items (in time order) re-dated to now and handed over at their recorded pace: the
    first at once, each later one when as much wall time has passed as its recording says (a
    message's sent and arrival times, a rejected packet's arrival time, moved by the same amount)."""
    from streaming.wire.envelope import millis
    shift = None
    for protocol, key, fields in items:
        arrival = millis(fields["arrival_time"])
        if shift is None:
            shift = int(clock() * 1000) - arrival
        due_s = (arrival + shift) / 1000 - clock()
        if due_s > 0:
            sleep(due_s)
        fields = dict(fields, arrival_time=arrival + shift)
        if "sent_time" in fields:
            fields["sent_time"] = millis(fields["sent_time"]) + shift
        yield protocol, key, fields


def publish_rejected(pub: Publisher, record: dict) -> None:
    """A rejected MQQB packet's record (streaming.wire.rejected) to its topic, keyed by its sender."""
    pub.send(REJECTED_TOPIC, record["source_machine"].encode("utf-8"), encode_rejected(record),
             [(PROTOCOL_HEADER, b"MQQB")])


def publish_all(pub: Publisher, items: Iterable, *, rate: float | None = None, duration: float | None = None,
                on_deadline=None, progress=sys.stderr, topics: dict[str, str] = TOPICS,
                total: int | None = None) -> PublishStats:
    """Publish (protocol, key, envelope) items; an item of protocol REJECTED carries a rejected MQQB
    packet's record instead of an envelope. `rate` caps messages per second; after `duration`
    seconds on_deadline() is called once (the simulator then winds down). Ctrl-C stops early;
    everything already handed to the client is still flushed and confirmed by the caller's close().
    Progress: a bar on a terminal (of `total` when known), else a line every second."""
    stats = PublishStats()
    next_report = stats.started + 1.0
    deadline_called, sent = False, 0
    bar = ProgressBar(progress, total) if progress and progress.isatty() else None
    try:
        with CountedHandOver() as hand_over:
            for protocol, key, envelope in items:
                hand_over.busy = True
                if protocol == REJECTED:
                    publish_rejected(pub, envelope)
                else:
                    publish_envelope(pub, protocol, key, envelope, topics)
                stats.per_protocol[protocol] += 1
                sent += 1                       # not stats.total: a sum over the protocols per message
                hand_over.done()
                now = time.monotonic()
                if rate:
                    ahead = sent / rate - (now - stats.started)
                    if ahead > 0:
                        time.sleep(ahead)
                if duration is not None and not deadline_called and now - stats.started >= duration:
                    deadline_called = True
                    if on_deadline is None:
                        break
                    on_deadline()
                if progress and now >= next_report:
                    if bar is not None:
                        bar.update(stats)
                    else:
                        print(f"\rsent {stats.line()}", end="", file=progress, flush=True)
                    next_report = now + (0.2 if bar is not None else 1.0)
    except KeyboardInterrupt:
        stats.interrupted = True
    if bar is not None:
        bar.close(stats)
    if progress:
        print(f"\rsent {stats.line()}" + (" (interrupted)" if stats.interrupted else ""), file=progress, flush=True)
    return stats


class CountedHandOver:
    """Ctrl-C stops publishing at once, except while a message is handed to the client and counted:
    then KeyboardInterrupt waits until it is counted. Raised in between (as CPython does on the return
    of the client's produce call), the client would deliver a message that no count holds."""

    def __init__(self):
        self.busy = False
        self.pending = False
        self.previous = None

    def __enter__(self) -> "CountedHandOver":
        if threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self.previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *_exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)

    def _on_sigint(self, _signum, _frame) -> None:
        if not self.busy:
            raise KeyboardInterrupt
        self.pending = True

    def done(self) -> None:
        self.busy = False
        if self.pending:
            raise KeyboardInterrupt


class ProgressBar:
    """Messages sent of the total (or a running count), with the rate, on a terminal (rich)."""

    def __init__(self, stream, total: int | None):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
        self.progress = Progress(TextColumn("sending"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[rate]}"), TimeRemainingColumn(),
                                 console=Console(file=stream), transient=True)
        self.task = self.progress.add_task("sending", total=total, rate="")
        self.progress.start()

    def update(self, stats: PublishStats) -> None:
        self.progress.update(self.task, completed=stats.total, rate=f"{stats.rate():,.0f} msg/s")

    def close(self, stats: PublishStats) -> None:
        self.update(stats)
        self.progress.stop()
