"""Moving the job's event time on after a finite run's traffic has ended.

The job's clock is its traffic: each query's watermark is the latest arrival it has read, less 10 s.
When a finite run stops (the soak), what waits for later event time waits for ever. A queue manager
applies a directory version only once its clock has passed it, and the last sync replies are dated
at the very end of the traffic. Its batching window and a read waiting for a replica run for up to
15 + 15 minutes (MS-MQCN note <3>; docs/design.md, "MQCN notification operator"). A live enterprise's traffic never
stops. A finite run publishes copies of one of its last change notifications instead, dated after
everything in the raw topics. Each copy is a duplicate, which the queue manager discards ([MS-MQQB]
3.1.5.8.1: a message id in its MessageIDHistoryTable, kept 30 minutes after it was last seen), so it
changes nothing but the time.
"""
from streaming.operators.notifications import MESSAGE_ID_HISTORY_MS, MINUTE, UNRESOLVED_WAIT_MS, Settings
from streaming.wire import WireError, decode
from streaming.wire.envelope import decode_envelope, millis

from .kafka import ConfluentPublisher, TOPICS
from .publish import publish_envelope
from .responder import latest_arrival_on

__all__ = ["move_event_time", "PAST_MS", "STEP_MS"]

STEP_MS = 10 * MINUTE           # each copy well within the history of the one before it
# past the longest wait: a batching window, then a read's wait for a replica, and a minute more
PAST_MS = Settings().window_ms + UNRESOLVED_WAIT_MS + MINUTE


def move_event_time(settings, past_ms: int = PAST_MS, scan: int = 200) -> list[int]:
    """Publish copies of the latest well-formed version 2 notification (or, if none, version 1) in
    the last `scan` records of each partition, the first one minute after the latest arrival on any
    raw topic, then every STEP_MS until past_ms after it; returns their arrival times (ms)."""
    latest = latest_arrival_on(settings, TOPICS.values())
    chosen = _latest_notification(settings, scan)
    if latest is None or chosen is None:
        raise ValueError(f"no change notification in the last {scan} records of {TOPICS['mqcn']}'s partitions")
    arrival_ms, key, envelope = chosen
    if latest + MINUTE - arrival_ms >= MESSAGE_ID_HISTORY_MS:
        raise ValueError(f"the latest notification arrived {(latest - arrival_ms) / MINUTE:.1f} min before the end "
                         f"of the traffic: a copy would no longer be a duplicate ([MS-MQQB] 3.1.5.8.1)")
    times = list(range(latest + MINUTE, latest + past_ms, STEP_MS)) + [latest + past_ms]
    pub = ConfluentPublisher(settings)
    try:
        for ms in times:
            publish_envelope(pub, "mqcn", key, dict(envelope, arrival_time=ms))
    finally:
        pub.close()
    return times


def _latest_notification(settings, scan: int):
    """(arrival ms, key, envelope) of the latest notification whose body decodes, version 2 first."""
    from confluent_kafka import Consumer, TopicPartition
    topic = TOPICS["mqcn"]
    consumer = Consumer(settings.confluent(**{"group.id": "dirstream-clock", "enable.auto.commit": False}))
    best = {}
    try:
        for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            start = max(low, high - scan)
            if high <= start:
                continue
            consumer.assign([TopicPartition(topic, p, start)])
            for msg in _read_until(consumer, high - 1):
                candidate = _notification(msg)
                if candidate is not None:
                    version, arrival = candidate[0], candidate[1][0]
                    if version not in best or arrival > best[version][0]:
                        best[version] = candidate[1]
    finally:
        consumer.close()
    return best.get(2) or best.get(1)


def _read_until(consumer, last_offset: int, polls: int = 50):
    for _ in range(polls):
        batch = consumer.consume(500, 1.0)
        for msg in batch:
            if msg.error() is None:
                yield msg
                if msg.offset() >= last_offset:
                    return


def _notification(msg):
    try:
        envelope = decode_envelope(msg.value())
        version = decode("mqcn", envelope["body"]).version
    except (ValueError, WireError):
        return None
    return version, (millis(envelope["arrival_time"]), (msg.key() or b"").decode("utf-8"), envelope)
