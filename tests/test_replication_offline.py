"""The replica state machine against the simulator's ground truth, without Spark or Kafka.

The simulator is an independent implementation of the authorities; the truth is what every
replica of a partition must end with (streaming/verify.py compares)."""
import functools

import pytest

from producers.simulator import Faults, Simulator
from replication_harness import OfflineJob
from streaming.verify import compare_replication
from streaming.wire.seqnum import seq_from_hex


@functools.lru_cache(maxsize=None)
def run(seed: int, count: int, reorder=0.0, duplicate=0.0, drop=0.0, nack=0.0, corrupt=0.0):
    sim = Simulator(seed=seed, faults=Faults(reorder=reorder, duplicate=duplicate, drop=drop, nack=nack,
                                             corrupt=corrupt))
    return [m.envelope for m in sim.messages(count)], sim.truth()


def differences(job: OfflineJob, truth: dict) -> list[str]:
    diffs, _ = compare_replication(truth, job.rows("directory_objects"), job.rows("deleted_objects"),
                                   job.rows("replication_partitions"))
    return diffs


def feed(job: OfflineJob, envelopes: list[dict], batch: int) -> None:
    for i in range(0, len(envelopes), batch):
        job.feed(envelopes[i:i + batch])
        job.run_until_quiet()


def test_reordered_and_duplicated_traffic_builds_every_replica_without_any_sync():
    envelopes, truth = run(5, 4000, reorder=0.2, duplicate=0.1, nack=0.01)
    job = OfflineJob(pec_name="pec0")                    # no authority answers
    feed(job, envelopes, 1000)
    assert differences(job, truth) == []
    assert len(job.rows("replication_partitions")) == 6 * 4          # 6 directory servers x 4 partitions
    pending = [r for r in job.rows("pending_changes")]
    assert pending and {r["status"] for r in pending} <= {"applied", "stale"}   # reordering went through Pending


@pytest.mark.parametrize("batch", [300, 100_000])
def test_dropped_propagations_heal_through_sync_requests(batch):
    envelopes, truth = run(3, 5000, reorder=0.1, duplicate=0.05, drop=0.05, nack=0.01, corrupt=0.01)
    assert truth["dropped"]
    without = OfflineJob(pec_name="pec0")
    feed(without, envelopes, batch)
    assert differences(without, truth), "drops must leave holes when nobody answers"
    job = OfflineJob(truth, pec_name="pec0")
    feed(job, envelopes, batch)
    assert differences(job, truth) == []
    assert any(r["operation"] == "SyncRequest" for r in job.outbound)


def test_a_replica_behind_the_purge_horizon_resynchronises_through_sync0():
    envelopes, truth = run(3, 5000)
    purged = {pid for pid, p in truth["partitions"].items() if seq_from_hex(p["purged_seq_number"]) > 0}
    assert purged, "the authorities must have purged something for this test"
    # bsc2-1 was offline for the first 60% of the run: everything it missed is behind the horizon
    cut = int(len(envelopes) * 0.6)
    late = [e for i, e in enumerate(envelopes) if i >= cut or e["destination_machine"] != "bsc2-1"]
    job = OfflineJob(truth, pec_name="pec0")
    feed(job, late, 100_000)                 # everything first, as one micro-batch; the answers after
    sync0 = [r for r in job.outbound if r["reason"] == "sync0"]
    assert sync0 and {r["server"] for r in sync0} == {"bsc2-1"} and {r["partition_id"] for r in sync0} <= purged
    assert all(r["detail"]["is_sync0"] == 1 for r in sync0)
    assert differences(job, truth) == []


def test_change_requests_are_forwarded_and_their_replies_relayed():
    envelopes, truth = run(3, 5000)
    job = OfflineJob(truth, pec_name="pec0")
    feed(job, envelopes, 1000)
    forwards = [r for r in job.outbound if r["reason"] == "forward"]
    replies = [r for r in job.outbound if r["operation"] == "ChangeReply"]
    assert forwards and replies
    assert all(r["detail"]["status"] == "MQ_OK" for r in replies)
    assert {r["destination"] for r in replies} <= {s for s, i in truth["servers"].items() if i["role"] == "BSC"}
