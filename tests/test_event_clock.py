"""The notification query's source: --max-records caps the directory versions it reads too,
and the traffic is then released only up to the progress of the latest replication batch whose
versions all lie within what the micro-batch reads (a real broker; the reader's planning driven by hand)."""
import json
import random

import pytest
from confluent_kafka import Producer
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from producers.kafka import KafkaSettings, ensure_topics
from streaming.spark.event_clock import ArrivalIndex
from streaming.spark.kafka_offsets import flatten
from streaming.spark.kafka_source import KafkaStreamReader
from streaming.spark.pipeline import notification_source_options, source_options
from streaming.wire.envelope import encode_envelope, make_envelope
from streaming.wire.topics import OBJECTS_TOPIC, PROGRESS_TOPIC, TOPICS

T0 = 1_767_225_600_000
CN, SD, DSRP = TOPICS["mqcn"], TOPICS["mqsd"], TOPICS["mqdsrp"]
OBJECTS = 100
# (replication topic's processed end, versions topic's end) of each progress record, in order
PROGRESS = ((5, 40), (10, 100))


def _envelope(protocol: str, at_ms: int) -> bytes:
    return encode_envelope(make_envelope(protocol, b"\0" * 8, source_machine="s", destination_machine="d",
                                         destination_queue="q", sent_time=T0 + at_ms))


def _publish(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value, b"k")
    assert producer.flush(30) == 0


def _progress(ends: int, objects_end: int | None) -> bytes:
    record = {"query_id": "q", "batch_id": 0, "ends": {DSRP: {"0": ends}}}
    if objects_end is not None:
        record["objects_end"] = {OBJECTS_TOPIC: {"0": objects_end}}
    return json.dumps(record).encode()


def _topics(broker: str, legacy: bool = False) -> None:
    """The replication topic: a record a second; MQCN: every 0.5 s; MQSD: four; 100 versions; two
    progress records (after 5 replication records and 40 versions, after all of both)."""
    ensure_topics(KafkaSettings(broker), {t: 1 for t in (CN, SD, DSRP, OBJECTS_TOPIC, PROGRESS_TOPIC)})
    _publish(broker, DSRP, [_envelope("mqdsrp", i * 1000) for i in range(10)])
    _publish(broker, CN, [_envelope("mqcn", i * 500) for i in range(20)])
    _publish(broker, SD, [_envelope("mqsd", ms) for ms in (1000, 3000, 6000, 9000)])
    _publish(broker, OBJECTS_TOPIC, [b"{}"] * OBJECTS)
    _publish(broker, PROGRESS_TOPIC, [_progress(e, None if legacy else o) for e, o in PROGRESS])


def _reader(broker: str) -> KafkaStreamReader:
    opts = notification_source_options(source_options(broker), OBJECTS_TOPIC, PROGRESS_TOPIC, "q")
    return KafkaStreamReader({**opts, "decode": "envelope"})


def _plan(reader: KafkaStreamReader, begin: dict, limit) -> dict:
    start = {t: {"0": begin.get(t, 0)} for t in (CN, SD, OBJECTS_TOPIC)}
    return {t: o for (t, _), o in flatten(reader.latestOffset(start, limit)).items()}


def _released_through(objects_end: int) -> int | None:
    """The arrival time (ms after T0) the traffic may reach when the versions below objects_end are
    read: that of the latest progress record within them (None: nothing may be released)."""
    within = [ends for ends, objects in PROGRESS if objects <= objects_end]
    if not within:
        return None
    return None if within[-1] == 10 else within[-1] * 1000 - 1


