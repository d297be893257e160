"""The MQCN queue manager state machine, rule by rule, from MS-MQCN section 3.2 (revision 17 where
the revisions differ) and the batching of product behaviour notes <3> and <14>."""
import dataclasses

import pytest

from streaming.operators.notifications import (MINUTE, Mode, QMState, QueueManager, Result, Settings, Superseded,
                                               Version, notification_from, queue_manager_of)
from streaming.wire import decode, encode, mqcn
from streaming.wire.properties import Property
from streaming.wire.propids import propid

QM = "0a0a0a0a-0000-4000-8000-000000000001"
DS = "0d0d0d0d-0000-4000-8000-00000000000d"
T0 = 1_767_225_600_000


def guid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def P(name, value):
    return Property(propid(name), value)


def v1(updates, at, *, sender="QueueManagerIdentifier", auth="Sig20", message_id=None):
    msg = decode("mqcn", encode("mqcn", mqcn.new_v1(updates)))            # through the codec, as on the wire
    return notification_from(msg, message_id=message_id or f"m{at}", arrival_ms=at, sender_identifier_type=sender,
                             authentication_level=auth, source="psc1")


def v2(event, object_guid, at, message_id=None):
    msg = decode("mqcn", encode("mqcn", mqcn.new_v2(event, object_guid, "psc1")))
    return notification_from(msg, message_id=message_id or f"m{at}", arrival_ms=at, sender_identifier_type=None,
                             authentication_level="None", source="qm9")


def create(n, label="q", quota=100):
    props = [P("Q_INSTANCE", guid(n)), P("Q_TYPE", guid(0)), P("Q_BASEPRIORITY", 1), P("Q_JOURNAL", 0),
             P("Q_QUOTA", quota), P("Q_JOURNAL_QUOTA", 50), P("Q_CREATE_TIME", 10), P("Q_MODIFY_TIME", 10),
             P("Q_SCOPE", 1), P("Q_SECURITY", b"\x01\x02"), P("Q_PATHNAME", f"qm\\q{n}"), P("Q_LABEL", label),
             P("Q_AUTHENTICATE", 0), P("Q_PRIV_LEVEL", 1), P("Q_TRANSACTION", 0)]
    return mqcn.new_update(0x00, props, DS, path_name=f"qm\\q{n}")


def update_queue(n, **props):
    return mqcn.new_update(0x01, [P("Q_QMID", QM)] + [P(k, v) for k, v in props.items()], DS, guid_identifier=guid(n))


def delete(n, objtype=1):
    return mqcn.new_update(0x02, [P("D_SCOPE", 1), P("D_OBJTYPE", objtype)], DS, guid_identifier=guid(n))


def immediate() -> QueueManager:
    return QueueManager(QMState(QM), Settings(mode="immediate"))


def batched(**kw) -> QueueManager:
    return QueueManager(QMState(QM), Settings(**kw))


def at_arrival(qm: QueueManager, n) -> None:
    """3.2.5 processing of one message at its arrival time (as the v2 rules read, without the batching)."""
    qm.process(n, n.arrival_ms, 1)


def attr(qm, n, name):
    return qm.state.queues[guid(n)].attributes[f"PROPID_{name}"]


def queue_version(n, at, seq, deleted=False, **props):
    base = {"PROPID_Q_INSTANCE": guid(n), "PROPID_Q_QMID": QM, "PROPID_Q_PATHNAME": f"qm\\q{n}",
            "PROPID_Q_LABEL": "dir", "PROPID_Q_QUOTA": 7}
    base.update({f"PROPID_{k}": v for k, v in props.items()})
    return Version(at, "bsc1", seq, deleted, "queue", base)


# ---------------------------------------------------------------- 3.2.5.1 version 0x01
def test_v1_create_takes_the_listed_attributes_over_the_queue_defaults():
    qm = immediate()
    update = create(1)
    update.properties = [p for p in update.properties if p.prop_id != propid("Q_LABEL")]   # Label absent
    qm.receive(v1([update], T0))
    assert attr(qm, 1, "Q_QUOTA") == 100 and attr(qm, 1, "Q_PATHNAME") == "qm\\q1"
    assert attr(qm, 1, "Q_LABEL") == ""                  # Set Queue Defaults (revision 17)
    assert attr(qm, 1, "Q_SECURITY") == "0102"
    assert qm.outcomes[0].outcome == "applied" and qm.outcomes[0].action == "create queue"


def test_v1_update_changes_only_the_listed_attributes():
    """3.2.5.1: "All other PROPIDs are not used, and they MUST be ignored.\""""
    qm = immediate()
    qm.receive(v1([create(1)], T0))
    qm.receive(v1([update_queue(1, Q_QUOTA=5, Q_LABEL="ignored", Q_PRIV_LEVEL=2)], T0 + 1))
    assert attr(qm, 1, "Q_QUOTA") == 5 and attr(qm, 1, "Q_PRIV_LEVEL") == 2
    assert attr(qm, 1, "Q_LABEL") == "q"


def test_v1_queue_manager_update_sets_quota_journal_quota_and_security():
    qm = immediate()
    update = mqcn.new_update(0x01, [P("QM_MACHINE_ID", QM), P("QM_FOREIGN", 0), P("QM_QUOTA", 9),
                                    P("QM_JOURNAL_QUOTA", 8), P("QM_SECURITY", b"\xaa"), P("QM_OS", 3)],
                             DS, guid_identifier=QM)
    qm.receive(v1([update], T0))
    assert (qm.state.quota, qm.state.journal_quota, qm.state.security) == (9, 8, "aa")


def test_v1_delete_needs_mqds_queue_in_the_second_value():
    qm = immediate()
    qm.receive(v1([create(1)], T0))
    qm.receive(v1([delete(1, objtype=2)], T0 + 1))
    assert not qm.state.queues[guid(1)].deleted
    assert qm.outcomes[-1].outcome == "discarded" and "MQDS_QUEUE" in qm.outcomes[-1].reason
    qm.receive(v1([delete(1)], T0 + 2))
    assert qm.state.queues[guid(1)].deleted


