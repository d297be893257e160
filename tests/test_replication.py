"""The MQDSRP replica state machine, event by event, from MC-MQDSRP section 3 and the digest's
readings of its defective places (the MC-MQDSRP digest, mqdsrp_digest.md)."""
import marshal

import pytest

from streaming.operators.replica_store import DictBackend, ObjectStore
from streaming.operators.replication import (
    MQ_ERROR, MQ_OK, PEC_PARTITION_ID, PENDING_LIMIT, PURGE_COMPLETESYNC0, PURGE_MOVES, PURGE_NORMAL, PURGE_SYNC0,
    IllegalPurgeMove, PurgeState, Replica, ReplicaOutputs, ServerState)
from streaming.operators.replica_state import STATE_VERSION, state_from_bytes, state_to_bytes
from streaming.wire import mqdsrp
from streaming.wire.properties import Property
from streaming.wire.propids import propid
from streaming.wire.seqnum import MAX_SEQ_NUMBER, MIN_SEQ_NUMBER
from conftest import spies_on_calls

SITE = "11111111-1111-4111-8111-111111111111"
OTHER_SITE = "22222222-2222-4222-8222-222222222222"
T0 = 1_700_000_000_000


def queue_guid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def P(name: str, value) -> Property:
    return Property(propid(name), value)


def create_queue(seq: int, n: int, prev: int | None = None, purged: int = 0, pid: str = SITE, **extra):
    props = [P("Q_INSTANCE", queue_guid(n)), P("Q_PATHNAME", f"qm\\q{n}"), P("Q_LABEL", f"q{n}"),
             P("Q_QUOTA", 100)] + [P(k, v) for k, v in extra.items()]
    return mqdsrp.DirectoryChange(0, 0, f"qm\\q{n}", None, pid, seq - 1 if prev is None else prev, seq, purged, props)


def update_queue(seq: int, n: int, prev: int | None = None, purged: int = 0, pid: str = SITE, **props):
    return mqdsrp.DirectoryChange(1, 1, None, queue_guid(n), pid, seq - 1 if prev is None else prev, seq, purged,
                                  [P(k, v) for k, v in props.items()])


def delete_queue(seq: int, n: int, prev: int | None = None, purged: int = 0, pid: str = SITE):
    return mqdsrp.DirectoryChange(2, 1, None, queue_guid(n), pid, seq - 1 if prev is None else prev, seq, purged,
                                  [P("D_SCOPE", 1), P("D_OBJTYPE", 1)])


def sync_queue(seq: int, n: int, prev: int, purged: int = 0, pid: str = SITE, label: str = "synced"):
    props = [P("Q_SCOPE", 1), P("Q_PATHNAME", f"qm\\q{n}"), P("Q_LABEL", label), P("Q_QUOTA", 7),
             P("Q_HASHKEY", 0), P("Q_LABEL_HASHKEY", 0)]
    return mqdsrp.DirectoryChange(3, 1, None, queue_guid(n), pid, prev, seq, purged, props)


def site_create(seq: int, site_id: str, psc: str, prev: int | None = None):
    props = [P("S_SITEID", site_id), P("S_PATHNAME", f"site-{psc}"), P("S_PSC", psc), P("S_GATES", [])]
    return mqdsrp.DirectoryChange(0, 0, f"site-{psc}", None, PEC_PARTITION_ID, seq - 1 if prev is None else prev,
                                  seq, 0, props)


def propagation(changes, flush=0, header=None, site=SITE):
    return mqdsrp.new_message(site, mqdsrp.ChangePropagationMessage(flush, len(changes), changes,
                                                                    header or mqdsrp.SeqNumberHeader(0)))


def sync_reply(changes, frm, to, purged=0, complete=0, pid=SITE):
    hdr = mqdsrp.SyncReplyHeader(pid, frm, to, purged, len(changes), complete)
    return mqdsrp.new_message(SITE, mqdsrp.SyncReplyMessage(hdr, changes))


class Server:
    """One replica with its store; `send` delivers messages at increasing event times."""

    def __init__(self, name: str = "bsc1", psc: str = "psc1", role: str = "BSC"):
        self.state, self.backend = ServerState(name), DictBackend()
        self.now = T0
        r = self.replica()
        r.initialize(T0)
        r.state.partitions[PEC_PARTITION_ID].authority = "pec"
        if role == "PSC":
            r._site_appeared(SITE, name)
            r._site_appeared(OTHER_SITE, "psc2")
        else:
            r.state.my_psc_name = psc
            r._site_appeared(SITE, psc)
        r.state.site_id = SITE
        r.send_initial_syncs()           # 3.3.3: already asked for every replicated partition
        self.out = []

    def replica(self) -> Replica:
        return Replica(self.state, ObjectStore(self.backend))

    def send(self, msg, source="psc1", message_class="Normal", queue=None, body=b""):
        self.now += 10
        r = self.replica()
        r.receive(msg, arrival_ms=self.now, source=source, message_class=message_class, destination_queue=queue,
                  body=body)
        r.store.flush()
        self.out = r.out
        self.last = r
        return r

    def timer(self, now):
        r = self.replica()
        r.on_timer(now)
        self.out = r.out
        return r

    def partition(self, pid=SITE):
        return self.state.partitions[pid]

    def obj(self, n: int):
        return self.replica().store.get(queue_guid(n))

    def requests(self):
        return [o for o in self.out if isinstance(o.message, mqdsrp.SyncRequestMessage)]


def caught_up(server: Server, pid=SITE):
    """A first sync reply (3.3.7.5: ChangeMissingWindow MAX -> MIN), so gaps are asked for."""
    server.send(sync_reply([], 0, 0, pid=pid))
    assert server.partition(pid).change_missing_window == MIN_SEQ_NUMBER


# ---------------------------------------------------------------- 3.1.7.2.2 / 3.1.7.2.3
def test_in_order_changes_apply_and_advance_the_last_sequence_number():
    s = Server()
    s.send(propagation([create_queue(1, 1), update_queue(2, 1, Q_LABEL="new"), create_queue(3, 2)]))
    assert s.partition().last_seq == 3
    q1 = s.obj(1)
    assert q1.seq_number == 2 and q1.properties[propid("Q_LABEL")] == "new"
    assert q1.properties[propid("Q_QUOTA")] == 100          # an update changes only the listed properties
    assert q1.path_name == "qm\\q1"


