"""Security findings against the simulator's ground truth (sans-IO, without Spark): every injected
attack is found with its evidence, however the micro-batches fall; traffic with every ordinary
fault but no attack gives none."""
import random
from collections import Counter

import pytest

from producers.simulator import FLOOD_COPIES, MESSAGE_ATTACKS, Faults, Simulator
from replication_harness import OfflineJob
from streaming.operators.findings import BUCKET_MS, FLOOD_PER_MINUTE, FindingLog
from conftest import spies_on_calls

ORDINARY_FAULTS = Faults(reorder=0.1, duplicate=0.05, drop=0.03, corrupt=0.01, nack=0.01)


def _run(seed: int, count: int, faults: Faults, attacks=frozenset(), cuts: int = 0) -> tuple[OfflineJob, dict]:
    sim = Simulator(seed=seed, faults=faults, burst_rate=0.01, attacks=attacks)
    envelopes = [m.envelope for m in sim.messages(count)]
    truth = sim.truth()
    job = OfflineJob(truth, pec_name="pec0")
    rng = random.Random(seed)
    bounds = [0] + sorted(rng.sample(range(1, len(envelopes)), cuts)) + [len(envelopes)]
    for lo, hi in zip(bounds, bounds[1:]):
        job.feed(envelopes[lo:hi])
        job.run_until_quiet()
    job.fire_timers(job.max_event_ms + 3_600_000)
    job.fire_qm_timers(job.max_event_ms + 3_600_000)
    return job, truth


def _findings(job: OfflineJob) -> list[dict]:
    return sorted(job.rows("security_findings"), key=lambda r: (r["kind"], r["source"], r["target"], r["bucket"]))


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_traffic_with_every_ordinary_fault_gives_no_finding(seed):
    job, truth = _run(seed, 6000, ORDINARY_FAULTS)
    assert truth["counts"]["mqcn"] > 1000
    assert _findings(job) == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_injected_attack_is_found_with_its_evidence(seed):
    job, truth = _run(seed, 6000, ORDINARY_FAULTS, frozenset(MESSAGE_ATTACKS))
    found = _findings(job)
    injected = Counter(a["kind"] for a in truth["attacks"])
    assert set(injected) == set(MESSAGE_ATTACKS), injected
    for kind in ("dsrp-unsigned", "dsrp-unknown-sender", "mqsd-rogue-reply", "mqcn-unauthenticated"):
        rows = [r for r in found if r["kind"] == kind]
        assert sum(r["count"] for r in rows) == injected[kind], kind
        evidence = {e["message_id"] for r in rows for e in (r["evidence"]["first"], r["evidence"]["last"])}
        attacks = [a for a in truth["attacks"] if a["kind"] == kind]
        assert evidence <= {a["message_id"] for a in attacks}
        for a in attacks:
            (row,) = [r for r in rows if (r["source"], r["target"]) == (a["source"], a["target"])
                      and r["bucket"].startswith(_hour(a["arrival_ms"]))]
            assert row["severity"] and row["first_seen"] <= _iso(a["arrival_ms"]) <= row["last_seen"]
    floods = [r for r in found if r["kind"] == "mqcn-flood"]
    for a in (a for a in truth["attacks"] if a["kind"] == "mqcn-flood"):
        (row,) = [r for r in floods if r["target"] == a["target"] and r["source"] == a["source"]
                  and r["bucket"].startswith(_hour(a["arrival_ms"]))]
        assert row["count"] >= FLOOD_COPIES - FLOOD_PER_MINUTE
        assert row["detail"]["most_in_a_minute"] > FLOOD_PER_MINUTE
        assert row["evidence"]["first"]["message_id"] == a["message_id"]


@pytest.mark.parametrize("seed", [40, 41, 42])
def test_traffic_without_the_responder_gives_no_finding(seed):
    """Without the authorities answering, the replicas learn the directory from the propagations
    alone (heavy drops: gaps nobody fills); a sender is still known to some replica within the
    registry's grace, with and without --pec-name."""
    sim = Simulator(seed=seed, faults=Faults(drop=0.1, reorder=0.2, duplicate=0.1), burst_rate=0.01)
    envelopes = [m.envelope for m in sim.messages(8000)]
    job = OfflineJob(None, pec_name="pec0" if seed % 2 else None)
    for lo in range(0, len(envelopes), 700):
        job.feed(envelopes[lo:lo + 700])
    job.fire_timers(job.max_event_ms + 3_600_000)
    job.fire_qm_timers(job.max_event_ms + 3_600_000)
    assert _findings(job) == []


