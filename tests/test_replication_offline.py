"""The replica state machine against the simulator's ground truth, without Spark or Kafka.

The simulator is an independent implementation of the authorities; the truth is what every
replica of a partition must end with (streaming/apps/verify.py compares)."""
import functools
from collections import Counter

import pytest

import producers.responder as responder

from producers.simulator import Faults, Simulator
from replication_harness import OfflineJob
from streaming.apps.verify import compare_notifications, compare_replication
from streaming.wire.seqnum import seq_from_hex
from conftest import spies_on_calls


@functools.lru_cache(maxsize=None)
def run(seed: int, count: int, reorder=0.0, duplicate=0.0, drop=0.0, nack=0.0, corrupt=0.0, unauthenticated=0.0):
    sim = Simulator(seed=seed, faults=Faults(reorder=reorder, duplicate=duplicate, drop=drop, nack=nack,
                                             corrupt=corrupt, unauthenticated=unauthenticated))
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


@pytest.mark.parametrize("part_bytes", [2_000, None])
def test_a_replica_behind_the_purge_horizon_resynchronises_through_sync0(part_bytes, monkeypatch):
    if part_bytes is not None:          # many small parts, each asked for in turn (3.3.7.5)
        monkeypatch.setattr(responder, "SYNC_REPLY_BYTES", part_bytes)
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
    assert len(sync0) > (5 if part_bytes else 0)
    assert differences(job, truth) == []


@pytest.mark.parametrize("seed", [1, 4, 9])
def test_propagations_split_to_fit_a_record_build_every_replica(seed, monkeypatch):
    """A tick's changes in several ChangePropagation messages (as on the wall clock, where a tick holds
    seconds of real changes), the SeqNumberHeader with the last: every replica still ends as the truth,
    with drops, duplicates and reordering."""
    import producers.simulator as simulator
    monkeypatch.setattr(simulator, "RECORD_BODY_BYTES", simulator.PROPAGATION_ROOM + 3_000)
    sim = Simulator(seed=seed, faults=Faults(reorder=0.1, duplicate=0.05, drop=0.03), burst_rate=0.02)
    messages = list(sim.messages(5_000))
    truth = sim.truth()
    propagations = [m.envelope for m in messages if m.kind == "ChangePropagation"]
    ticks = Counter((e["source_machine"], e["destination_machine"], e["sent_time"]) for e in propagations)
    assert sum(n > 1 for n in ticks.values()) > 20
    assert max(len(e["body"]) for e in propagations) <= simulator.RECORD_BODY_BYTES
    job = OfflineJob(truth, pec_name="pec0")
    feed(job, [m.envelope for m in messages], 1000)
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


# ---------------------------------------------------------------- MQCN against the same truth
def notification_differences(job: OfflineJob, truth: dict) -> list[str]:
    job.fire_qm_timers(job.max_event_ms + 3_600_000)       # the quiet hour after the run
    diffs, _, _ = compare_notifications(truth, job.rows("queue_managers"), job.rows("qm_queues"),
                                     job.rows("notifications"))
    return diffs


@pytest.mark.parametrize("batch, drop", [(700, 0.05), (100_000, 0.0)])
def test_queue_managers_end_with_their_queues_whatever_the_micro_batches(batch, drop):
    """One micro-batch with the whole history is left without drops: a replica that stalls at a gap
    shows the healed objects only from its sync reply's time, after the queue managers' last window
    (docs/design.md, MQCN operator: limits)."""
    envelopes, truth = run(3, 5000, reorder=0.1, drop=drop, unauthenticated=0.05)
    assert truth["discarded_notifications"]
    assert {qm["notification_version"] for qm in truth["queue_managers"].values()} == {"v1", "v2"}
    job = OfflineJob(truth, pec_name="pec0")
    feed(job, envelopes, batch)
    assert notification_differences(job, truth) == []
    batches = job.rows("notification_batches")
    assert any(b["refresh_all"] for b in batches) and any(not b["refresh_all"] for b in batches)
    outcomes = {r["outcome"] for r in job.rows("notifications")}
    assert {"applied", "discarded", "superseded-by-refresh"} <= outcomes
    existing = {g for qm in truth["queue_managers"].values() for g in qm["queues"]}
    assert not [r for r in job.rows("notifications") if r["outcome"] == "unresolved" and r["object_guid"] in existing]