def test_duplicates_and_old_changes_take_no_action():
    s = Server()
    s.send(propagation([create_queue(1, 1), update_queue(2, 1, Q_LABEL="new")]))
    s.send(propagation([update_queue(2, 1, Q_LABEL="again"), update_queue(1, 1, prev=0, Q_LABEL="older")]))
    assert s.obj(1).properties[propid("Q_LABEL")] == "new" and s.partition().last_seq == 2


def test_a_change_older_than_the_purge_horizon_is_stale():
    s = Server()
    s.partition().purged_seq = 50
    s.send(propagation([create_queue(1, 1, purged=10)]))
    assert s.obj(1) is None and s.partition().last_seq == 0


def test_overlapping_previous_sequence_number_is_in_sync():
    """3.1.7.2.2 tests PreviousSeqNumber <= LastSeqNumber: an overlap is accepted."""
    s = Server()
    s.send(propagation([create_queue(1, 1), create_queue(2, 2)]))
    s.send(propagation([create_queue(3, 3, prev=1)]))
    assert s.partition().last_seq == 3 and s.obj(3) is not None


def test_an_out_of_order_change_waits_and_applies_when_its_predecessor_arrives():
    """Check Pending Changes with the digest's reading (§9.4: PreviousSeqNumber > LastSeqNumber);
    the literal SeqNumber > LastSeqNumber would never let the pending change through."""
    s = Server()
    s.send(propagation([create_queue(2, 2), create_queue(3, 3)]))
    assert s.partition().last_seq == 0 and [c.seq_number for c in s.partition().pending] == [2, 3]
    s.send(propagation([create_queue(1, 1)]))
    assert s.partition().last_seq == 3 and not s.partition().pending
    assert {s.obj(n).seq_number for n in (1, 2, 3)} == {1, 2, 3}


def test_pending_collection_is_sorted_without_duplicates_and_capped_at_100():
    s = Server()
    s.send(propagation([create_queue(5, 5), create_queue(3, 3), create_queue(3, 3)]))
    assert [c.seq_number for c in s.partition().pending] == [3, 5]
    s.send(propagation([create_queue(10 + i, 10 + i) for i in range(PENDING_LIMIT + 5)]))
    assert len(s.partition().pending) == PENDING_LIMIT


def test_no_gap_request_while_the_initial_sync_is_outstanding():
    """ChangeMissingWindow starts at MAX (3.1.1.2.3): no change can be above it."""
    s = Server()
    s.send(propagation([create_queue(5, 5)]))
    assert s.requests() == []


def test_a_gap_asks_for_the_missing_range_once_caught_up():
    s = Server()
    caught_up(s)
    s.send(propagation([create_queue(1, 1)]))
    s.send(propagation([create_queue(5, 5)]))
    (req,) = s.requests()
    m = req.message
    assert (m.from_seq_number, m.to_seq_number, m.is_sync0, m.scope) == (1, 5, 0, 0)     # a BSC: scope 0x00
    assert req.destination == "psc1" and req.reason == "gap"                            # a BSC asks its PSC
    assert s.partition().change_missing_window == 5
    s.send(propagation([create_queue(6, 6)]))                   # inside the window already asked for
    assert s.requests() == []


def test_a_psc_asks_the_authority_with_scope_one():
    s = Server("psc1", role="PSC")
    caught_up(s, OTHER_SITE)
    s.send(propagation([create_queue(3, 3, pid=OTHER_SITE)], site=OTHER_SITE), source="psc2")
    (req,) = s.requests()
    assert req.destination == "psc2" and req.message.scope == 1 and req.message.requester_name == "psc1"


# ---------------------------------------------------------------- object operations
def test_delete_records_a_deleted_object_and_removes_the_object():
    s = Server()
    s.send(propagation([create_queue(1, 1), delete_queue(2, 1)]))
    assert s.obj(1) is None
    d = s.state.deleted[queue_guid(1)]
    assert (d.seq_number, d.object_type, d.scope, d.partition_id) == (2, 1, 1, SITE)


def test_update_of_an_unknown_object_fails_and_does_not_advance():
    s = Server()
    s.send(propagation([update_queue(1, 9, Q_LABEL="x")]))
    assert s.partition().last_seq == 0


def test_sync_creates_with_the_guid_and_drops_reserved_properties():
    """§9.8: the GUID travels in GuidIdentifier only; Q_HASHKEY values MUST NOT be interpreted."""
    s = Server()
    s.send(sync_reply([sync_queue(1, 4, prev=0)], 0, 1))
    q = s.obj(4)
    assert q.properties[propid("Q_INSTANCE")] == queue_guid(4)
    assert propid("Q_HASHKEY") not in q.properties and propid("Q_LABEL_HASHKEY") not in q.properties
    assert q.path_name == "qm\\q4"


def test_sync_of_an_existing_object_replaces_its_listed_properties():
    s = Server()
    s.send(propagation([create_queue(1, 1)]))
    s.send(sync_reply([sync_queue(2, 1, prev=1, label="fresh")], 1, 2))
    q = s.obj(1)
    assert q.properties[propid("Q_LABEL")] == "fresh" and q.properties[propid("Q_QUOTA")] == 7 and q.seq_number == 2


# ---------------------------------------------------------------- 3.3.7.5 Receive Sync Reply
def test_first_sync_reply_closes_the_window_and_applies_pending_changes():
    s = Server()
    s.send(propagation([create_queue(3, 3)]))
    s.send(sync_reply([create_queue(1, 1), create_queue(2, 2)], 0, 2))
    assert s.partition().change_missing_window == MIN_SEQ_NUMBER and s.partition().last_seq == 3


def test_an_empty_reply_for_the_requested_window_skips_the_gap():
    """§11.5: Count 0 and ChangeMissingWindow == ToSeqNumber: LastSeqNumber := ToSeqNumber."""
    s = Server()
    caught_up(s)
    s.send(propagation([create_queue(1, 1)]))
    s.send(propagation([create_queue(6, 6, prev=5)]))
    assert s.partition().change_missing_window == 6
    s.send(sync_reply([], 1, 6))
    p = s.partition()
    assert p.change_missing_window == MIN_SEQ_NUMBER and p.last_seq == 6


def test_a_reply_older_than_the_purge_horizon_is_ignored():
    s = Server()
    s.partition().purged_seq = 20
    s.send(sync_reply([create_queue(21, 1, prev=0, purged=20)], 0, 21, purged=10))
    assert s.obj(1) is None