def test_the_registry_decides_after_its_grace_with_what_any_replica_knew_by_then():
    """A check waits DECIDE_AFTER_MS of event time; a name some replica announced by then (or the
    configured PEC) is a directory server; one announced later is not, however the rows came."""
    from streaming.operators.notification_input import Row
    from streaming.operators.server_registry import (DECIDE_AFTER_MS, Check, ServerRegistry, advance, check_text,
                                                     fact_text)

    def row(at, text):
        return Row(at, "server_registry", None, None, None, text.encode(), None, None, None, None, None, None)
    t = 1_000_000
    held = [row(t, check_text(Check("dsrp-unknown-sender", t, "bsc9", "psc1", ["bsc9"], {"offset": 1}))),
            row(t, check_text(Check("dsrp-unknown-sender", t, "PSC7", "pec0", ["PSC7"], {"offset": 2}))),
            row(t, check_text(Check("mqsd-rogue-reply", t, "10.0.0.9", "10.1.0.5", ["10.0.0.9", "pec0"],
                                    {"offset": 3}))),
            row(t + DECIDE_AFTER_MS - 1, fact_text("psc7")),             # in time, another case
            row(t + DECIDE_AFTER_MS + 1, fact_text("bsc9"))]             # too late
    for cut in (0, 2, 4, 5):
        registry = ServerRegistry.from_bytes(None, configured=("pec0",))
        registry, waiting = advance(registry, held[:cut], t + DECIDE_AFTER_MS - 1)
        assert registry.findings.rows() == [] and registry.next_timer_ms() == (t + DECIDE_AFTER_MS if cut else None)
        registry = ServerRegistry.from_bytes(registry.to_bytes(), configured=("pec0",))   # a checkpoint
        registry, waiting = advance(registry, waiting + held[cut:], t + DECIDE_AFTER_MS + 5)
        found = {(r["kind"], r["source"]): r["detail"] for _t, r in registry.findings.rows()}
        assert found == {("dsrp-unknown-sender", "bsc9"): {"not_directory_servers": ["bsc9"]},
                         ("mqsd-rogue-reply", "10.0.0.9"): {"not_directory_servers": ["10.0.0.9"]}}
        assert registry.checks == [] and registry.next_timer_ms() is None


def test_a_machine_object_names_its_addresses_and_a_broken_blob_ends_the_walk():
    from streaming.operators.server_registry import ip_addresses, servers_named
    from streaming.wire.propids import propid
    two = bytes([4, 0, 1, 0, 10, 1, 0, 7]) + bytes([10, 0, 2, 0]) + bytes(10) + bytes([4, 0, 1, 0, 10, 2, 0, 9])
    assert ip_addresses(two) == ["10.1.0.7", "10.2.0.9"]                   # an IPX address between them
    assert ip_addresses(bytes([4, 0, 1, 0, 10, 1, 0, 7, 9, 0, 1, 0, 1])) == ["10.1.0.7"]   # cut short
    assert ip_addresses("not a blob") == [] and ip_addresses(b"") == []
    machine = {propid("QM_PATHNAME"): "bsc1-1", propid("QM_SERVICE"): 0x2, propid("QM_ADDRESS"): two}
    assert servers_named(2, machine) == ["bsc1-1", "10.1.0.7", "10.2.0.9"]
    assert servers_named(2, {**machine, propid("QM_SERVICE"): 0x1}) == []          # a routing server
    assert servers_named(3, {propid("S_PSC"): "psc1"}) == ["psc1"]
    assert servers_named(6, {propid("E_PECNAME"): "pec0"}) == ["pec0"]