def test_an_update_or_delete_naming_its_queue_by_path_name_references_that_queue():
    """3.2.5.1: "the server MUST update the state of the queue or queue manager object referenced by
    the PathName field or the GuidIdentifier field". A delete with UseGuid 0x00 (which 2.2.6 says a
    sender must not send, but which arrives authenticated and well-formed) once made the row
    building raise and wedged the job."""
    from streaming.operators.notification_rows import step_rows
    qm = immediate()
    qm.receive(v1([create(1), create(2)], T0))
    by_path = mqcn.new_update(0x01, [P("Q_QMID", QM), P("Q_QUOTA", 5)], DS, path_name="QM\\Q1")
    qm.receive(v1([by_path], T0 + 1))
    assert attr(qm, 1, "Q_QUOTA") == 5 and attr(qm, 2, "Q_QUOTA") == 100
    step_rows(qm)
    qm.receive(v1([mqcn.new_update(0x02, [P("D_SCOPE", 1), P("D_OBJTYPE", 1)], DS, path_name="qm\\q1")], T0 + 2))
    assert qm.state.queues[guid(1)].deleted and not qm.state.queues[guid(2)].deleted
    assert qm.outcomes[-1].outcome == "applied" and qm.outcomes[-1].object_guid == guid(1)
    qm.receive(v1([mqcn.new_update(0x02, [P("D_SCOPE", 1), P("D_OBJTYPE", 1)], DS, path_name="qm\\q1")], T0 + 3))
    assert qm.outcomes[-1].outcome == "ignored" and "no queue with this PathName" in qm.outcomes[-1].reason
    qm.receive(v1([create(3), mqcn.new_update(0x02, [P("D_SCOPE", 1), P("D_OBJTYPE", 1)], DS,
                                              path_name="qm\\q3")], T0 + 4))       # the message that showed it
    assert qm.state.queues[guid(3)].deleted and None not in qm.state.queues
    rows = step_rows(qm)
    assert rows and all(r.get("queue_guid", "") is not None for _t, r in rows)


@pytest.mark.parametrize("sender, auth, why", [
    ("QueueManagerIdentifier", "None", "AuthenticationLevel None"),
    ("None", "Sig20", "SenderIdentifierType None"),
])
def test_unauthenticated_v1_is_disregarded_whole(sender, auth, why):
    qm = immediate()
    qm.receive(v1([create(1), create(2)], T0, sender=sender, auth=auth))
    assert qm.state.queues == {}
    assert [o.outcome for o in qm.outcomes] == ["discarded", "discarded"] and why in qm.outcomes[0].reason


def test_a_bad_object_type_disregards_the_whole_message():
    qm = immediate()
    site = mqcn.new_update(0x01, [P("S_PATHNAME", "x")], DS, guid_identifier=guid(9))
    qm.receive(v1([create(1), site], T0))
    assert qm.state.queues == {} and "object type 3" in qm.outcomes[0].reason


# ---------------------------------------------------------------- 3.2.5.2 version 0x02
def test_v2_create_and_change_read_the_directory():
    qm = batched()
    qm.directory_object(guid(1), queue_version(1, T0, 5, Q_LABEL="from the replica"))
    at_arrival(qm, v2(1, guid(1), T0 + 10))
    assert attr(qm, 1, "Q_LABEL") == "from the replica" and attr(qm, 1, "Q_QUOTA") == 7
    qm.directory_object(guid(1), queue_version(1, T0 + 20, 6, Q_LABEL="changed"))
    at_arrival(qm, v2(2, guid(1), T0 + 30))
    assert attr(qm, 1, "Q_LABEL") == "changed"


def test_v2_reads_the_directory_as_of_its_processing_time():
    qm = batched()
    qm.directory_object(guid(1), queue_version(1, T0, 5, Q_LABEL="then"))
    qm.directory_object(guid(1), queue_version(1, T0 + 100, 6, Q_LABEL="later"))
    at_arrival(qm, v2(1, guid(1), T0 + 50))
    assert attr(qm, 1, "Q_LABEL") == "then"


def test_a_version_that_reaches_the_operator_late_corrects_an_earlier_read():
    qm = batched()
    qm.directory_object(guid(1), queue_version(1, T0, 5, Q_LABEL="old"))
    at_arrival(qm, v2(1, guid(1), T0 + 50))
    qm.directory_object(guid(1), queue_version(1, T0 + 40, 6, Q_LABEL="was already current"))
    assert attr(qm, 1, "Q_LABEL") == "was already current"
    qm.directory_object(guid(1), queue_version(1, T0 + 60, 7, Q_LABEL="future"))
    assert attr(qm, 1, "Q_LABEL") == "was already current"     # after the read: needs its own notification


def test_v2_for_an_object_no_replica_holds_waits_until_it_appears():
    qm = batched()
    at_arrival(qm, v2(1, guid(1), T0))
    assert qm.outcomes[-1].outcome == "unresolved" and guid(1) not in qm.state.queues
    qm.directory_object(guid(1), queue_version(1, T0 + 500, 3))
    assert qm.outcomes[-1].outcome == "applied" and "appeared" in qm.outcomes[-1].reason
    assert attr(qm, 1, "Q_LABEL") == "dir"


def test_v2_delete_needs_no_read_and_change_machine_reads_the_queue_manager():
    qm = batched()
    qm.directory_object(guid(1), queue_version(1, T0, 5))
    at_arrival(qm, v2(1, guid(1), T0 + 1))
    at_arrival(qm, v2(3, guid(1), T0 + 2))
    assert qm.state.queues[guid(1)].deleted
    qm.directory_object(QM, Version(T0, "bsc1", 9, False, "machine",
                                    {"PROPID_QM_QUOTA": 1, "PROPID_QM_JOURNAL_QUOTA": 2, "PROPID_QM_SECURITY": "ff"}))
    qm.directory_object(QM, Version(T0 + 5, "bsc1", 10, False, "machine",
                                    {"PROPID_QM_QUOTA": 11, "PROPID_QM_JOURNAL_QUOTA": 12, "PROPID_QM_SECURITY": "ee"}))
    at_arrival(qm, v2(4, QM, T0 + 10))
    assert (qm.state.quota, qm.state.journal_quota, qm.state.security) == (11, 12, "ee")


def test_other_v2_events_are_ignored():
    qm = batched()
    at_arrival(qm, v2(7, guid(1), T0))
    assert qm.outcomes[-1].outcome == "ignored" and "note <10>" in qm.outcomes[-1].reason