def test_a_quiet_directory_processes_each_notification_after_one_minute():
    envelopes, truth = run(8, 2500)
    job = OfflineJob(truth, pec_name="pec0")
    feed(job, envelopes, 1000)
    assert notification_differences(job, truth) == []
    first = {}
    for b in sorted(job.rows("notification_batches"), key=lambda b: b["fired_at"]):
        first.setdefault(b["queue_manager"], b)
    for b in first.values():             # each queue manager's first window: one minute after it started
        from datetime import datetime
        started, fired = (datetime.fromisoformat(b[k]) for k in ("timer_started", "fired_at"))
        assert (fired - started).total_seconds() == 60


# ---------------------------------------------------------------- the same tables whatever the micro-batches
def _tables_after(envelopes: list[dict], cuts: list[int], first_arrivals: bool = False) -> dict:
    job = OfflineJob(pec_name="pec0", first_arrivals=first_arrivals)
    bounds = [0] + sorted(set(cuts)) + [len(envelopes)]
    for lo, hi in zip(bounds, bounds[1:]):
        if hi > lo:
            job.feed(envelopes[lo:hi])
    end = job.max_event_ms + 3_600_000                 # the quiet hour after the run
    job.fire_timers(end)
    job.fire_qm_timers(end)
    return job.tables


@pytest.mark.parametrize("seed", range(10))
def test_the_same_traffic_in_random_micro_batches_gives_the_same_tables(seed):
    """Both operators as the job drives them (each key's input in event-time order, timers first):
    every table is the same whole, in random micro-batches and one message at a time."""
    import random
    envelopes, _ = run(40 + seed, 1500, reorder=0.1, duplicate=0.05, drop=0.03, nack=0.01, corrupt=0.01,
                       unauthenticated=0.05)
    rng = random.Random(seed)
    whole = _tables_after(envelopes, [])
    assert whole["notifications"] and whole["directory_objects"] and whole["outbound_messages"]
    assert _tables_after(envelopes, rng.sample(range(1, len(envelopes)), rng.randint(2, 60))) == whole
    if seed < 2:
        assert _tables_after(envelopes, list(range(1, len(envelopes)))) == whole


# ---------------------------------------------------------------- the MQCN operator needs only first arrivals
MQCN_TABLES = ("queue_managers", "qm_queues", "notifications", "notification_batches")


def _mqcn_tables(envelopes, truth, cuts, first_arrivals: bool, tasks: int = 0, seed: int = 0) -> tuple[dict, int]:
    job = OfflineJob(truth, pec_name="pec0", first_arrivals=first_arrivals, tasks=tasks, seed=seed)
    bounds = [0] + sorted(set(cuts)) + [len(envelopes)]
    for lo, hi in zip(bounds, bounds[1:]):
        if hi > lo:
            job.feed(envelopes[lo:hi])
            job.run_until_quiet()
    end = job.max_event_ms + 3_600_000                 # the quiet hour after the run
    job.fire_timers(end)
    job.fire_qm_timers(end)
    return {t: job.tables.get(t) for t in MQCN_TABLES}, job.versions_published, job.versions_dropped_in_tasks


@pytest.mark.parametrize("seed", range(12))
def test_the_first_arrival_of_each_version_gives_the_mqcn_operator_the_same_tables(seed):
    """The replication writer passes the MQCN operator only the first arrival of each
    version across the replicas (FirstArrivals). Against every version, over random traffic with
    every fault, sync heals from the authorities and random micro-batches: every MQCN table is the
    same, and far fewer versions travel."""
    import random
    rng = random.Random(seed)
    envelopes, truth = run(60 + seed, 1200, reorder=0.1, duplicate=0.05, drop=0.03 * (seed % 3), nack=0.01,
                           corrupt=0.01, unauthenticated=0.05)
    cuts = rng.sample(range(1, len(envelopes)), rng.randint(1, 40))
    every, published_every, _ = _mqcn_tables(envelopes, truth, cuts, first_arrivals=False)
    first, published_first, _ = _mqcn_tables(envelopes, truth, cuts, first_arrivals=True)
    assert every["notifications"] and every["qm_queues"]
    assert first == every
    assert published_first < 0.7 * published_every
    # each micro-batch's replicas spread over 1-4 reading tasks at random, each task dropping the
    # copies its own earlier output makes redundant (FirstArrivals.pre_select): the same tables again
    in_tasks, published_in_tasks, dropped = _mqcn_tables(envelopes, truth, cuts, first_arrivals=True,
                                                         tasks=1 + seed % 4, seed=seed)
    assert in_tasks == every
    assert published_in_tasks == published_first
    # and every replica in one task, where pre_select sees every copy (a few replicas per task may
    # leave it nothing to drop)
    one_task, published_one_task, dropped_in_one = _mqcn_tables(envelopes, truth, cuts, first_arrivals=True,
                                                                tasks=1, seed=seed)
    assert one_task == every and published_one_task == published_first and dropped + dropped_in_one > 0


