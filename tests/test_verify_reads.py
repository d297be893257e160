"""`verify` judges what a queue manager could read from the replicas at its read times
(directory_history), without letting that weaker reading hide a defect.

Offline (the replication and MQCN operators driven as the job drives them, against the simulator's
independent truth): over many seeds with every fault, verify is clean and every difference from the
authority's final values is explained by replica lag; a tampered attribute, a read of a version
dated after the read, and a read that missed an earlier version still fail."""
import copy
import random

import pytest

from replication_harness import OfflineJob
from streaming.apps.verify import compare_notifications
from streaming.apps.verify_reads import ReplicaHistory
from test_replication_offline import run
from conftest import spies_on_calls


def _finished(seed: int, drop: float = 0.03, count: int = 1500, quiet_ms: int = 3_600_000,
              stopped_at: float = 1.0) -> tuple[OfflineJob, dict]:
    """A simulated enterprise with every fault, processed in random micro-batches with the
    authorities answering, then quiet_ms of event time after the run (the quiet hour: every
    queue manager's timers have fired). stopped_at < 1: only that share of the traffic, as a job
    stopped in the middle of the run sees it."""
    envelopes, truth = run(200 + seed, count, reorder=0.1, duplicate=0.05, drop=drop, nack=0.01, corrupt=0.01,
                           unauthenticated=0.05)
    envelopes = envelopes[:int(len(envelopes) * stopped_at)]
    rng = random.Random(seed)
    job = OfflineJob(truth, pec_name="pec0")
    cuts = sorted(rng.sample(range(1, len(envelopes)), rng.randint(1, 30)))
    for lo, hi in zip([0] + cuts, cuts + [len(envelopes)]):
        job.feed(envelopes[lo:hi])
        job.run_until_quiet()
    end = job.max_event_ms + quiet_ms
    job.fire_timers(end)
    job.fire_qm_timers(end)
    return job, truth


def _judged(job: OfflineJob, truth: dict, queues=None, managers=None, strict: bool = False):
    return compare_notifications(truth, managers if managers is not None else job.rows("queue_managers"),
                                 queues if queues is not None else job.rows("qm_queues"), job.rows("notifications"),
                                 None if strict else job.history, job.rows("notification_batches"))


# ---------------------------------------------------------------- the judge on hand-made histories
T0 = 1_767_225_600_000           # 2026-01-01T00:00:00Z


def _version(server, at, seq, props=None, kind="modified", guid="q1"):
    from streaming.operators.replication_rows import ts
    return {"server": server, "object_guid": guid, "seq_number": f"{seq:016x}", "kind": kind,
            "properties": props if props is not None else {"PROPID_Q_QUOTA": 1}, "valid_from": ts(T0 + at)}


def _queue_row(read_at, read_seq, since=(), **columns):
    from streaming.operators.replication_rows import ts
    return {"queue_manager": "m1", "queue_guid": "q1", "deleted": False, "read_at": ts(T0 + read_at),
            "read_seq": f"{read_seq:016x}", "since_read": list(since), "path_name": "qm1\\q", **columns}


def _truth(quota=2, queues=True):
    return {"queue_managers": {"m1": {"machine_name": "qm1", "notification_version": "v2", "quota": None,
                                      "journal_quota": None, "security": None,
                                      "queues": {"q1": {"path_name": "qm1\\q", "properties": {
                                          "PROPID_Q_PATHNAME": "qm1\\q", "PROPID_Q_QUOTA": quota}}} if queues else {}}}}


MANAGER = {"machine_id": "m1", "quota": None, "journal_quota": None, "security": None, "qm_read_at": None,
           "qm_read_seq": None, "qm_since_read": []}
