"""The streaming job on the real embedded broker, with real SQLite and PostgreSQL sinks."""
import json
import os
import subprocess
import time

import pytest
from conftest import resident_kb, simulate
from job_runs import bare_job, output, run_once, sink_totals, wait_for_rows

from producers.kafka import ConfluentPublisher, KafkaSettings, ensure_topics
from streaming.wire.envelope import encode_envelope, make_envelope
from streaming.spark.operator_counts import task_balance
from streaming.spark.pipeline import source_options, start_query
from streaming.sinks import open_sink
from streaming.wire.topics import TOPICS
from streaming.wire import encode, mqcn


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_simulated_run_counts_every_message_once(spark, broker, tmp_path, backend, request):
    summary, truth = simulate(broker, tmp_path, "--seed", "7", "--count", "3000", "--corrupt", "0.02",
                              "--duplicate", "0.01", "--reorder", "0.1")
    url = f"sqlite:///{tmp_path}/sink.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
    query = run_once(spark, broker, url, tmp_path / "ckpt")
    assert query.exception() is None
    totals = sink_totals(url)
    assert totals["rows"] == summary["published"]
    assert totals["seen"] == summary["per_protocol"]
    expected = {d["message_id"] for d in truth["dead_letters"]}
    assert expected and {d["message_id"] for d in totals["dead_letters"]} == expected
    assert totals["dead"] == len(expected)
    for d in totals["dead_letters"]:
        assert d["error_reason"] and d["error_structure"] and d["error_field"] and d["raw_value"]
    # Nothing new: a second --once run adds no rows and changes no counts.
    assert run_once(spark, broker, url, tmp_path / "ckpt").exception() is None
    again = sink_totals(url)
    assert (again["rows"], again["seen"], len(again["dead_letters"])) == (
        totals["rows"], totals["seen"], len(totals["dead_letters"]))


def test_the_operator_counts_follow_every_row_across_the_seam_and_count_the_state_calls(spark, broker, tmp_path,
                                                                                          operator_counts):
    """What bench_whole_job prints: the session's workers count (the spark fixture turns it on)."""
    from job_runs import once_in_session
    from streaming.spark.operator_counts import read_counts
    summary, _truth = simulate(broker, tmp_path, "--seed", "3", "--count", "1500")
    for old in operator_counts.iterdir():
        old.unlink()
    once_in_session(spark, broker, f"sqlite:///{tmp_path}/sink.db", tmp_path / "ckpt")
    counts = read_counts(str(operator_counts))
    assert set(counts) == {"first operator", "second operator"}, counts
    first, second = counts["first operator"], counts["second operator"]
    # every record read reaches the first operator, with one summary row per reading task (a few)
    assert summary["published"] < first["rows in"] < summary["published"] + 200, (first, summary)
    assert first["rows out"] == second["rows in"] > 0          # every row it yields crosses to the second
    assert first["keys"] >= 4 and second["keys"] >= 2            # replicas, requests, senders; queue managers
    for c in (first, second):
        calls = c["calls"]
        assert calls["ValueStateClient.get"] >= 1 and calls["StatefulProcessorApiClient.set_implicit_key"] >= c["keys"]
        assert sum(calls.values()) > 2 * c["keys"]
        assert c["bytes to the state server"] > 10 * sum(calls.values())
    # the queue managers hold each row in their state until the watermark passes it
    assert second["bytes to the state server"] > 100 * second["rows in"], second
    # each task says which micro-batch and shuffle partition it ran: its rows are the operator's, split
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    for c in (first, second):
        assert sum(rows for *_task, rows in c["task_rows"]) == c["rows in"]
        assert all(batch is not None and 0 <= partition < partitions for batch, _s, partition, _r in c["task_rows"])
        assert task_balance(c["task_rows"], partitions)["largest_to_mean"] >= 1.0


def test_task_balance_weighs_each_micro_batchs_largest_task_against_its_mean():
    # batch 0: 300 and 100 rows (1.5); batch 1: one partition of two got all 100 rows (2.0)
    balance = task_balance([("0", 5, 0, 300), ("0", 5, 1, 100), ("1", 9, 1, 100)], partitions=2)
    assert balance["largest_to_mean"] == (1.5 * 400 + 2.0 * 100) / 500
    assert (balance["worst_batch"], balance["worst_ratio"], balance["worst_rows"]) == ("1", 2.0, [100, 0])
    assert task_balance([("0", 5, 0, 0)], partitions=2) is None


