"""The job's source: a live micro-batch ends every partition at the earliest of the live partitions'
last records (a partition idle for a while holds no one back), and under --max-records a capped
micro-batch stays within the cap and ends every raw partition at one event time, so that no
partition runs ahead of another (a real broker; the reader's planning driven by hand)."""
import os
import random
import signal
import threading

import pytest
from confluent_kafka import Producer
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from producers.kafka import KafkaSettings, ensure_topics
from streaming.spark.event_clock import ArrivalIndex, ReleaseGate
from streaming.spark.kafka_offsets import SourceError, flatten
from streaming.spark.kafka_source import KafkaStreamReader, proportional_cap
from streaming.spark.pipeline import source_options
from streaming.wire.envelope import encode_envelope, make_envelope
from streaming.wire.topics import TOPICS

T0 = 1_767_225_600_000
CN, SD, DSRP = TOPICS["mqcn"], TOPICS["mqsd"], TOPICS["mqdsrp"]
# arrival times (ms after T0) of each topic's records, one partition each
ARRIVALS = {DSRP: [i * 1000 for i in range(10)], CN: [i * 500 for i in range(20)], SD: [1000, 3000, 6000, 9000]}


def _envelope(protocol: str, at_ms: int) -> bytes:
    return encode_envelope(make_envelope(protocol, b"\0" * 8, source_machine="s", destination_machine="d",
                                         destination_queue="q", sent_time=T0 + at_ms))


def _topics(broker: str) -> None:
    ensure_topics(KafkaSettings(broker), {t: 1 for t in ARRIVALS})
    producer = Producer({"bootstrap.servers": broker})
    protocol = {t: p for p, t in TOPICS.items()}
    for topic, times in ARRIVALS.items():
        for ms in times:
            producer.produce(topic, _envelope(protocol[topic], ms), b"k")
    assert producer.flush(30) == 0


def _plan(reader: KafkaStreamReader, begin: dict, limit) -> dict:
    start = {t: {"0": begin.get(t, 0)} for t in ARRIVALS}
    return {t: o for (t, _), o in flatten(reader.latestOffset(start, limit)).items()}


# the cap alone: every partition counts as idle, so none holds the others back
CAP_ONLY = {"idlePartitionSeconds": "0"}
IDLE = {"idlePartitionSeconds": "5"}


def test_a_capped_plan_ends_every_partition_at_one_event_time(broker):
    _topics(broker)
    reader = KafkaStreamReader({**source_options(broker), "decode": "job", **CAP_ONLY})
    try:
        assert _plan(reader, {}, ReadAllAvailable()) == {t: len(times) for t, times in ARRIVALS.items()}
        # 12 of 34 records: in proportion (about 3, 7 and 1), reaching 2,000, 3,000 and 1,000 ms; every
        # partition stops at the latest of these times within the cap: 2,000 ms (9 records; 3,000 ms
        # would read 13)
        assert _plan(reader, {}, ReadMaxRows(12)) == {DSRP: 3, CN: 5, SD: 1}
    finally:
        reader.stop()


