"""What only a real Apache Kafka broker can show: partitions added while the job runs, records deleted
below the low watermark (DeleteRecords), an unreachable broker, and a replay of one protocol on an
empty broker. The broker restarted on its log directories mid-stream is the short soak's
(test_soak.py): the job and the producer ride through it, and the tables equal a fresh --once."""
import json
import time

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from conftest import dirstream, resident_kb
from producers.kafka import KafkaSettings, ensure_topics
from samples import mqcn_messages
from streaming.wire.envelope import encode_envelope, make_envelope
from streaming.spark.pipeline import source_options, start_query
from streaming.sinks import open_sink
from streaming.wire.topics import TOPICS
from streaming.wire import encode
from job_runs import bare_job, output, run_once, sink_totals, wait_for_rows


def _mqsd_records(n: int) -> list[bytes]:
    body = bytes.fromhex("00010000") + bytes(48)
    return [encode_envelope(make_envelope("mqsd", body, source_machine="a", destination_machine=f"qm{i % 3}", destination_queue="q",
                                          sent_time=1_767_225_600_000 + i)) for i in range(n)]


def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, value in enumerate(values):
        kwargs = {} if partition is None else {"partition": partition}
        producer.produce(topic, value, f"k{i}".encode(), **kwargs)
    assert producer.flush(60) == 0


def test_a_partition_added_while_the_job_runs_is_picked_up(spark, broker, tmp_path):
    topic = TOPICS["mqsd"]
    ensure_topics(KafkaSettings(broker), {topic: 2})
    _produce(broker, topic, _mqsd_records(20))
    url = f"sqlite:///{tmp_path}/sink.db"
    query = start_query(spark, sink_url=url, checkpoint=str(tmp_path / "ckpt"), trigger="500ms",
                        echo=lambda _l: None, source_opts=source_options(broker, topics=[topic]))
    try:
        wait_for_rows(url, 20)
        admin = AdminClient({"bootstrap.servers": broker})
        [f.result(30) for f in admin.create_partitions([NewPartitions(topic, 5)]).values()]
        for partition in (2, 3, 4):
            _produce(broker, topic, _mqsd_records(10), partition=partition)
        wait_for_rows(url, 50)
    finally:
        query.stop()
    s = open_sink(url)
    try:
        last = s.query("SELECT end_offsets FROM pipeline_progress WHERE query_name = 'dirstream' ORDER BY batch_id DESC LIMIT 1")[0]["end_offsets"]
    finally:
        s.close()
    ends = json.loads(last) if isinstance(last, str) else last
    assert {ends[f"{topic}[{p}]"] for p in (2, 3, 4)} == {10}
    assert sink_totals(url)["rows"] == 50


def test_deleted_records_stop_the_job_or_are_skipped_and_counted(spark, broker, tmp_path):
    """DeleteRecords moves the low watermark past offsets the checkpoint has not read yet."""
    topic = TOPICS["mqsd"]
    ensure_topics(KafkaSettings(broker), {t: 1 for t in TOPICS.values()})
    _produce(broker, topic, _mqsd_records(100))
    url, ckpt = f"sqlite:///{tmp_path}/sink.db", tmp_path / "ckpt"
    opts = dict(data_loss_log=str(tmp_path / "skipped.jsonl"))
    assert run_once(spark, broker, url, ckpt, **opts).exception() is None
    _produce(broker, topic, _mqsd_records(200))
    admin = AdminClient({"bootstrap.servers": broker})
    [f.result(30) for f in admin.delete_records([TopicPartition(topic, 0, 250)]).values()]
    failed = run_once(spark, broker, url, ckpt, **opts)
    assert (f"offsets 100..249 of {topic}[0] were deleted before they were read (earliest available: 250); "
            "restart with --skip-data-loss") in str(failed.exception())
    assert sink_totals(url)["rows"] == 100                              # nothing of the failed batch landed
    assert run_once(spark, broker, url, ckpt, fail_on_data_loss=False, **opts).exception() is None
    s = open_sink(url)
    try:
        assert s.query("SELECT MAX(skipped_offsets) AS s FROM pipeline_progress WHERE query_name = 'dirstream'")[0]["s"] == 150
    finally:
        s.close()
    assert sink_totals(url)["rows"] == 100 + 50                          # offsets 250..299