# ---------------------------------------------------------------- batching (notes <3>, <14>)
def test_after_a_quiet_period_the_first_notification_starts_a_one_minute_timer():
    qm = batched()
    qm.receive(v1([create(1)], T0))
    assert qm.next_timer_ms() == T0 + MINUTE and guid(1) not in qm.state.queues
    qm.receive(v1([create(2)], T0 + 30_000))
    qm.on_timer(T0 + MINUTE - 1)
    assert qm.state.queues == {}
    qm.on_timer(T0 + MINUTE)
    assert set(qm.state.queues) == {guid(1), guid(2)}
    (batch,) = qm.batches
    assert (batch.timer_started_ms, batch.fired_ms, batch.count, batch.refresh_all) == (T0, T0 + MINUTE, 2, False)


def test_within_fourteen_minutes_the_timer_runs_to_fifteen_minutes_after_the_last_processing():
    qm = batched()
    qm.receive(v1([create(1)], T0))
    qm.on_timer(T0 + MINUTE)
    qm.receive(v1([create(2)], T0 + 5 * MINUTE))
    assert qm.next_timer_ms() == T0 + MINUTE + 15 * MINUTE
    qm.on_timer(T0 + 16 * MINUTE)
    qm.receive(v1([create(3)], T0 + 16 * MINUTE + 14 * MINUTE + 1))     # more than 14 minutes quiet
    assert qm.next_timer_ms() == T0 + 30 * MINUTE + 1 + MINUTE


def test_notifications_that_arrive_after_the_timer_belong_to_the_next_window():
    qm = batched()
    qm.receive(v1([create(1)], T0))
    qm.receive(v1([create(2)], T0 + 2 * MINUTE))        # one micro-batch can bring both before the timer
    qm.on_timer(T0 + 20 * MINUTE)                       # the watermark passed both timers
    assert [b.count for b in qm.batches] == [1, 1]
    assert [b.fired_ms for b in qm.batches] == [T0 + MINUTE, T0 + 16 * MINUTE]


@pytest.mark.parametrize("count, refresh", [(99, False), (100, True)])
def test_a_hundred_notifications_in_one_window_are_dropped_for_a_refresh(count, refresh):
    qm = batched()
    for n in range(3):
        qm.directory_object(guid(n), queue_version(n, T0 - 1000, 5 + n, Q_LABEL=f"dir{n}"))
    for i in range(count):
        qm.receive(v1([update_queue(i % 3, Q_QUOTA=i)], T0 + i, message_id=f"m{i}"))
    qm.on_timer(T0 + MINUTE)
    (batch,) = qm.batches
    assert (batch.count, batch.refresh_all) == (count, refresh)
    outcomes = {o.outcome for o in qm.outcomes}
    if refresh:
        assert outcomes == {"superseded-by-refresh"}
        assert {attr(qm, n, "Q_LABEL") for n in range(3)} == {"dir0", "dir1", "dir2"}   # read from the directory
    else:
        assert outcomes == {"ignored"}                 # updates of queues not in the collection


def test_immediate_mode_processes_on_arrival():
    qm = immediate()
    qm.receive(v1([create(1)], T0))
    assert guid(1) in qm.state.queues and qm.next_timer_ms() is None


def test_the_notify_queue_names_the_queue_manager():
    assert queue_manager_of(f"PRIVATE={QM.upper()}\\3") == QM
    assert queue_manager_of("DIRECT=OS:x\\private$\\q") is None


@pytest.mark.parametrize("seed", range(5))
def test_the_query_routes_and_the_queue_manager_reads_a_format_name_with_the_grammar_of_ms_mqmq_2_1_4(seed):
    """One reading of PRIVATE=<GUID>\\<hex id>: the query's key, the queue manager's check of its
    notification queue and wire.mqqb's parser agree on well-formed and malformed names."""
    import random
    from streaming.operators.notifications import is_notification_queue
    from streaming.spark.job_query import queue_manager_key
    from streaming.wire.mqqb import parse_format_name
    rng = random.Random(seed)
    pieces = ["PRIVATE=", "private=", "PUBLIC=", "DIRECT=OS:x", QM, QM.upper(), "{", "}", "\\", "3", "03", "1",
              "g", "-", " ", "z" * 36]
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))
        try:
            name = parse_format_name(text)
        except ValueError:
            name = None
        private = name is not None and name.kind == "PRIVATE"
        assert queue_manager_of(text) == (str(name.guid) if private else None), text
        assert queue_manager_key(text, "machine") == (str(name.guid) if private else "machine"), text
        assert is_notification_queue(text) == (private and name.number == 3), text
    assert is_notification_queue(f"PRIVATE={QM}\\3") and not is_notification_queue(f"PRIVATE={{{QM}}}\\3")


def test_a_pending_v1_notification_stored_with_plain_tuples_loads_with_named_updates():
    """A queue manager state pickled before updates were Updates gives the same queue manager."""
    import pickle
    from streaming.operators.notifications import Update
    qm = batched()
    qm.receive(v1([create(1)], T0))
    (pending,) = qm.state.pending
    assert isinstance(pending.updates[0], Update)
    old_style = pickle.loads(pickle.dumps(qm.state))
    old_style.pending[0].__dict__["updates"] = [tuple(u) for u in pending.updates]
    reloaded = pickle.loads(pickle.dumps(old_style))
    assert reloaded.pending[0].updates == pending.updates
    assert all(type(u) is Update for u in reloaded.pending[0].updates)
    later = QueueManager(reloaded, Settings())
    later.on_timer(T0 + 16 * MINUTE)
    assert guid(1) in later.state.queues


def test_take_outputs_hands_over_what_the_queue_manager_collected_and_forgets_it():
    from streaming.operators.notifications import QueueManagerOutputs
    qm = batched()
    qm.receive(v1([create(1)], T0))
    qm.on_timer(T0 + 16 * MINUTE)
    outcomes, batches = list(qm.outcomes), list(qm.batches)
    out = qm.take_outputs()
    assert isinstance(out, QueueManagerOutputs) and out.outcomes == outcomes and out.batches == batches
    assert [o.outcome for o in out.outcomes] == ["applied"] and len(out.batches) == 1
    assert out.queues_touched == {guid(1)} and out.arrived
    assert qm.take_outputs() == QueueManagerOutputs([], [], set(), False, False)