def test_nothing_is_counted_unless_asked(monkeypatch):
    from streaming.spark.operator_counts import COUNTS_ENV, start_counting
    monkeypatch.delenv(COUNTS_ENV, raising=False)
    assert start_counting("first operator", object(), object()) is None


def _publish_raw(bootstrap: str, topic: str, values: list[bytes]) -> None:
    pub = ConfluentPublisher(KafkaSettings(bootstrap, {"message.max.bytes": "20000000"}))
    for i, v in enumerate(values):
        pub.send(topic, f"host{i}".encode(), v, [])
    pub.close()


def _env(protocol: str, body: bytes) -> bytes:
    return encode_envelope(make_envelope(protocol, body, source_machine="a", destination_machine="qm1",
                                         destination_queue="q", sent_time=1_767_225_600_000))


def test_bad_records_become_dead_letters_and_good_ones_go_on(spark, broker, tmp_path):
    ensure_topics(KafkaSettings(broker), {t: 1 for t in TOPICS.values()})
    good = _env("mqcn", encode("mqcn", mqcn.new_v2(1, "11223344-5566-7788-99aa-bbccddeeff00", "DC1")))
    values = [good,
              b"\x01\x00\x00\x00\x01garbage",                                     # corrupted envelope (magic)
              b"",                                                                 # empty value
              _env("mqcn", bytes.fromhex("00010000") + bytes(48)),                 # an MQSD body inside MQCN
              _env("mqsd", encode("mqcn", mqcn.new_v2(2, "11223344-5566-7788-99aa-bbccddeeff00", "DC1"))),
              _env("mqcn", b"\x02\x01" + os.urandom(10 * 1024 * 1024)),           # a 10 MB value
              good]
    _publish_raw(broker, TOPICS["mqcn"], values)
    url = f"sqlite:///{tmp_path}/sink.db"
    assert run_once(spark, broker, url, tmp_path / "ckpt").exception() is None
    totals = sink_totals(url)
    assert totals["rows"] == 7 and totals["dead"] == 5 and totals["seen"] == {"mqcn": 7}
    by_offset = {d["kafka_offset"]: d for d in totals["dead_letters"]}
    assert sorted(by_offset) == [1, 2, 3, 4, 5]
    assert by_offset[1]["error_field"] == "(magic)" and "magic byte" in by_offset[1]["error_reason"]
    assert by_offset[2]["error_field"] == "(frame)" and "0 bytes" in by_offset[2]["error_reason"]
    assert (by_offset[3]["error_structure"], by_offset[3]["error_field"]) == ("ChangeNotificationMessage", "Version")
    assert "topic msmq.cn.raw carries MQCN" in by_offset[4]["error_reason"]
    assert len(by_offset[5]["raw_value"]) > 10 * 1024 * 1024
    assert by_offset[5]["error_structure"] == "NotificationBody"


def test_missing_topic_fails_with_a_clear_message(spark, broker, tmp_path):
    query = run_once(spark, broker, f"sqlite:///{tmp_path}/sink.db", tmp_path / "ckpt", topics=["no.such.topic"])
    assert "no.such.topic do not exist" in str(query.exception())


def test_starting_offsets_and_admission_control(spark, broker, tmp_path):
    ensure_topics(KafkaSettings(broker), {t: 2 for t in TOPICS.values()})
    good = _env("mqcn", encode("mqcn", mqcn.new_v2(1, "11223344-5566-7788-99aa-bbccddeeff00", "DC1")))
    _publish_raw(broker, TOPICS["mqcn"], [good] * 1000)
    latest = f"sqlite:///{tmp_path}/latest.db"
    assert run_once(spark, broker, latest, tmp_path / "c1", starting_offsets="latest").exception() is None
    assert sink_totals(latest)["rows"] == 0
    capped = f"sqlite:///{tmp_path}/capped.db"
    assert run_once(spark, broker, capped, tmp_path / "c2", max_records=150).exception() is None
    totals = sink_totals(capped)
    assert totals["rows"] == 1000 and totals["batches"] >= 7
    given = f"sqlite:///{tmp_path}/given.db"
    start = json.dumps({TOPICS["mqcn"]: {"0": 0, "1": 0}, TOPICS["mqsd"]: {"0": 0, "1": 0},
                        TOPICS["mqdsrp"]: {"0": 0, "1": 0}})
    assert run_once(spark, broker, given, tmp_path / "c3", starting_offsets=start).exception() is None
    assert sink_totals(given)["rows"] == 1000