def test_the_versions_are_capped_and_the_traffic_stops_at_a_progress_within_them(broker):
    _topics(broker)
    reader = _reader(broker)
    try:
        assert _plan(reader, {}, ReadAllAvailable()) == {CN: 20, SD: 4, OBJECTS_TOPIC: 100}
        assert _plan(reader, {}, ReadMaxRows(1000)) == {CN: 20, SD: 4, OBJECTS_TOPIC: 100}
        # 124 records behind, 60 read: 48 versions (the second record's 100 is not within them), so
        # the traffic stops at the first record's progress (the replication record of 5 s unread):
        # shares of 9 MQCN and 1 MQSD records, ending together at the MQSD record's 1 s
        assert _plan(reader, {}, ReadMaxRows(60)) == {CN: 3, SD: 1, OBJECTS_TOPIC: 48}
        # 24 versions: not even the first record's 40 are read: the traffic waits
        assert _plan(reader, {}, ReadMaxRows(30)) == {CN: 0, SD: 0, OBJECTS_TOPIC: 24}
        # the rest of the versions: the gate is open again
        assert _plan(reader, {OBJECTS_TOPIC: 48}, ReadMaxRows(80)) == {CN: 20, SD: 4, OBJECTS_TOPIC: 100}
    finally:
        reader.stop()


def test_a_progress_record_without_objects_end_leaves_the_versions_read_to_their_end(broker):
    _topics(broker, legacy=True)
    reader = _reader(broker)
    try:
        planned = _plan(reader, {}, ReadMaxRows(12))
        assert planned[OBJECTS_TOPIC] == OBJECTS
        assert planned[CN] + planned[SD] <= 12 and planned[CN] > 0
    finally:
        reader.stop()


@pytest.mark.parametrize("seed", range(3))
def test_every_capped_plan_stays_within_max_records_and_behind_the_versions_it_reads(broker, seed):
    """Random positions and caps: at most max_rows records (one more per partition at most, as every
    partition with a backlog moves), no traffic past what the versions read allow, and every plan
    moves forward."""
    _topics(broker)
    reader, index = _reader(broker), None
    rng = random.Random(seed)
    try:
        index = ArrivalIndex(reader.conf)
        for _ in range(12):
            objects_at = rng.randrange(0, OBJECTS)
            gate = _released_through(objects_at)
            cn_at = rng.randrange(0, 20 if gate is None else min(20, gate // 500 + 1))
            begin = {OBJECTS_TOPIC: objects_at, CN: cn_at, SD: 0}
            max_rows = rng.randrange(3, 130)
            plan = _plan(reader, begin, ReadMaxRows(max_rows))
            taken = {t: plan[t] - begin[t] for t in plan}
            assert sum(taken.values()) <= max_rows + len(plan), (begin, max_rows, plan)
            assert all(n >= 0 for n in taken.values()) and sum(taken.values()) > 0, (begin, max_rows, plan)
            allowed = _released_through(plan[OBJECTS_TOPIC])
            for topic in (CN, SD):
                if plan[topic] > begin[topic] and allowed is not None:
                    last = index.arrival_at((topic, 0), plan[topic] - 1) - T0
                    assert last <= allowed, (topic, begin, max_rows, plan)
                if allowed is None and plan[OBJECTS_TOPIC] < PROGRESS[0][1]:
                    assert plan[topic] == begin[topic], (topic, begin, max_rows, plan)
    finally:
        reader.stop()
        if index is not None:
            index.close()


def test_the_replication_writers_progress_record_holds_the_versions_end(broker, tmp_path):
    """Written once the batch's versions are confirmed: the processed ends (Spark's offset log) and
    the versions topic's end, which the notification source compares with what it reads."""
    from streaming.spark.replication_query import ReplicationWriter
    ensure_topics(KafkaSettings(broker), {OBJECTS_TOPIC: 1})
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "3").write_text('v1\n{"batchWatermarkMs":0}\n{"%s":{"0":7}}\n' % DSRP)
    objects = {"topic": OBJECTS_TOPIC, "progress_topic": PROGRESS_TOPIC, "kafka": {"bootstrap.servers": broker}}
    writer = ReplicationWriter("sqlite:///unused.db", "q", lambda *_: None, None, objects, str(tmp_path))
    writer.batch_id = 3
    for published in (25, 40):
        writer._publish(objects, [(b"{}", b"qm")] * (published - (25 if published == 40 else 0)))
        record = json.loads(writer._progress_record()[0])
        assert record == {"query_id": "q", "batch_id": 3, "ends": {DSRP: {"0": 7}},
                          "objects_end": {OBJECTS_TOPIC: {"0": published}}}