@pytest.mark.parametrize("seed", range(3))
def test_every_capped_plan_stays_within_max_records_and_no_partition_runs_ahead(broker, seed):
    """Random positions and caps: a plan never reads more than the cap, never goes back, and no
    partition's last record read arrives after a record another partition left unread (unless
    aligning would read nothing: then the shares stay in proportion to the backlogs)."""
    _topics(broker)
    rng = random.Random(seed)
    reader = KafkaStreamReader({**source_options(broker), "decode": "job", **CAP_ONLY})
    misaligned = 0
    try:
        for _ in range(15):
            begin = {t: rng.randrange(len(times) + 1) for t, times in ARRIVALS.items()}
            cap = rng.randrange(1, 30)
            plan = _plan(reader, begin, ReadMaxRows(cap))
            assert all(plan[t] >= begin[t] for t in ARRIVALS)
            assert sum(plan[t] - begin[t] for t in ARRIVALS) <= cap
            if sum(plan[t] - begin[t] for t in ARRIVALS) == 0:
                continue
            last_read = max(ARRIVALS[t][plan[t] - 1] for t in ARRIVALS if plan[t] > begin[t])
            first_left = [ARRIVALS[t][plan[t]] for t in ARRIVALS if plan[t] < len(ARRIVALS[t])]
            aligned = not first_left or last_read <= min(first_left)
            # left in proportion only when aligning would read nothing (a partition begun ahead)
            proportional = {t: o for (t, _), o in proportional_cap({(t, 0): b for t, b in begin.items()},
                                                       {(t, 0): len(v) for t, v in ARRIVALS.items()}, cap).items()}
            assert aligned or plan == proportional, (begin, cap, plan)
            misaligned += not aligned
            if aligned:
                assert sum(plan[t] - begin[t] for t in ARRIVALS) == _fullest(begin, proportional, cap)
    finally:
        reader.stop()
    assert misaligned < 15


def _fullest(begin: dict, shares: dict, cap: int) -> int:
    """The records a batch takes when every partition ends at one of the times the capped shares
    reach: the latest time within the cap (the earliest if none is)."""
    reached = [ARRIVALS[t][shares[t] - 1] if shares[t] > begin[t] else ARRIVALS[t][begin[t]] - 1
               for t in ARRIVALS if shares[t] < len(ARRIVALS[t])]

    def taken(until: int) -> int:
        return sum(sum(1 for ms in ARRIVALS[t][begin[t]:] if ms <= until) for t in ARRIVALS)
    if not reached:
        return sum(len(ARRIVALS[t]) - begin[t] for t in ARRIVALS)        # the whole backlog fits
    counts = [taken(u) for u in reached]                  # grows with the time
    within = [n for n in counts if n <= cap]
    return max(within) if within else min(counts)


def test_a_record_the_broker_is_slow_to_bring_is_waited_for_never_taken_as_early(kafka_broker, broker):
    """A fetch that brings nothing (a broker paused, restarting, or slow on a loaded machine) is tried
    again: taken as a record arriving early, it would end its partition past the others and their
    rows behind the watermark would be dropped as late. A broker that does not come back within the
    wait fails the planning with a clear error instead."""
    _topics(broker)
    pid = kafka_broker.status().pid
    patient = ArrivalIndex({"bootstrap.servers": broker}, fetch_timeout_s=1.0)
    impatient = ArrivalIndex({"bootstrap.servers": broker}, fetch_timeout_s=0.5, broker_wait_s=1.5)
    os.kill(pid, signal.SIGSTOP)
    resume = threading.Timer(6.0, os.kill, (pid, signal.SIGCONT))
    resume.start()
    try:
        with pytest.raises(SourceError, match=rf"{SD}\[0\] at offset 2 .*no record came"):
            impatient.arrival_at((SD, 0), 2)
        assert patient.arrival_at((SD, 0), 2) == T0 + ARRIVALS[SD][2]      # paused 6 s: asked 3 times or more
        assert patient.arrival_at((SD, 0), 3) == T0 + ARRIVALS[SD][3]
    finally:
        resume.cancel()
        os.kill(pid, signal.SIGCONT)
        patient.close()
        impatient.close()


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _gated(broker: str, clock: _Clock) -> KafkaStreamReader:
    reader = KafkaStreamReader({**source_options(broker), "decode": "job"})
    reader._gate = ReleaseGate(reader.arrivals, idle_s=5.0, clock=clock)
    return reader