def test_new_topics_matching_the_pattern_are_picked_up(spark, broker, tmp_path):
    settings = KafkaSettings(broker)
    ensure_topics(settings, {"msmq.sd.raw": 1})
    good = _env("mqsd", bytes.fromhex("00010000") + bytes(48))
    _publish_raw(broker, "msmq.sd.raw", [good] * 10)
    url = f"sqlite:///{tmp_path}/sink.db"
    query = start_query(spark, sink_url=url, checkpoint=str(tmp_path / "ckpt"), trigger="500ms",
                        echo=lambda _l: None, source_opts={**source_options(broker), "topics": "",
                                                           "topicPattern": r"msmq\.sd\..*"} | {})
    try:
        wait_for_rows(url, 10)
        ensure_topics(settings, {"msmq.sd.extra": 2})
        _publish_raw(broker, "msmq.sd.extra", [good] * 25)
        wait_for_rows(url, 35)
    finally:
        query.stop()
    assert sink_totals(url)["rows"] == 35


def test_recreated_topic_fails_or_skips_counting(spark, broker, tmp_path):
    from confluent_kafka.admin import AdminClient
    settings = KafkaSettings(broker)
    ensure_topics(settings, {t: 1 for t in TOPICS.values()})
    good = _env("mqsd", bytes.fromhex("00010000") + bytes(48))
    _publish_raw(broker, TOPICS["mqsd"], [good] * 100)
    url, ckpt = f"sqlite:///{tmp_path}/sink.db", tmp_path / "ckpt"
    opts = dict(data_loss_log=str(tmp_path / "skipped.jsonl"))
    assert run_once(spark, broker, url, ckpt, **opts).exception() is None
    admin = AdminClient({"bootstrap.servers": broker})
    [f.result() for f in admin.delete_topics([TOPICS["mqsd"]]).values()]
    time.sleep(0.5)
    ensure_topics(settings, {TOPICS["mqsd"]: 1})
    _publish_raw(broker, TOPICS["mqsd"], [good] * 10)
    failed = run_once(spark, broker, url, ckpt, **opts)
    assert "was recreated or truncated" in str(failed.exception())
    assert run_once(spark, broker, url, ckpt, fail_on_data_loss=False, **opts).exception() is None
    _publish_raw(broker, TOPICS["mqsd"], [good] * 150)
    assert run_once(spark, broker, url, ckpt, fail_on_data_loss=False, **opts).exception() is None
    s = open_sink(url)
    assert s.query("SELECT MAX(skipped_offsets) AS s FROM pipeline_progress WHERE query_name = 'dirstream'")[0]["s"] == 100
    assert sink_totals(url)["rows"] == 100 + 60          # offsets 100..159 of the new topic


# ---------------------------------------------------------------------------- restarts
def test_ctrl_c_stops_a_job_with_a_backlog_after_the_batch_in_flight(broker, tmp_path):
    """A query with a backlog runs its micro-batches back to back, so it is hardly ever seen between
    two: Ctrl-C (the stop file, kafka_source option stopFile) lets no new batch start, and the job
    stops after the batches in flight instead of once it has read everything (the short soak's job
    read on for two minutes after Ctrl-C). Restarted, it reads the rest exactly once."""
    import signal
    import uuid
    topic = f"backlog-{uuid.uuid4().hex[:8]}"
    ensure_topics(KafkaSettings(broker), {topic: 1})
    records = 60_000
    _publish_raw(broker, topic, [_env("mqsd", bytes.fromhex("00010000") + bytes(48))] * records)
    url, ckpt = f"sqlite:///{tmp_path}/sink.db", tmp_path / "ckpt"
    job = bare_job(broker, url, ckpt, "--topics", topic, "--max-records", "100", "--trigger", "10ms")
    try:
        wait_for_rows(url, 500, timeout=600)
        job.send_signal(signal.SIGINT)
        assert job.wait(600) == 0, output(job)[-5000:]
    finally:
        if job.poll() is None:
            job.kill()
    read = sink_totals(url)["rows"]
    assert 500 <= read < records / 4, f"{read} of {records} records read after Ctrl-C: {output(job)[-5000:]}"
    rest = bare_job(broker, url, ckpt, "--topics", topic, "--once")
    assert rest.wait(600) == 0, output(rest)[-5000:]
    assert sink_totals(url)["rows"] == records