# ---------------------------------------------------------------- conformance
def test_a_late_replica_row_never_brings_back_a_queue_a_later_event_3_deleted():
    """3.2.5.2 Event 3 deletes the queue; nothing in 3.2.5 re-adds one except a create."""
    qm = batched()
    qm.directory_object(guid(1), queue_version(1, T0, 5, Q_LABEL="first"))
    at_arrival(qm, v2(1, guid(1), T0 + 100))
    at_arrival(qm, v2(3, guid(1), T0 + 200))
    qm.directory_object(guid(1), queue_version(1, T0 + 50, 6, Q_LABEL="late"))
    assert qm.state.queues[guid(1)].deleted
    assert attr(qm, 1, "Q_LABEL") == "late"                    # it still corrects the read it belongs to
    qm.directory_object(guid(1), queue_version(1, T0 + 150, 7, deleted=True))
    assert qm.state.queues[guid(1)].deleted


@pytest.mark.parametrize("mode", ["refresh", "event 1"])
def test_a_late_replica_row_never_overwrites_a_later_v1_update(mode):
    """3.2.5.1: "Quota := PropertyValue[IndexOf(PROPID_Q_QUOTA)]"; only a later notification or
    refresh may change it again."""
    qm = batched(refresh_threshold=3)
    qm.directory_object(guid(1), queue_version(1, T0, 5, Q_QUOTA=7, Q_LABEL="old"))
    if mode == "refresh":
        for i in range(3):
            qm.receive(v1([update_queue(1, Q_QUOTA=1)], T0 + 10 + i))
        qm.on_timer(T0 + MINUTE + 10)
        assert qm.batches[-1].refresh_all
    else:
        at_arrival(qm, v2(1, guid(1), T0 + MINUTE + 10))
    assert attr(qm, 1, "Q_QUOTA") == 7
    at_arrival(qm, v1([update_queue(1, Q_QUOTA=5)], T0 + 2 * MINUTE))
    qm.directory_object(guid(1), queue_version(1, T0 + 30_000, 6, Q_QUOTA=9, Q_LABEL="corrected"))
    assert attr(qm, 1, "Q_QUOTA") == 5 and attr(qm, 1, "Q_LABEL") == "corrected"


def test_a_copy_of_a_message_id_is_discarded_and_recorded_as_duplicate():
    """[MS-MQQB] 3.1.5.8.1: a message whose MessageID is in the MessageIDHistoryTable "MUST discard
    this message and perform no further processing"."""
    qm = immediate()
    qm.receive(v1([create(1)], T0, message_id="A"))
    qm.receive(v1([update_queue(1, Q_QUOTA=5)], T0 + 1, message_id="B"))
    qm.receive(v1([create(1)], T0 + 2, message_id="A"))
    assert attr(qm, 1, "Q_QUOTA") == 5
    copy = qm.outcomes[-1]
    assert (copy.message_id, copy.index, copy.outcome) == ("A", -1, "duplicate") and "3.1.5.8.1" in copy.reason
    qm.receive(v1([create(1)], T0 + 3, message_id="A"))
    assert qm.outcomes[-1].index == -2
    # forgotten 30 minutes after it was last seen (note <47>): then processed again
    qm.receive(v1([create(1)], T0 + 3 + 30 * MINUTE + 1, message_id="A"))
    assert qm.outcomes[-1].outcome == "applied" and attr(qm, 1, "Q_QUOTA") == 100


def test_copies_do_not_count_towards_the_refresh_threshold():
    qm = batched()
    for i in range(99):
        qm.receive(v1([update_queue(1, Q_QUOTA=i)], T0 + i, message_id=f"m{i}"))
    qm.receive(v1([update_queue(1, Q_QUOTA=0)], T0 + 99, message_id="m0"))
    qm.on_timer(T0 + MINUTE)
    assert (qm.batches[-1].count, qm.batches[-1].refresh_all) == (99, False)


def test_events_1_and_2_read_queues_only():
    """3.2.5.2 Events 1 and 2: iDirectoryObjectType := "Queue"; a machine object is never returned."""
    qm = batched()
    qm.directory_object(QM, Version(T0, "bsc1", 9, False, "machine",
                                    {"PROPID_QM_QUOTA": 1, "PROPID_QM_JOURNAL_QUOTA": 2, "PROPID_QM_SECURITY": "ff"}))
    at_arrival(qm, v1([mqcn.new_update(0x01, [P("QM_MACHINE_ID", QM), P("QM_FOREIGN", 0), P("QM_QUOTA", 50)],
                                       DS, guid_identifier=QM)], T0 + 1))
    at_arrival(qm, v2(1, QM, T0 + 10))
    assert qm.state.quota == 50 and QM not in qm.state.queues
    assert qm.outcomes[-1].outcome == "ignored" and "not as a queue" in qm.outcomes[-1].reason


def test_event_2_updates_only_a_queue_of_the_queue_collection():
    """3.2.5.2 Event 2: "Update the corresponding Queue ADM element instance in the QueueCollection"."""
    qm = batched()
    qm.directory_object(guid(1), queue_version(1, T0, 5))
    at_arrival(qm, v2(2, guid(1), T0 + 10))
    assert guid(1) not in qm.state.queues and qm.outcomes[-1].outcome == "ignored"
    at_arrival(qm, v2(1, guid(1), T0 + 20))
    at_arrival(qm, v2(3, guid(1), T0 + 30))
    at_arrival(qm, v2(2, guid(1), T0 + 40))                    # a replica still shows it live
    assert qm.state.queues[guid(1)].deleted and qm.outcomes[-1].outcome == "ignored"


def test_immediate_mode_ignores_version_2_messages():
    """Note <4>: NT 4 and Windows 2000 process only the directory service's (version 1) messages."""
    qm = immediate()
    qm.directory_object(guid(1), queue_version(1, T0, 5))
    qm.receive(v2(1, guid(1), T0 + 10))
    assert guid(1) not in qm.state.queues
    assert qm.outcomes[-1].outcome == "ignored" and "note <4>" in qm.outcomes[-1].reason


