"""MQCN change notifications as a stateful streaming operator: transformWithStateInPandas keyed by
the queue manager (the GUID in its NOTIFY_QUEUE_PRIVATE), driven by the sans-IO queue manager in
streaming/operators/notifications.py.

Inputs (the job's second operator, streaming/spark/job_query.py): the notifications and the
directory as the MQDSRP replicas hold it (every version the replication operator derived, keyed by
the owning queue manager), both from the first operator of the same micro-batch.

Each queue manager applies its input in event-time order, whatever the micro-batching: rows wait in
its state until the watermark passes them, then are applied in order, the timers due before each
row firing first (a read "as of" a time then sees exactly the versions dated up to it).
"""
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from pyspark.sql.types import BinaryType, StructField, StructType

from .stateful import dead_letter, replace_timers, timer_dead_letter, typed_frame
from ..operators.notification_input import DIRECTORY, DIRECTORY_VERSIONS, ROW_FIELDS, Row, advance, unpack_versions
from ..operators.notification_rows import step_rows
from ..operators.notifications import QueueManager, Settings
from .qm_store import QueueManagerStore

__all__ = ["input_rows", "NotificationProcessor", "STAGE"]

STAGE = "operator:notifications"


class NotificationProcessor(StatefulProcessor):
    def __init__(self, settings: Settings):
        self.settings = settings

    def init(self, handle) -> None:
        self.handle = handle
        # a queue manager's state whole, as earlier versions stored it (read once: streaming.spark.qm_store);
        # the server registry's key keeps its own state in it
        self.state = handle.getValueState("queue_manager", StructType([StructField("state", BinaryType())]))
        self.store = QueueManagerStore(handle, self.state)

    def handleInputRows(self, key, rows, timerValues):
        self.fired_ms = None
        watermark = timerValues.getCurrentWatermarkInMs()
        loaded, ready = self.store.load(key[0], watermark, input_rows(rows))
        yield from self._advance(key[0], loaded, ready, watermark)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        self.fired_ms = expiredTimerInfo.getExpiryTimeInMs()          # Spark removes it itself
        watermark = timerValues.getCurrentWatermarkInMs()
        try:
            loaded, ready = self.store.load(key[0], watermark, [])
            yield from self._advance(key[0], loaded, ready, watermark)
        except Exception as exc:          # noqa: BLE001 -- a timer no message is to blame for: nothing is saved
            replace_timers(self.handle, None, self.fired_ms)
            row = timer_dead_letter(STAGE, "mqcn", key[0], expiredTimerInfo.getExpiryTimeInMs(), exc)
            yield typed_frame([row])

    def _advance(self, key: str, loaded, ready: list[Row], watermark_ms: int):
        def load() -> QueueManager:                  # again after a poison message: as stored
            st, history = loaded.queue_manager_parts(key)
            return QueueManager(st, self.settings, history)
        qm, bad_rows, bad_pending = advance(load, ready, watermark_ms)
        qm.forget_versions(watermark_ms)
        dead = [dead_letter(STAGE, "mqcn" if row.kind != DIRECTORY else DIRECTORY, row, exc) for row, exc in bad_rows]
        dead += [dead_letter(STAGE, "mqcn", _Origin(n), exc) for n, exc in bad_pending]
        rows = step_rows(qm) + dead
        waiting_ms = self.store.save(loaded, qm.state, watermark_ms)
        due = [t for t in (qm.next_timer_ms(), waiting_ms) if t is not None]
        replace_timers(self.handle, min(due) if due else None, self.fired_ms)
        if rows:                            # typed chunks: a few binary rows to the driver, not one per row
            yield typed_frame(rows)

    def close(self) -> None:
        pass


def input_rows(frames) -> list[Row]:
    """A key's input (the pandas frames Spark hands over) as Rows of plain Python values, picklable
    without numpy and comparable: a column at a time, without concatenating the frames or reading
    them a cell at a time through pandas."""
    rows: list[Row] = []
    for frame in frames:
        present = [name for name in ROW_FIELDS if name in frame]     # capture: absent from older frames
        columns = [_plain_column(frame[name]) for name in present]
        if DIRECTORY_VERSIONS not in columns[present.index("kind")]:
            rows.extend(Row(*values) for values in zip(*columns))
            continue
        for values in zip(*columns):
            if values[_KIND] == DIRECTORY_VERSIONS:
                rows.extend(unpack_versions(values[_BODY]))
            else:
                rows.append(Row(*values))
    return rows


_KIND, _BODY = ROW_FIELDS.index("kind"), ROW_FIELDS.index("body")     # always present, in this order


def _plain_column(series) -> list:
    """Every number of a Row is an integer: a column with nulls comes as floats (NaN for null), made
    ints again, so that a value is the same whatever the chunk it came in."""
    values = series.tolist()                # Python scalars
    if series.dtype.kind == "f":
        return [None if v != v else int(v) for v in values]
    return values


class _Origin:
    """A pending notification's Kafka coordinates and body, as a dead letter wants them."""

    def __init__(self, n):
        self.topic, self.partition, self.offset, self.body = n.origin[:4]
        self.message_id, self.arrival_ms, self.source_machine = n.message_id, n.arrival_ms, n.source