def test_envelope_only_decoding_leaves_the_body_to_its_operator():
    """decode=envelope: a bad body still passes (the raw query makes it a dead letter; the operator
    skips it), a bad envelope does not."""
    from streaming.spark.decode import DECODED_FIELDS, Decoder
    names = [n for n, _ in DECODED_FIELDS]
    good = _env("mqdsrp", b"\x07" + bytes(17))          # Version 7: no such layout
    row = dict(zip(names, Decoder(body=False).row(TOPICS["mqdsrp"], 0, 1, None, b"k", good)))
    assert row["ok"] and row["kind"] is None and row["body"] == b"\x07" + bytes(17) and row["state_key"] == "qm1"
    full = dict(zip(names, Decoder().row(TOPICS["mqdsrp"], 0, 1, None, b"k", good)))
    assert not full["ok"] and full["error_field"] == "Version"
    bad = dict(zip(names, Decoder(body=False).row(TOPICS["mqdsrp"], 0, 2, None, b"k", b"xx")))
    assert not bad["ok"]


# ---------------------------------------------------------------------------- summary decoding
def _records_with_faults(n: int = 3000):
    """(topic, [(offset, ts, key, value)]) per raw topic: simulated traffic with corrupted records."""
    from producers.simulator import Faults, Simulator
    from streaming.wire.envelope import encode_envelope
    by_topic: dict[str, list] = {t: [] for t in TOPICS.values()}
    for m in Simulator(seed=11, faults=Faults(corrupt=0.05)).messages(n):
        records = by_topic[TOPICS[m.protocol]]
        records.append((len(records), 1_767_225_600_000_000 + 1000 * len(records), m.key.encode(),
                         encode_envelope(m.envelope)))
    for records in by_topic.values():           # bad values the simulator does not make
        records += [(len(records), None, None, b""), (len(records) + 1, 0, b"k", b"\x00\x00\x00\x00\x01\xff")]
    return by_topic


def test_summary_decoding_counts_what_per_record_decoding_counts():
    """decode=summary (the raw query) against decode=true rows aggregated as the per-record path does."""
    from streaming.spark.decode import DECODED_FIELDS, SUMMARY_FIELDS, Decoder, summarize_records
    names, summary_names = [n for n, _ in DECODED_FIELDS], [n for n, _ in SUMMARY_FIELDS]
    for topic, records in _records_with_faults().items():
        rows = [dict(zip(names, Decoder().row(topic, 3, o, ts, k, v))) for o, ts, k, v in records]
        expected_seen: dict = {}
        for r in rows:
            when = r["arrival_time"] if r["arrival_time"] is not None else r["kafka_timestamp"]
            group = (r["protocol"] or "(unknown)", r["destination_machine"] or r["key"] or "(unknown)",
                     None if when is None else when - when % 60_000_000)
            counts = expected_seen.setdefault(group, [0, 0])
            counts[0] += 1
            counts[1] += not r["ok"]
        summary = [dict(zip(summary_names, row)) for row in zip(*(
            c.to_pylist() for c in summarize_records(topic, 3, iter(records)).columns))]
        (partition,) = [s for s in summary if s["row_type"] == "partition"]
        dead = [s for s in summary if s["row_type"] == "dead"]
        assert (partition["messages"], partition["offset"]) == (len(records), len(records) - 1)
        assert partition["dead_letters"] == len(dead) == sum(not r["ok"] for r in rows) >= 2
        seen = {(s["protocol"], s["server"], s["minute"] and int(s["minute"].timestamp() * 1_000_000)):
                [s["messages"], s["dead_letters"]] for s in summary if s["row_type"] == "seen"}
        assert seen == expected_seen
        bad = [r for r in rows if not r["ok"]]
        assert [(d["offset"], d["error_field"], d["error_reason"], d["raw_value"], d["kafka_key"]) for d in dead] == \
            [(r["offset"], r["error_field"], r["error_reason"], r["raw_value"], r["key"]) for r in bad]


