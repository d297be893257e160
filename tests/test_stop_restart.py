"""A stop and a restart never make a row late that the job running on would have accepted.

One partition (the MQDSRP topic's) reaches Kafka behind the others, as a producer holding its
records for a moment does: the first micro-batch finds the other topics' records up to the end of
the traffic and the MQDSRP records only up to its middle. The job runs on (the control: the rest
of the MQDSRP records reach Kafka while that batch is written, the next batch reads them), or is
stopped after that batch (its no-data micro-batch runs: the stop file) and restarted once the rest
is in Kafka. The real broker and the real query, in the tests' Spark session; the test drives the
cuts from the writer. Either way no row is dropped as late and every table comes out the same."""
import os
import time

from job_runs import dump, differences
from producers.kafka import ConfluentPublisher, KafkaSettings, ensure_topics
from producers.publish import publish_envelope
from producers.simulator import Simulator
from streaming.wire.envelope import millis
from streaming.wire.topics import TOPICS

WATERMARK_DELAY_MS = 10_000


def _traffic(count: int = 900):
    """The simulated messages split where the MQDSRP partition falls behind: (first, rest), rest
    being only MQDSRP messages, many of them older than the first part's newest by more than the
    watermark delay."""
    messages = list(Simulator(seed=5).messages(count))
    times = [millis(m.envelope["arrival_time"]) for m in messages]
    cut = times[len(times) // 2]
    first = [m for m, t in zip(messages, times) if m.protocol != "mqdsrp" or t <= cut]
    rest = [m for m, t in zip(messages, times) if m.protocol == "mqdsrp" and t > cut]
    behind = [t for m, t in zip(messages, times) if m.protocol == "mqdsrp" and cut < t < times[-1] - WATERMARK_DELAY_MS]
    assert len(behind) > 20, "the traffic must hold MQDSRP records the others' records would make late"
    return first, rest


def _publish(broker: str, messages) -> None:
    pub = ConfluentPublisher(KafkaSettings(broker))
    for m in messages:
        publish_envelope(pub, m.protocol, m.key, m.envelope)
    pub.close()


class _Writes:
    """The writer's observer: counts the micro-batches written and runs a step after the first
    batch that read records (inside foreachBatch: before the next micro-batch is planned)."""

    def __init__(self, after_first_data):
        self.after_first_data, self.batches, self.rows = after_first_data, [], 0

    def batch(self, _query, batch_id, progress, _counts, _dead) -> None:
        self.batches.append((batch_id, progress["input_rows"]))
        self.rows += progress["input_rows"]
        if progress["input_rows"] and self.after_first_data is not None:
            step, self.after_first_data = self.after_first_data, None
            step()

    def progress(self, _row) -> None:
        pass


def _late_rows(query) -> int:
    return sum(op.get("numRowsDroppedByWatermark", 0) for p in query.recentProgress for op in p.get("stateOperators", []))


def _start(spark, broker, sink, checkpoint, stop_file, observer):
    from streaming.operators.notifications import Settings
    from streaming.spark.job_query import start_job_query
    from streaming.spark.pipeline import source_options
    opts = {**source_options(broker), "stopFile": str(stop_file)}
    return start_job_query(spark, sink_url=sink, checkpoint=str(checkpoint), source_opts=opts, settings=Settings(),
                           trigger="200ms", echo=lambda _l: None, pec_name="pec0", outbound_topic=None,
                           observer=observer)


def _wait(condition, what: str, query, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _drained(query, writes, total: int):
    """Every record read and the query idle (no batch in flight)."""
    return lambda: writes.rows >= total and not query.status.get("isTriggerActive")


def _run_on(spark, broker, tmp_path, first, rest) -> tuple[int, dict]:
    _publish(broker, first)
    writes = _Writes(lambda: _publish(broker, rest))
    query = _start(spark, broker, f"sqlite:///{tmp_path}/ran-on.db", tmp_path / "c_ran_on", tmp_path / "none", writes)
    try:
        _wait(_drained(query, writes, len(first) + len(rest)), "the job to read everything", query)
        time.sleep(1.0)
    finally:
        query.stop()
    return _late_rows(query), dump(f"sqlite:///{tmp_path}/ran-on.db")


def _stopped_and_restarted(spark, broker, tmp_path, first, rest) -> tuple[int, dict]:
    sink, checkpoint, stop_file = f"sqlite:///{tmp_path}/restarted.db", tmp_path / "c_restarted", tmp_path / "stop"
    _publish(broker, first)
    writes = _Writes(lambda: stop_file.touch())
    query = _start(spark, broker, sink, checkpoint, stop_file, writes)
    try:
        # the stop: no new records are planned; the watermark moved, so Spark runs a no-data batch
        _wait(lambda: len(writes.batches) >= 2, "the stop's no-data micro-batch", query, timeout=120)
        assert writes.rows <= len(first)
    finally:
        query.stop()
    _publish(broker, rest)
    os.remove(stop_file)
    again = _Writes(None)
    again.rows = writes.rows
    query2 = _start(spark, broker, sink, checkpoint, stop_file, again)
    try:
        _wait(_drained(query2, again, len(first) + len(rest)), "the restarted job to read everything", query2)
        time.sleep(1.0)
    finally:
        query2.stop()
    return _late_rows(query) + _late_rows(query2), dump(sink)


def test_a_stop_and_restart_make_no_row_late_that_running_on_accepts(spark, broker, tmp_path):
    from conftest import delete_user_topics
    first, rest = _traffic()
    ensure_topics(KafkaSettings(broker), {t: 1 for t in TOPICS.values()})
    late_running_on, ran_on = _run_on(spark, broker, tmp_path, first, rest)
    assert late_running_on == 0

    delete_user_topics(broker)               # the same records again, at the same offsets
    ensure_topics(KafkaSettings(broker), {t: 1 for t in TOPICS.values()})
    late_restarted, restarted = _stopped_and_restarted(spark, broker, tmp_path, first, rest)
    assert late_restarted == 0, f"{late_restarted} rows dropped as late after the stop and restart"
    assert differences(ran_on, restarted) == []


def _notifications_behind_the_watermark(count: int = 900):
    """(first, rest): rest holds the MQCN messages after the middle of the traffic, first everything
    else, the quiet tail included: once the job has read first, its watermark is past every message
    of rest, by minutes."""
    messages = list(Simulator(seed=5).messages(count))
    times = [millis(m.envelope["arrival_time"]) for m in messages]
    cut = times[len(times) // 2]
    rest = [m for m, t in zip(messages, times) if m.protocol == "mqcn" and t > cut]
    first = [m for m, t in zip(messages, times) if m.protocol != "mqcn" or t <= cut]
    assert len(rest) > 50 and max(millis(m.envelope["arrival_time"]) for m in rest) < times[-1] - 60_000
    return first, rest


def test_records_behind_the_watermark_are_taken_not_dropped(spark, broker, tmp_path):
    """A partition brings records older than what the job has read, by minutes (a producer that
    held them, a second run's traffic dated earlier): every one reaches its operator (a
    notifications row or a dead letter for each MQCN message) and no row is dropped as late."""
    import sqlite3
    from conftest import delete_user_topics
    delete_user_topics(broker)
    ensure_topics(KafkaSettings(broker), {t: 1 for t in TOPICS.values()})
    first, rest = _notifications_behind_the_watermark()
    _publish(broker, first)
    writes = _Writes(None)
    db = tmp_path / "behind.db"
    query = _start(spark, broker, f"sqlite:///{db}", tmp_path / "c_behind", tmp_path / "none", writes)
    try:
        _wait(_drained(query, writes, len(first)), "the job to read the first part", query)
        # the watermark moves past the first part's records in the no-data micro-batch after the one
        # that read them (200 ms later)
        _wait(lambda: query.lastProgress and query.lastProgress.get("numInputRows") == 0
              and int(query.lastProgress.get("eventTime", {}).get("watermark", "1970")[:4]) > 2000,
              "the watermark to move past the first part", query, timeout=120)
        _publish(broker, rest)
        _wait(_drained(query, writes, len(first) + len(rest)), "the job to read the late part", query)
        time.sleep(1.0)
    finally:
        query.stop()
    assert _late_rows(query) == 0
    with sqlite3.connect(db) as con:
        taken = {r[0] for r in con.execute("SELECT message_id FROM notifications UNION "
                                           "SELECT message_id FROM dead_letters")}
    missing = [m.envelope["message_id"] for m in rest if m.envelope["message_id"] not in taken]
    assert missing == [], f"{len(missing)} of {len(rest)} notifications behind the watermark were lost"