def test_a_sync_reply_is_applied_whole_before_pending_changes():
    """[INFERENCE] (replication.py, Receive Sync Reply): a pending older update must not be applied
    in the middle of a reply whose later entry carries the object's current state."""
    s = Server()
    s.send(propagation([create_queue(1, 1)]))
    # 2..3 lost; 4 updates queue 1 (label only) and waits
    s.send(propagation([update_queue(4, 1, prev=3, Q_LABEL="four")]))
    # the authority's answer: queue 2 at 3 (its current seq) and queue 1 at 5 (its current state)
    s.send(sync_reply([create_queue(3, 2, prev=1), sync_queue(5, 1, prev=3, label="current")], 1, 5))
    q = s.obj(1)
    assert q.properties[propid("Q_LABEL")] == "current" and q.seq_number == 5
    assert s.partition().last_seq == 5 and not s.partition().pending


# ---------------------------------------------------------------- 3.2.7.1 SeqNumberHeader
def test_seq_number_header_raises_allowed_purge_and_asks_for_what_is_missing():
    s = Server()
    caught_up(s)
    s.send(propagation([create_queue(1, 1)]))
    header = mqdsrp.SeqNumberHeader(1, "psc1", [mqdsrp.PartitionSeqNumbers(SITE, 9, 4)])
    s.send(propagation([], header=header))
    p = s.partition()
    assert p.allowed_purge_seq == 4 and p.change_missing_window == 10
    (req,) = s.requests()
    assert (req.message.from_seq_number, req.message.to_seq_number) == (1, 10)


# ---------------------------------------------------------------- 3.1.7.2.9 purge
def deletes_up_to(s: Server, last: int):
    changes = [create_queue(1, 1), delete_queue(2, 1)] + [create_queue(i, i) for i in range(3, last + 1)]
    s.send(propagation(changes))


def test_purge_waits_for_the_1024_buffer_and_the_allowed_horizon():
    s = Server()
    s.partition().allowed_purge_seq = 5
    deletes_up_to(s, 1000)                       # LastSeqNumber < 1024: nothing to purge (§9.9 b)
    assert queue_guid(1) in s.state.deleted and s.partition().purged_seq == 0
    s.send(propagation([create_queue(i, i, purged=5) for i in range(1001, 1100)]))
    assert queue_guid(1) not in s.state.deleted  # at 1028: purged up to 1028 - 1024 = 4
    assert s.partition().purged_seq == 4         # and the horizon advances (§9.9 a)
    s.send(propagation([create_queue(i, i, purged=5) for i in range(1100, 1300)]))
    assert s.partition().purged_seq == 5         # at 1285: bounded by AllowedPurgeSeqNumber


def test_no_purge_beyond_what_the_authority_allows():
    s = Server()
    deletes_up_to(s, 1300)                       # AllowedPurgeSeqNumber is still MIN
    assert queue_guid(1) in s.state.deleted and s.partition().purged_seq == 0


# ---------------------------------------------------------------- PSC ack (3.1.7.2.3, 3.3.7.4)
def test_a_psc_acks_every_256th_change_and_a_bsc_does_not():
    psc, bsc = Server("psc1", role="PSC"), Server()
    for s, pid, src in ((psc, OTHER_SITE, "psc2"), (bsc, SITE, "psc1")):
        s.send(propagation([create_queue(i, i, pid=pid) for i in range(1, 258)], site=pid), source=src)
    acks = [o for o in psc.out if isinstance(o.message, mqdsrp.PSCAckMessage)]
    assert len(acks) == 1 and acks[0].destination == "psc2"
    assert (acks[0].message.acked_seq_number, acks[0].message.acked_partition_id, acks[0].message.psc_name) == \
        (256, OTHER_SITE, "psc1")
    assert acks[0].message.psc_site_id == SITE
    assert not [o for o in bsc.out if isinstance(o.message, mqdsrp.PSCAckMessage)]


def test_the_initial_sync_is_outstanding_until_its_reply_and_again_from_a_sync0():
    s = Server()
    p = s.partition()
    assert p.initial_sync_outstanding and p.change_missing_window == MAX_SEQ_NUMBER
    s.send(sync_reply([create_queue(1, 1)], 0, 1))
    assert not p.initial_sync_outstanding and p.change_missing_window == MIN_SEQ_NUMBER
    s.send(mqdsrp.new_message(SITE, mqdsrp.AlreadyPurgedMessage(SITE, 40)))
    assert s.partition().initial_sync_outstanding


def test_a_state_of_another_layout_version_is_refused_with_its_name_and_version():
    raw = marshal.loads(state_to_bytes(ServerState("bsc1")))
    assert raw[0] == STATE_VERSION == 1
    with pytest.raises(ValueError, match=r"replica state of 'bsc1' is of version 2: this release reads version 1"):
        state_from_bytes(marshal.dumps((2, *raw[1:])))


def test_take_outputs_hands_over_what_the_step_collected_and_forgets_it():
    s = Server()
    r = s.send(mqdsrp.new_message(SITE, mqdsrp.AlreadyPurgedMessage(SITE, 40)))
    r.receive(mqdsrp.new_message(SITE, mqdsrp.SyncRequestMessage(SITE, 0, 10, 0, 0, 0, "bsc2")),
              arrival_ms=s.now)
    sent = list(r.out)
    outputs = r.take_outputs()
    assert isinstance(outputs, ReplicaOutputs) and outputs.sent == sent and sent
    assert [m.message.is_sync0 for m in outputs.sent] == [1]
    assert outputs.ignored == [("SyncRequest", "answered by the object authority")]
    again = r.take_outputs()
    assert (again.sent, again.pending_events, again.deleted_touched, again.ignored, again.checks) == ([], [], {}, [], [])


