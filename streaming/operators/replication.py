"""[MC-MQDSRP] section 3 as a sans-IO state machine: one directory server's replica.

`Replica(state, store)` takes the replication messages addressed to one server, in arrival order,
and keeps what the server keeps (3.1.1.3): the DirectoryPartitionCollection, the PSC and BSC
neighbour collections, the DeletedObjectCollection and the directory objects (in an ObjectStore).
What the server would send (SyncRequest, PSCAck, BSCAck, change propagation to its BSCs,
forwarded change requests and their replies) is collected in `out`.

Section numbers below are the spec's; "digest" is the MC-MQDSRP digest (mqdsrp_digest.md). The
server observed here is passive: its own partition (the one it is the object authority of)
changes by local administration, which is not on the wire; that partition is left to the
authority (in tests, the authority responder) and is not replicated here.

Readings of defective spec text, each tested in tests/test_replication.py:
- Check Pending Changes (3.1.7.2.4) tests PreviousSeqNumber > LastSeqNumber (digest §9.4).
- Purge Deleted Objects (3.1.7.2.9) skips while LastSeqNumber < 1024 and advances
  PurgedSeqNumber after removing (digest §9.9 a, b).
- Receive Already Purged (3.3.7.7) passes the message's PurgedSeqNumber to Start Sync0 (§11.7).
- Complete Sync0 (3.3.7.11) accepts PurgeState 2 or 3 (digest §11.11); CompleteSync0 == 2 means
  "sync0 complete" (digest §11.5).
- Handle Site Update on a BSC creates no PSC neighbour (digest §9.11); a sync-created site's
  partition takes its id from the change's GUID.
- Sync-created objects keep their GUID (digest §9.8, §13.20); reserved PROPIDs whose values
  "MUST NOT be interpreted" (digest §2, §10.8) are not stored.
- Immediate flushes to BSCs carry Flush = 0x01 (digest §9.3).
"""
import itertools
import zlib
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple, TypeVar, cast

from ..wire import mqdsrp
from ..wire.guid import GUID_NULL
from ..wire.mqdsrp import DirectoryChange
from ..wire.properties import (MQDS_CN, MQDS_ENTERPRISE, MQDS_MACHINE, MQDS_QUEUE, MQDS_ROUTINGLINK, MQDS_SITE,
                               MQDS_USER, Property, object_type_of)
from ..wire.propids import propid
from ..wire.seqnum import MAX_SEQ_NUMBER, MIN_SEQ_NUMBER, add, subtract
from .findings import FindingLog
from .python_class import python_class
from .server_registry import SERVICE_BITS, Check
from .replica_store import DirObject, ObjectStore, StoreLayout

__all__ = ["BSC_ACK_FIRST_MS", "BSC_ACK_MS", "CHANGE_WAIT_AUTHORITY_MS", "CHANGE_WAIT_OTHER_MS", "DeletedObject",
           "E_PECNAME", "ForwardedRequest", "Handled", "ID_PROPERTY", "IllegalPurgeMove", "INITIAL_SYNC_WINDOW",
           "INTERSITE_MS", "INTRASITE_MS", "MQ_ERROR", "MQ_OK", "MQDS_OBJECT_NOT_FOUND", "NACK_CLASSES",
           "NACK_RESEND_LIMIT", "Neighbor", "NO_WINDOW", "Outbound", "Partition", "PEC_PARTITION_ID",
           "PENDING_LIMIT", "PendingEvent", "PROPAGATION_CHUNK", "PURGE_BUFFER", "PURGE_COMPLETESYNC0",
           "PURGE_EVERY", "PURGE_MOVES", "PURGE_NORMAL", "PURGE_STARTSYNC0", "PURGE_STATE_NAMES", "PURGE_SYNC0",
           "PurgeState", "QM_PATHNAME", "QM_SERVICE", "QM_SITE_ID", "Replica", "ReplicaOutputs",
           "RESERVED_PROPIDS", "S_PSC", "S_SITEID", "SEQ_HEADER_MS", "ServerState", "SERVICE_BSC"]

PEC_PARTITION_ID = GUID_NULL
PENDING_LIMIT = 100                  # 3.1.7.2.2
PURGE_EVERY, PURGE_BUFFER = 256, 1024  # 3.1.7.2.3, 3.1.7.2.9


class PurgeState(IntEnum):
    """A partition's PurgeState (3.1.1.2.3): its UCHAR value is its stored form (the checkpoint keeps
    the int) and its lowercase name is the sink's replication_partitions.purge_state."""
    NORMAL = 0
    STARTSYNC0 = 1
    SYNC0 = 2
    COMPLETESYNC0 = 3

    @property
    def label(self) -> str:
        return self.name.lower()


# The moves 3.3.7.10 and 3.3.7.11 make. Start Sync0 checks no state, so sync0 may start again from
# sync0; COMPLETESYNC0 is never assigned by the spec, but Complete Sync0 accepts it (digest §11.11).
PURGE_MOVES = {
    PurgeState.NORMAL: frozenset({PurgeState.STARTSYNC0}),
    PurgeState.STARTSYNC0: frozenset({PurgeState.SYNC0}),
    PurgeState.SYNC0: frozenset({PurgeState.STARTSYNC0, PurgeState.NORMAL}),
    PurgeState.COMPLETESYNC0: frozenset({PurgeState.STARTSYNC0, PurgeState.NORMAL}),
}


@python_class
class IllegalPurgeMove(RuntimeError):
    """A move PURGE_MOVES does not hold: a bug in the replica, never a message's fault."""


PURGE_NORMAL, PURGE_STARTSYNC0, PURGE_SYNC0, PURGE_COMPLETESYNC0 = PurgeState
PURGE_STATE_NAMES = {state: state.label for state in PurgeState}
# ChangeMissingWindow's two marks (3.1.1.2.3; digest: MAX = an initial or full sync is outstanding,
# MIN = nothing outstanding); any other value is the upper end of a missing range asked for
INITIAL_SYNC_WINDOW, NO_WINDOW = MAX_SEQ_NUMBER, MIN_SEQ_NUMBER
SERVICE_BSC = 0x2
MQ_OK, MQ_ERROR = 0, 0xC00E0001
# The seed names these statuses without values; the reply carries MQ_ERROR and the table the name.
MQDS_OBJECT_NOT_FOUND = "MQDS_OBJECT_NOT_FOUND"
# MQDSRP's timers (the simulator's servers run them too)
BSC_ACK_FIRST_MS, BSC_ACK_MS = 5_000, 12 * 3_600_000        # BSC Ack Timer, notes <7>, <8>
INTRASITE_MS, INTERSITE_MS = 2_000, 10_000                   # Change Propagation Timer, notes <3> and <2>
SEQ_HEADER_MS = 20 * 60_000                                  # SeqNumberHeader interval, note <12>
CHANGE_WAIT_AUTHORITY_MS, CHANGE_WAIT_OTHER_MS = 10_000, 20_000   # Process Change Request wait, note <11>
NACK_RESEND_LIMIT = 3                                        # digest §11.9: the spec sets no bound
PROPAGATION_CHUNK = 200                                      # changes per ChangePropagation this server sends