HISTORY = [_version("dc1", 0, 5, {"PROPID_Q_PATHNAME": "qm1\\q", "PROPID_Q_QUOTA": 1}, "created"),
           _version("dc2", 10, 5, {"PROPID_Q_PATHNAME": "qm1\\q", "PROPID_Q_QUOTA": 1}, "created"),
           _version("dc2", 148, 6, {"PROPID_Q_PATHNAME": "qm1\\q", "PROPID_Q_QUOTA": 2}),
           _version("dc1", 300, 6, {"PROPID_Q_PATHNAME": "qm1\\q", "PROPID_Q_QUOTA": 2})]


def _compare(row, truth=None, history=HISTORY):
    return compare_notifications(truth or _truth(), [MANAGER], [row], [], history)


def _columns(**values):
    from streaming.operators.notification_rows import QUEUE_COLUMNS
    row = {col: None for col in QUEUE_COLUMNS.values()}
    row.update(values)
    return row


def test_a_value_read_before_any_replica_had_the_change_is_stale_by_replica_lag():
    row = _queue_row(100, 5, **_columns(path_name="qm1\\q", quota=1))
    diffs, summary, stale = _compare(row)
    assert diffs == []
    assert stale == ["qm1 (v2): queue q1 q_quota is 1, the authority's 2: stale by replica lag: 48 ms, read at "
                     "2026-01-01T00:00:00.100+00:00, the replica dc2 received the change at "
                     "2026-01-01T00:00:00.148+00:00"]
    assert "1 stale by replica lag" in summary
    strict, _, none = _compare(row, history=None)              # --strict-authority
    assert strict == ["qm1 (v2): queue q1 quota is 1, expected 2"] and none == []


def test_a_tampered_value_fails_even_where_the_read_was_stale():
    diffs, _, stale = _compare(_queue_row(100, 5, **_columns(path_name="qm1\\q", quota=7)))
    assert stale == [] and diffs == ["qm1 (v2): queue q1 q_quota is 7, but the version read at "
                                     "2026-01-01T00:00:00.100+00:00 (seq 0000000000000005) holds 1"]


def test_a_read_of_a_version_dated_after_the_read_fails_even_with_the_authoritys_value():
    diffs, _, stale = _compare(_queue_row(100, 6, **_columns(path_name="qm1\\q", quota=2)))
    assert stale == [] and diffs == ["qm1 (v2): queue q1 read at 2026-01-01T00:00:00.100+00:00 used seq "
                                     "0000000000000006, but the replicas held seq 0000000000000005 then (dc1)"]


def test_a_read_that_missed_a_version_the_replicas_held_fails():
    diffs, _, stale = _compare(_queue_row(200, 5, **_columns(path_name="qm1\\q", quota=1)))
    assert stale == [] and sorted(diffs) == [
        "qm1 (v2): queue q1 quota is 1, expected 2",
        "qm1 (v2): queue q1 read at 2026-01-01T00:00:00.200+00:00 used seq 0000000000000005, but the replicas "
        "held seq 0000000000000006 then (dc2)"]


def test_an_attribute_a_notification_set_is_not_excused_by_the_read():
    diffs, _, stale = _compare(_queue_row(100, 5, since=["PROPID_Q_QUOTA"], **_columns(path_name="qm1\\q", quota=1)))
    assert stale == [] and diffs == ["qm1 (v2): queue q1 quota is 1, expected 2"]


def test_a_queue_deleted_after_the_read_is_stale_and_one_deleted_before_it_is_not():
    deleted = HISTORY + [_version("dc1", 400, 6, {"PROPID_Q_QUOTA": 2}, "deleted")]
    row = _queue_row(350, 6, **_columns(path_name="qm1\\q", quota=2))
    diffs, _, stale = _compare(row, _truth(queues=False), deleted)
    assert diffs == [] and len(stale) == 1 and "is live, the authority deleted it: stale by replica lag: 50 ms" in stale[0]
    diffs, _, stale = _compare(dict(row, read_at=_queue_row(450, 6)["read_at"]), _truth(queues=False), deleted)
    assert stale == [] and any("is its deletion" in d for d in diffs)


