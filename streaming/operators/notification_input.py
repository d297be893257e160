"""The order a queue manager takes its input in, whatever the micro-batching (sans-IO).

Rows (notifications and directory versions) wait until the event-time clock (the watermark) passes
them, then are applied in event-time order, each after the timers due before it, and the timers due
by the clock fire last. A read "as of" a time then sees exactly the versions dated up to it, and a
micro-batch boundary changes nothing. The Spark adapter (streaming/spark/notification_query.py) and
the offline harness of the tests both drive the queue manager through `advance`.
"""
import json
import struct
from typing import Any, NamedTuple

from ..wire import WireError, decode
from .notification_rows import directory_version
from .notifications import QueueManager, notification_from

__all__ = ["advance", "apply_row", "DIRECTORY", "directory_row", "DIRECTORY_VERSIONS", "order", "pack_versions",
           "Row", "ROW_FIELDS", "split", "unpack_versions"]



class Row(NamedTuple):
    """One input row of a queue manager. Typed Any: the Spark adapter builds rows from pandas columns
    (numpy integers among them), which the compiled build would refuse as int."""
    event_ms: Any
    kind: Any
    topic: Any
    partition: Any
    offset: Any
    body: Any
    message_id: Any
    sender_identifier_type: Any
    authentication_level: Any
    source_machine: Any
    destination_machine: Any
    destination_queue: Any
    # a capture producer's position of the message (a Kafka header); None in rows a state stored
    # before it was carried
    capture: Any = None


ROW_FIELDS = Row._fields
DIRECTORY = "directory"
# Many directory versions for one queue manager in one input row: (event_ms, body) pairs, each an
# int64 and a uint32 length (little-endian) before the body. A version a row of its own cost the
# job's two operators more than applying it did (a pandas and an Arrow conversion of every column,
# and a shuffle row each); unpacked, each is the Row it would have been.
DIRECTORY_VERSIONS = "directory versions"
_VERSION_HEAD = struct.Struct("<qI")


def directory_row(version_row: dict, body: bytes | None = None) -> Row:
    """A directory version (a directory_objects row of the replication operator) as an input row."""
    from .notification_rows import version_event_ms
    body = body if body is not None else json.dumps(version_row, default=str).encode()
    return Row(version_event_ms(version_row), DIRECTORY, None, None, None, body, None, None, None, None, None, None)


def pack_versions(versions) -> bytes:
    """(event_ms, body bytes) pairs as one DIRECTORY_VERSIONS body."""
    head = _VERSION_HEAD.pack
    return b"".join(head(ms, len(body)) + body for ms, body in versions)


def unpack_versions(packed: bytes) -> list[Row]:
    """A DIRECTORY_VERSIONS body as the DIRECTORY rows packed in it, in order."""
    rows, pos, size, unpack = [], 0, _VERSION_HEAD.size, _VERSION_HEAD.unpack_from
    while pos < len(packed):
        ms, length = unpack(packed, pos)
        pos += size
        rows.append(Row(ms, DIRECTORY, None, None, None, packed[pos:pos + length], None, None, None, None, None, None))
        pos += length
    return rows


def split(held: list[Row], watermark_ms: int) -> tuple[list[Row], list[Row]]:
    """(rows the clock has passed, in the order they apply in; rows still waiting)."""
    return sorted((r for r in held if r.event_ms <= watermark_ms), key=order), \
        [r for r in held if r.event_ms > watermark_ms]


def order(row: Row) -> tuple:
    """Event time; at one time the directory versions first (a read as of a time sees the versions
    dated then), ordered by content (their offsets depend on the replication query's batching),
    then the notifications in Kafka order."""
    if row.kind == DIRECTORY:
        return row.event_ms, 0, bytes(row.body), 0, 0
    return row.event_ms, 1, (row.topic or "").encode(), row.partition or 0, row.offset or 0


def advance(load, ready: list[Row], watermark_ms: int):
    """Applies the rows (in order) to the queue manager load() builds, each after the timers due
    before it, then the timers due by the watermark. A message that raises, as a row or as a pending
    notification while a timer fires, is left out and everything is applied again from a fresh
    load(), so the state is as if it had never come. Returns (queue manager, [(row, exception)],
    [(pending notification, exception)])."""
    bad_rows: dict[int, Exception] = {}
    bad_pending: dict[str, tuple] = {}
    while True:
        qm, step = load(), None
        if bad_pending:
            qm.leave_out(bad_pending)
        try:
            for i, row in enumerate(ready):
                if i in bad_rows:
                    continue
                step, qm.current = None, None
                qm.on_timer(row.event_ms - 1, forget=False)
                step = i
                apply_row(qm, row, bad_pending)
            step, qm.current = None, None
            qm.on_timer(watermark_ms)
            return qm, [(ready[i], exc) for i, exc in sorted(bad_rows.items())], list(bad_pending.values())
        except Exception as exc:          # noqa: BLE001 -- any exception: the message is the poison
            culprit = qm.current
            if step is not None:
                bad_rows[step] = exc
            elif culprit is not None and culprit.message_id not in bad_pending:
                bad_pending[culprit.message_id] = (culprit, exc)
            else:
                raise


def apply_row(qm: QueueManager, row: Row, skip=()) -> None:
    if row.kind == DIRECTORY:
        routed = directory_version(json.loads(bytes(row.body)))
        if routed:
            qm.directory_object(routed[1], routed[2])
        return
    try:
        msg = decode("mqcn", bytes(row.body))
    except WireError:
        return                              # a dead letter, recorded by the raw query
    n = notification_from(msg, message_id=row.message_id, arrival_ms=int(row.event_ms),
                          sender_identifier_type=row.sender_identifier_type,
                          authentication_level=row.authentication_level, source=row.source_machine,
                          destination_queue=row.destination_queue)
    n.origin = (row.topic, row.partition, row.offset, bytes(row.body), row.capture)
    if row.message_id in skip:
        # found poison while a timer fired: never taken in again; but it arrived, as it did for a
        # batching that received it in an earlier micro-batch (the findings stay the same)
        qm.look_for_findings(n)
        return
    qm.current = n
    qm.receive(n, row.destination_machine)