ID_PROPERTY = {MQDS_QUEUE: propid("Q_INSTANCE"), MQDS_MACHINE: propid("QM_MACHINE_ID"),
               MQDS_SITE: propid("S_SITEID"), MQDS_CN: propid("CN_GUID"), MQDS_ENTERPRISE: propid("E_ID"),
               MQDS_USER: propid("U_ID"), MQDS_ROUTINGLINK: propid("L_ID")}
RESERVED_PROPIDS = frozenset(propid(n) for n in (
    "Q_HASHKEY", "Q_LABEL_HASHKEY", "QM_HASHKEY", "E_S_INTERVAL1", "E_S_INTERVAL2", "E_CRL", "E_CSP_TYPE",
    "E_ENCRYPT_ALG", "E_SIGN_ALG", "E_HASH_ALG", "E_CIPHER_MODE"))
S_PSC, S_SITEID, E_PECNAME = propid("S_PSC"), propid("S_SITEID"), propid("E_PECNAME")
QM_SERVICE, QM_PATHNAME, QM_SITE_ID = propid("QM_SERVICE"), propid("QM_PATHNAME"), propid("QM_SITE_ID")
NACK_CLASSES = frozenset((
    "NackBadDestQueue", "NackPurged", "NackReachQueueTimeout", "NackQueueExceedQuota", "NackAccessDenied",
    "NackHopCountExceeded", "NackBadSignature", "NackBadEncryption", "NackCouldNotEncrypt", "NackNotTransactionalQueue",
    "NackNotTransactionalMessage", "NackUnsupportedCryptoProvider", "NackSourceComputerGuidChanged", "NackQueueDeleted",
    "NackQueuePurged", "NackReceiveTimeout", "NackReceiveTimeoutAtSender"))


# ================================================================== state (3.1.1)
@dataclass
class Partition:
    """DirectoryPartition (3.1.1.2.3); the last four fields are not persisted by the spec."""
    partition_id: str
    authority: str
    last_seq: int = MIN_SEQ_NUMBER
    purged_seq: int = MIN_SEQ_NUMBER
    allowed_purge_seq: int = MIN_SEQ_NUMBER
    purge_state: PurgeState = PurgeState.NORMAL
    previous_purged_seq: int = MIN_SEQ_NUMBER
    change_missing_window: int = INITIAL_SYNC_WINDOW
    pending: list[DirectoryChange] = field(default_factory=list)
    initial_sync_sent: bool = False        # this implementation's: the 3.3.3 request went out
    # this implementation's, for the directory's health (docs/monitoring.md, "Metrics");
    # they change no behaviour:
    seen_seq: int = MIN_SEQ_NUMBER         # the highest SeqNumber seen in changes and SeqNumberHeaders
    last_change_ms: int = 0                # event time LastSeqNumber last moved

    def move_purge_state(self, new: PurgeState) -> None:
        """The one place PurgeState changes; a move PURGE_MOVES does not hold raises."""
        if new not in PURGE_MOVES[self.purge_state]:
            raise IllegalPurgeMove(f"partition {self.partition_id}: PurgeState {self.purge_state.name} -> {new.name}")
        self.purge_state = new

    @property
    def initial_sync_outstanding(self) -> bool:
        return self.change_missing_window == INITIAL_SYNC_WINDOW


@dataclass
class Neighbor:
    """DirectoryNeighbor (3.1.1.2.4) with its AvailableChangeCollection."""
    partition_id: str
    machine_name: str | None              # None only for a machine object named nowhere (kept as it came)
    acked_seq: int = MIN_SEQ_NUMBER
    acked_pec_seq: int = MIN_SEQ_NUMBER
    last_acked_ms: int = 0
    available: list[DirectoryChange] = field(default_factory=list)
    next_tick_ms: int | None = None


@dataclass
class DeletedObject:
    """DeletedObject (3.1.1.2.2)."""
    identifier: str
    partition_id: str
    seq_number: int
    object_type: int
    scope: int


@dataclass
class ForwardedRequest:
    """A change request this server forwarded (Process Change Request, 3.3.7.1), awaiting its reply."""
    requester: str
    request_id: int
    psc_name: str | None
    deadline_ms: int


@dataclass
class ServerState:
    name: str
    site_id: str | None = None
    my_psc_name: str | None = None
    partitions: dict[str, Partition] = field(default_factory=dict)
    psc_neighbors: dict[str, Neighbor] = field(default_factory=dict)
    bsc_neighbors: dict[str, Neighbor] = field(default_factory=dict)
    deleted: dict[str, DeletedObject] = field(default_factory=dict)
    forwarded: dict[str, ForwardedRequest] = field(default_factory=dict)
    nack_resends: dict[str, int] = field(default_factory=dict)
    bsc_ack_due_ms: int | None = None
    now_ms: int = 0
    messages_sent: int = 0
    initialized: bool = False
    store_layout: StoreLayout = field(default_factory=StoreLayout)    # how its objects are bucketed
    versions_recorded: int = 0          # directory_history rows so far: each version's number (not in the spec)
    findings: FindingLog | None = None  # security findings about the messages it received (not in the spec)


# ================================================================== outputs
@dataclass
class Outbound:
    destination: str | None
    message: Any                    # an mqdsrp inner message (SyncRequestMessage, PSCAckMessage, ...)
    reason: str
    partition_id: str | None = None
    body: bytes | None = None       # a resend (3.3.7.9) carries the original body unchanged
    status: str | None = None       # ChangeReply: the status name
    sent_ms: int | None = None      # the event time it was sent at (stamped by the replica),
    site_id: str | None = None      # and the site its header names (the replica's then)


@dataclass
class PendingEvent:
    partition_id: str
    change: DirectoryChange
    status: str                     # pending, applied, stale, dropped (collection full), cleared (sync0)
    at_ms: int = 0                  # the event time of the status change


class Handled(NamedTuple):
    """What a Handle Directory event returns to Handle In-Sync Change (3.1.7.2.3: rStatus and
    needFlush): whether the change applied, and whether the BSCs get it flushed at once."""
    applied: bool
    flush: bool


@dataclass
class ReplicaOutputs:
    """What a replica did since its outputs were last taken (Replica.take_outputs)."""
    sent: list[Outbound]                                        # what the server would send, in order
    pending_events: list[PendingEvent]                          # each pending change's moves
    deleted_touched: dict[str, tuple[DeletedObject, str, int]]  # identifier -> (entry, status, event time)
    ignored: list[tuple[str, str]]                              # (operation, reason): no further action
    checks: list[Check]                                         # senders it does not know itself