def test_a_live_plan_ends_every_partition_at_the_earliest_last_record_of_the_live_ones(broker):
    """Uncapped: the heads are 9,000 (MQDSRP, MQSD) and 9,500 ms (MQCN): MQCN's last record waits
    until MQDSRP or MQSD bring a newer one, or both have been idle for 5 s."""
    _topics(broker)
    clock = _Clock()
    reader = _gated(broker, clock)
    try:
        full = {t: len(times) for t, times in ARRIVALS.items()}
        assert _plan(reader, {}, ReadAllAvailable()) == dict(full, **{CN: 19})
        assert _plan(reader, {DSRP: 3}, ReadAllAvailable()) == dict(full, **{CN: 19})
        clock.now += 4.9
        assert _plan(reader, {}, ReadAllAvailable()) == dict(full, **{CN: 19})
        producer = Producer({"bootstrap.servers": broker})
        producer.produce(DSRP, _envelope("mqdsrp", 9_700), b"k")        # MQDSRP moves on: live again
        assert producer.flush(30) == 0
        clock.now += 0.2                                                # MQSD idle: holds no one back
        assert _plan(reader, {}, ReadAllAvailable()) == dict(full, **{DSRP: 11})
        clock.now += 5.0                                                # every partition idle
        assert _plan(reader, {}, ReadAllAvailable()) == dict(full, **{DSRP: 11})
        # capped, the batch ends at one time within the cap and before the live partitions' heads
        clock.now += 1.0                                                # (2,500 ms: 10 of 35 records)
        assert _plan(reader, {}, ReadMaxRows(12)) == {DSRP: 3, CN: 6, SD: 1}
    finally:
        reader.stop()


def test_a_partition_without_records_holds_the_others_back_only_while_live(broker):
    """Its first record may come behind the others': nothing is released until it has been idle."""
    _topics(broker)
    ensure_topics(KafkaSettings(broker), {"msmq.empty": 2})
    clock = _Clock()
    reader = KafkaStreamReader({**source_options(broker, topics=[*ARRIVALS, "msmq.empty"]), "decode": "job"})
    reader._gate = ReleaseGate(reader.arrivals, idle_s=5.0, clock=clock)
    try:
        assert set(flatten(reader.latestOffset({}, ReadAllAvailable())).values()) == {0}
        clock.now += 5.0
        plan = flatten(reader.latestOffset({}, ReadAllAvailable()))
        assert plan[(CN, 0)] == 20 and plan[("msmq.empty", 0)] == plan[("msmq.empty", 1)] == 0
    finally:
        reader.stop()


@pytest.mark.parametrize("seed", range(3))
def test_no_live_partition_brings_a_record_older_than_one_released(broker, seed):
    """Random traffic in arrival order per partition, some partitions' records of each round
    reaching Kafka only in the next one (a producer holding them): whatever the cuts, every record
    a partition brings later is at or after the latest arrival released before it (so never behind
    the watermark). Every partition moves within the idle time."""
    rng = random.Random(seed)
    topics = {DSRP: 2, CN: 3, SD: 1}
    ensure_topics(KafkaSettings(broker), topics)
    partitions = [(t, p) for t, n in topics.items() for p in range(n)]
    protocol = {t: p for p, t in TOPICS.items()}
    clock = _Clock()
    reader = KafkaStreamReader({**source_options(broker, topics=list(topics)), "decode": "job", **IDLE})
    reader._gate = ReleaseGate(reader.arrivals, idle_s=float(IDLE["idlePartitionSeconds"]), clock=clock)
    producer = Producer({"bootstrap.servers": broker})
    arrivals, held = {tp: [] for tp in partitions}, {tp: [] for tp in partitions}
    now_ms, begin, released_ms = 0, {}, -1
    try:
        for _ in range(12):
            made = {tp: [] for tp in partitions}
            for tp in partitions * 2 + [rng.choice(partitions) for _ in range(rng.randrange(20))]:
                now_ms += rng.randrange(1, 400)
                made[tp].append(now_ms)
            late = set(rng.sample(partitions, 2))
            for tp in partitions:
                due = held[tp] + ([] if tp in late else made[tp])
                held[tp] = made[tp] if tp in late else []
                for ms in due:
                    producer.produce(tp[0], _envelope(protocol[tp[0]], ms), b"k", partition=tp[1])
                arrivals[tp] += due
            assert producer.flush(30) == 0
            clock.now += rng.choice([0.1, 0.5, 1.0])
            start = {t: {str(p): begin.get((t, p), 0) for p in range(n)} for t, n in topics.items()}
            plan = flatten(reader.latestOffset(start, ReadAllAvailable()))
            for tp in partitions:
                fresh = arrivals[tp][begin.get(tp, 0):plan[tp]]
                assert all(ms >= released_ms for ms in fresh), (tp, fresh, released_ms)
            released_ms = max([released_ms] + [arrivals[tp][plan[tp] - 1] for tp in partitions if plan[tp] > 0])
            begin = plan
    finally:
        reader.stop()