# ---------------------------------------------------------------- the operator's reads, offline
def _read_differences(job: OfflineJob) -> tuple[list[str], int]:
    """What verify says about every recorded read (queues and queue managers), and how many there are."""
    from streaming.apps.verify_reads import ReadJudge, ReadRecord
    judge, reads = ReadJudge(ReplicaHistory(job.history)), 0
    for record in ([ReadRecord.of_queue(r) for r in job.rows("qm_queues")]
                   + [ReadRecord.of_manager(r) for r in job.rows("queue_managers")]):
        reads += record.read_ms is not None
        judge.read_version("qm", record.guid, record)
    return judge.diffs, reads


@pytest.mark.parametrize("seed", range(8))
def test_every_recorded_read_is_the_version_the_replicas_held_at_its_time(seed):
    """Over random traffic with every fault, authorities answering and random micro-batches, each
    read the MQCN operator records is the one verify recomputes from directory_history."""
    job, _truth = _finished(seed, drop=0.03 * (seed % 2))
    diffs, reads = _read_differences(job)
    assert reads > 20 and diffs == []


def _operator_rows(read_offset_ms: int = 0):
    """A v2 queue manager reads queue 1 at T0 + 50 ms (Event 1, processed on arrival); the replicas
    received quota 7 at T0 and quota 9 at T0 + 100 ms. read_offset_ms > 0: a defective operator
    that reads the directory that much later than it should."""
    from streaming.operators.notification_rows import step_rows
    from test_notifications import QM, T0 as AT, at_arrival, batched, guid, queue_version, v2
    qm = batched()
    if read_offset_ms:
        honest = qm.read
        qm.read = lambda g, as_of_ms: honest(g, as_of_ms + read_offset_ms)
    versions = [queue_version(1, AT, 5, Q_QUOTA=7), queue_version(1, AT + 100, 6, Q_QUOTA=9)]
    for v in versions:
        qm.directory_object(guid(1), v)
    at_arrival(qm, v2(1, guid(1), AT + 50))
    rows = step_rows(qm)
    history = [{"server": v.server, "object_guid": guid(1), "seq_number": f"{v.seq_number:016x}", "kind": "modified",
                "properties": v.properties, "valid_from": datetime_of(v.event_ms)} for v in versions]
    truth = {"queue_managers": {QM: {"machine_name": "qm", "notification_version": "v2", "quota": None,
                                     "journal_quota": None, "security": None, "queues": {guid(1): {
                                         "path_name": "qm\\q1", "properties": versions[-1].properties}}}}}
    managers = [dict(r, quota=None) for t, r in rows if t == "queue_managers"] or [
        {"machine_id": QM, "quota": None, "journal_quota": None, "security": None}]
    return compare_notifications(truth, managers, [r for t, r in rows if t == "qm_queues"], [], history)


def datetime_of(ms: int):
    from datetime import datetime, timezone
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


@spies_on_calls                 # a defective queue manager: its read replaced on the instance
def test_an_operator_that_reads_versions_dated_after_the_read_fails():
    diffs, _, stale = _operator_rows()
    assert diffs == [] and len(stale) == 1 and "q_quota is 7, the authority's 9: stale by replica lag: 50 ms" in stale[0]
    diffs, _, stale = _operator_rows(read_offset_ms=60_000)            # reads quota 9, dated after the read
    assert stale == [] and len(diffs) == 1 and "used seq 0000000000000006, but the replicas held seq " \
        "0000000000000005 then" in diffs[0]


# ---------------------------------------------------------------- verify clean under every fault
@pytest.mark.parametrize("seed", range(12))
def test_verify_is_clean_under_every_fault_and_explains_what_it_excuses(seed):
    """Random traffic with every fault (reordered, duplicated, dropped, corrupt, unauthenticated,
    NACKed), authorities answering, random micro-batches, the quiet hour after: no difference, and
    what differs from the authority's final values is listed as explained (replica lag, or the
    order the notifications were delivered in), never silently accepted."""
    job, truth = _finished(seed, drop=0.03 * (seed % 2))
    diffs, summary, explained = _judged(job, truth)
    assert diffs == [], diffs[:5]
    strict, _, _ = _judged(job, truth, strict=True)
    assert len(explained) == len(strict), (explained, strict)        # each strict difference explained once
    assert all(": stale by replica lag: " in e or ": as delivered, " in e for e in explained)
    assert f"{sum(': as delivered, ' in e for e in explained)} as delivered" in summary