# ---------------------------------------------------------------- AlreadyPurged and sync0 (3.3.7.7, 3.3.7.10, 3.3.7.11)
def test_already_purged_starts_sync0_and_sync0_rebuilds_the_partition():
    s = Server()
    s.send(propagation([create_queue(1, 1), create_queue(2, 2), delete_queue(3, 2)]))
    s.send(mqdsrp.new_message(SITE, mqdsrp.AlreadyPurgedMessage(SITE, 40)))
    p = s.partition()
    assert (p.purge_state, p.last_seq, p.purged_seq, p.change_missing_window) == (PURGE_SYNC0, 0, 40, MAX_SEQ_NUMBER)
    assert s.obj(1).seq_number == MIN_SEQ_NUMBER           # Reset Directory Partition, operation 1
    (req,) = s.requests()
    m = req.message
    assert (m.from_seq_number, m.to_seq_number, m.known_purged_seq_number, m.is_sync0) == (0, MAX_SEQ_NUMBER, 40, 1)
    s.send(sync_reply([sync_queue(41, 3, prev=0, purged=40)], 0, 41, purged=40, complete=1))
    (again,) = s.requests()                                # CompleteSync0 = 1: more to come
    assert again.message.from_seq_number == 41 and again.message.is_sync0 == 1
    s.send(sync_reply([sync_queue(42, 4, prev=41, purged=40)], 41, 42, purged=40, complete=2))
    p = s.partition()
    assert (p.purge_state, p.change_missing_window, p.last_seq) == (PURGE_NORMAL, MIN_SEQ_NUMBER, 42)
    assert s.obj(1) is None                                # still at MIN: gone (operation 2)
    assert s.obj(3) is not None and s.obj(4) is not None
    assert queue_guid(2) not in s.state.deleted            # deleted objects still at MIN are dropped


def test_already_purged_is_ignored_when_the_replica_is_past_the_horizon():
    s = Server()
    s.send(propagation([create_queue(i, i) for i in range(1, 51)]))
    s.send(mqdsrp.new_message(SITE, mqdsrp.AlreadyPurgedMessage(SITE, 40)))
    assert s.partition().purge_state == PURGE_NORMAL and s.obj(1).seq_number == 1
    # [INFERENCE] the unanswered initial request is asked again from where the replica is
    (req,) = s.requests()
    assert req.message.from_seq_number == 50 and req.message.is_sync0 == 0


def test_complete_sync0_also_accepts_purge_state_3():
    """§11.11: the labels contradict the state table; both literal numbers 2 and 3 are accepted."""
    s = Server()
    r = s.replica()
    p = s.partition()
    p.purge_state = PURGE_COMPLETESYNC0
    r.complete_sync0(p)
    assert p.purge_state == PURGE_NORMAL


@spies_on_calls
def test_every_purge_state_move_is_in_the_table_and_any_other_raises():
    """3.3.7.10 and 3.3.7.11 are the only writers of PurgeState: each move they make is one of
    PURGE_MOVES, which Partition.move_purge_state enforces."""
    s = Server()
    r, p = s.replica(), s.partition()
    moves = []
    original = type(p).move_purge_state

    def watched(partition, new):
        moves.append((partition.purge_state, new))
        original(partition, new)

    type(p).move_purge_state = watched
    try:
        r.start_sync0(p, 40)
        r.start_sync0(p, 50)                               # AlreadyPurged again during sync0: it starts over
        r.complete_sync0(p)
    finally:
        type(p).move_purge_state = original
    assert moves == [(PurgeState.NORMAL, PurgeState.STARTSYNC0), (PurgeState.STARTSYNC0, PurgeState.SYNC0),
                     (PurgeState.SYNC0, PurgeState.STARTSYNC0), (PurgeState.STARTSYNC0, PurgeState.SYNC0),
                     (PurgeState.SYNC0, PurgeState.NORMAL)]
    for old in PurgeState:
        for new in PurgeState:
            p.purge_state = old
            if new in PURGE_MOVES[old]:
                p.move_purge_state(new)
                assert p.purge_state is new
            else:
                with pytest.raises(IllegalPurgeMove, match=f"{old.name} -> {new.name}"):
                    p.move_purge_state(new)
                assert p.purge_state is old


def test_the_purge_state_is_stored_as_its_uchar_and_read_back_as_the_enum():
    """The checkpoint keeps the int a state written before the enum kept, and the sink its
    lowercase name."""
    s = Server()
    s.send(mqdsrp.new_message(SITE, mqdsrp.AlreadyPurgedMessage(SITE, 40)))
    raw = state_to_bytes(s.state)
    (stored,) = [t[5] for t in marshal.loads(raw)[4] if t[0] == SITE]
    assert type(stored) is int and stored == 2
    back = state_from_bytes(raw).partitions[SITE].purge_state
    assert back is PurgeState.SYNC0 and back.label == "sync0"
    assert [state.label for state in PurgeState] == ["normal", "startsync0", "sync0", "completesync0"]


def test_propagated_changes_during_sync0_wait_for_it_to_complete():
    s = Server()
    s.send(mqdsrp.new_message(SITE, mqdsrp.AlreadyPurgedMessage(SITE, 40)))
    s.send(propagation([create_queue(44, 7, prev=43, purged=40)]))
    assert s.obj(7) is None and len(s.partition().pending) == 1
    s.send(sync_reply([sync_queue(43, 3, prev=0, purged=40)], 0, 43, purged=40, complete=2))
    assert s.obj(7) is not None and s.partition().last_seq == 44


# ---------------------------------------------------------------- sites and the enterprise (3.1.7.2.5, .10, .11)
def test_a_new_site_adds_its_partition_and_asks_its_psc_for_it():
    s = Server()
    s.send(propagation([site_create(1, "33333333-3333-4333-8333-333333333333", "psc3")], site=SITE))
    new = s.state.partitions["33333333-3333-4333-8333-333333333333"]
    assert new.authority == "psc3" and new.change_missing_window == MAX_SEQ_NUMBER
    (req,) = s.requests()
    assert req.destination == "psc1" and req.message.partition_id == new.partition_id   # a BSC asks its PSC
    assert s.state.psc_neighbors == {}                     # a BSC has no directory neighbours (§9.11)


def test_a_psc_gets_a_psc_neighbour_for_a_new_site():
    s = Server("psc1", role="PSC")
    s.send(propagation([site_create(1, "33333333-3333-4333-8333-333333333333", "psc3")]), source="pec")
    assert s.state.psc_neighbors["psc3"].partition_id == "33333333-3333-4333-8333-333333333333"
    assert [r.destination for r in s.requests()] == ["psc3"]


def test_enterprise_and_site_updates_move_the_authority():
    s = Server("psc1", role="PSC")
    s.send(propagation([site_create(1, "33333333-3333-4333-8333-333333333333", "psc3")]), source="pec")
    site_obj = "33333333-3333-4333-8333-333333333333"
    ent = mqdsrp.DirectoryChange(0, 0, "corp", None, PEC_PARTITION_ID, 1, 2, 0,
                                 [P("E_ID", "44444444-4444-4444-8444-444444444444"), P("E_NAME", "corp")])
    upd_ent = mqdsrp.DirectoryChange(1, 1, None, "44444444-4444-4444-8444-444444444444", PEC_PARTITION_ID, 2, 3, 0,
                                     [P("E_PECNAME", "newpec")])
    upd_site = mqdsrp.DirectoryChange(1, 1, None, site_obj, PEC_PARTITION_ID, 3, 4, 0, [P("S_PSC", "psc9")])
    s.send(propagation([ent, upd_ent, upd_site]), source="pec")
    assert s.state.partitions[PEC_PARTITION_ID].authority == "newpec"
    assert s.state.partitions[site_obj].authority == "psc9"
    assert s.state.psc_neighbors["psc3"].machine_name == "psc9"