def test_a_read_no_replica_answers_gets_a_final_outcome():
    qm = batched()
    at_arrival(qm, v2(1, guid(1), T0))
    assert qm.outcomes[-1].outcome == "unresolved"
    assert qm.next_timer_ms() == T0 + 15 * MINUTE
    qm.on_timer(T0 + 15 * MINUTE)
    assert qm.outcomes[-1].outcome == "ignored" and "Read Directory found nothing" in qm.outcomes[-1].reason
    assert qm.state.unresolved == {} and qm.next_timer_ms() is None


def test_only_private_queue_3_is_the_notification_queue():
    """MQCN 1.9: NOTIFY_QUEUE_PRIVATE = PRIVATE=<Queue Manager GUID>\\3."""
    qm = immediate()
    n = v1([create(1)], T0)
    n.destination_queue = f"PRIVATE={QM}\\5"
    qm.receive(n)
    assert qm.state.queues == {} and qm.outcomes[-1].outcome == "ignored" and "MQCN 1.9" in qm.outcomes[-1].reason
    n = v1([create(1)], T0 + 1)
    n.destination_queue = f"PRIVATE={QM}\\3"
    qm.receive(n)
    assert guid(1) in qm.state.queues


# ---------------------------------------------------------------- reads exactly as of the timer
def test_a_read_at_the_timer_returns_the_version_current_then_however_many_newer_ones_arrived():
    """Note <3>: the state stored in the directory service "when the timer expires"."""
    qm = batched()
    qm.directory_object(guid(1), queue_version(1, T0, 5, Q_LABEL="A"))
    qm.receive(v2(1, guid(1), T0 + 1000))
    for k, label in enumerate("BCD"):
        qm.directory_object(guid(1), queue_version(1, T0 + (2 + k) * MINUTE, 6 + k, Q_LABEL=label))
    qm.on_timer(T0 + 5 * MINUTE)
    assert attr(qm, 1, "Q_LABEL") == "A"


def test_versions_are_forgotten_only_when_no_pending_read_can_need_them():
    qm = batched()
    for k in range(5):
        qm.directory_object(guid(1), queue_version(1, T0 + k * MINUTE, 5 + k))
    qm.forget_versions(T0 + 10 * MINUTE)
    assert [v.seq_number for v in qm.state.directory[guid(1)]] == [9]
    for k in range(5):
        qm.directory_object(guid(2), queue_version(2, T0 + k * MINUTE, 5 + k))
    qm.receive(v2(1, guid(2), T0 + 30))                       # timer at T0 + 1 min + 30 s
    qm.forget_versions(T0 + 10 * MINUTE)
    assert [v.seq_number for v in qm.state.directory[guid(2)]] == [6, 7, 8, 9]


def test_a_refresh_does_not_bring_in_a_queue_whose_only_version_is_later():
    qm = batched(refresh_threshold=2)
    qm.directory_object(guid(1), queue_version(1, T0 + 10 * MINUTE, 5))
    qm.receive(v1([update_queue(2, Q_QUOTA=1)], T0, message_id="a"))
    qm.receive(v1([update_queue(3, Q_QUOTA=2)], T0 + 1, message_id="b"))
    qm.on_timer(T0 + MINUTE)
    assert qm.batches[-1].refresh_all and guid(1) not in qm.state.queues
    qm.receive(v1([update_queue(1, Q_QUOTA=1)], T0 + 20 * MINUTE, message_id="c"))
    qm.receive(v1([update_queue(1, Q_QUOTA=2)], T0 + 20 * MINUTE + 1, message_id="d"))
    qm.on_timer(T0 + 30 * MINUTE)
    assert guid(1) in qm.state.queues


@pytest.mark.parametrize("version_first", [True, False])
def test_a_queue_a_dropped_notification_announced_comes_in_when_a_replica_shows_it(version_first):
    """[INFERENCE] the replicas trail the directory service that announced the queue."""
    qm = batched(refresh_threshold=2)
    later = queue_version(1, T0 + 10 * MINUTE, 5, Q_LABEL="late replica")
    if version_first:
        qm.directory_object(guid(1), later)
    qm.receive(v1([create(1)], T0, message_id="a"))
    qm.receive(v1([update_queue(1, Q_QUOTA=2)], T0 + 1, message_id="b"))
    qm.on_timer(T0 + MINUTE)
    if not version_first:
        assert guid(1) not in qm.state.queues
        qm.directory_object(guid(1), later)
    assert attr(qm, 1, "Q_LABEL") == "late replica" and qm.state.queues[guid(1)].read_ms == T0 + 10 * MINUTE
    assert {o.outcome for o in qm.outcomes} == {"superseded-by-refresh"}


def random_window(rng, count: int) -> list:
    """`count` notifications for one batching window, in arrival order: v1 creates, updates and deletes
    (some disregarded by 3.2.5.1: unauthenticated, or naming a site), v2 events 1-4 of queues some of
    which no replica shows, and copies of earlier message ids."""
    site = mqcn.new_update(0x01, [P("S_PATHNAME", "x")], DS, guid_identifier=guid(99))
    kinds = [lambda n, t: v1([create(n)], t), lambda n, t: v1([update_queue(n, Q_QUOTA=n)], t),
             lambda n, t: v1([delete(n)], t), lambda n, t: v1([create(n)], t, auth="None"),
             lambda n, t: v1([create(n), site], t), lambda n, t: v1([create(n)], t, sender="None"),
             lambda n, t: v2(rng.randint(1, 4), guid(n) if rng.random() < 0.9 else QM, t)]
    window, t = [], T0
    for i in range(count):
        t += rng.randint(1, 400)
        if window and rng.random() < 0.05:              # a copy: discarded, not counted in the window
            copy = window[rng.randrange(len(window))]
            n = dataclasses.replace(copy, arrival_ms=t)
        else:
            n = rng.choice(kinds)(rng.randint(1, 12), t)
            n.message_id = f"m{i}"
        window.append(n)
    return window


