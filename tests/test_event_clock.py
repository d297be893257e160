"""The job's source under --max-records: a capped micro-batch stays within the cap and ends every raw
partition at one event time, so that no partition runs ahead of another (a real broker; the
reader's planning driven by hand)."""
import os
import random
import signal
import threading

import pytest
from confluent_kafka import Producer
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from producers.kafka import KafkaSettings, ensure_topics
from streaming.spark.event_clock import ArrivalIndex
from streaming.spark.kafka_offsets import SourceError, flatten
from streaming.spark.kafka_source import KafkaStreamReader, _cap
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


def test_a_capped_plan_ends_every_partition_at_one_event_time(broker):
    _topics(broker)
    reader = KafkaStreamReader({**source_options(broker), "decode": "job"})
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
    reader = KafkaStreamReader({**source_options(broker), "decode": "job"})
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
            proportional = {t: o for (t, _), o in _cap({(t, 0): b for t, b in begin.items()},
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