# ---------------------------------------------------------------- BSC neighbours and flushes (3.1.7.2.3, 3.3.7.2)
def test_a_psc_forwards_changes_to_its_bscs_and_flushes_site_changes_at_once():
    s = Server("psc1", role="PSC")
    s.send(mqdsrp.new_message(SITE, mqdsrp.BSCAckMessage(queue_guid(99), "bsc1")), source="bsc1")
    assert "bsc1" in s.state.bsc_neighbors
    s.send(propagation([create_queue(1, 1, pid=OTHER_SITE)], site=OTHER_SITE), source="psc2")
    assert not [o for o in s.out if o.reason == "flush"]
    s.send(propagation([site_create(1, "33333333-3333-4333-8333-333333333333", "psc3")]), source="pec")
    (flush,) = [o for o in s.out if o.reason == "flush"]
    assert flush.destination == "bsc1" and flush.message.flush == 1
    assert [c.seq_number for c in flush.message.directory_changes] == [1, 1]     # both partitions' changes
    s.send(propagation([create_queue(2, 2, pid=OTHER_SITE)], site=OTHER_SITE), source="psc2")
    due = s.replica().next_timer_ms()
    assert due == s.now + 2_000                          # Change Propagation Timer, intrasite (note <3>)
    (tick,) = [o for o in s.timer(due).out if o.reason == "propagation"]
    assert tick.message.flush == 0 and [c.seq_number for c in tick.message.directory_changes] == [2]


def test_the_bsc_ack_timer_fires_after_5_seconds_then_every_12_hours():
    s = Server()
    r = s.replica()
    assert r.next_timer_ms() == T0 + 5_000
    (ack,) = s.timer(T0 + 5_000).out
    assert ack.destination == "psc1" and ack.message.bsc_name == "bsc1"
    assert s.replica().next_timer_ms() == T0 + 5_000 + 12 * 3_600_000


# ---------------------------------------------------------------- change requests (3.2.7.2, 3.3.7.1, 3.2.7.6)
def change_request(requester="bsc1", psc_name="psc1", request_id=7, pid=OTHER_SITE):
    header = mqdsrp.ChangeRequestHeader(pid, request_id, len(requester) + 1 if psc_name else 0, requester, psc_name)
    change = mqdsrp.DirectoryChange(1, 0, "qm\\q1", None, pid, 0, 0, 0, [P("Q_LABEL", "x")])
    return mqdsrp.new_message(SITE, mqdsrp.ChangeRequestMessage(header, change))


def test_a_psc_forwards_a_bsc_change_request_and_relays_the_reply():
    s = Server("psc1", role="PSC")
    s.send(mqdsrp.new_message(SITE, mqdsrp.BSCAckMessage(queue_guid(99), "bsc1")), source="bsc1")
    s.send(change_request(), source="bsc1", body=b"original")
    (fwd,) = s.out
    assert fwd.destination == "psc2" and fwd.body == b"original"          # unchanged, to the authority
    s.send(mqdsrp.new_message(OTHER_SITE, mqdsrp.ChangeReplyMessage(7, MQ_OK, "bsc1")), source="psc2")
    (reply,) = s.out
    assert reply.destination == "bsc1" and reply.message.result == MQ_OK and not s.state.forwarded


def test_a_forwarded_request_without_reply_times_out_and_a_nack_means_owner_not_reached():
    s = Server("psc1", role="PSC")
    s.send(change_request(request_id=1))
    deadline = s.replica().next_timer_ms()
    assert deadline == s.now + 10_000                    # the next hop is the authority (note <11>)
    (timeout,) = s.timer(deadline).out
    assert (timeout.message.result, timeout.status) == (MQ_ERROR, "MQDS_NO_RSP_FROM_OWNER")
    assert timeout.destination == "psc1"                 # bsc1 is not a neighbour: via its PSC (PSCName)
    s.send(change_request(request_id=2))
    s.send(change_request(request_id=2), message_class="NackReachQueueTimeout")
    (nack,) = s.out
    assert nack.status == "MQDS_OWNER_NOT_REACHED"


def test_a_change_request_for_the_own_partition_is_left_to_the_authority():
    s = Server("psc1", role="PSC")
    s.send(change_request(pid=SITE))
    assert s.out == []


# ---------------------------------------------------------------- Nacks and message classes (3.1.5.1, 3.3.7.9)
def test_bad_signature_nacks_are_resent_at_most_three_times():
    s = Server()
    queue = "DIRECT=OS:psc1\\private$\\mqis_queue$"
    msg = mqdsrp.new_message(SITE, mqdsrp.PSCAckMessage(SITE, SITE, 256, "bsc1"))
    sent = []
    for _ in range(5):
        s.send(msg, message_class="NackBadSignature", queue=queue, body=b"body")
        sent += s.out
    assert [o.destination for o in sent] == ["psc1"] * 3 and all(o.body == b"body" for o in sent)
    s.send(msg, message_class="NackReachQueueTimeout", queue=queue, body=b"other")
    assert s.out == []


def test_positive_acknowledgement_classes_take_no_action():
    s = Server()
    s.send(propagation([create_queue(1, 1)]), message_class="AckReachQueue")
    assert s.partition().last_seq == 0


# ---------------------------------------------------------------- persistence
def test_state_survives_a_round_trip_through_bytes():
    s = Server("psc1", role="PSC")
    s.send(mqdsrp.new_message(SITE, mqdsrp.BSCAckMessage(queue_guid(99), "bsc1")), source="bsc1")
    s.send(propagation([create_queue(1, 1, pid=OTHER_SITE), create_queue(3, 3, pid=OTHER_SITE),
                        delete_queue(2, 1, prev=1, pid=OTHER_SITE)], site=OTHER_SITE), source="psc2")
    s.send(change_request(request_id=5))
    again = state_from_bytes(state_to_bytes(s.state))
    assert again == s.state