# ================================================================== the state machine
class Replica:
    """One directory server's MC-MQDSRP replication. Inputs: receive() a message, on_timer() /
    fire_timers_until() for the timers of 3.1.2 (next_timer_ms() says when), initialize() and
    send_initial_syncs() for the start of 3.1.3, start_sync0() / complete_sync0() for the sync0 events
    of 3.3.7.10 / 3.3.7.11, and inspect() for the security findings. Output: take_outputs(), one
    ReplicaOutputs per step. Queries: name, role, owns(). Every other method is one of the spec's
    events, reached only through these."""

    def __init__(self, state: ServerState, store: ObjectStore, pec_name: str | None = None):
        self.state = state
        self.store = store
        store.layout = state.store_layout       # persisted with the state, beside the buckets it describes
        self.pec_name = pec_name
        self.out: list[Outbound] = []
        self.pending_events: list[PendingEvent] = []
        self.deleted_touched: dict[str, tuple[DeletedObject, str, int]] = {}
        # identifier -> (object, status, event time of the change)
        self.ignored: list[tuple[str, str]] = []                             # (operation, reason)
        self.checks: list[Check] = []       # senders it does not know itself: for the server registry
        # partition -> a lower bound of the sequence numbers of its DeletedObjectCollection entries
        # (not stored: built on first use), so Purge Deleted Objects, which runs after every change,
        # walks the collection only when something can be purged
        self._deleted_floor: dict[str, float] = {}

    def take_outputs(self) -> ReplicaOutputs:
        """Everything collected since the last take, handed over and forgotten here."""
        outputs = ReplicaOutputs(self.out, self.pending_events, self.deleted_touched, self.ignored, self.checks)
        self.out, self.pending_events, self.deleted_touched, self.ignored, self.checks = [], [], {}, [], []
        return outputs

    # ------------------------------------------------------------ roles
    @property
    def name(self) -> str:
        return self.state.name

    def enterprise(self) -> Partition:
        return self.state.partitions[PEC_PARTITION_ID]

    def _is_pec(self) -> bool:
        return self.enterprise().authority == self.name

    def _is_psc(self) -> bool:
        """A server named as a site's PSC (S_PSC) or as the PEC ("the PEC is also a PSC"). Any other
        server that receives replication traffic is a BSC."""
        return any(p.authority == self.name for p in self.state.partitions.values())

    def _is_bsc(self) -> bool:
        return not self._is_psc()

    def role(self) -> str:
        return "PEC" if self._is_pec() else "PSC" if self._is_psc() else "BSC"

    def _my_site_partition(self) -> Partition | None:
        for p in self.state.partitions.values():
            if p.partition_id != PEC_PARTITION_ID and (p.authority == self.name or p.partition_id == self.state.site_id):
                return p
        return None

    def owns(self, p: Partition) -> bool:
        return p.authority == self.name

    # ------------------------------------------------------------ initialization (3.1.3.1, 3.3.3)
    def initialize(self, now_ms: int) -> None:
        if self.state.initialized:
            return
        self.state.initialized = True
        if PEC_PARTITION_ID not in self.state.partitions:
            self.state.partitions[PEC_PARTITION_ID] = Partition(PEC_PARTITION_ID, self.pec_name or "")
        self.state.bsc_ack_due_ms = now_ms + BSC_ACK_FIRST_MS

    def send_initial_syncs(self) -> None:
        """3.3.3: a sync request for every partition this server is not the authority of, sent at
        initialization, before the first message is processed: From is the LastSeqNumber of then, MIN.
        Its destination (the PEC's name, a BSC's PSC, the server's own role) may only
        be learnt from the traffic: then it goes out as soon as it is known, with that same From."""
        for p in list(self.state.partitions.values()):
            if not p.initial_sync_sent and not self.owns(p) and p.initial_sync_outstanding:
                self._send_sync_request(p, "initial", from_seq=MIN_SEQ_NUMBER)

    # ------------------------------------------------------------ dispatch (3.1.5.1)
    def receive(self, msg: mqdsrp.ReplicationMessage, *, arrival_ms: int, source: str | None = None,
                message_class: str = "Normal", destination_queue: str | None = None, body: bytes = b"") -> None:
        self.state.now_ms = max(self.state.now_ms, arrival_ms)
        self.store.clock_ms = self.state.now_ms
        self.initialize(arrival_ms)
        self.send_initial_syncs()                 # 3.1.3.3 / 3.3.3: before the first message is processed
        op = msg.header.operation
        if message_class == "Normal":
            _NORMAL_HANDLERS[op](self, msg, source, body)
        elif message_class in NACK_CLASSES:
            if op == mqdsrp.OP_CHANGE_REQUEST:
                self._receive_change_request_nack(_inner(msg.change_request))
            else:
                self._receive_request_nack(message_class, destination_queue, body)
        else:
            self._ignore(msg.operation_name, f"message class {message_class}: no further action (3.1.5.1)")
        self.send_initial_syncs()
        self._stamp_sent()

    def inspect(self, *, authentication_level: str | None, source: str | None, arrival_ms: int, where: dict,
                message_class: str = "Normal", decoded: bool = True) -> None:
        """Security findings about a message this server received, looked at once it has been
        processed (streaming.operators.findings):
        - dsrp-unsigned: replication data without a signature, where Windows signs every message
          that carries it (MC-MQDSRP 5.1, note <13>);
        - dsrp-unknown-sender: a replication message from a machine that is not a directory server
          of the enterprise (MC-MQDSRP 5.1: replication data can be tampered with). A sender this
          server knows is one; any other is a check for the server registry, which knows what every
          replica knows (streaming.operators.server_registry). Nack classes come from any queue
          manager on the route, so only Normal ones count."""
        if authentication_level in (None, "None"):
            self._finding("dsrp-unsigned", source, arrival_ms, where)
        if decoded and message_class == "Normal" and not self._knows_directory_server(source):
            self.checks.append(Check("dsrp-unknown-sender", arrival_ms, source, self.name,
                                     [source] if source else [], where))

    def _finding(self, kind: str, source: str | None, arrival_ms: int, where: dict) -> None:
        if self.state.findings is None:
            self.state.findings = FindingLog()
        self.state.findings.record(kind, source, self.name, arrival_ms, where)

    def _knows_directory_server(self, name: str | None) -> bool:
        """A directory server of the enterprise as this server knows them: itself, the PEC it was
        configured with, a partition's authority (the PEC and the sites' PSCs, S_PSC), a PSC or BSC
        neighbour, or a machine object of its replica whose PROPID_QM_SERVICE has the BSC, PSC or
        PEC bit. Names compare case-insensitively, as MSMQ's machine names do."""
        if not name:
            return False
        low = name.lower()
        if low == self.name.lower() or low == (self.pec_name or "").lower():
            return True
        if any(p.authority.lower() == low for p in self.state.partitions.values()):
            return True
        if any(n.lower() == low for n in itertools.chain(self.state.psc_neighbors, self.state.bsc_neighbors)):
            return True
        guid = self._guid_of(name)
        machine = self.store.get(guid) if guid else None
        return machine is not None and machine.object_type == MQDS_MACHINE \
            and bool(int(machine.properties.get(QM_SERVICE) or 0) & SERVICE_BITS)

    def _stamp_sent(self) -> None:
        """What this event sent was sent at its event time (not at the micro-batch's end)."""
        for o in reversed(self.out):
            if o.sent_ms is not None:
                break
            o.sent_ms, o.site_id = self.state.now_ms, self.state.site_id

    def _ignore(self, operation: str, reason: str) -> None:
        self.ignored.append((operation, reason))

    # ------------------------------------------------------------ 3.2.7.1 Receive Change Propagation
    def _receive_change_propagation(self, msg: mqdsrp.ReplicationMessage, source: str | None) -> None:
        prop = _inner(msg.change_propagation)
        for change in prop.directory_changes:
            self._process_change(change, check_flush=prop.flush == 0x00, source=source)
        if source and self._is_bsc() and source != self.name:
            # [INFERENCE] a BSC's one neighbour is its PSC, the sender of its propagations (3.1.3.1 lets
            # MyPSCName be "obtained in an implementation-specific way"); the PSC shares its site.
            # Learnt after the changes, which may name this server a PSC.
            self.state.my_psc_name = source
            self.state.site_id = self.state.site_id or msg.header.site_id
        header = prop.seq_number_header
        if header.count == 0:
            return
        machine_name = header.machine_name
        assert machine_name is not None                  # 2.2.5.2.1: present whenever Count is not 0
        for entry in header.partition_seq_numbers:
            p = self.state.partitions.get(entry.partition_id)
            if p is None or self.owns(p) or entry.purged_seq_number < p.purged_seq:
                continue
            if entry.purged_seq_number > p.allowed_purge_seq:
                p.allowed_purge_seq = entry.purged_seq_number
            if entry.last_seq_number > p.seen_seq:
                p.seen_seq = entry.last_seq_number
            if entry.last_seq_number <= p.last_seq or entry.last_seq_number < p.change_missing_window:
                continue
            if self._is_psc() or p.partition_id == PEC_PARTITION_ID and not p.authority:
                p.authority = machine_name
            else:
                self.state.my_psc_name = machine_name
            p.change_missing_window = add(entry.last_seq_number, 1)
            self._send_sync_request(p, "seq-number-header")

    # ------------------------------------------------------------ 3.1.5.2 processing directory changes
    def _process_change(self, change: DirectoryChange, check_flush: bool, source: str | None = None) -> None:
        p = self.state.partitions.get(change.partition_id)
        if p is None and self._is_pec() and source:
            # [INFERENCE] the PEC creates sites in its own (local) enterprise partition, so it learns a
            # site partition from its first propagated change; only the authority propagates to PSCs
            # (3.1.7.1.2), so the sender is the partition's authority.
            p = self.state.partitions[change.partition_id] = Partition(change.partition_id, source)
            self._send_sync_request(p, "initial")
        if p is None:
            self._ignore("DirectoryChange", f"unknown partition {change.partition_id} (3.1.5.2)")
            return
        if self.owns(p):
            self._ignore("DirectoryChange", "own partition: changed by local administration")
            return
        if change.seq_number > p.seen_seq:
            p.seen_seq = change.seq_number
        self._handle_directory_change(p, change, check_flush)

    # ------------------------------------------------------------ 3.1.7.2.2 Handle Directory Change
    def _handle_directory_change(self, p: Partition, change: DirectoryChange, check_flush: bool) -> None:
        if change.seq_number <= p.last_seq or change.purged_seq_number < p.purged_seq:
            return                                                   # duplicate, old or stale
        if change.previous_seq_number <= p.last_seq:
            if self._handle_in_sync_change(p, change, check_flush):
                self._check_pending_changes(p)                    # 3.1.7.2.2, also inside a sync reply
            return
        if not p.pending:
            self._pend(p, change)
            if change.seq_number > p.change_missing_window:
                p.change_missing_window = change.seq_number
                self._send_sync_request(p, "gap")
        elif len(p.pending) < PENDING_LIMIT:
            if all(c.seq_number != change.seq_number for c in p.pending):
                self._pend(p, change)
                p.pending.sort(key=lambda c: c.seq_number)
        else:
            self.pending_events.append(PendingEvent(p.partition_id, change, "dropped", self.state.now_ms))

    def _pend(self, p: Partition, change: DirectoryChange) -> None:
        p.pending.append(change)
        self.pending_events.append(PendingEvent(p.partition_id, change, "pending", self.state.now_ms))

    # ------------------------------------------------------------ 3.1.7.2.3 Handle In-Sync Change
    def _handle_in_sync_change(self, p: Partition, change: DirectoryChange, flush: bool) -> bool:
        object_type = object_type_of(change.properties[0].prop_id) if change.properties else 0
        path = change.path_name if change.use_guid == 0 else None
        guid = change.guid_identifier if change.use_guid == 1 else None
        if change.command == mqdsrp.CMD_CREATE:
            handled = self._handle_directory_create(p, object_type, path, change.properties, change.seq_number)
        elif change.command == mqdsrp.CMD_UPDATE:
            handled = self._handle_directory_update(p, object_type, path, guid, change.properties, change.seq_number)
        elif change.command == mqdsrp.CMD_DELETE:
            handled = self._handle_directory_delete(p, *_delete_type_and_scope(change), path, guid, change.seq_number)
        else:
            handled = self._handle_directory_sync(p, object_type, path, guid, change.properties, change.seq_number)
        if not handled.applied:
            return False
        p.last_seq, p.last_change_ms = change.seq_number, self.state.now_ms
        if p.purge_state == PURGE_NORMAL:
            for bsc in self.state.bsc_neighbors.values():
                bsc.available.append(change)
                if bsc.next_tick_ms is None:
                    bsc.next_tick_ms = self.state.now_ms + INTRASITE_MS
                if flush and handled.flush:
                    self._send_change_propagation(bsc, flush=True)
        if p.last_seq > add(p.previous_purged_seq, PURGE_EVERY):
            self._purge_deleted_objects(p)
            p.previous_purged_seq = p.last_seq
        if p.purge_state == PURGE_NORMAL or p.last_seq >= p.purged_seq:
            # 8th byte 0x00; the role check second, as it walks the partitions
            if (p.last_seq & 0xFF) == 0x00 and self._is_psc():
                self._send_psc_ack(p)
        return True

    # ------------------------------------------------------------ 3.1.7.2.4 Check Pending Changes
    def _check_pending_changes(self, p: Partition) -> None:
        for change in list(p.pending):
            if change.purged_seq_number < p.purged_seq:
                p.pending.remove(change)
                self.pending_events.append(PendingEvent(p.partition_id, change, "stale", self.state.now_ms))
                continue
            # digest §9.4: the literal "SeqNumber > LastSeqNumber" never lets a change through.
            if change.previous_seq_number > p.last_seq:
                if change.seq_number > p.change_missing_window:
                    p.change_missing_window = change.seq_number
                    self._send_sync_request(p, "gap")
                return
            p.pending.remove(change)
            if change.previous_seq_number == p.last_seq:
                applied = self._handle_in_sync_change(p, change, True)
                self.pending_events.append(PendingEvent(p.partition_id, change, "applied" if applied else "failed",
                                                        self.state.now_ms))
            else:
                self.pending_events.append(PendingEvent(p.partition_id, change, "stale", self.state.now_ms))

    # ------------------------------------------------------------ MQDS object operations ([MS-MQDS] 3.2.6)
    @staticmethod
    def _stored_properties(properties: list[Property]) -> dict[int, Any]:
        return {prop.prop_id: prop.value for prop in properties if prop.prop_id not in RESERVED_PROPIDS}

    def _resolve(self, path: str | None, guid: str | None) -> str | None:
        if guid:
            return guid
        return self.store.guid_for_path(path) if path else None

    def _create_object(self, p: Partition, object_type: int, path: str | None, guid: str | None,
                       properties: list[Property], seq: int) -> DirObject:
        props = self._stored_properties(properties)
        id_prop = ID_PROPERTY.get(object_type)
        guid = guid or (props.get(id_prop) if id_prop else None) or self._resolve(path, None) or f"path:{path}"
        if id_prop and id_prop not in props:
            props = {id_prop: guid, **props}         # digest §9.8: the object keeps its identity
        old = self.store.get(guid)
        obj = DirObject(guid, p.partition_id, object_type, path or (old.path_name if old else None)
                        or _name_property(object_type, props), seq, props)
        self.store.put(obj)
        return obj

    def _update_object(self, p: Partition, path: str | None, guid: str | None, properties: list[Property],
                       seq: int) -> DirObject | None:
        key = self._resolve(path, guid)
        obj = self.store.get(key) if key else None
        if obj is None:
            return None                               # MQDS_OBJECT_NOT_FOUND
        obj.properties.update(self._stored_properties(properties))
        obj.seq_number = seq
        self.store.put(obj, index_path=False)
        return obj

    # ------------------------------------------------------------ 3.1.7.2.5 Handle Directory Create
    def _handle_directory_create(self, p, object_type, path, properties, seq) -> Handled:
        obj = self._create_object(p, object_type, path, None, properties, seq)
        need_flush = False
        if object_type == MQDS_SITE:
            self._site_appeared(obj.guid, obj.properties.get(S_PSC, ""))
            need_flush = True
        elif object_type == MQDS_ENTERPRISE:
            self._handle_enterprise_update(p, obj.properties)     # [INFERENCE] the administrator's PEC name
        elif object_type == MQDS_MACHINE:
            self._machine_seen(p, obj)
        return Handled(True, need_flush)

    def _site_appeared(self, site_id: str, psc_name: str) -> None:
        """A site's partition and, on a PSC, its PSC neighbour (3.1.7.2.5 / 3.1.7.2.11 with the digest's
        readings: the neighbour belongs to the new site; a BSC has no neighbours)."""
        if site_id in self.state.partitions:
            self.state.partitions[site_id].authority = psc_name
            return
        partition = Partition(site_id, psc_name)
        self.state.partitions[site_id] = partition
        if psc_name != self.name:
            self._send_sync_request(partition, "initial")
            if self._is_psc():
                self.state.psc_neighbors.setdefault(psc_name, Neighbor(site_id, psc_name))
        else:
            self.state.site_id = site_id                           # MySitePartition

    def _machine_seen(self, p: Partition, obj: DirObject) -> None:
        """3.1.7.2.5 / 3.1.7.2.12: BSC neighbours from the PSC's own site's machines; and a BSC learns
        its own site from its machine object."""
        if obj.properties.get(QM_PATHNAME, obj.path_name) == self.name and obj.properties.get(QM_SITE_ID):
            self.state.site_id = self.state.site_id or obj.properties[QM_SITE_ID]
        mine = self._my_site_partition()
        if not (self._is_psc() and mine is not None and p.partition_id == mine.partition_id):
            return
        name: Any = obj.properties.get(QM_PATHNAME) or obj.path_name     # Any: None is kept as a key, as it came
        if obj.properties.get(QM_SERVICE) == SERVICE_BSC:
            self.state.bsc_neighbors.setdefault(name, Neighbor(p.partition_id, name))
        elif QM_SERVICE in obj.properties:
            self.state.bsc_neighbors.pop(name, None)

    # ------------------------------------------------------------ 3.1.7.2.6 Handle Directory Update
    def _handle_directory_update(self, p, object_type, path, guid, properties, seq) -> Handled:
        obj = self._update_object(p, path, guid, properties, seq)
        if obj is None:
            self._ignore("update", f"{MQDS_OBJECT_NOT_FOUND}: {guid or path}")
            return Handled(False, False)
        changed = {prop.prop_id: prop.value for prop in properties}
        if object_type == MQDS_SITE:
            return Handled(True, self._handle_site_update(obj.guid, changed, sync=False))
        if object_type == MQDS_ENTERPRISE:
            return Handled(True, self._handle_enterprise_update(p, changed))
        if object_type == MQDS_MACHINE:
            self._machine_seen(p, obj)
        return Handled(True, False)

    # ------------------------------------------------------------ 3.1.7.2.7 Handle Directory Delete
    def _handle_directory_delete(self, p, object_type, scope, path, guid, seq) -> Handled:
        key = self._resolve(path, guid)
        # the removal is recorded with the deletion's SeqNumber (as deleted_objects has it), so it
        # orders after every version of the object: after a sync0 reset (3.3.7.10: every object's
        # SeqNumber is 0 until the authority's reply) the object's own number would order the
        # deletion before its last live version, and a read takes the highest number (the queue
        # managers would keep queues their replicas had deleted)
        obj = self.store.remove(key, seq) if key else None
        # [INFERENCE] deleting an object this replica never had still succeeds: the object is gone
        # either way, and failing would stall the sequence (a sync reply lists deletions by GUID).
        identifier = key or f"path:{path}"
        deleted = DeletedObject(identifier, p.partition_id, seq, object_type or (obj.object_type if obj else 0), scope)
        self.state.deleted[identifier] = deleted
        if p.partition_id in self._deleted_floor:
            self._deleted_floor[p.partition_id] = min(self._deleted_floor[p.partition_id], seq)
        self.deleted_touched[identifier] = (deleted, "deleted", self.state.now_ms)
        need_flush = False
        if self._is_pec() and object_type == MQDS_SITE and key in self.state.partitions:
            gone = self.state.partitions.pop(key)
            for name in [n for n in self.state.psc_neighbors if n == gone.authority]:
                del self.state.psc_neighbors[name]
            need_flush = True
        if object_type == MQDS_MACHINE and obj is not None and self._is_psc():
            self.state.bsc_neighbors.pop(cast(Any, obj.properties.get(QM_PATHNAME) or obj.path_name), None)
        return Handled(True, need_flush)

    # ------------------------------------------------------------ 3.1.7.2.8 Handle Directory Sync
    def _handle_directory_sync(self, p, object_type, path, guid, properties, seq) -> Handled:
        key = self._resolve(path, guid)
        existing = self.store.get(key) if key else None
        if existing is None:
            obj = self._create_object(p, object_type, path, key, properties, seq)
        else:
            updated = self._update_object(p, path, key, properties, seq)
            assert updated is not None                 # the store holds it: existing
            obj = updated
        if key in self.state.deleted:                  # re-synchronised: no longer a deleted object
            self.deleted_touched[key] = (self.state.deleted.pop(key), "resynchronised", self.state.now_ms)
        changed = {prop.prop_id: prop.value for prop in properties}
        if object_type == MQDS_ENTERPRISE:
            return Handled(True, self._handle_enterprise_update(p, changed))
        if object_type == MQDS_SITE:
            return Handled(True, self._handle_site_update(obj.guid, changed, sync=True))
        if object_type == MQDS_MACHINE:
            self._machine_seen(p, obj)
        return Handled(True, False)

    # ------------------------------------------------------------ 3.1.7.2.9 Purge Deleted Objects
    def _purge_deleted_objects(self, p: Partition) -> None:
        if p.last_seq < PURGE_BUFFER:
            return                                  # digest §9.9 (b): the subtraction would wrap
        purge_to = subtract(p.last_seq, PURGE_BUFFER)
        if p.purge_state != PURGE_NORMAL or p.purged_seq >= purge_to:
            return
        if p.allowed_purge_seq < purge_to:          # a replica: bounded by what the authority allows
            if p.allowed_purge_seq < p.purged_seq:
                return
            purge_to = p.allowed_purge_seq
        floor = self._deleted_floor.get(p.partition_id)
        if floor is None or floor <= purge_to:
            floor = float("inf")
            for identifier, d in list(self.state.deleted.items()):
                if d.partition_id != p.partition_id:
                    continue
                if d.seq_number <= purge_to:
                    del self.state.deleted[identifier]
                    self.deleted_touched[identifier] = (d, "purged", self.state.now_ms)
                else:
                    floor = min(floor, d.seq_number)
            self._deleted_floor[p.partition_id] = floor
        p.purged_seq = max(p.purged_seq, purge_to)  # digest §9.9 (a)

    # ------------------------------------------------------------ 3.1.7.2.10 / 3.1.7.2.11
    def _handle_enterprise_update(self, p: Partition, changed: dict) -> bool:
        name = changed.get(E_PECNAME)
        if name and name != p.authority:
            p.authority = name
            return True
        return False

    def _handle_site_update(self, site_id: str, changed: dict, sync: bool) -> bool:
        if S_PSC not in changed:
            return False
        psc_name = changed[S_PSC]
        existing = self.state.partitions.get(site_id)
        if existing is not None:
            existing.authority = psc_name
            for n in self.state.psc_neighbors.values():
                if n.partition_id == site_id:
                    n.machine_name = psc_name
            return True
        if sync:
            self._site_appeared(site_id, psc_name)
            return True
        return False

    # ------------------------------------------------------------ 3.3.7.3 Send Sync Request
    def _send_sync_request(self, p: Partition, reason: str, from_seq: int | None = None) -> None:
        if p.purge_state not in (PURGE_NORMAL, PURGE_SYNC0):
            return
        destination = self.state.my_psc_name if self._is_bsc() else p.authority
        if not destination:
            return                                  # sent by send_initial_syncs once it is known
        p.initial_sync_sent = True
        msg = mqdsrp.SyncRequestMessage(p.partition_id, p.last_seq if from_seq is None else from_seq,
                                        p.change_missing_window, p.purged_seq,
                                        1 if p.purge_state == PURGE_SYNC0 else 0, 0 if self._is_bsc() else 1,
                                        self.name)
        self.out.append(Outbound(destination, msg, reason, p.partition_id))

    # ------------------------------------------------------------ 3.3.7.4 Send PSC Ack
    def _send_psc_ack(self, p: Partition) -> None:
        mine = self._my_site_partition()
        site = mine.partition_id if mine else (self.state.site_id or GUID_NULL)   # digest §11.4
        msg = mqdsrp.PSCAckMessage(site, p.partition_id, p.last_seq, self.name)
        self.out.append(Outbound(p.authority, msg, "ack", p.partition_id))

    # ------------------------------------------------------------ 3.3.7.2 Send Change Propagation
    def _send_change_propagation(self, bsc: Neighbor, flush: bool = False) -> None:
        """The collection goes out in messages of at most PROPAGATION_CHUNK changes: Count is a u16 and an
        MSMQ message (and a Kafka record) has a size limit; the receiver applies them in order anyway."""
        changes, bsc.available = bsc.available, []
        bsc.next_tick_ms = None
        for i in range(0, len(changes), PROPAGATION_CHUNK):
            chunk = changes[i:i + PROPAGATION_CHUNK]
            msg = mqdsrp.ChangePropagationMessage(1 if flush else 0, len(chunk), chunk, mqdsrp.SeqNumberHeader(0))
            self.out.append(Outbound(bsc.machine_name, msg, "flush" if flush else "propagation"))

    # ------------------------------------------------------------ 3.3.7.5 Receive Sync Reply
    def _receive_sync_reply(self, msg: mqdsrp.SyncReplyMessage) -> None:
        hdr = msg.sync_reply_header
        p = self.state.partitions.get(hdr.partition_id)
        if p is None or self.owns(p) or hdr.purged_seq_number < p.purged_seq:
            return
        # 3.3.7.5: each change is processed as in 3.1.5.2, and 3.1.7.2.2 checks the pending changes
        # after every change that applied, so a pending change whose predecessor the reply supplies
        # applies in sequence order. A reply entry that then looks old (pending changes moved
        # LastSeqNumber past it) still carries its object's full current state: it is applied to an
        # object that is not newer, without moving LastSeqNumber.
        for change in msg.directory_changes:
            if change.seq_number <= p.last_seq and change.partition_id == p.partition_id \
                    and change.purged_seq_number >= p.purged_seq:
                self._heal_from_reply(p, change)
            else:
                self._process_change(change, check_flush=True)
        if p.partition_id not in self.state.partitions:
            return
        if p.purge_state == PURGE_SYNC0:
            if hdr.complete_sync0 == 2:
                self.complete_sync0(p)
            elif hdr.complete_sync0 == 1:
                self._send_sync_request(p, "sync0")
        elif p.purge_state == PURGE_NORMAL:
            if p.initial_sync_outstanding:
                p.change_missing_window = NO_WINDOW
            elif p.change_missing_window == hdr.to_seq_number:
                p.change_missing_window = NO_WINDOW
                self._close_window(p, hdr.to_seq_number)
            self._check_pending_changes(p)

    def _close_window(self, p: Partition, to: int) -> None:
        """The reply to the window asked for holds every change of [From, To] that the authority still
        has; what it leaves out was superseded by a later change of the same object. Digest §11.5
        skips the gap when the reply is empty; [INFERENCE] generalised: whatever the
        count, the pending changes up to To apply in order (their missing predecessors are superseded;
        a pending create must not be dropped, or the object's later updates would fail) and
        LastSeqNumber becomes at least To - 1: To is the first pending change's number (3.1.7.2.2) or
        one more than the authority's LastSeqNumber in a SeqNumberHeader (3.2.7.1), never a change
        the reply itself stands for."""
        for change in [c for c in p.pending if c.seq_number <= to]:
            p.pending.remove(change)
            if change.seq_number <= p.last_seq:
                self.pending_events.append(PendingEvent(p.partition_id, change, "stale", self.state.now_ms))
                continue
            applied = self._handle_in_sync_change(p, change, True)
            self.pending_events.append(PendingEvent(p.partition_id, change, "applied" if applied else "failed",
                                                    self.state.now_ms))
        if p.last_seq < to - 1:
            p.last_seq, p.last_change_ms = to - 1, self.state.now_ms

    def _heal_from_reply(self, p: Partition, change: DirectoryChange) -> None:
        """A full-state reply entry (a Sync, or a Delete by GUID) at or below LastSeqNumber: applied when
        this replica's copy of the object is not newer than it, LastSeqNumber unchanged."""
        guid = change.guid_identifier if change.use_guid == 1 else None
        key = self._resolve(change.path_name if change.use_guid == 0 else None, guid)
        if key is None:
            return
        existing = self.store.get(key)
        if change.command == mqdsrp.CMD_SYNC and change.properties:
            if existing is None and key in self.state.deleted and self.state.deleted[key].seq_number >= change.seq_number:
                return                                       # deleted since: the deletion is newer
            if existing is None or existing.seq_number <= change.seq_number:
                object_type = object_type_of(change.properties[0].prop_id)
                self._handle_directory_sync(p, object_type, None, key, change.properties, change.seq_number)
        elif change.command == mqdsrp.CMD_DELETE and existing is not None and existing.seq_number <= change.seq_number:
            self._handle_directory_delete(p, *_delete_type_and_scope(change), None, key, change.seq_number)

    # ------------------------------------------------------------ 3.3.7.7 Receive Already Purged
    def _receive_already_purged(self, msg: mqdsrp.AlreadyPurgedMessage) -> None:
        p = self.state.partitions.get(msg.partition_id)
        if p is None or self.owns(p):
            return
        if p.last_seq >= msg.purged_seq_number or p.purged_seq >= msg.purged_seq_number:
            if p.initial_sync_outstanding and p.purge_state == PURGE_NORMAL:
                # [INFERENCE] the initial request was answered with AlreadyPurged, but this replica has
                # meanwhile caught up past the purge horizon: ask again from where it is now, or the
                # window would stay at MAX and no gap would ever be requested again.
                self._send_sync_request(p, "initial")
            return
        self.start_sync0(p, msg.purged_seq_number)

    # ------------------------------------------------------------ 3.3.7.10 / 3.3.7.11 sync0
    def start_sync0(self, p: Partition, purged_seq: int) -> None:
        if p.last_seq >= purged_seq or p.purged_seq >= purged_seq:
            return
        p.move_purge_state(PurgeState.STARTSYNC0)
        p.last_seq, p.change_missing_window, p.purged_seq = MIN_SEQ_NUMBER, INITIAL_SYNC_WINDOW, purged_seq
        for change in p.pending:
            self.pending_events.append(PendingEvent(p.partition_id, change, "cleared", self.state.now_ms))
        p.pending = []
        # MQDS Reset Directory Partition, operation 1; in GUID order, so that the versions it records
        # are numbered the same whatever the order the store's buckets were loaded in
        for obj in sorted(self.store.all_objects(), key=lambda o: o.guid):
            if obj.partition_id == p.partition_id:
                obj.seq_number = MIN_SEQ_NUMBER
                self.store.put(obj, index_path=False)
        for d in self.state.deleted.values():
            if d.partition_id == p.partition_id:
                d.seq_number = MIN_SEQ_NUMBER
                self.deleted_touched[d.identifier] = (d, "deleted", self.state.now_ms)
        p.move_purge_state(PurgeState.SYNC0)
        self._send_sync_request(p, "sync0")

    def complete_sync0(self, p: Partition) -> None:
        if p.purge_state not in (PURGE_SYNC0, PURGE_COMPLETESYNC0):
            return
        for obj in sorted(self.store.all_objects(), key=lambda o: o.guid):   # MQDS Reset Directory Partition, op. 2
            if obj.partition_id == p.partition_id and obj.seq_number == MIN_SEQ_NUMBER:
                # Gone from the authority, deleted at or below the purge horizon: the removal is
                # recorded with that sequence number, so it orders after the object's last change.
                obj.seq_number = p.purged_seq
                self.store.put(obj, index_path=False)
                self.store.remove(obj.guid)
        for identifier, d in list(self.state.deleted.items()):
            if d.partition_id == p.partition_id and d.seq_number == MIN_SEQ_NUMBER:
                del self.state.deleted[identifier]
                self.deleted_touched[identifier] = (d, "removed-by-sync0", self.state.now_ms)
        p.move_purge_state(PurgeState.NORMAL)
        p.change_missing_window = NO_WINDOW
        self._check_pending_changes(p)

    # ------------------------------------------------------------ 3.2.7.4 / 3.2.7.5 acks
    def _receive_psc_ack(self, msg: mqdsrp.PSCAckMessage) -> None:
        self._learn_authority(msg.acked_partition_id)
        if not self._is_psc():
            return
        neighbor = self.state.psc_neighbors.get(msg.psc_name)
        if neighbor is None:
            return
        if self._is_pec() and msg.acked_partition_id == PEC_PARTITION_ID:
            neighbor.acked_pec_seq = msg.acked_seq_number
        mine = self._my_site_partition()
        if mine is not None and msg.acked_partition_id == mine.partition_id:
            neighbor.acked_seq = msg.acked_seq_number

    def _learn_authority(self, partition_id: str) -> None:
        """[INFERENCE] A PSCAck is sent to the acked partition's AuthorityName (3.3.7.4): its receiver is
        that partition's authority, which its own traffic never tells it (its partition is local)."""
        p = self.state.partitions.get(partition_id)
        if p is None:
            self.state.partitions[partition_id] = Partition(partition_id, self.name, initial_sync_sent=True)
            if partition_id != PEC_PARTITION_ID:
                self.state.site_id = partition_id
        elif not p.authority:
            p.authority = self.name

    def _receive_bsc_ack(self, msg: mqdsrp.BSCAckMessage) -> None:
        if not self._is_psc():
            return
        neighbor = self.state.bsc_neighbors.get(msg.bsc_name)
        if neighbor is None:
            # [INFERENCE] a PSC finds its BSCs among its own site's machines (3.1.7.2.5), which change
            # by local administration, not on the wire; a BSC's ack is the wire's sign of one.
            mine = self._my_site_partition()
            neighbor = Neighbor(mine.partition_id if mine else "", msg.bsc_name)
            self.state.bsc_neighbors[msg.bsc_name] = neighbor
        neighbor.last_acked_ms = self.state.now_ms

    # ------------------------------------------------------------ change requests (3.2.7.2, 3.3.7.1, 3.2.7.6)
    def _receive_change_request(self, msg: mqdsrp.ChangeRequestMessage, body: bytes) -> None:
        hdr = msg.change_request_header
        p = self.state.partitions.get(hdr.partition_id)
        if p is not None and self.owns(p):
            self._ignore("ChangeRequest", "this server is the object authority: applied by the authority")
            return
        if self._is_bsc():
            next_hop = self.state.my_psc_name
        elif p is None:
            # [INFERENCE] a PSC gets change requests for its own partition, which is local and so
            # unknown here, or from its BSCs for partitions it replicates (3.3.7.1).
            self._ignore("ChangeRequest", "partition not replicated here: taken as this authority's own")
            return
        else:
            next_hop = p.authority
        if not next_hop:
            self._send_change_reply(hdr, MQ_ERROR, "MQDS_UNKNOWN_SOURCE")
            return
        wait = CHANGE_WAIT_AUTHORITY_MS if p is not None and next_hop == p.authority else CHANGE_WAIT_OTHER_MS
        self.state.forwarded[_request_key(hdr.requester_name, hdr.request_identifier)] = ForwardedRequest(
            hdr.requester_name, hdr.request_identifier, hdr.psc_name, self.state.now_ms + wait)
        self.out.append(Outbound(next_hop, msg, "forward", hdr.partition_id, body=body))

    def _receive_change_reply(self, msg: mqdsrp.ChangeReplyMessage) -> None:
        fwd = self.state.forwarded.pop(_request_key(msg.requester_name, msg.request_identifier), None)
        if fwd is None:
            return                                  # not a request this server forwarded
        self._reply(fwd, msg.result, "MQ_OK" if msg.result == MQ_OK else f"0x{msg.result:08x}")

    def _receive_change_request_nack(self, msg: mqdsrp.ChangeRequestMessage) -> None:
        hdr = msg.change_request_header
        fwd = self.state.forwarded.pop(_request_key(hdr.requester_name, hdr.request_identifier), None)
        if fwd is not None:
            self._reply(fwd, MQ_ERROR, "MQDS_OWNER_NOT_REACHED")

    def _reply(self, fwd: ForwardedRequest, result: int, status: str) -> None:
        hdr = mqdsrp.ChangeRequestHeader("", fwd.request_id, 0, fwd.requester, fwd.psc_name)
        self._send_change_reply(hdr, result, status)

    def _send_change_reply(self, hdr: mqdsrp.ChangeRequestHeader, result: int, status: str) -> None:
        destination = hdr.requester_name
        if destination not in self.state.psc_neighbors and destination not in self.state.bsc_neighbors and hdr.psc_name:
            destination = hdr.psc_name
        msg = mqdsrp.ChangeReplyMessage(hdr.request_identifier, result, hdr.requester_name)
        self.out.append(Outbound(destination, msg, "reply", hdr.partition_id or None, status=status))

    # ------------------------------------------------------------ 3.3.7.9 Receive Request Nack
    def _receive_request_nack(self, message_class: str, destination_queue: str | None, body: bytes) -> None:
        if message_class != "NackBadSignature":
            return
        destination = _machine_of(destination_queue)
        if not destination:
            return
        key = f"{destination}:{_digest(body)}"
        count = self.state.nack_resends.get(key, 0)
        if count >= NACK_RESEND_LIMIT:
            self._ignore("Nack", f"resend limit {NACK_RESEND_LIMIT} reached for {destination}")
            return
        self.state.nack_resends[key] = count + 1
        self.out.append(Outbound(destination, None, "nack-resend", body=body))

    # ------------------------------------------------------------ timers (3.3.6)
    def next_timer_ms(self) -> int | None:
        if self.state.bsc_ack_due_ms is not None and self._is_psc():
            self.state.bsc_ack_due_ms = None               # only a BSC runs the BSC Ack Timer (3.3.3)
        due = [self.state.bsc_ack_due_ms] if self.state.bsc_ack_due_ms is not None else []
        due += [n.next_tick_ms for n in self.state.bsc_neighbors.values() if n.next_tick_ms is not None]
        due += [f.deadline_ms for f in self.state.forwarded.values()]
        return min(due) if due else None

    def fire_timers_until(self, until_ms: int) -> None:
        """Every timer due by until_ms, each at its own due time and in order (the adapter calls this
        before each message with the message's time less one, and with the watermark), so what the
        timers send does not depend on where a micro-batch ends."""
        while (due := self.next_timer_ms()) is not None and due <= until_ms:
            self.on_timer(due)

    def on_timer(self, now_ms: int) -> None:
        self.state.now_ms = max(self.state.now_ms, now_ms)
        self.store.clock_ms = self.state.now_ms
        if self.state.bsc_ack_due_ms is not None and self.state.bsc_ack_due_ms <= now_ms:
            self._bsc_ack_timer(now_ms)
        for bsc in self.state.bsc_neighbors.values():
            if bsc.next_tick_ms is not None and bsc.next_tick_ms <= now_ms:
                self._send_change_propagation(bsc)
        for key, fwd in list(self.state.forwarded.items()):
            if fwd.deadline_ms <= now_ms:
                del self.state.forwarded[key]
                self._reply(fwd, MQ_ERROR, "MQDS_NO_RSP_FROM_OWNER")
        self._stamp_sent()

    def _bsc_ack_timer(self, now_ms: int) -> None:
        if self._is_psc():
            self.state.bsc_ack_due_ms = None              # only a BSC runs the BSC Ack Timer
            return
        if not self.state.my_psc_name:
            self.state.bsc_ack_due_ms = now_ms + BSC_ACK_FIRST_MS
            return
        machine_id = self._own_machine_id() or GUID_NULL
        self.out.append(Outbound(self.state.my_psc_name, mqdsrp.BSCAckMessage(machine_id, self.name), "ack"))
        self.state.bsc_ack_due_ms = now_ms + BSC_ACK_MS

    def _own_machine_id(self) -> str | None:
        return None if self.state.site_id is None else self._guid_of(self.name)

    def _guid_of(self, path_name: str) -> str | None:
        """The GUID of the object stored under a path name (None for a path placeholder)."""
        guid = self.store.guid_for_path(path_name)
        return guid if guid and not guid.startswith("path:") else None