def test_evidence_names_the_capture_position_a_capture_producer_put_in_the_record():
    from streaming.operators.findings import evidence
    from streaming.wire.topics import capture_header
    header = capture_header("/data/dc1.pcapng:packet 812 (TCP 10.1.0.5:49152 > 10.1.0.1:1801, stream byte 4096)")
    assert evidence("msmq.dsrp.raw", 2, 40, "m1", header.decode()) == {
        "topic": "msmq.dsrp.raw", "partition": 2, "offset": 40, "message_id": "m1", "capture": "/data/dc1.pcapng",
        "position": "packet 812 (TCP 10.1.0.5:49152 > 10.1.0.1:1801, stream byte 4096)"}
    assert evidence("t", 0, 1, None, capture_header("eth0:packet 3").decode())["capture"] == "eth0"
    assert evidence("t", 0, 1, None, "not json")["capture"] == "not json"      # another producer's header
    assert "capture" not in evidence("t", 0, 1, None)


def test_findings_are_the_same_however_the_micro_batches_fall():
    whole, _ = _run(7, 5000, ORDINARY_FAULTS, frozenset(MESSAGE_ATTACKS))
    assert _findings(whole)
    for cuts in (5, 40):
        cut, _ = _run(7, 5000, ORDINARY_FAULTS, frozenset(MESSAGE_ATTACKS), cuts)
        assert _findings(cut) == _findings(whole)


def test_an_aggregate_keeps_its_first_evidence_its_count_and_its_peak():
    log = FindingLog()
    for i, at in enumerate((10, 5, 30)):
        log.record("mqcn-flood", "ds1", "qm1", BUCKET_MS + at, {"offset": i}, {"limit": 1}, most={"peak": 7 - i})
    (row,) = [r for _t, r in log.rows()]
    assert (row["count"], row["evidence"]["first"], row["evidence"]["last"]) == (3, {"offset": 0}, {"offset": 2})
    assert row["first_seen"].endswith("01:00:00.005+00:00") and row["last_seen"].endswith("01:00:00.030+00:00")
    assert row["detail"] == {"limit": 1, "peak": 7}
    assert log.rows() == []                               # only what was touched since
    again = FindingLog(log.to_list())
    again.record("mqcn-flood", "ds1", "qm1", BUCKET_MS + 40, {"offset": 3})
    assert [r["count"] for _t, r in again.rows()] == [4]
    again.forget(3 * BUCKET_MS)
    assert again.entries == {}
    with pytest.raises(ValueError, match="unknown finding kind"):
        log.record("made-up", None, "qm1", 0, {})


def _hour(ms: int) -> str:
    return _iso(ms - ms % BUCKET_MS)[:13]


def _iso(ms: int) -> str:
    from datetime import datetime, timezone
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")


@pytest.mark.parametrize("faults", [Faults(), ORDINARY_FAULTS])
def test_attacks_leave_the_seeds_own_traffic_as_it_is(faults):
    """The copies come on top: the traffic's messages, their times and every random draw are the same."""
    def traffic(attacks):
        sim = Simulator(seed=4, faults=faults, burst_rate=0.01, attacks=attacks)
        return [(m.kind, m.envelope["message_id"], m.envelope["arrival_time"], m.envelope["body"])
                for m in sim.messages(5000) if not m.kind.startswith("attack:")]
    assert traffic(frozenset(MESSAGE_ATTACKS)) == traffic(frozenset())


def test_the_unauthenticated_fault_is_listed_and_found_as_a_finding():
    job, truth = _run(5, 5000, Faults(unauthenticated=0.05))
    listed = [a for a in truth["attacks"] if a["kind"] == "mqcn-unauthenticated"]
    assert listed and len(listed) == len(truth["discarded_notifications"])
    assert sum(r["count"] for r in _findings(job) if r["kind"] == "mqcn-unauthenticated") == len(listed)
    assert {r["kind"] for r in _findings(job)} == {"mqcn-unauthenticated"}


def test_a_flood_blames_its_sender_not_the_others_that_write_in_the_same_minute():
    from streaming.operators.notifications import Notification, QMState, QueueManager, Settings
    qm = QueueManager(QMState("qm1"), Settings(flood_per_minute=5))
    for i in range(8):
        qm.look_for_findings(Notification(f"m{i}", 1_000 + i, 2, None, "Sig20", "flooder"))
    qm.look_for_findings(Notification("legit", 2_000, 2, None, "Sig20", "ds1"))
    rows = [r for _t, r in qm.state.findings.rows()]
    assert [(r["kind"], r["source"], r["count"]) for r in rows] == [("mqcn-flood", "flooder", 3)]
    assert rows[0]["detail"] == {"per_minute_limit": 5, "most_in_a_minute": 8}