@pytest.mark.parametrize("n", [1, 300])
def test_object_store_keeps_objects_across_steps(n):
    s = Server()
    s.send(propagation([create_queue(i, i) for i in range(1, n + 1)]))
    assert [s.obj(i).seq_number for i in (1, n)] == [1, n]
    assert s.replica().store.guid_for_path(f"QM\\Q{n}") == queue_guid(n)        # path names: case-insensitive


def test_a_long_collection_goes_to_the_bsc_in_several_messages():
    from streaming.operators.replication import PROPAGATION_CHUNK
    s = Server("psc1", role="PSC")
    s.send(mqdsrp.new_message(SITE, mqdsrp.BSCAckMessage(queue_guid(99), "bsc1")), source="bsc1")
    n = PROPAGATION_CHUNK * 2 + 5
    s.send(propagation([create_queue(i, i, pid=OTHER_SITE) for i in range(1, n + 1)], site=OTHER_SITE), source="psc2")
    out = s.timer(s.replica().next_timer_ms()).out
    sizes = [len(o.message.directory_changes) for o in out if o.reason == "propagation"]
    assert sizes == [PROPAGATION_CHUNK, PROPAGATION_CHUNK, 5]
    seqs = [c.seq_number for o in out for c in o.message.directory_changes]
    assert seqs == list(range(1, n + 1))


# ---------------------------------------------------------------- sync replies lose nothing
def test_pending_changes_apply_in_order_inside_a_sync_reply():
    """3.3.7.5 processes each reply change as 3.1.5.2 does, and 3.1.7.2.2 checks the pending changes
    after every change that applied: seq 3 (a label) waits on seq 2, which only the reply brings."""
    s = Server()
    caught_up(s)
    s.send(propagation([create_queue(1, 1)]))
    s.send(propagation([create_queue(4, 4, prev=3)]))                        # 2 never propagated
    assert [(r.message.from_seq_number, r.message.to_seq_number) for r in s.requests()] == [(1, 4)]
    s.send(propagation([update_queue(3, 1, prev=2, Q_LABEL="L3")]))
    s.send(propagation([update_queue(5, 1, prev=4, Q_QUOTA=5555)]))
    s.send(sync_reply([sync_queue(2, 2, prev=1, label="q2"), sync_queue(4, 4, prev=2, label="q4")], 1, 4))
    q1 = s.obj(1)
    assert (q1.properties[propid("Q_LABEL")], q1.properties[propid("Q_QUOTA")]) == ("L3", 5555)
    assert s.obj(2) and s.obj(4) and s.partition().last_seq == 5 and not s.partition().pending


def test_a_pending_create_is_applied_when_the_reply_closes_its_window():
    """[INFERENCE] (digest §11.5 generalised): the reply for [From, To] holds what the authority still
    has of that window; a pending create in it whose predecessor the reply leaves out still applies."""
    s = Server()
    caught_up(s)
    s.send(propagation([create_queue(1, 1)]))
    s.send(propagation([create_queue(4, 4, prev=3)]))                        # 2 and 3 lost
    s.send(propagation([create_queue(3, 3, prev=2)]))                        # 3 arrives late
    s.send(propagation([update_queue(5, 3, prev=4, Q_QUOTA=5)]))
    s.send(sync_reply([], 1, 4))              # 2 was superseded; the authority's 3 and 4 are now later
    assert s.obj(3) and s.obj(3).properties[propid("Q_QUOTA")] == 5 and s.obj(4)
    assert s.partition().last_seq == 5 and not s.requests()


def test_a_reply_entry_at_or_below_last_seq_still_heals_an_object_that_is_not_newer():
    """The pending change applied inside the reply moves LastSeqNumber past the reply's own entry for
    the same object, whose full current state (with the lost label) must still apply."""
    s = Server()
    caught_up(s)
    s.send(propagation([create_queue(1, 1)]))
    s.send(propagation([update_queue(4, 1, prev=3, Q_QUOTA=9)]))              # 2 (label) and 3 lost
    s.send(sync_reply([sync_queue(3, 2, prev=1), sync_queue(4, 1, prev=3, label="L2")], 1, 4))
    q1 = s.obj(1)
    assert q1.properties[propid("Q_LABEL")] == "L2" and s.partition().last_seq == 4
    s.send(sync_reply([sync_queue(2, 1, prev=1, label="older")], 1, 2))      # an older entry: not applied
    assert s.obj(1).properties[propid("Q_LABEL")] == "L2"


def test_the_initial_sync_requests_go_out_before_the_first_message_is_processed():
    """3.1.3.3 / 3.3.3: the enterprise partition's request reads (0, MAX), not (1, MAX)."""
    r = Replica(ServerState("psc1"), ObjectStore(DictBackend()), "pec")
    r.receive(propagation([site_create(1, SITE, "psc1")]), arrival_ms=T0, source="pec")
    requests = [(o.message.partition_id, o.message.from_seq_number, o.message.to_seq_number) for o in r.out
                if isinstance(o.message, mqdsrp.SyncRequestMessage)]
    assert requests[0] == (PEC_PARTITION_ID, 0, MAX_SEQ_NUMBER)


class Authority:
    """An independent MQDSRP authority for partition SITE: it makes changes and answers a sync request
    with every object (its full state) and deletion whose current sequence number is in [From, To]
    (3.2.7.3), PreviousSeqNumber chained from From. With `whole_updates` its updates carry the
    object's whole mutable state (label and quota); otherwise one attribute. A change that a later
    partial update of the same object supersedes, once dropped or delayed past the reply for its
    number, is in no reply (the object's current number is later): the protocol's own limit."""

    def __init__(self, whole_updates: bool):
        self.seq, self.objects, self.deleted, self.whole_updates = 0, {}, {}, whole_updates

    def change(self, rng):
        self.seq += 1
        live = sorted(self.objects)
        r = rng.random()
        if r < 0.3 or not live:
            n = len(self.objects) + len(self.deleted) + 1
            self.objects[n] = [self.seq, f"q{n}", 100]
            return create_queue(self.seq, n)
        n = rng.choice(live)
        if r < 0.9:
            o = self.objects[n]
            o[0] = self.seq
            if rng.random() < 0.5:
                o[1] = f"L{self.seq}"
                return update_queue(self.seq, n, Q_LABEL=o[1], **({"Q_QUOTA": o[2]} if self.whole_updates else {}))
            o[2] = self.seq
            return update_queue(self.seq, n, Q_QUOTA=o[2], **({"Q_LABEL": o[1]} if self.whole_updates else {}))
        del self.objects[n]
        self.deleted[n] = self.seq
        return delete_queue(self.seq, n)

    def reply(self, req):
        to = self.seq if req.to_seq_number == MAX_SEQ_NUMBER else req.to_seq_number
        frm = req.from_seq_number
        changes = []
        for n, (seq, label, quota) in self.objects.items():
            if frm <= seq <= to:
                c = sync_queue(seq, n, 0, label=label)
                c.properties = [p for p in c.properties if p.prop_id != propid("Q_QUOTA")] + [P("Q_QUOTA", quota)]
                changes.append(c)
        changes += [delete_queue(seq, n, 0) for n, seq in self.deleted.items() if frm <= seq <= to]
        changes.sort(key=lambda c: c.seq_number)
        previous = frm
        for c in changes:
            c.previous_seq_number, previous = previous, c.seq_number
        return sync_reply(changes, frm, to)

    def state(self):
        return {queue_guid(n): (label, quota) for n, (_seq, label, quota) in self.objects.items()}