def test_the_faults_make_verify_explain_something():
    """The property above is not vacuous: over its seeds, reordered notifications and deletions lost
    in a refresh window occur and are explained."""
    explained = [e for seed in range(12) for e in _judged(*_finished(seed, drop=0.03 * (seed % 2)))[2]]
    assert any("the last notification that set it" in e for e in explained)
    assert any("refresh replaced" in e or "was its creation" in e for e in explained)


def test_the_explanations_cannot_hide_a_tampered_value_or_a_queue_kept_after_its_applied_deletion():
    job, truth = _finished(4)
    queues = copy.deepcopy(job.rows("qm_queues"))
    v1 = {m for m, qm in truth["queue_managers"].items() if qm["notification_version"] == "v1"}
    notified = next(q for q in queues if q["queue_manager"] in v1 and not q["deleted"]
                    and "PROPID_Q_QUOTA" in q["since_read"] and q["queue_guid"] in truth["queue_managers"][
                        q["queue_manager"]]["queues"])
    notified["quota"] = 424242
    applied = {n["message_id"] for n in job.rows("notifications") if n["outcome"] == "applied"}
    told = {g: (m, q) for m, qm in truth["queue_managers"].items() for g, q in qm["delivered"]["queues"].items()}
    gone = next(q for q in queues if q["deleted"] and q["queue_guid"] in told
                and (told[q["queue_guid"]][1].get("last") or [None, None])[1] in applied)
    gone["deleted"] = False
    diffs, _, _ = _judged(job, truth, queues=queues)
    assert any(f"queue {notified['queue_guid']} quota is 424242" in d for d in diffs)
    assert any(f"extra queue {gone['queue_guid']}" in d for d in diffs)


def test_a_value_the_replica_read_had_lost_is_explained_and_one_it_should_have_had_is_not():
    """Seen in the soak: a replica that lost a change (a dropped propagation that a later partial
    update keeps out of every sync reply, MC-MQDSRP 3.2.7.3) holds a version without that value;
    a read that took that replica's copy (the first to arrive) returns what it holds. Explained
    when no replica held the authority's value in a version newer than the one read: the same
    version reached another replica with it, none ever had it, or only an older version had it
    (the short soak); not when a newer version that held it had arrived before the read."""
    lost = [_version("dc1", 0, 5, {"PROPID_Q_PATHNAME": "qm1\\q", "PROPID_Q_QUOTA": 1}, "created"),
            _version("dc1", 100, 7, {"PROPID_Q_PATHNAME": "qm1\\q", "PROPID_Q_QUOTA": 1}),
            _version("dc2", 200, 7, {"PROPID_Q_PATHNAME": "qm1\\q", "PROPID_Q_QUOTA": 2})]
    row = _queue_row(150, 7, **_columns(path_name="qm1\\q", quota=1))
    diffs, summary, explained = _compare(row, history=lost)
    assert diffs == [] and len(explained) == 1 and "dc1 had lost the authority's value" in explained[0]
    assert "1 never held by a replica" in summary
    never = [dict(v, properties={"PROPID_Q_PATHNAME": "qm1\\q", "PROPID_Q_QUOTA": 1}) for v in lost]
    diffs, _, explained = _compare(row, history=never)
    assert diffs == [] and "no replica ever held it" in explained[0]
    older = lost[:2] + [_version("dc2", 50, 6, {"PROPID_Q_PATHNAME": "qm1\\q", "PROPID_Q_QUOTA": 2})]
    diffs, _, explained = _compare(row, history=older)
    assert diffs == [] and "; only an older version held it" in explained[0]
    missed = lost[:2] + [_version("dc2", 120, 8, {"PROPID_Q_PATHNAME": "qm1\\q", "PROPID_Q_QUOTA": 2})]
    diffs, _, explained = _compare(row, history=missed)                 # seq 8 arrived before the read
    assert explained == [] and diffs == ["qm1 (v2): queue q1 quota is 1, expected 2",
                                         "qm1 (v2): queue q1 read at 2026-01-01T00:00:00.150+00:00 used seq "
                                         "0000000000000007, but the replicas held seq 0000000000000008 then (dc2)"]