@spies_on_calls
def test_a_notification_that_raises_when_processed_is_counted_however_the_batches_fall(monkeypatch):
    """It arrived: an unauthenticated one is a finding whether it came in an earlier micro-batch than
    the timer that raised on it, or in the same one (the batch is then applied again without it)."""
    import pickle
    from replication_harness import arrival_ms
    from streaming.operators.notification_input import Row, advance
    from streaming.operators.notifications import QMState, QueueManager
    sim = Simulator(seed=3, attacks=frozenset({"mqcn-unauthenticated"}))
    envelopes = [m.envelope for m in sim.messages(3000)]
    victim = sim.truth()["attacks"][0]
    rows = [Row(arrival_ms(e), "mqcn", "msmq.cn.raw", 0, i, e["body"], e["message_id"], e["sender_identifier_type"],
                e["authentication_level"], e["source_machine"], e["destination_machine"], e["destination_queue"])
            for i, e in enumerate(envelopes) if e["protocol"].lower() == "mqcn" and victim["target"] in
            e["destination_queue"]]
    rejection = QueueManager._v1_rejection

    def raising(self, n):
        if n.message_id == victim["message_id"]:
            raise RuntimeError("poison")
        return rejection(self, n)
    monkeypatch.setattr(QueueManager, "_v1_rejection", raising)
    at = next(i for i, r in enumerate(rows) if r.message_id == victim["message_id"]) + 1
    counts = []
    for batches in ([rows], [rows[:at], rows[at:]]):
        stored, found, poisoned = None, {}, 0
        for i, batch in enumerate(batches):
            watermark = batch[-1].event_ms + (3_600_000 if i == len(batches) - 1 else 0)
            qm, bad_rows, bad_pending = advance(
                lambda: QueueManager(pickle.loads(stored) if stored else QMState(victim["target"])), batch, watermark)
            poisoned += len(bad_rows) + len(bad_pending)
            found.update({(r["kind"], r["source"], r["bucket"]): r["count"] for _t, r in qm.state.findings.rows()})
            stored = pickle.dumps(qm.state)
        assert poisoned == 1
        counts.append(sum(n for (kind, _s, _b), n in found.items() if kind == "mqcn-unauthenticated"))
    assert counts[0] == counts[1] >= 1


def test_the_attacks_leave_every_replica_and_queue_manager_as_the_truth_says():
    """Each attack is extra copies the protocols leave the directory's state unchanged by: with
    every attack and every ordinary fault, the replicas and the queue managers still end exactly
    as the ground truth."""
    from test_replication_offline import differences, notification_differences
    job, truth = _run(8, 5000, ORDINARY_FAULTS, frozenset(MESSAGE_ATTACKS))
    assert {a["kind"] for a in truth["attacks"]} == set(MESSAGE_ATTACKS)
    assert differences(job, truth) == [] and notification_differences(job, truth) == []


