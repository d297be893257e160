"""MQQB packets a capture producer rejected (msmq.qb.rejected): each one a dead letter with the
producer's reason and an mqqb-malformed security finding, the same however the batches fall."""
import json
import random

import pyarrow as pa
import pytest

from streaming.operators.findings import BUCKET_MS, RejectedPackets, evidence
from streaming.spark.decode import FINDING, Decoder, job_batches
from streaming.wire.envelope import EnvelopeError
from streaming.wire.rejected import decode_rejected, encode_rejected
from streaming.wire.topics import REJECTED_TOPIC

T0 = 1_767_225_600_000


def _record(n: int, at_ms: int, source: str = "psc9", target: str = "pec0") -> dict:
    return {"capture": "site.pcapng", "position": f"packet {n} (TCP 10.0.0.9:49152 > 10.0.0.1:1801, stream byte 80)",
            "source_machine": source, "destination_machine": target, "source_address": "10.0.0.9",
            "source_port": 49152, "destination_address": "10.0.0.1", "destination_port": 1801,
            "arrival_time": at_ms, "structure": "MessagePropertiesHeader", "field": "MessageSize",
            "byte_offset": 316, "reason": "2147483632 bytes of MessageBody would run past the end of the packet",
            "bytes": bytes([n % 256]) * 40}


def test_a_rejected_packet_is_a_dead_letter_with_the_producers_reason_and_goes_to_its_senders_key():
    value = encode_rejected(_record(7, T0))
    garbage = b"\x00\x00\x00\x00\x05\x99"
    batches = list(job_batches(REJECTED_TOPIC, 0, [(11, None, b"psc9", value), (12, None, b"psc9", garbage)]))
    rows = pa.Table.from_batches(batches).to_pylist()
    keyed = [r for r in rows if r["summary"] is None and r["clock_time"] is None]
    assert [(r["operator_key"], r["offset"], r["protocol"], r["body"]) for r in keyed] == \
        [(FINDING + "psc9", 11, "mqqb", value)]              # the undecodable one is a dead letter only
    assert keyed[0]["arrival_time"].timestamp() * 1000 == T0
    (clock,) = [r for r in rows if r["clock_time"] is not None]     # the task's latest arrival: the watermark's
    assert clock["clock_time"].timestamp() * 1000 == T0 and clock["arrival_time"] is None and clock["body"] is None
    (summary,) = [r["summary"] for r in rows if r["summary"] is not None]
    counted = pa.ipc.open_stream(summary).read_all().to_pylist()
    dead = sorted((r for r in counted if r["row_type"] == "dead"), key=lambda r: r["offset"])
    assert [(d["offset"], d["protocol"]) for d in dead] == [(11, "mqqb"), (12, "mqqb")]
    assert (dead[0]["error_structure"], dead[0]["error_field"], dead[0]["error_offset"]) == \
        ("MessagePropertiesHeader", "MessageSize", 316)
    assert dead[0]["raw_value"] == value and "would run past the end" in dead[0]["error_reason"]
    assert dead[0]["error"].startswith("MQQB MessagePropertiesHeader.MessageSize at byte 316")
    assert (dead[0]["source_machine"], dead[0]["destination_machine"]) == ("psc9", "pec0")
    assert dead[1]["raw_value"] == garbage and dead[1]["error"]


def test_the_rejected_topic_holds_only_rejected_packets():
    """An envelope published to the rejected topic is no rejected packet: a dead letter, not a finding."""
    from streaming.wire.envelope import encode_envelope, make_envelope
    env = encode_envelope(make_envelope("mqsd", b"x", source_machine="a", destination_machine="b",
                                        destination_queue="udp:1801", sent_time=T0))
    protocol, _env, record, exc = Decoder().check(REJECTED_TOPIC, env)
    assert (protocol, record) == ("mqqb", None) and isinstance(exc, EnvelopeError)
    with pytest.raises(EnvelopeError):
        decode_rejected(env)


def _sink(packets: list, cuts: int, rng: random.Random) -> dict:
    """The security_findings table after the packets, in micro-batches cut at `cuts` random places
    (the key's state kept between them as the operator keeps it)."""
    bounds = [0] + sorted(rng.sample(range(1, len(packets)), cuts)) + [len(packets)]
    state, table = None, {}
    for lo, hi in zip(bounds, bounds[1:]):
        log = RejectedPackets.from_json(state) if state else RejectedPackets()
        for n, p in packets[lo:hi]:
            log.record(p, evidence(REJECTED_TOPIC, 0, n, None))
        for _table, row in log.rows():
            table[(row["kind"], row["source"], row["target"], row["bucket"])] = row
        state = log.to_json()
    return table


@pytest.mark.parametrize("seed", range(6))
def test_findings_of_rejected_packets_are_the_same_however_the_batches_fall(seed):
    """Any order of times, a day late or more included: the same table for every cut."""
    rng = random.Random(seed)
    span = rng.choice([3, 30, 80]) * BUCKET_MS
    packets = [(n, _record(n, T0 + rng.randrange(span), rng.choice(["psc9", "psc9", "x1"]),
                           rng.choice(["pec0", "psc1"]))) for n in range(400)]
    whole = _sink(packets, 0, rng)
    assert all(r["kind"] == "mqqb-malformed" and r["severity"] == "high" for r in whole.values())
    for cuts in (3, 50, 399):
        assert _sink(packets, cuts, rng) == whole