def test_a_replay_of_one_protocol_runs_the_whole_job(broker, tmp_path):
    hex_file = tmp_path / "mqcn.hex"
    bodies = [encode("mqcn", m) for m in mqcn_messages().values()]
    hex_file.write_text("".join(b.hex() + "\n" for b in bodies))
    replayed = dirstream("produce", "replay", str(hex_file), "--protocol", "mqcn", "--bootstrap", broker)
    assert replayed.returncode == 0, replayed.stderr
    url = f"sqlite:///{tmp_path}/sink.db"
    done = bare_job(broker, url, tmp_path / "ckpt", "--once")
    assert done.wait(600) == 0, output(done)[-5000:]
    log = open(done.log_path).read()
    assert "raw topic(s) msmq.dsrp.raw, msmq.sd.raw did not exist" in log and "created them empty" in log
    assert sink_totals(url)["seen"] == {"mqcn": len(bodies)}


def test_the_offsets_asked_for_every_partition_at_once_are_each_partitions_watermarks(broker):
    """One ListOffsets request for all partitions gives what get_watermark_offsets gives one partition at a
    time: an empty partition, one whose start was deleted, and one with a transaction still open (the
    consumer's isolation, read_committed, ends it before the open transaction)."""
    from confluent_kafka import Consumer
    from streaming.spark.kafka_offsets import EndOffsets
    topic = f"offsets-{time.time_ns()}"
    ensure_topics(KafkaSettings(broker), {topic: 3})
    _produce(broker, topic, _mqsd_records(40), partition=0)
    _produce(broker, topic, _mqsd_records(30), partition=1)
    admin = AdminClient({"bootstrap.servers": broker})
    [f.result(30) for f in admin.delete_records([TopicPartition(topic, 1, 12)]).values()]
    open_transaction = Producer({"bootstrap.servers": broker, "transactional.id": topic})
    open_transaction.init_transactions(30)
    open_transaction.begin_transaction()
    _produce(broker, topic, _mqsd_records(5), partition=0)
    for value in _mqsd_records(7):
        open_transaction.produce(topic, value, partition=0)
    assert open_transaction.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker, "group.id": topic})
    one_by_one = {(topic, p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                  for p in range(3)}
    consumer.close()
    offsets = EndOffsets({"bootstrap.servers": broker}, [topic])
    try:
        assert offsets.bounds() == one_by_one
        assert one_by_one[(topic, 1)] == (12, 30) and one_by_one[(topic, 2)] == (0, 0)
        assert one_by_one[(topic, 0)] == (0, 45)                        # the open transaction's 7 not yet
        assert offsets.ends() == {tp: high for tp, (_low, high) in one_by_one.items()}
        assert offsets.lows([(topic, 1), (topic, 2)]) == {(topic, 1): 12, (topic, 2): 0}
        assert offsets.low((topic, 1)) == 12
    finally:
        offsets.close()
        open_transaction.abort_transaction(30)


def test_a_partition_the_broker_does_not_know_is_reported_by_name_not_taken_for_an_offset(broker):
    from streaming.spark.kafka_offsets import EndOffsets, SourceError
    topic = f"offsets-{time.time_ns()}"
    ensure_topics(KafkaSettings(broker), {topic: 1})
    offsets = EndOffsets({"bootstrap.servers": broker}, [topic], broker_wait_s=3)
    try:
        with pytest.raises(SourceError, match=rf"cannot read the offsets of 2 partitions from .*{topic}\[7\]"):
            offsets.lows([(topic, 0), (topic, 7)])
        assert offsets.lows([(topic, 0)]) == {(topic, 0): 0}
    finally:
        offsets.close()


def test_an_unreachable_broker_is_waited_for_then_reported_clearly():
    from streaming.spark.kafka_offsets import EndOffsets, SourceError
    offsets = EndOffsets({"bootstrap.servers": "127.0.0.1:1"}, [TOPICS["mqsd"]], broker_wait_s=3)
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"cannot read Kafka metadata from 127\.0\.0\.1:1: .* \(the broker did not "
                                          r"answer for \d+ s\); start the broker, then run the job again"):
        offsets.partitions()
    assert time.monotonic() - started >= 3
    offsets.close()