@pytest.mark.parametrize("seed", range(30))
def test_a_window_bound_to_be_refreshed_keeps_what_its_fire_records_and_fires_as_from_the_messages(seed):
    """Past refresh_threshold notifications due, a window keeps the later ones as Superseded: its fire
    gives the same outcomes, batch, queues and waiting reads as the fire of the same window holding
    every message whole (and so does the next window, of those that came after the timer)."""
    import copy
    import pickle
    import random
    rng = random.Random(seed)
    qm = batched()
    for n in range(1, 13):
        if rng.random() < 0.7:                          # the others: announced queues no replica shows
            qm.directory_object(guid(n), queue_version(n, T0 - 1000 + n, 5 + n, Q_LABEL=f"dir{n}"))
    window = random_window(rng, rng.choice([rng.randint(60, 130), rng.randint(130, 400)]))
    for n in window:
        qm.receive(n)
    kept, timer = list(qm.state.pending), qm.state.timer_ms
    due = [k for k in kept if k.arrival_ms <= timer]
    bound = [k for k in kept if isinstance(k, Superseded)]
    assert bound == due[100:]                       # the first hundred due stay whole, and those after the timer
    assert qm.state.window_due == len(due)
    qm.take_outputs()                               # the copies, recorded on arrival
    whole = QueueManager(copy.deepcopy(qm.state), qm.settings)
    by_id: dict = {}
    for n in window:                                # the first of each message id: the others are copies
        by_id.setdefault(n.message_id, n)
    whole.state.pending = [by_id[k.message_id] for k in kept]
    for q in (qm, whole):
        q.on_timer(T0 + 20 * MINUTE)
    assert [dataclasses.astuple(o) for o in qm.outcomes] == [dataclasses.astuple(o) for o in whole.outcomes]
    assert qm.batches == whole.batches and qm.batches[0].refresh_all == (len(due) >= 100)
    assert dataclasses.replace(qm.state, findings=None) == dataclasses.replace(whole.state, findings=None)
    if bound:
        assert {o.outcome for o in qm.outcomes} >= {"superseded-by-refresh", "discarded"}
        small = sum(len(pickle.dumps(k)) for k in bound)
        assert small * 3 < sum(len(pickle.dumps(by_id[k.message_id])) for k in bound)


def test_a_poison_message_left_out_of_a_bound_window_leaves_it_refreshed():
    """A window of exactly refresh_threshold + 1 notifications, the last kept as Superseded: with two
    of the first hundred left out, fewer than the threshold remain and it is refreshed all the same."""
    qm = batched()
    for i in range(101):
        qm.receive(v1([update_queue(1, Q_QUOTA=i)], T0 + i, message_id=f"m{i}"))
    assert isinstance(qm.state.pending[-1], Superseded) and qm.state.window_due == 101
    qm.leave_out({"m5", "m6"})
    assert qm.state.window_due == 99
    qm.on_timer(T0 + MINUTE)
    assert qm.batches[0].count == 99 and qm.batches[0].refresh_all
    assert {o.outcome for o in qm.outcomes} == {"superseded-by-refresh"}


@pytest.mark.parametrize("first_read", ["refresh", "event 1"])
def test_a_refresh_names_a_queue_again_the_instant_the_last_read_of_it_gives_up(first_read):
    """The next window ends 15 minutes after a processing, the instant a read made there stops
    waiting (UNRESOLVED_WAIT_MS): the new refresh's read of the queue still waits its own 15 minutes."""
    qm = batched(refresh_threshold=2)
    if first_read == "refresh":
        qm.receive(v1([create(1)], T0, message_id="a"))
        qm.receive(v1([update_queue(1, Q_QUOTA=2)], T0 + 1, message_id="b"))
    else:
        qm.receive(v2(1, guid(1), T0, message_id="a"))
    qm.on_timer(T0 + MINUTE)
    assert guid(1) in qm.state.unresolved and qm.state.last_processed_ms == T0 + MINUTE
    qm.receive(v1([update_queue(1, Q_QUOTA=3)], T0 + 5 * MINUTE, message_id="c"))
    qm.receive(v1([update_queue(1, Q_QUOTA=4)], T0 + 5 * MINUTE + 1, message_id="d"))
    qm.on_timer(T0 + 16 * MINUTE)                              # the second window's refresh, at the tie
    assert qm.batches[-1].refresh_all and qm.batches[-1].fired_ms == T0 + 16 * MINUTE
    qm.directory_object(guid(1), queue_version(1, T0 + 20 * MINUTE, 9, Q_LABEL="late replica"))
    assert attr(qm, 1, "Q_LABEL") == "late replica"


def test_a_refresh_rereads_the_queue_managers_own_attributes():
    """Decision (digest B.7 open point c): the dropped notifications may have been Event 4."""
    qm = batched(refresh_threshold=2)
    qm.directory_object(QM, Version(T0, "bsc1", 9, False, "machine",
                                    {"PROPID_QM_QUOTA": 1, "PROPID_QM_JOURNAL_QUOTA": 2, "PROPID_QM_SECURITY": "ff"}))
    qm.directory_object(QM, Version(T0 + 10, "bsc1", 10, False, "machine",
                                    {"PROPID_QM_QUOTA": 11, "PROPID_QM_JOURNAL_QUOTA": 12, "PROPID_QM_SECURITY": "ee"}))
    qm.receive(v2(4, QM, T0 + 20, message_id="a"))
    qm.receive(v2(4, QM, T0 + 30, message_id="b"))
    qm.on_timer(T0 + MINUTE + 20)
    assert qm.batches[-1].refresh_all and (qm.state.quota, qm.state.journal_quota) == (11, 12)


def test_events_1_and_2_finding_the_queue_deleted_leave_the_collection_as_it_is():
    """Decision: 3.2.5.2 deletes only on Event 3; [MS-MQDMPR] 3.1.7.1.20 leaves a failed read's result
    undefined. A later v1 update in the same batch still applies."""
    qm = batched()
    qm.directory_object(guid(1), queue_version(1, T0, 5))
    at_arrival(qm, v2(1, guid(1), T0 + 10))
    qm.directory_object(guid(1), queue_version(1, T0 + 20, 6, deleted=True))
    qm.receive(v2(2, guid(1), T0 + 30, message_id="e2"))
    qm.receive(v1([update_queue(1, Q_QUOTA=3)], T0 + 40, message_id="u"))
    qm.on_timer(T0 + MINUTE + 30)
    outcomes = {o.message_id: o.outcome for o in qm.outcomes}
    assert outcomes["e2"] == "ignored" and outcomes["u"] == "applied"
    assert not qm.state.queues[guid(1)].deleted and attr(qm, 1, "Q_QUOTA") == 3