def test_a_kafka_partition_is_split_into_tasks_of_at_most_the_given_records():
    from streaming.spark.kafka_offsets import SourceError
    from streaming.spark.kafka_source import KafkaStreamReader
    reader = KafkaStreamReader({"bootstrap": "127.0.0.1:1", "topics": "t", "maxRecordsPerPartition": "1000"})
    reader._offsets = type("Fixed", (), {"lows": staticmethod(lambda tps: {tp: 0 for tp in tps})})()
    parts = reader.partitions({"t": {"0": 10, "1": 5}}, {"t": {"0": 2511, "1": 905}})
    ranges = [(p.partition, p.start, p.end) for p in parts]
    assert ranges == [(0, 10, 843), (0, 843, 1677), (0, 1677, 2511), (1, 5, 905)]
    whole = KafkaStreamReader({"bootstrap": "127.0.0.1:1", "topics": "t"})
    whole._offsets = reader._offsets
    assert [(p.start, p.end) for p in whole.partitions({"t": {"0": 10}}, {"t": {"0": 2511}})] == [(10, 2511)]
    with pytest.raises(SourceError, match="maxRecordsPerPartition must be a positive whole number"):
        KafkaStreamReader({"bootstrap": "127.0.0.1:1", "topics": "t", "maxRecordsPerPartition": "0"})


def test_a_small_micro_batchs_ranges_are_grouped_into_as_many_reading_tasks_as_cores():
    from streaming.spark.kafka_source import GROUP_RECORDS, KafkaRangeGroup, KafkaStreamReader
    reader = KafkaStreamReader({"bootstrap": "127.0.0.1:1", "topics": "t,u", "maxRecordsPerPartition": "25000",
                                "readTasks": "2"})
    reader._offsets = type("Fixed", (), {"lows": staticmethod(lambda tps: {tp: 0 for tp in tps})})()

    def tasks(end: dict) -> list[list[tuple]]:
        parts = reader.partitions({t: {p: 0 for p in ps} for t, ps in end.items()}, end)
        return [[(r.topic, r.partition, r.start, r.end) for r in (p.ranges if isinstance(p, KafkaRangeGroup) else [p])]
                for p in parts]
    # a live micro-batch's few records: two tasks, balanced, each reading its ranges in Kafka order
    few = tasks({"t": {"0": 300, "1": 120, "2": 90}, "u": {"0": 200}})
    assert few == [[("t", 0, 0, 300), ("t", 2, 0, 90)], [("t", 1, 0, 120), ("u", 0, 0, 200)]]
    # a bigger micro-batch (GROUP_RECORDS a task or more): a task a range, split at maxRecordsPerPartition
    big = tasks({"t": {"0": 60_000, "1": GROUP_RECORDS, "2": 300}})
    assert big == [[("t", 0, 0, 20_000)], [("t", 0, 20_000, 40_000)], [("t", 0, 40_000, 60_000)],
                   [("t", 1, 0, GROUP_RECORDS)], [("t", 2, 0, 300)]]


def test_reading_tasks_grouped_or_one_per_kafka_partition_write_the_same_tables(spark, broker, tmp_path):
    """The job groups a micro-batch's ranges into as many reading tasks as cores; with
    --records-per-task 0 each Kafka partition is its own task. Nothing downstream may depend on it."""
    from job_runs import differences, dump, once_in_session
    simulate(broker, tmp_path, "--seed", "9", "--count", "2000", "--corrupt", "0.02")
    grouped, apart = f"sqlite:///{tmp_path}/grouped.db", f"sqlite:///{tmp_path}/apart.db"
    once_in_session(spark, broker, grouped, tmp_path / "c_grouped", max_records=700)
    once_in_session(spark, broker, apart, tmp_path / "c_apart", max_records=700, records_per_task=0)
    tables = dump(grouped)                          # every column, the Kafka coordinates too
    assert tables["notifications"] and tables["directory_objects"] and tables["dead_letters"]
    assert differences(tables, dump(apart)) == []