def test_in_capture_order_every_packet_is_counted_once_with_its_evidence():
    rng = random.Random(1)
    at, packets = T0, []
    for n in range(300):
        at += rng.randrange(1, 1_200_000)
        packets.append((n, _record(n, at, rng.choice(["psc9", "x1"]))))
    table = _sink(packets, 20, rng)
    assert sum(r["count"] for r in table.values()) == len(packets) and len({k[3] for k in table}) > 24
    first = min(table.values(), key=lambda r: r["first_seen"])
    assert first["evidence"]["first"] == {"topic": REJECTED_TOPIC, "partition": 0, "offset": 0, "message_id": None,
                                          "capture": "site.pcapng", "position": packets[0][1]["position"]}
    assert first["detail"]["reason"].startswith("MessagePropertiesHeader.MessageSize at byte 316: ")
    assert first["detail"]["bytes"] == 40


def test_buckets_a_day_behind_the_latest_packet_are_forgotten_and_their_rows_are_final():
    log = RejectedPackets()
    log.record(_record(1, T0), evidence(REJECTED_TOPIC, 0, 1, None))
    log.record(_record(2, T0 + 30 * BUCKET_MS), evidence(REJECTED_TOPIC, 0, 2, None))
    rows = log.rows()
    assert [r["count"] for _t, r in rows] == [1, 1]             # the forgotten bucket's row comes out too
    assert [k[3] for k in log.log.entries] == [T0 + 30 * BUCKET_MS]


def test_simulate_refuses_the_capture_attack_without_a_capture(capsys):
    from streaming.apps.cli import main
    assert main(["produce", "simulate", "--bootstrap", "127.0.0.1:1", "--count", "10",
                 "--attack", "mqqb-malformed"]) == 2
    assert "mqqb-malformed is injected into packet captures only: add --pcap FILE" in capsys.readouterr().err


def test_the_jobs_first_operator_keeps_a_senders_findings_in_its_state_across_batches():
    """DirectoryProcessor, F|sender key (TwsTester): the rows the reading task keyed, in two
    batches; the second batch's row is the whole aggregate."""
    import pandas as pd
    from pyspark.sql.streaming.tws_tester import TwsTester
    from streaming.sinks.typed import unpack
    from streaming.spark.job_query import DirectoryProcessor
    values = [encode_rejected(_record(n, T0 + n * 1000)) for n in range(5)]
    rows = pa.Table.from_batches(list(job_batches(REJECTED_TOPIC, 0, [(n, None, b"psc9", v)
                                                                      for n, v in enumerate(values)])))
    frame = rows.to_pandas()
    frame = frame[frame["summary"].isna() & frame["clock_time"].isna()]
    frame = frame.assign(arrival_ms=lambda f: f["arrival_time"].astype("int64") // 1000)
    assert set(frame["operator_key"]) == {FINDING + "psc9"}
    tester = TwsTester(DirectoryProcessor(), timeMode="EventTime", eventTimeExtractor=lambda r: int(r["arrival_ms"]))
    outs = [tester.testInPandas(FINDING + "psc9", part.reset_index(drop=True)) for part in (frame[:2], frame[2:])]
    found = [[row for table, chunk in zip(out["table_name"], out["rows"]) if table == "security_findings"
              for batch in unpack(chunk) for row in batch.to_pylist()] for out in outs]
    assert [[r["count"] for r in f] for f in found] == [[2], [5]]
    assert json.loads(found[1][0]["evidence"])["last"]["offset"] == 4 and found[1][0]["source"] == "psc9"


def test_the_security_page_shows_where_in_kafka_and_in_the_capture_a_rejected_packet_is():
    from streaming.apps.dashboard_pages import evidence_text
    where = dict(evidence(REJECTED_TOPIC, 2, 11, None), capture="site.pcapng", position="packet 7 (TCP ...)")
    assert evidence_text(where) == "msmq.qb.rejected[2]@11 (site.pcapng:packet 7 (TCP ...))"
    assert evidence_text(evidence("msmq.cn.raw", 0, 5, "m-1")) == "msmq.cn.raw[0]@5 (m-1)"


def test_a_replay_publishes_each_rejected_packet_among_the_messages_of_its_time():
    """The job's event time follows what it has read: a rejected packet published after the whole
    capture's messages would be late for its finding."""
    from producers.publish import REJECTED, in_time_order
    items = [("mqcn", "qm", {"arrival_time": t}) for t in (10, 20, 30, 40)]
    rejected = [_record(1, 15), _record(2, 40), _record(3, 45)]
    merged = list(in_time_order(items, rejected))
    assert [(p, e["arrival_time"]) for p, _k, e in merged] == [
        ("mqcn", 10), (REJECTED, 15), ("mqcn", 20), ("mqcn", 30), ("mqcn", 40), (REJECTED, 40), (REJECTED, 45)]
    assert [k for p, k, _e in merged if p == REJECTED] == ["psc9"] * 3