# ---------------------------------------------------------------- property: whatever the micro-batching
def random_stream(rng, length=600):
    """Directory versions and notifications in arrival order (strictly increasing times): creates,
    updates, deletes, v2 events 1-4, quiet gaps around 14 minutes, bursts of 90-130 notifications.
    A queue's directory version always comes before the notifications that read it."""
    t, seq, items, live, dead = T0, 100, [], [], []
    machine = {"PROPID_QM_QUOTA": 1, "PROPID_QM_JOURNAL_QUOTA": 1, "PROPID_QM_SECURITY": "00"}

    def version(n, deleted=False):
        nonlocal seq, t
        seq += 1
        t += rng.randint(1, 20_000)
        items.append(("dir", guid(n), queue_version(n, t, seq, deleted, Q_LABEL=f"L{seq}", Q_QUOTA=seq,
                                                    Q_TRANSACTION=seq % 2)))
        if rng.random() < 0.5:                                # the same change at a second replica
            t += rng.randint(1, 5_000)
            items.append(("dir", guid(n), queue_version(n, t, seq, deleted, Q_LABEL=f"L{seq}", Q_QUOTA=seq,
                                                        Q_TRANSACTION=seq % 2)))
            items[-1][2].server = "bsc2"

    def notify(n):
        nonlocal t
        t += rng.randint(1, 30_000)
        items.append(("cn", n, t))

    next_queue = 1
    while len(items) < length:
        r = rng.random()
        if r < 0.04:
            t += rng.choice([13, 14, 15]) * MINUTE + rng.randint(-30_000, 30_000)      # a quiet gap
        elif r < 0.06:
            for _ in range(rng.randint(90, 130)):                                      # a burst
                t += rng.randint(1, 3_000)
                n = rng.choice(live) if live and rng.random() < 0.6 else None
                items.append(("cn", v2(2, guid(n), t) if n else
                              v1([update_queue(rng.choice(live or [1]), Q_QUOTA=rng.randint(1, 9))], t), t))
        elif r < 0.25 or not live:
            n, next_queue = next_queue, next_queue + 1
            version(n)
            live.append(n)
            notify(v2(1, guid(n), 0) if rng.random() < 0.6 else v1([create(n, label=f"v1-{n}")], 0))
        elif r < 0.6:
            n = rng.choice(live)
            version(n)
            notify(v2(2, guid(n), 0) if rng.random() < 0.6 else v1([update_queue(n, Q_QUOTA=rng.randint(1, 9))], 0))
        elif r < 0.7:
            n = rng.choice(live)
            version(n, deleted=True)
            live.remove(n)
            dead.append(n)
            notify(v2(3, guid(n), 0) if rng.random() < 0.6 else v1([delete(n)], 0))
        elif r < 0.8:
            seq += 1
            t += rng.randint(1, 20_000)
            items.append(("dir", QM, Version(t, "bsc1", seq, False, "machine",
                                             dict(machine, PROPID_QM_QUOTA=seq))))
            notify(v2(4, QM, 0))
        else:
            notify(v2(rng.choice([1, 2]), guid(rng.choice(live + dead)), 0))
    stamped = []
    for k, item in enumerate(items):
        if item[0] == "cn":
            n, at = item[1], item[2]
            n.arrival_ms, n.message_id = at, f"m{k}"
            stamped.append(("cn", n, at))
        else:
            stamped.append((item[0], item[1], item[2], item[2].event_ms))
    return stamped


def run_stream(stream, cuts, mode="batched"):
    qm = QueueManager(QMState(QM), Settings(mode=mode))
    outcomes = {}
    bounds = [0] + sorted(cuts) + [len(stream)]
    for lo, hi in zip(bounds, bounds[1:]):
        for item in stream[lo:hi]:
            if item[0] == "cn":
                qm.receive(item[1])
            else:
                qm.directory_object(item[1], item[2])
        if hi > lo:
            qm.on_timer(stream[hi - 1][-1])
        for o in qm.outcomes:
            outcomes[(o.message_id, o.index)] = (o.outcome, o.reason, o.batch, o.processed_ms)
        qm.outcomes = []
    qm.on_timer(stream[-1][-1] + 60 * MINUTE)
    for o in qm.outcomes:
        outcomes[(o.message_id, o.index)] = (o.outcome, o.reason, o.batch, o.processed_ms)
    queues = {g: (q.deleted, sorted(q.attributes.items(), key=str)) for g, q in qm.state.queues.items()}
    return queues, (qm.state.quota, qm.state.journal_quota, qm.state.security), outcomes


@pytest.mark.parametrize("seed", range(40))
def test_the_same_stream_whole_or_in_random_micro_batches_gives_the_same_queue_manager(seed):
    import random
    rng = random.Random(seed)
    stream = random_stream(rng)
    one_by_one = run_stream(stream, range(1, len(stream)))
    batched_run = run_stream(stream, rng.sample(range(1, len(stream)), rng.randint(1, 40)))
    whole = run_stream(stream, [])
    assert batched_run == one_by_one
    assert whole == one_by_one


def test_the_next_timer_a_queue_manager_keeps_is_the_one_a_fresh_look_at_its_state_finds():
    """The earliest unresolved read is kept between notifications, not found again each time: after
    every step it is the one a new QueueManager over the same state finds."""
    import random
    waited = 0
    for seed in range(20):
        rng = random.Random(seed)
        qm, held = QueueManager(QMState(QM)), []
        for item in random_stream(rng):
            if item[0] == "dir" and rng.random() < 0.3:
                held.append(item)               # a replica late to show it: the reads of it wait
                continue
            if held and rng.random() < 0.1:
                qm.directory_object(held[0][1], held[0][2])
                del held[0]
            if item[0] == "cn":
                qm.on_timer(item[-1] - 1, forget=False)
                qm.receive(item[1])
            else:
                qm.directory_object(item[1], item[2])
            if rng.random() < 0.05:
                qm.on_timer(item[-1])
            waited += bool(qm.state.unresolved)
            fresh = QueueManager(qm.state)
            assert (qm.unresolved_deadline_ms(), qm.next_timer_ms()) == \
                (fresh.unresolved_deadline_ms(), fresh.next_timer_ms()), (seed, item)
    assert waited > 200, waited