def test_split_summary_and_per_record_paths_write_the_same_tables(spark, broker, tmp_path):
    """The raw query's reading tasks count (split into tasks of 300 records); the per-record path
    sends every decoded row through Spark. Both must write the same rows."""
    summary, _truth = simulate(broker, tmp_path, "--seed", "5", "--count", "2500", "--corrupt", "0.03")
    tables = {}
    for name, kw in {"summary": {"records_per_task": 300}, "records": {"per_record": True}}.items():
        url = f"sqlite:///{tmp_path}/{name}.db"
        query = start_query(spark, sink_url=url, checkpoint=str(tmp_path / name), once=True, echo=lambda _l: None,
                            source_opts=source_options(broker), **kw)
        query.awaitTermination(600)
        assert query.exception() is None
        s = open_sink(url)
        tables[name] = (
            s.query("SELECT protocol, server, minute, messages, dead_letters FROM raw_messages_seen "
                    "ORDER BY protocol, server, minute"),
            s.query("SELECT topic, kafka_partition, kafka_offset, protocol, kafka_key, message_id, source_machine, "
                    "destination_machine, arrival_time, error_structure, error_field, error_offset, error_reason, "
                    "error, raw_value FROM dead_letters ORDER BY topic, kafka_partition, kafka_offset"),
            s.query("SELECT SUM(input_rows) AS n, SUM(dead_letters) AS d FROM pipeline_progress WHERE query_name = 'dirstream'"))
        s.close()
    assert tables["summary"] == tables["records"]
    assert tables["summary"][2][0]["n"] == summary["published"] and tables["summary"][1]


def test_a_worker_reuses_its_consumer_and_reads_exactly_each_range(broker):
    """Tasks of one Python worker share a consumer (as Spark's Kafka source pools them); a reused
    consumer must read exactly its new range, nothing left over from the previous one."""
    from streaming.spark import kafka_source
    from streaming.spark.kafka_source import KafkaInputPartition, KafkaStreamReader
    ensure_topics(KafkaSettings(broker), {"reuse.test": 2})
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": broker})
    for i in range(400):
        producer.produce("reuse.test", value=f"p{i % 2}-{i // 2}".encode(), partition=i % 2)
    producer.flush(30)
    reader = KafkaStreamReader({"bootstrap": broker, "topics": "reuse.test"})
    kafka_source._CONSUMERS.clear()

    def read(partition, start, end):
        return [v.decode() for b in reader.read(KafkaInputPartition("reuse.test", partition, start, end))
                for v in b.column("value").to_pylist()]

    assert read(0, 0, 150) == [f"p0-{i}" for i in range(150)]
    (consumer,) = kafka_source._CONSUMERS.values()
    assert read(0, 20, 30) == [f"p0-{i}" for i in range(20, 30)]          # backwards, within what was fetched
    assert read(1, 190, 200) == [f"p1-{i}" for i in range(190, 200)]
    assert read(0, 150, 200) == [f"p0-{i}" for i in range(150, 200)]
    assert list(kafka_source._CONSUMERS.values()) == [consumer]
    abandoned = reader.read(KafkaInputPartition("reuse.test", 1, 0, 200))
    next(abandoned)
    abandoned.close()                          # a task stopped early: its consumer is closed, not kept
    assert kafka_source._CONSUMERS == {}


def test_a_reading_consumer_fetches_only_a_bounded_queue_past_its_range(broker):
    """Catching up, the log runs far past a task's range: librdkafka's default read-ahead (64 MB or
    100,000 records per consumer) filled every reading Python worker with records thrown away at
    the range's end. Its queue, as its own statistics report it, stays within READ_AHEAD
    (and one fetch of at most max.partition.fetch.bytes, 1 MB)."""
    from confluent_kafka import TopicPartition
    from streaming.spark import kafka_source
    from streaming.spark.kafka_source import KafkaInputPartition
    queued, conf = _backlog_and_queue_statistics(broker, "readahead.test")
    consumer = kafka_source._reading_consumer(("readahead", id(conf)), conf)
    try:
        consumer.assign([TopicPartition("readahead.test", 0, 0)])
        records = kafka_source._read_records(consumer, KafkaInputPartition("readahead.test", 0, 0, 2000))
        next(records)
        time.sleep(1.5)                                        # a slow task: the fetcher runs ahead
        assert sum(1 for _ in records) == 1999
    finally:
        consumer.close()
    _assert_read_ahead_bounded(queued)