def replicate_with_faults(seed, whole_updates=True, changes=60):
    """Propagations dropped (10 %), duplicated (10 %) and reordered (within 3); each sync request
    answered at a random later point from the authority's state then; at the end a SeqNumberHeader
    (3.2.7.1) tells the replica the authority's last number, and every request is answered."""
    import random
    rng = random.Random(seed)
    a, s = Authority(whole_updates), Server()
    s.send(a.reply(mqdsrp.SyncRequestMessage(SITE, 0, MAX_SEQ_NUMBER, 0, 0, 0, "bsc1")))
    in_flight, requests = [], []

    def deliver(msg):
        s.send(msg)
        requests.extend(r.message for r in s.requests())

    for _ in range(changes):
        change = a.change(rng)
        if rng.random() < 0.1:
            continue
        in_flight.append(propagation([change]))
        if rng.random() < 0.1:
            in_flight.append(propagation([change]))
        while in_flight and rng.random() < 0.6:
            deliver(in_flight.pop(rng.randrange(min(3, len(in_flight)))))
            while requests and rng.random() < 0.5:
                deliver(a.reply(requests.pop(0)))
    for msg in in_flight:
        deliver(msg)
    deliver(propagation([], header=mqdsrp.SeqNumberHeader(1, "psc1", [mqdsrp.PartitionSeqNumbers(SITE, a.seq, 0)])))
    while requests:
        deliver(a.reply(requests.pop(0)))
    store = s.replica().store
    got = {}
    for n in range(1, changes + 2):
        o = store.get(queue_guid(n))
        if o is not None:
            got[queue_guid(n)] = (o.properties.get(propid("Q_LABEL")), o.properties.get(propid("Q_QUOTA")))
    return got, a.state(), s.partition().last_seq, a.seq


@pytest.mark.parametrize("seed", range(300))
def test_the_replica_ends_equal_to_the_authority_whatever_the_gaps_reorders_and_copies(seed):
    got, want, last, authority_last = replicate_with_faults(seed)
    assert got == want
    assert last == authority_last


@pytest.mark.parametrize("seed", range(300))
def test_with_partial_updates_no_object_is_lost_and_the_replica_does_not_stall(seed):
    got, want, last, authority_last = replicate_with_faults(seed, whole_updates=False)
    assert set(got) == set(want)
    assert last == authority_last


# ---------------------------------------------------------------- health fields (docs/monitoring.md, "Metrics")
def test_a_replica_remembers_the_highest_sequence_number_seen_and_when_it_last_advanced():
    s = Server()
    caught_up(s)
    s.send(propagation([create_queue(1, 1)]))
    applied_at = s.now
    s.send(propagation([create_queue(5, 5, prev=4)]))             # pending: seen, not applied
    p = s.partition()
    assert (p.last_seq, p.seen_seq, p.last_change_ms) == (1, 5, applied_at)
    header = mqdsrp.SeqNumberHeader(1, "psc1", [mqdsrp.PartitionSeqNumbers(SITE, 9, 0)])
    s.send(propagation([], header=header))
    assert (p.seen_seq, p.last_change_ms) == (9, applied_at)       # announced, still nothing applied
    s.send(propagation([create_queue(2, 2), create_queue(3, 3), create_queue(4, 4)]))
    assert (p.last_seq, p.last_change_ms) == (5, s.now)            # the pending change applied too


def test_the_health_fields_survive_the_state_round_trip_and_old_states_decode():
    import marshal
    s = Server()
    caught_up(s)
    s.send(propagation([create_queue(1, 1), create_queue(3, 3, prev=2)]))
    restored = state_from_bytes(state_to_bytes(s.state)).partitions[SITE]
    assert (restored.seen_seq, restored.last_change_ms) == (3, s.now) and restored.last_seq == 1
    old = list(marshal.loads(state_to_bytes(s.state)))
    old[4] = [p[:10] for p in old[4]]                               # a checkpoint written before them
    before = state_from_bytes(marshal.dumps(tuple(old))).partitions[SITE]
    assert (before.last_seq, before.seen_seq, before.last_change_ms) == (1, MIN_SEQ_NUMBER, 0)


# ---------------------------------------------------------------- the object store's layout
class CountingBackend:
    """A DictBackend that counts its round trips, as the job's MapState would make them (around one:
    the compiled build's classes take no subclass from outside)."""

    def __init__(self):
        self.inner = DictBackend()
        self.calls = {"load": 0, "get": 0, "save": 0}

    @property
    def data(self):
        return self.inner.data

    @data.setter
    def data(self, data):
        self.inner.data = data

    def load(self, bucket):
        self.calls["load"] += 1                 # containsKey then getValue in the job: two round trips
        return self.inner.load(bucket)

    def get(self, bucket):
        self.calls["get"] += 1
        return self.inner.get(bucket)

    def save(self, bucket, data):
        self.calls["save"] += 1
        self.inner.save(bucket, data)

    def buckets(self):
        return self.inner.buckets()