def test_the_random_streams_exercise_refreshes_reads_and_ignored_events():
    import random
    seen = set()
    for seed in range(10):
        seen |= {o[0] for o in run_stream(random_stream(random.Random(seed)), [])[2].values()}
    assert {"applied", "superseded-by-refresh", "ignored"} <= seen


@pytest.mark.parametrize("mode", list(Mode))
def test_every_outcome_of_the_random_streams_is_a_result_and_keeps_its_stored_text(mode):
    """The notifications table's outcome column holds Result's values, in both modes of 3.2.5."""
    import random
    for seed in range(10):
        outcomes = run_stream(random_stream(random.Random(seed)), [], mode=mode)[2].values()
        assert all(type(o[0]) is Result for o in outcomes)
    assert [r.value for r in Result] == ["applied", "discarded", "unresolved", "superseded-by-refresh", "ignored",
                                         "duplicate"]
    assert Settings().mode is Mode.BATCHED and Mode(mode.value) is mode


@pytest.mark.parametrize("version_first", [True, False])
def test_an_event_read_before_the_objects_first_version_takes_it_whenever_it_arrives(version_first):
    """A replication micro-batch reports only an object's last version: the queue created before the
    read may show up only with a later version. Same outcome whether it is already there or not."""
    qm = batched()
    later = queue_version(1, T0 + 5 * MINUTE, 6, Q_LABEL="folded")
    if version_first:
        qm.directory_object(guid(1), later)
    at_arrival(qm, v2(1, guid(1), T0))
    if not version_first:
        qm.directory_object(guid(1), later)
    final = qm.outcomes[-1]
    assert (final.outcome, final.reason, final.processed_ms) == ("applied", "resolved when the object appeared in "
                                                                 "a replica", T0 + 5 * MINUTE)
    assert attr(qm, 1, "Q_LABEL") == "folded"


# ---------------------------------------------------------------- health columns (docs/monitoring.md, "Metrics")
def _qm_row(qm):
    from streaming.operators.notification_rows import step_rows
    return next((row for table, row in step_rows(qm) if table == "queue_managers"), None)


def test_the_queue_manager_row_counts_what_waits_in_the_window_and_when_it_last_processed():
    qm = batched()
    qm.receive(v1([create(1)], T0))
    qm.receive(v1([create(2)], T0 + 30_000))
    row = _qm_row(qm)
    assert (row["notifications_waiting"], row["unresolved_reads"], row["last_processed_at"]) == (2, 0, None)
    assert _qm_row(qm) is None                                  # nothing changed since: no row
    qm.on_timer(T0 + MINUTE)
    row = _qm_row(qm)
    assert row["notifications_waiting"] == 0 and row["last_processed_at"].startswith("2026-01-01T00:01:00")


def test_the_queue_manager_row_counts_unresolved_reads_until_the_object_appears():
    qm = batched()
    at_arrival(qm, v2(1, guid(1), T0))
    at_arrival(qm, v2(1, guid(2), T0 + 1))
    assert _qm_row(qm)["unresolved_reads"] == 2
    qm.directory_object(guid(1), queue_version(1, T0 + 500, 3))
    assert _qm_row(qm)["unresolved_reads"] == 1


def test_of_two_copies_of_one_change_a_read_takes_the_change_as_first_propagated():
    """A replica that applied change 6 to a copy that missed change 5 holds, for an
    instant, a version 6 with the older label (then the healed one, a copy the first arrivals leave
    out). A read takes version 6 as it first arrived; a deletion of the same number still wins."""
    qm = batched()
    qm.directory_object(guid(1), queue_version(1, T0, 6, Q_LABEL="as propagated"))
    stale = Version(T0 + 20, "pec0", 6, False, "queue", dict(queue_version(1, T0, 6).properties, PROPID_Q_LABEL="stale"))
    qm.directory_object(guid(1), stale)
    assert qm.read(guid(1), T0 + 30).properties["PROPID_Q_LABEL"] == "as propagated"
    qm.directory_object(guid(1), queue_version(1, T0 + 40, 6, deleted=True))
    assert qm.read(guid(1), T0 + 50).deleted


def test_a_change_never_brings_in_a_queue_that_no_refresh_found():
    """As seen in a short soak, in its shortest form: a queue's create and a change came in a window a
    refresh replaced (note <3>) while no replica held it; the next window (none of which named it) is
    a refresh too, fired the instant the first refresh's read of the queue gave up; then a replica
    shows the queue; then a change of it comes. 3.2.5.2 Event 2 updates "the corresponding Queue ADM
    element instance in the QueueCollection": none, so it is ignored and the queue stays absent
    (verify explains it as replica lag: no refresh or create read came after the replica had it)."""
    qm = batched(refresh_threshold=2)
    qm.receive(v2(1, guid(1), T0, message_id="create"))
    qm.receive(v2(2, guid(1), T0 + 1, message_id="change1"))
    qm.on_timer(T0 + MINUTE)                                        # refresh 1: no replica holds q1
    assert guid(1) in qm.state.unresolved and guid(1) not in qm.state.queues
    qm.receive(v2(2, guid(2), T0 + 5 * MINUTE, message_id="other1"))
    qm.receive(v2(2, guid(3), T0 + 5 * MINUTE + 1, message_id="other2"))
    qm.on_timer(T0 + 16 * MINUTE)                                   # refresh 2, the instant q1's wait ends
    assert qm.batches[-1].refresh_all and guid(1) not in qm.state.unresolved
    qm.directory_object(guid(1), queue_version(1, T0 + 17 * MINUTE, 9))   # sync0 brings it to a replica
    qm.receive(v2(2, guid(1), T0 + 18 * MINUTE, message_id="change2"))
    qm.on_timer(T0 + 31 * MINUTE)                                   # a plain batch: 1 notification
    outcomes = {o.message_id: (o.outcome, o.reason) for o in qm.outcomes}
    assert outcomes["create"][0] == outcomes["change1"][0] == "superseded-by-refresh"
    assert outcomes["change2"] == ("ignored", "no such queue in the QueueCollection (3.2.5.2 Event 2 updates "
                                              "the corresponding Queue; only Event 1 creates)")
    assert guid(1) not in qm.state.queues and not qm.batches[-1].refresh_all