def test_the_arrival_index_reads_one_record_without_a_large_queue_behind_it(broker):
    """The same for the source's driver side (the notification query's gate, each query's aligned
    cap): it reads one record at a time, in the streaming source's long-lived Python process."""
    from streaming.spark.event_clock import ArrivalIndex
    queued, conf = _backlog_and_queue_statistics(broker, "readahead.index")
    index = ArrivalIndex(conf)
    try:
        first = index.value_at(("readahead.index", 0), 0)
        time.sleep(1.5)                                        # planning waits: the fetcher runs ahead
        assert index.value_at(("readahead.index", 0), 1) != first is not None
    finally:
        index.close()
    _assert_read_ahead_bounded(queued)


def _backlog_and_queue_statistics(broker: str, topic: str) -> tuple[list[int], dict]:
    """A topic of one partition holding 20 MB, and a consumer configuration whose statistics (every
    100 ms) add the bytes its fetch queue holds to the list returned."""
    from confluent_kafka import Producer
    ensure_topics(KafkaSettings(broker), {topic: 1})
    producer = Producer({"bootstrap.servers": broker, "linger.ms": 20})
    for i in range(40_000):
        producer.produce(topic, value=os.urandom(500), partition=0)
        if i % 5000 == 0:
            producer.flush(30)
    producer.flush(30)
    queued: list[int] = []

    def statistics(text):
        partitions = json.loads(text)["topics"].get(topic, {}).get("partitions", {})
        queued.extend(p["fetchq_size"] for p in partitions.values())

    return queued, {"bootstrap.servers": broker, "statistics.interval.ms": 100, "stats_cb": statistics}


def _assert_read_ahead_bounded(queued: list[int]) -> None:
    from streaming.spark.kafka_offsets import READ_AHEAD
    limit = READ_AHEAD["queued.max.messages.kbytes"] * 1024 + 1024 * 1024
    assert queued and max(queued) > 100_000, "the statistics never saw the fetcher run ahead"
    assert max(queued) <= limit, f"{max(queued):,} bytes queued past what was read"


def test_the_source_module_loads_without_pyarrow_for_spark_planning_workers():
    """Spark unpickles the source and asks for its schema in short-lived planning workers
    (create_data_source) that linger a minute after the job starts, when a catch-up's first batches
    run: pyarrow, 40 MB there, is imported only when records are read. The schema is
    still the Arrow batches' one."""
    import sys
    code = ("import sys, streaming.spark.kafka_source as k\n"
            "assert all(k.KafkaSource({'decode': m}).schema() for m in ('false', 'true', 'summary', 'envelope'))\n"
            "assert 'pyarrow' not in sys.modules, 'imported'\n"
            "assert k.arrow_schema().names == k.SCHEMA.names")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)


def test_the_operators_default_to_one_shuffle_partition_per_local_core_and_four_on_a_cluster():
    import os
    from streaming.spark.pipeline import default_shuffle_partitions
    assert default_shuffle_partitions("local[2]") == 2 and default_shuffle_partitions("local[3,2]") == 3
    assert default_shuffle_partitions("local") == 1
    assert default_shuffle_partitions("local[*]") == os.cpu_count()
    assert default_shuffle_partitions("spark://master:7077") == 4 == default_shuffle_partitions("local[x]")