def test_verify_holds_the_findings_to_the_attacks_the_truth_lists():
    """`dirstream verify`'s findings check: with every attack, what the job found is what was injected;
    without, nothing; a finding no attack explains, or one not found, is a difference."""
    from streaming.apps.verify import compare_findings
    job, truth = _run(2, 5000, ORDINARY_FAULTS, frozenset(MESSAGE_ATTACKS))
    rows = _findings(job)
    assert compare_findings(truth, rows) == ([], f"{len(truth['attacks'])} attacks injected, "
                                                 f"{len({(r['kind'], r['source'], r['target']) for r in rows})} "
                                                 f"findings (kind, source, target)")
    clean, clean_truth = _run(2, 3000, ORDINARY_FAULTS)
    assert compare_findings(clean_truth, _findings(clean))[0] == []
    # the unauthenticated fault's copies, some of them delivered twice: each arrival is listed and found
    twice, twice_truth = _run(1, 5000, Faults(duplicate=0.1, unauthenticated=0.05))
    listed = [a["message_id"] for a in twice_truth["attacks"]]
    assert len(listed) > len(set(listed)) and compare_findings(twice_truth, _findings(twice))[0] == []
    # the registry's findings of the traffic's last moments are decided with the next traffic: not
    # required, counted if found; one found that was not injected is still a difference
    rogue = [a for a in truth["attacks"] if a["kind"] == "mqsd-rogue-reply"]
    assert rogue
    ended = dict(truth, last_arrival_ms=max(a["arrival_ms"] for a in rogue))
    undecided = [r for r in rows if r["kind"] != "mqsd-rogue-reply"
                 or r["last_seen"] < _iso(ended["last_arrival_ms"] - 200_000)]
    diffs, summary = compare_findings(ended, undecided)
    assert diffs == [] and "within the last 120 s of the traffic" in summary
    stranger = dict(rogue[0], source="10.250.9.9", arrival_ms=0)
    assert compare_findings(ended, rows + [dict(rows[0], kind="mqsd-rogue-reply", source="10.250.9.9",
                                                target=stranger["target"], count=1)])[0] \
        == [f"mqsd-rogue-reply from 10.250.9.9 to {stranger['target']}: 1 messages found, no attack injected"]
    unsigned = next(r for r in rows if r["kind"] == "dsrp-unsigned")
    extra = dict(unsigned, source="psc-nobody")
    diffs, _ = compare_findings(truth, [r for r in rows if r is not unsigned] + [extra])
    assert any("not found" in d or "found" in d and unsigned["source"] in d for d in diffs), diffs
    assert f"dsrp-unsigned from psc-nobody to {unsigned['target']}: {unsigned['count']} messages found, " \
           "no attack injected" in diffs


def test_the_server_registry_in_the_second_operator_finds_and_never_fails_the_batch(monkeypatch):
    """The registry's key of the job's second operator: facts and checks wait for the watermark, a
    check is decided after the grace (a finding row), and a registry that raises leaves a dead
    letter instead of failing the micro-batch."""
    import pandas as pd
    from pyspark.sql.streaming.tws_tester import TwsTester
    from streaming.operators.notification_input import ROW_FIELDS
    from streaming.operators.server_registry import DECIDE_AFTER_MS, Check, check_text, fact_text
    from streaming.spark import registry_query
    from streaming.spark.job_query import QueueManagerProcessor
    from streaming.operators.notifications import Settings
    from test_poison import outputs

    def frame(*rows):
        return pd.DataFrame([dict(dict.fromkeys(ROW_FIELDS), event_ms=at, kind="server_registry", body=text.encode())
                             for at, text in rows])
    t = 1_767_225_600_000
    tester = TwsTester(QueueManagerProcessor(Settings(), "pec0"), timeMode="EventTime",
                       eventTimeExtractor=lambda row: int(row["event_ms"]))
    rogue = Check("dsrp-unknown-sender", t, "rogue-ds1", "psc1", ["rogue-ds1"], {"offset": 7, "message_id": "m7"})
    known = Check("dsrp-unknown-sender", t, "bsc1-1", "psc1", ["bsc1-1"], {"offset": 8, "message_id": "m8"})
    assert outputs(tester.testInPandas(registry_query.SERVERS, frame(
        (t, check_text(rogue)), (t, check_text(known)), (t + 1_000, fact_text("bsc1-1"))))) == {}
    assert outputs(tester.setWatermark(t + DECIDE_AFTER_MS - 1)) == {}          # not yet: the grace
    found = outputs(tester.setWatermark(t + DECIDE_AFTER_MS + 5))
    assert [(r["kind"], r["source"], r["target"], r["count"]) for r in found["security_findings"]] == \
        [("dsrp-unknown-sender", "rogue-ds1", "psc1", 1)]

    def broken(*_args):
        raise RuntimeError("registry broken")
    monkeypatch.setattr(registry_query, "advance", broken)
    out = outputs(tester.testInPandas(registry_query.SERVERS, frame((t + DECIDE_AFTER_MS + 10, fact_text("x")))))
    (dead,) = out["dead_letters"]
    assert dead["stage"] == "operator:server-registry" and "registry broken" in dead["error"]