def test_first_arrivals_pass_an_earlier_or_different_copy_and_machines_without_a_quota():
    from streaming.operators.notification_rows import FirstArrivals, version_record

    def row(server, t, seq="0000000000000005", props=None, object_type="queue"):
        props = props if props is not None else {"PROPID_Q_QUOTA": 1, "PROPID_Q_QMID": "q"}
        return version_record({"server": server, "object_guid": "g", "partition_id": "p", "object_type": object_type,
                               "path_name": "m\\q", "seq_number": seq, "deleted": False, "properties": props,
                               "updated_at": f"2026-01-01T00:00:{t:02d}.000+00:00"})
    f = FirstArrivals()
    assert f.select([row("b", 20), row("a", 10)]) == [row("a", 10)]          # the earliest copy only
    assert f.select([row("c", 30)]) == []                                     # a later copy: nothing new
    assert f.select([row("d", 5)]) == [row("d", 5)]                           # an earlier one: passed
    assert f.select([row("e", 40, props={"PROPID_Q_QUOTA": 2, "PROPID_Q_QMID": "q"})]) != []   # other content
    assert f.select([row("f", 41, seq="0000000000000006")]) != []             # another version: passed
    machine = row("a", 10, object_type="machine", props={"PROPID_QM_PATHNAME": "m"})
    assert f.select([machine]) and f.select([row("b", 10, object_type="machine", props={"PROPID_QM_PATHNAME": "m"})])
    small = FirstArrivals(capacity=2)
    for seq in ("01", "02", "03"):
        small.select([row("a", 10, seq=seq)])
    assert small.select([row("b", 20, seq="01")]) != [] and small.select([row("b", 20, seq="03")]) == []


def test_first_arrivals_forget_their_oldest_entry_first_like_a_list_would():
    """The bounded memory against a plain list model (oldest first, a passed copy moved to the end),
    over random keys and times with small capacities: the same copies passed."""
    import random
    from streaming.operators.notification_rows import FirstArrivals
    for seed in range(40):
        rng = random.Random(seed)
        capacity = rng.randrange(1, 6)
        arrivals, model = FirstArrivals(capacity), []
        for _ in range(300):
            key, ms = rng.choice(["", *(f"k{i}" for i in range(8))]), rng.randrange(20)
            known = dict(model)
            expected = not key or key not in known or ms < known[key]
            if key and expected:
                model = [(k, t) for k, t in model if k != key] + [(key, ms)]
                model = model[-capacity:]
            assert arrivals.keep(key, ms) == expected, (seed, key, ms)


@spies_on_calls
def test_a_published_version_is_its_directory_objects_row_as_json():
    """The replication operator builds the published record itself, memoised by content across the
    replicas (replication_rows.published_version): it must equal the reference built from the
    directory_objects row (notification_rows.version_record), whose text is exactly the row's JSON,
    which the MQCN operator orders same-time versions by, for every version of a simulated history."""
    import json
    from streaming.operators import replication_rows
    from streaming.operators.notification_rows import version_record
    envelopes, truth = run(3, 1500, reorder=0.1, drop=0.05)
    job = OfflineJob(truth, pec_name="pec0")
    pairs = []
    original = replication_rows.version_rows

    def spy(r, versions, contents):
        published = original(r, versions, contents)
        records = iter(p for _t, p in published)
        for guid, obj, removed, at, _kind in versions:
            reference = replication_rows._object_row(r, guid, obj, removed, at)
            pairs.append((reference, replication_rows.published_version(r.name, guid, obj, removed, at)))
            # directory_history's properties: the sorted JSON text the sink stores
            history = replication_rows._content(guid, obj, removed)[3]
            assert history["properties"] == json.dumps(reference["properties"], sort_keys=True, default=str)
            if pairs[-1][1] is not None:        # what the step published is that record, in order
                assert next(records) == pairs[-1][1]
        assert next(records, None) is None
        return published
    replication_rows.version_rows = spy
    size = replication_rows._CONTENT_MEMO_SIZE
    replication_rows._CONTENT_MEMO_SIZE = 300        # far fewer than the history's versions: it forgets
    try:
        feed(job, envelopes, 500)
        assert len(replication_rows._CONTENT_MEMO) == 300
    finally:
        replication_rows.version_rows = original
        replication_rows._CONTENT_MEMO_SIZE = size
    assert len([p for _row, p in pairs if p]) > 1000
    for row, fast in pairs:
        reference = version_record(row)
        assert fast == reference
        assert (reference is None) == (row["object_type"] not in ("queue", "machine")
                                       or not (row["properties"].get("PROPID_Q_QMID") if row["object_type"] == "queue"
                                               else row["object_guid"]))
        if reference:
            assert reference.text == json.dumps(row) and json.loads(reference.text) == row