def test_a_transactional_partition_is_planned_without_waiting(broker):
    """A transactional producer's partition ends with a commit marker, not a record: the plan reads
    past it at once (no fetch left waiting for a record that will never come), and the partition
    still ends at the others' time, its last record being the one before the marker."""
    import time
    _topics(broker)
    producer = Producer({"bootstrap.servers": broker, "transactional.id": "clock-test"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for ms in (9_600, 9_800):
        producer.produce(CN, _envelope("mqcn", ms), b"k")
    producer.commit_transaction(30)
    clock = _Clock()
    reader = _gated(broker, clock)
    # a fetch left waiting for a record would wait its whole timeout: 10 minutes, far beyond any
    # slow machine's planning
    reader._arrivals = ArrivalIndex(reader.conf, fetch_timeout_s=600.0)
    reader._gate = ReleaseGate(reader._arrivals, idle_s=5.0, clock=clock)
    try:
        started = time.monotonic()
        plan = _plan(reader, {}, ReadAllAvailable())
        assert time.monotonic() - started < 300
        # heads 9,000 (MQDSRP, MQSD) and a marker (MQCN, whose records go on to 9,800): up to 9,000
        assert plan == {DSRP: 10, CN: 19, SD: 4}
        # its head is its last record, not the marker: 9,800 holds nothing back, an earlier one would
        assert reader.arrivals.heads({(CN, 0): 23}) == {(CN, 0): T0 + 9_800}
    finally:
        reader.stop()


def test_every_task_of_a_micro_batch_carries_its_clock_which_only_moves_forward(broker):
    """decode=job: the planned input partitions carry the micro-batch's clock, the latest arrival
    among the last records they read and those of the micro-batches planned before; a later
    micro-batch that reads only an older partition keeps it (its clock rows are never behind the
    watermark), and each reading task yields it as its one clock row."""
    import pyarrow as pa
    from streaming.spark.decode import job_batches
    _topics(broker)
    reader = KafkaStreamReader({**source_options(broker), "decode": "job"})
    try:
        start = {t: {"0": 0} for t in ARRIVALS}
        parts = reader.partitions(start, {DSRP: {"0": 10}, CN: {"0": 4}, SD: {"0": 0}})
        assert {p.clock_ms for p in parts} == {T0 + 9_000}          # MQDSRP's last record read: the latest
        parts = reader.partitions({DSRP: {"0": 10}, CN: {"0": 4}, SD: {"0": 0}},
                                  {DSRP: {"0": 10}, CN: {"0": 6}, SD: {"0": 0}})
        assert [(p.topic, p.start, p.end, p.clock_ms) for p in parts] == [(CN, 4, 6, T0 + 9_000)]
        records = [(4, None, b"k", _envelope("mqcn", 2_000)), (5, None, b"k", _envelope("mqcn", 2_500))]
        rows = pa.Table.from_batches(list(job_batches(CN, 0, records, clock_ms=parts[0].clock_ms))).to_pylist()
        clocks = [r["clock_time"].timestamp() * 1000 for r in rows if r["clock_time"] is not None]
        # the bodies are no MQCN (dead letters, in the summary): the clock row still comes
        assert clocks == [T0 + 9_000] and len(rows) == 2 and sum(r["summary"] is not None for r in rows) == 1
    finally:
        reader.stop()
