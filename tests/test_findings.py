"""Security findings against the simulator's ground truth (sans-IO, without Spark): every injected
attack is found with its evidence, however the micro-batches fall; traffic with every ordinary
fault but no attack gives none."""
import random
from collections import Counter

import pytest

from producers.simulator import ATTACKS, FLOOD_COPIES, Faults, Simulator
from replication_harness import OfflineJob
from streaming.operators.findings import BUCKET_MS, FLOOD_PER_MINUTE, FindingLog

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
    job, truth = _run(seed, 6000, ORDINARY_FAULTS, frozenset(ATTACKS))
    found = _findings(job)
    injected = Counter(a["kind"] for a in truth["attacks"])
    assert set(injected) == set(ATTACKS), injected
    for kind in ("dsrp-unsigned", "mqcn-unauthenticated"):
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


def test_findings_are_the_same_however_the_micro_batches_fall():
    whole, _ = _run(7, 5000, ORDINARY_FAULTS, frozenset(ATTACKS))
    assert _findings(whole)
    for cuts in (5, 40):
        cut, _ = _run(7, 5000, ORDINARY_FAULTS, frozenset(ATTACKS), cuts)
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