def test_the_outbound_publisher_publishes_more_records_than_the_clients_queue_holds(broker):
    """A batch of 300,000 messages published about a million records; the client's local queue
    holds 100,000 and the batch failed with BufferError (Queue full). The publisher lets deliveries
    drain the queue: here a queue of 1,000 takes 5,000 records, every one."""
    from confluent_kafka import Consumer
    from streaming.spark.replication_query import OutboundPublisher
    publisher = OutboundPublisher({"bootstrap.servers": broker, "queue.buffering.max.messages": 1000})
    publisher.publish("versions", ((b"%d" % i, b"qm") for i in range(5000)))
    consumer = Consumer({"bootstrap.servers": broker, "group.id": "check", "auto.offset.reset": "earliest"})
    consumer.subscribe(["versions"])
    seen, deadline = set(), time.monotonic() + 60
    while len(seen) < 5000 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            seen.add(int(msg.value()))
    consumer.close()
    assert seen == set(range(5000))


def test_the_outbound_publisher_fails_the_batch_when_kafka_does_not_take_its_records():
    """Records Kafka never confirmed (here: no broker, and they time out) fail the batch, which
    Spark then runs again; before, a record that failed delivery left the flush empty-handed and
    the batch counted as done."""
    from conftest import free_port
    from streaming.spark.replication_query import OutboundPublisher
    publisher = OutboundPublisher({"bootstrap.servers": f"127.0.0.1:{free_port()}", "message.timeout.ms": 500,
                                   "log_level": 0})
    with pytest.raises(RuntimeError, match="3 records not delivered to versions"):
        publisher.publish("versions", [(b"1", b"qm"), (b"2", b"qm"), (b"3", b"qm")])


def test_the_brokers_heap_is_resident_from_its_start(kafka_broker):
    """A heap touched as it is used grows the broker's memory for an hour (the soak: 848 -> 942 MB
    from minute 30 to 60); touched whole at start, the broker holds all of it from the first minute
    (without it, about 520 MB at minute 1)."""
    heap_kb = 768 * 1024
    assert kafka_broker.heap == "768m"
    resident = resident_kb(kafka_broker.status().pid)
    assert resident >= heap_kb, f"the broker holds {resident} kB, less than its {heap_kb} kB heap"


def test_a_reading_task_whose_client_fetches_nothing_reads_on_with_a_fresh_one(broker, monkeypatch):
    """A reading task's client that brings no record (one that saw the broker restart under it
    fetched nothing for minutes, the records on the broker: stale metadata) is replaced by a fresh
    one at the position reached, and the range is read to its end, each record once."""
    from streaming.spark import kafka_source
    from streaming.spark.kafka_source import KafkaInputPartition
    monkeypatch.setattr(kafka_source, "RENEW_AFTER_S", 2.0)
    topic = TOPICS["mqsd"]
    ensure_topics(KafkaSettings(broker), {topic: 1})
    _produce(broker, topic, _mqsd_records(10), partition=0)
    conf = {"bootstrap.servers": broker}
    stuck = kafka_source._assigned(kafka_source._new_consumer({"bootstrap.servers": "127.0.0.1:1"}), topic, 0, 3)
    renewed: list[tuple[int, object]] = []

    def renew(position: int):
        renewed.append((position, kafka_source._assigned(kafka_source._new_consumer(conf), topic, 0, position)))
        return renewed[-1][1]
    try:
        read = [r[0] for r in kafka_source._read_records(stuck, KafkaInputPartition(topic, 0, 3, 10), renew)]
        assert read == [3, 4, 5, 6, 7, 8, 9] and [position for position, _ in renewed] == [3]
    finally:
        for consumer in [stuck] + [c for _, c in renewed]:
            consumer.close()