# 3.1.5.1: the event each Operation of a Normal-class message raises, as (replica, message, source, body).
_NORMAL_HANDLERS = {
    mqdsrp.OP_CHANGE_PROPAGATION: lambda r, m, source, body: r._receive_change_propagation(m, source),
    mqdsrp.OP_CHANGE_REQUEST: lambda r, m, source, body: r._receive_change_request(m.change_request, body),
    mqdsrp.OP_SYNC_REQUEST: lambda r, m, source, body: r._ignore("SyncRequest", "answered by the object authority"),
    mqdsrp.OP_SYNC_REPLY: lambda r, m, source, body: r._receive_sync_reply(m.sync_reply),
    mqdsrp.OP_CHANGE_REPLY: lambda r, m, source, body: r._receive_change_reply(m.change_reply),
    mqdsrp.OP_ALREADY_PURGED: lambda r, m, source, body: r._receive_already_purged(m.already_purged),
    mqdsrp.OP_PSC_ACK: lambda r, m, source, body: r._receive_psc_ack(m.psc_ack),
    mqdsrp.OP_BSC_ACK: lambda r, m, source, body: r._receive_bsc_ack(m.bsc_ack),
}


def _name_property(object_type: int, props: dict) -> str | None:
    names = {MQDS_QUEUE: "Q_PATHNAME", MQDS_MACHINE: "QM_PATHNAME", MQDS_SITE: "S_PATHNAME", MQDS_CN: "CN_NAME",
             MQDS_ENTERPRISE: "E_NAME"}
    return props.get(propid(names[object_type])) if object_type in names else None