def test_what_the_protocol_cannot_bring_back_is_named_by_the_truth_and_nothing_else_differs():
    """A long run with drops, the authorities answering as they are while the traffic goes on (as
    `produce simulate --respond` does in the soak): a change lost with a dropped propagation that a
    later change of the same object keeps out of every sync reply (MC-MQDSRP 3.2.7.3) is listed in
    the truth's `unreachable`; every other difference must be zero, over several seeds."""
    from producers.responder import live_authorities
    explained_total = 0
    for seed in range(4):
        sim = Simulator(seed=seed, faults=Faults(reorder=0.1, duplicate=0.05, drop=0.05, nack=0.01, corrupt=0.01),
                        op_interval_ms=(100, 500))
        job = OfflineJob(pec_name="pec0")
        job.authorities = live_authorities(sim)
        chunk = []
        for m in sim.messages(15_000):
            chunk.append(m.envelope)
            if len(chunk) == 500:
                job.feed(chunk)
                job.run_until_quiet(rounds=1000)    # a full pending collection drops changes: a round a hole
                chunk = []
        job.feed(chunk)
        job.run_until_quiet(rounds=1000)
        truth, explained = sim.truth(), []
        diffs, _ = compare_replication(truth, job.rows("directory_objects"), job.rows("deleted_objects"),
                                       job.rows("replication_partitions"), explained,
                                       [r for r in job.rows("pending_changes") if r["status"] == "dropped"])
        assert diffs == [], (seed, diffs[:5])
        assert all(" is " in d or " missing " in d for d in explained)
        explained_total += len(explained)
    assert explained_total > 0, "the runs must reach the protocol's limit for this test to mean anything"


def test_a_value_whose_change_was_discarded_as_stale_after_a_sync_is_the_protocols_limit(tmp_path):
    """A replica holds a change pending (a gap before it), asks for a sync, and the authority, answering
    after a later change of the same object, leaves the object out of the window (3.2.7.3); the sync
    reply moves LastSeqNumber past the pending change, which is discarded as stale, and the later
    change, partial, does not carry the value. Found by the short soak (bsc2-1 kept a queue's old
    label). The judge explains a differing value only when the change that set it was discarded as
    stale (or dropped) at that replica, not when it was applied."""
    import json
    from streaming.apps.verify import check_replication
    from streaming.sinks import open_sink
    sim = Simulator(seed=5, faults=Faults(reorder=0.1, duplicate=0.05), op_interval_ms=(100, 500))
    job = OfflineJob(pec_name="pec0")
    job.feed([m.envelope for m in sim.messages(3000)])
    job.run_until_quiet(rounds=1000)
    truth = sim.truth()
    objects = job.rows("directory_objects")
    args = (job.rows("deleted_objects"), job.rows("replication_partitions"))
    assert compare_replication(truth, objects, *args, [], [])[0] == []
    # the lost value, as the soak found it: one replica's copy keeps an older label
    def props_of(o) -> dict:
        return json.loads(o["properties"]) if isinstance(o["properties"], str) else dict(o["properties"])

    row = next(o for o in objects if not o["deleted"] and o["server"] != "pec0" and "PROPID_Q_LABEL" in props_of(o))
    props = props_of(row)
    props["PROPID_Q_LABEL"] = "an older label"
    tampered = [dict(o, properties=json.dumps(props)) if o is row else o for o in objects]
    setter = truth["set_by"][row["object_guid"]]["properties"]["PROPID_Q_LABEL"]
    pending = {"server": row["server"], "partition_id": row["partition_id"], "seq_number": setter}
    for status, judged in (("stale", "explained"), ("dropped", "explained"), ("applied", "a difference")):
        sink = open_sink(f"sqlite:///{tmp_path}/{status}.db")          # verify reads the sink's tables
        try:
            assert sink.write_batch("q", 0, {
                "directory_objects": [dict(o, properties=props_of(o)) for o in tampered], "deleted_objects": args[0], "replication_partitions": args[1],
                "pending_changes": [dict(pending, status=status, previous_seq_number=None, command="update",
                                         object=row["object_guid"])]})
            diffs, _, explained = check_replication(truth, sink)
        finally:
            sink.close()
        assert (len(explained), len(diffs)) == ((1, 0) if judged == "explained" else (0, 1)), (status, diffs)
