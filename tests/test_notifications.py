"""The MQCN queue manager state machine, rule by rule, from MS-MQCN section 3.2 (revision 17 where
the revisions differ) and the batching of product behaviour notes <3> and <14>."""
import pytest

from streaming.operators.notifications import (MINUTE, QMState, QueueManager, Settings, Version,
                                               notification_from, queue_manager_of)
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


def attr(qm, n, name):
    return qm.s.queues[guid(n)].attributes[f"PROPID_{name}"]


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
    assert (qm.s.quota, qm.s.journal_quota, qm.s.security) == (9, 8, "aa")


def test_v1_delete_needs_mqds_queue_in_the_second_value():
    qm = immediate()
    qm.receive(v1([create(1)], T0))
    qm.receive(v1([delete(1, objtype=2)], T0 + 1))
    assert not qm.s.queues[guid(1)].deleted
    assert qm.outcomes[-1].outcome == "discarded" and "MQDS_QUEUE" in qm.outcomes[-1].reason
    qm.receive(v1([delete(1)], T0 + 2))
    assert qm.s.queues[guid(1)].deleted


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
    assert qm.s.queues[guid(1)].deleted and not qm.s.queues[guid(2)].deleted
    assert qm.outcomes[-1].outcome == "applied" and qm.outcomes[-1].object_guid == guid(1)
    qm.receive(v1([mqcn.new_update(0x02, [P("D_SCOPE", 1), P("D_OBJTYPE", 1)], DS, path_name="qm\\q1")], T0 + 3))
    assert qm.outcomes[-1].outcome == "ignored" and "no queue with this PathName" in qm.outcomes[-1].reason
    qm.receive(v1([create(3), mqcn.new_update(0x02, [P("D_SCOPE", 1), P("D_OBJTYPE", 1)], DS,
                                              path_name="qm\\q3")], T0 + 4))       # the message of issue 13
    assert qm.s.queues[guid(3)].deleted and None not in qm.s.queues
    rows = step_rows(qm)
    assert rows and all(r.get("queue_guid", "") is not None for _t, r in rows)


@pytest.mark.parametrize("sender, auth, why", [
    ("QueueManagerIdentifier", "None", "AuthenticationLevel None"),
    ("None", "Sig20", "SenderIdentifierType None"),
])
def test_unauthenticated_v1_is_disregarded_whole(sender, auth, why):
    qm = immediate()
    qm.receive(v1([create(1), create(2)], T0, sender=sender, auth=auth))
    assert qm.s.queues == {}
    assert [o.outcome for o in qm.outcomes] == ["discarded", "discarded"] and why in qm.outcomes[0].reason


def test_a_bad_object_type_disregards_the_whole_message():
    qm = immediate()
    site = mqcn.new_update(0x01, [P("S_PATHNAME", "x")], DS, guid_identifier=guid(9))
    qm.receive(v1([create(1), site], T0))
    assert qm.s.queues == {} and "object type 3" in qm.outcomes[0].reason


# ---------------------------------------------------------------- 3.2.5.2 version 0x02
def test_v2_create_and_change_read_the_directory():
    qm = immediate()
    qm.directory_object(guid(1), queue_version(1, T0, 5, Q_LABEL="from the replica"))
    qm.receive(v2(1, guid(1), T0 + 10))
    assert attr(qm, 1, "Q_LABEL") == "from the replica" and attr(qm, 1, "Q_QUOTA") == 7
    qm.directory_object(guid(1), queue_version(1, T0 + 20, 6, Q_LABEL="changed"))
    qm.receive(v2(2, guid(1), T0 + 30))
    assert attr(qm, 1, "Q_LABEL") == "changed"


def test_v2_reads_the_directory_as_of_its_processing_time():
    qm = immediate()
    qm.directory_object(guid(1), queue_version(1, T0, 5, Q_LABEL="then"))
    qm.directory_object(guid(1), queue_version(1, T0 + 100, 6, Q_LABEL="later"))
    qm.receive(v2(2, guid(1), T0 + 50))
    assert attr(qm, 1, "Q_LABEL") == "then"


def test_a_version_that_reaches_the_operator_late_corrects_an_earlier_read():
    qm = immediate()
    qm.directory_object(guid(1), queue_version(1, T0, 5, Q_LABEL="old"))
    qm.receive(v2(2, guid(1), T0 + 50))
    qm.directory_object(guid(1), queue_version(1, T0 + 40, 6, Q_LABEL="was already current"))
    assert attr(qm, 1, "Q_LABEL") == "was already current"
    qm.directory_object(guid(1), queue_version(1, T0 + 60, 7, Q_LABEL="future"))
    assert attr(qm, 1, "Q_LABEL") == "was already current"     # after the read: needs its own notification


def test_v2_for_an_object_no_replica_holds_waits_until_it_appears():
    qm = immediate()
    qm.receive(v2(1, guid(1), T0))
    assert qm.outcomes[-1].outcome == "unresolved" and guid(1) not in qm.s.queues
    qm.directory_object(guid(1), queue_version(1, T0 + 500, 3))
    assert qm.outcomes[-1].outcome == "applied" and "appeared" in qm.outcomes[-1].reason
    assert attr(qm, 1, "Q_LABEL") == "dir"


def test_v2_delete_needs_no_read_and_change_machine_reads_the_queue_manager():
    qm = immediate()
    qm.directory_object(guid(1), queue_version(1, T0, 5))
    qm.receive(v2(1, guid(1), T0 + 1))
    qm.receive(v2(3, guid(1), T0 + 2))
    assert qm.s.queues[guid(1)].deleted
    qm.directory_object(QM, Version(T0, "bsc1", 9, False, "machine",
                                    {"PROPID_QM_QUOTA": 1, "PROPID_QM_JOURNAL_QUOTA": 2, "PROPID_QM_SECURITY": "ff"}))
    qm.directory_object(QM, Version(T0 + 5, "bsc1", 10, False, "machine",
                                    {"PROPID_QM_QUOTA": 11, "PROPID_QM_JOURNAL_QUOTA": 12, "PROPID_QM_SECURITY": "ee"}))
    qm.receive(v2(4, QM, T0 + 10))
    assert (qm.s.quota, qm.s.journal_quota, qm.s.security) == (11, 12, "ee")


def test_other_v2_events_are_ignored():
    qm = immediate()
    qm.receive(v2(7, guid(1), T0))
    assert qm.outcomes[-1].outcome == "ignored" and "note <10>" in qm.outcomes[-1].reason


# ---------------------------------------------------------------- batching (notes <3>, <14>)
def test_after_a_quiet_period_the_first_notification_starts_a_one_minute_timer():
    qm = batched()
    qm.receive(v1([create(1)], T0))
    assert qm.next_timer_ms() == T0 + MINUTE and guid(1) not in qm.s.queues
    qm.receive(v1([create(2)], T0 + 30_000))
    qm.on_timer(T0 + MINUTE - 1)
    assert qm.s.queues == {}
    qm.on_timer(T0 + MINUTE)
    assert set(qm.s.queues) == {guid(1), guid(2)}
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
    assert guid(1) in qm.s.queues and qm.next_timer_ms() is None


def test_the_notify_queue_names_the_queue_manager():
    assert queue_manager_of(f"PRIVATE={QM.upper()}\\3") == QM
    assert queue_manager_of("DIRECT=OS:x\\private$\\q") is None