def test_the_progress_listener_reads_the_json_progress_as_pyspark_reads_the_java_object(spark, tmp_path):
    """OperatorProgress takes each progress from the JVM's JSON text (one py4j call):
    every pipeline_progress column but finished_at equals what pyspark's own listener, walking the
    Java object, gives, for the batches of a stateful query (rows_per_second to the one decimal of
    Spark's JSON)."""
    import time
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StreamingQueryListener
    from streaming.spark.progress import JsonProgressListener, operator_progress_row
    seen: dict[str, dict] = {"java": {}, "json": {}}

    def record(kind):
        def on_progress(self, event):
            if event.progress.name == "progress_check":
                row = operator_progress_row(event.progress, "q")
                row.pop("finished_at")
                seen[kind][row["batch_id"]] = row
        return on_progress

    class ByJava(StreamingQueryListener):
        onQueryStarted = onQueryIdle = onQueryTerminated = lambda self, event: None
        onQueryProgress = record("java")

    class ByJson(JsonProgressListener):
        onQueryProgress = record("json")

    listeners = [ByJava(), ByJson()]
    for listener in listeners:
        spark.streams.addListener(listener)
    query = (spark.readStream.format("rate").option("rowsPerSecond", 200).load()
             .withWatermark("timestamp", "1 second").groupBy((F.col("value") % 7).alias("k")).count()
             .writeStream.queryName("progress_check").outputMode("update").format("memory")
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="500 milliseconds").start())
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and len(set(seen["java"]) & set(seen["json"])) < 3:
            time.sleep(0.2)
    finally:
        query.stop()
        for listener in listeners:
            spark.streams.removeListener(listener)
    common = sorted(set(seen["java"]) & set(seen["json"]))
    assert len(common) >= 3
    for batch in common:
        by_json, by_java = dict(seen["json"][batch]), dict(seen["java"][batch])
        # Spark's JSON progress rounds rates to one decimal (safeDoubleToJValue), as its logs show them
        assert abs(by_json.pop("rows_per_second") - by_java.pop("rows_per_second")) <= 0.05
        assert by_json == by_java
    assert any(seen["json"][b]["state_rows"] for b in common) and any(seen["json"][b]["input_rows"] for b in common)


def test_the_driver_jvms_heap_is_fixed_at_the_driver_memory_and_resident_from_its_start(spark):
    """An elastic heap made the JVM's memory follow the load (2.1 -> 3.1 GB while catching
    up); fixed at spark.driver.memory (2g in the tests' session) and touched whole at start, it is
    flat whatever the batches."""
    jvm = spark.sparkContext._jvm
    runtime = jvm.java.lang.Runtime.getRuntime()
    heap = 2 * 2**30
    assert runtime.maxMemory() == heap
    assert runtime.totalMemory() == heap, "the heap is not committed whole"
    pid = jvm.java.lang.ProcessHandle.current().pid()
    resident = resident_kb(pid)
    assert resident >= heap // 1024, f"the driver JVM holds {resident} kB, less than its {heap // 1024} kB heap"


def test_spark_s_jvms_compile_with_c1_only(spark):
    """C2 compiling Spark's planning code took more of the driver JVM's CPU than the work did; the
    driver runs C1 only, and a cluster's executors are told to."""
    jvm = spark.sparkContext._jvm
    flags = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    assert flags.getVMOption("TieredStopAtLevel").getValue() == "1"
    assert "-XX:TieredStopAtLevel=1" in spark.sparkContext.getConf().get("spark.executor.defaultJavaOptions")


def test_the_python_workers_give_freed_memory_back_through_malloc(spark):
    """The Python workers' pyarrow allocates from malloc (not its mimalloc pool, which keeps
    freed pages) and glibc's malloc unmaps large buffers when they are freed."""
    from streaming.spark.pipeline import PYTHON_WORKER_ENV

    def worker_memory(_rows):
        import os as worker_os
        import pyarrow
        yield (pyarrow.default_memory_pool().backend_name,
               {k: worker_os.environ.get(k) for k in PYTHON_WORKER_ENV})

    seen = spark.sparkContext.parallelize(range(2), 2).mapPartitions(worker_memory).collect()
    assert [backend for backend, _env in seen] == ["system", "system"]
    assert all(env == PYTHON_WORKER_ENV for _backend, env in seen)


def test_the_driver_gives_a_large_batch_back_when_done(spark):
    """The driver's own pyarrow (a micro-batch's output collected as Arrow) allocates from
    malloc too: a large batch's memory goes back when it is freed, not kept for the rest of the run."""
    import os

    import pyarrow
    assert pyarrow.default_memory_pool().backend_name == "system"
    before = resident_kb(os.getpid())
    batch = pyarrow.array(["x" * 1000] * 300_000)               # 300 MB of payloads
    held = resident_kb(os.getpid())
    del batch
    after = resident_kb(os.getpid())
    assert held - before > 250_000 and after - before < 50_000, (before, held, after)