MINUTES = 60_000


def _missing(received_min: float | None, last_processed_min: float, notified: list[tuple],
             waiting: int = 0, refreshes: tuple = ()):
    """q1 missing from m1: the replicas first received it at received_min (None: never), the queue
    manager last processed at last_processed_min, the notifications about q1 (outcome, minute[,
    action]; create queue unless given), its refreshes (minutes; without them, the processing times
    of the notifications superseded by a refresh)."""
    from streaming.operators.replication_rows import ts
    history = [] if received_min is None else [
        _version("dc1", int(received_min * MINUTES), 5, {"PROPID_Q_PATHNAME": "qm1\\q", "PROPID_Q_QUOTA": 2},
                 "created")]
    manager = dict(MANAGER, last_processed_at=ts(T0 + int(last_processed_min * MINUTES)), notifications_waiting=waiting)
    rows = [{"queue_manager": "m1", "message_id": f"n{i}", "object_guid": "q1", "outcome": outcome,
             "action": action[0] if action else "create queue", "processed_at": ts(T0 + int(minute * MINUTES))}
            for i, (outcome, minute, *action) in enumerate(notified)]
    batches = [{"queue_manager": "m1", "fired_at": ts(T0 + int(minute * MINUTES)), "refresh_all": True}
               for minute in refreshes] or None
    return compare_notifications(_truth(), [manager], [], rows, history, batches)


def test_a_queue_no_replica_held_by_the_last_read_that_could_find_it_is_missing_by_replica_lag():
    """Seen in the soak: a queue's creation came in a window a refresh replaced while the replicas,
    reset by sync0, did not hold it, and they held it only after the queue manager's last read.
    Its absence is explained; not when a replica held it by a read that could have found it: the
    queue manager's last refresh, or the wait of the refresh's read of it (15 minutes)."""
    diffs, summary, explained = _missing(120, 60, [("superseded-by-refresh", 0)], refreshes=(0, 60))
    assert diffs == [] and explained == [
        "qm1 (v2): missing queue q1 (qm1\\q): stale by replica lag: no replica held it by "
        "2026-01-01T01:00:00.000+00:00, the last read that could have found it; the replica dc1 received it at "
        "2026-01-01T02:00:00.000+00:00"]
    assert "1 stale by replica lag" in summary
    missing = ["qm1 (v2): missing queue q1 (qm1\\q)"]
    assert _missing(50, 60, [("superseded-by-refresh", 0)], refreshes=(0, 60))[0] == missing  # held by a refresh
    assert _missing(62, 60, [("superseded-by-refresh", 50)])[0] == missing         # within the refresh read's wait
    assert _missing(120, 60, [("ignored", 30)])[0] == []                            # its read gave up at 30
    assert _missing(120, 60, [("applied", 30)])[0] == missing                      # applied, then lost: a defect
    assert _missing(120, 60, [("unresolved", 30)])[0] == [*missing, "notification n0 (create queue q1) still "
                                                                     "unresolved"]             # still waiting
    assert _missing(120, 60, [("superseded-by-refresh", 0)], waiting=3)[0] == missing
    assert _missing(120, 60, [("superseded-by-refresh", 0)], waiting=0)[0] == []
    strict = compare_notifications(_truth(), [dict(MANAGER)], [], [], None)[0]
    assert strict == missing                                                          # --strict-authority