@pytest.mark.parametrize("seed", range(8))
def test_the_store_holds_what_a_dict_holds_through_resizes_and_restarts(seed, monkeypatch):
    """Random puts, updates and removes (objects with path names) over random steps, each step a new
    store on the state restored from bytes, as the job runs a micro-batch: every object and path is
    found as a plain dict says; the buckets double as the directory grows; the layout names exactly
    the buckets the backend holds, counts exactly its entries, and a bucket is never asked for
    before it is read."""
    import random
    from streaming.operators import replica_store
    from streaming.operators.replica_store import DirObject, bucket_of
    monkeypatch.setattr(replica_store, "ENTRIES_PER_BUCKET", 1 + seed % 4)
    rng = random.Random(seed)
    state, backend = ServerState("bsc1"), CountingBackend()
    model: dict[str, DirObject] = {}
    sizes = set()
    for _step in range(60):
        state = state_from_bytes(state_to_bytes(state))
        store = Replica(state, ObjectStore(backend)).store
        for _ in range(rng.randint(0, 12)):
            guid = queue_guid(rng.randint(1, 150))
            if rng.random() < 0.25:
                assert (store.remove(guid) is None) == (guid not in model)
                model.pop(guid, None)
            else:
                obj = DirObject(guid, SITE, 1, f"QM\\Q{guid[-4:]}", rng.randint(1, 99), {7: rng.random()})
                store.put(obj, index_path=guid not in model)
                model[guid] = obj
        for guid in rng.sample([queue_guid(i) for i in range(1, 151)], 10):
            got = store.get(guid)
            assert (got.to_tuple() if got else None) == (model[guid].to_tuple() if guid in model else None)
        store.flush()
        layout = state.store_layout
        sizes.add(layout.buckets)
        assert layout.present == set(backend.data)
        entries = {k for raw in backend.data.values() for k in marshal.loads(raw)}
        assert layout.entries == len(entries) == len(model) + len({o.path_name.lower() for o in model.values()})
        assert all(bucket_of(k, layout.buckets) == b for b, raw in backend.data.items() for k in marshal.loads(raw))
    assert backend.calls["load"] == 0
    assert {o.guid for o in ObjectStore(backend, state.store_layout).all_objects()} == set(model)
    assert len(sizes) >= 3 and all(n & (n - 1) == 0 for n in sizes)


def test_a_state_written_before_directory_history_numbers_its_versions_from_zero():
    state = ServerState("bsc1", versions_recorded=41)
    state.store_layout.buckets = 64
    assert state_from_bytes(state_to_bytes(state)).versions_recorded == 41
    old = marshal.loads(state_to_bytes(state))
    earlier = state_from_bytes(marshal.dumps(tuple(old[:-2])))          # without the version count and findings
    assert earlier.versions_recorded == 0 and earlier.store_layout.buckets == 64


def test_a_replicas_findings_survive_its_state_and_a_state_written_before_them_has_none():
    from streaming.operators.findings import FindingLog
    state = ServerState("bsc1", versions_recorded=3, findings=FindingLog())
    state.findings.record("dsrp-unsigned", "psc9", "bsc1", T0, {"offset": 1})
    again = state_from_bytes(state_to_bytes(state))
    assert again.findings.to_list() == state.findings.to_list() and again.versions_recorded == 3
    earlier = state_from_bytes(marshal.dumps(tuple(marshal.loads(state_to_bytes(state))[:-1])))
    assert earlier.findings is None and earlier.versions_recorded == 3


def test_a_state_written_before_layouts_keeps_its_256_buckets():
    """A checkpoint of an earlier version: objects in 256 buckets, no layout in the state. They are
    found (the backend is asked whether a bucket exists), and the buckets stay as they are."""
    from streaming.operators.replica_store import LEGACY_BUCKETS, DirObject, bucket_of
    backend = CountingBackend()
    for i in range(1, 40):
        guid = queue_guid(i)
        b = bucket_of(guid, LEGACY_BUCKETS)
        bucket = marshal.loads(backend.data[b]) if b in backend.data else {}
        bucket[guid] = DirObject(guid, SITE, 1, None, i, {}).to_tuple()
        backend.data[b] = marshal.dumps(bucket)
    old = list(marshal.loads(state_to_bytes(ServerState("bsc1"))))
    state = state_from_bytes(marshal.dumps(tuple(old[:-3])))    # without the layout, version count and findings
    assert state.store_layout.buckets == LEGACY_BUCKETS and state.store_layout.present is None
    store = Replica(state, ObjectStore(backend)).store
    assert store.get(queue_guid(7)).seq_number == 7 and backend.calls["load"] >= 1
    for i in range(40, 3000):
        store.put(DirObject(queue_guid(i), SITE, 1, None, i, {}), index_path=False)
    store.flush()
    assert state_from_bytes(state_to_bytes(state)).store_layout.buckets == LEGACY_BUCKETS
    assert len(backend.data) == LEGACY_BUCKETS


def test_a_busy_step_makes_few_round_trips_on_a_small_directory():
    """The reason for the layout: 2,000 queues (4,000 entries with their path names), one step
    changing 500 of them reads and writes 8 buckets, one round trip each (256 buckets before, each
    asked for first)."""
    s = Server()
    s.send(propagation([create_queue(i, i) for i in range(1, 2001)]))
    backend = CountingBackend()
    backend.data = dict(s.backend.data)
    r = Replica(s.state, ObjectStore(backend))
    for i in range(1, 2001, 4):
        r.store.put(r.store.get(queue_guid(i)), index_path=False)
    r.store.flush()
    assert s.state.store_layout.buckets == 8 and s.state.store_layout.entries == 4000
    assert backend.calls == {"load": 0, "get": 8, "save": 8}


@pytest.mark.parametrize("first", [("Q_PATHNAME", "qm\\q1"), ("Q_INSTANCE", queue_guid(1)), ("S_GATES", [SITE])])
def test_a_delete_whose_first_properties_are_not_integers_is_taken_without_scope_and_type(first):
    """D_SCOPE and D_OBJTYPE are integers: a delete carrying other properties first (a surprising
    producer) deletes the object with scope and type 0, and its rows fit the sink's columns."""
    from streaming.operators.replication_rows import step_rows
    from streaming.spark.stateful import batch_rows, typed_frame
    import pyarrow as pa
    s = Server()
    s.send(propagation([create_queue(1, 1)]))
    weird = mqdsrp.DirectoryChange(2, 1, None, queue_guid(1), SITE, 1, 2, 0, [P(*first), P("Q_LABEL", "x")])
    r = s.send(propagation([weird]))
    assert s.obj(1) is None and s.partition().last_seq == 2
    rows = step_rows(r, s.now)
    (deleted,) = [row for table, row in rows if table == "deleted_objects"]
    assert deleted["scope"] == 0
    typed = batch_rows(pa.Table.from_pandas(typed_frame(rows), preserve_index=False))
    assert "dead_letters" not in typed and len(typed["deleted_objects"]) == 1