def _delete_type_and_scope(change: DirectoryChange) -> tuple[int, int]:
    """A delete's PropertyValue[1] (object type) and PropertyValue[0] (scope), 0 when absent. Both
    are integers (D_OBJTYPE, D_SCOPE); a delete whose first properties are of other types (text, a
    GUID, a vector) is taken as one without them: 0."""
    values = [prop.value if isinstance(prop.value, int) else 0 for prop in change.properties[:2]]
    return (values[1] if len(values) > 1 else 0), (values[0] if values else 0)


def _request_key(requester: str, request_id: int) -> str:
    """digest §11.1: identifiers from different requesters can collide; key on both."""
    return f"{requester.lower()}:{request_id}"


def _machine_of(format_name: str | None) -> str | None:
    """DIRECT=OS:<machine>\\private$\\mqis_queue$ -> machine (REPLICATION_QUEUE_DIRECT, 1.9)."""
    if not format_name or ":" not in format_name:
        return None
    return format_name.split(":", 1)[1].split("\\", 1)[0] or None


def _digest(body: bytes) -> str:
    return format(zlib.crc32(body), "08x")


M = TypeVar("M")


def _inner(message: M | None) -> M:
    """The one message of a ReplicationMessage its operation names (set whenever the operation is
    handled: the decoder sets it with the operation)."""
    assert message is not None
    return message