def test_a_change_ignored_for_a_queue_the_queue_manager_lacks_is_not_a_read_that_could_add_it():
    """The third hour's soak: a refresh's read of q1 gave up at minute 75 (no replica held it, sync0
    resets); a change of q1 waited, and its read found the queue the instant the final sync0 reply
    brought it (minute 120). A change updates a queue of the QueueCollection and never adds one
    (MS-MQCN 3.2.5.2 Event 2, 3.2.5.1 update), so q1's absence is still replica lag; a create read
    then, or a replica holding q1 before the refresh's read gave up, is a difference."""
    refresh = ("superseded-by-refresh", 60)
    for action in ("change queue", "update queue"):
        diffs, summary, explained = _missing(120, 61, [refresh, ("ignored", 120, action)])
        assert diffs == [] and "1 stale by replica lag" in summary, (action, diffs)
    missing = ["qm1 (v2): missing queue q1 (qm1\\q)"]
    assert _missing(120, 61, [refresh, ("ignored", 120, "create queue")])[0] == missing
    assert _missing(70, 61, [refresh, ("ignored", 120, "change queue")])[0] == missing
    assert _missing(120, 61, [refresh, ("applied", 90, "change queue")])[0] == missing   # it held q1, then lost it


def test_the_explanations_cannot_hide_a_queue_a_replica_held_in_time():
    """Offline, every fault: dropping from the sink any live queue the queue manager holds (each one
    a replica held in time, since the operator read it) is a difference, never explained."""
    job, truth = _finished(5)
    queues = job.rows("qm_queues")
    held = [q for q in queues if not q["deleted"]
            and q["queue_guid"] in truth["queue_managers"][q["queue_manager"]]["queues"]]
    assert len(held) > 20
    for dropped in random.Random(5).sample(held, 20):
        diffs, _, _ = _judged(job, truth, queues=[q for q in queues if q is not dropped])
        assert any(f"missing queue {dropped['queue_guid']}" in d for d in diffs), dropped["queue_guid"]


def test_a_processing_that_is_no_refresh_is_not_a_read_that_could_add_a_queue():
    """As seen in a short soak (qm1-2, queue qefe815cd): its create and a change came in a window
    of 596 that a refresh replaced at 00:31:29 while every replica of its site partition was stalled
    behind a gap; the next window was a refresh too (00:46:29, the instant the first refresh's read of
    the queue gave up, and none of its 241 named the queue); the sync0 reply brought the queue to
    every replica at 00:47:46; a change of it (arrival 00:48:44) was ignored at 01:01:29, the last
    processing, in a batch of 42: Event 2 updates a queue of the QueueCollection and never adds one
    (MS-MQCN 3.2.5.2). No read that could add the queue came after 00:47:46: its absence is replica
    lag. A refresh after 00:47:46, or a replica holding it before 00:46:29, is a difference."""
    create, change = ("superseded-by-refresh", 31.5), ("superseded-by-refresh", 31.5, "change queue")
    late_change = ("ignored", 61.5, "change queue")
    diffs, summary, explained = _missing(47.8, 61.5, [create, change, late_change], refreshes=(16.5, 31.5, 46.5))
    assert diffs == [] and "1 stale by replica lag" in summary
    assert "no replica held it by 2026-01-01T00:46:30.000+00:00, the last read that could have found it; the " \
           "replica dc1 received it at 2026-01-01T00:47:48.000+00:00" in explained[0]
    missing = ["qm1 (v2): missing queue q1 (qm1\\q)"]
    assert _missing(47.8, 61.5, [create, change, late_change], refreshes=(31.5, 46.5, 61.5))[0] == missing
    assert _missing(45, 61.5, [create, change, late_change], refreshes=(31.5, 46.5))[0] == missing
    # without the batches, the refreshes come from the notifications they replaced (here only 31.5)
    assert _missing(47.8, 61.5, [create, change, late_change])[0] == []
