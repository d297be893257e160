"""[MS-MQCN] section 3.2 as a sans-IO state machine: one queue manager receiving change notifications.

`QueueManager(state, settings)` takes the notifications addressed to one queue manager (its
NOTIFY_QUEUE_PRIVATE) and the directory as its replicas show it (`directory_object`), and keeps
the queue manager's own attributes and its QueueCollection. Revision 17 is followed where the two
revisions differ (MQCN digest, part A): the v1 authentication check is unconditional and a v1
create starts from Set Queue Defaults ([MS-MQDMPR] 3.1.7.1.33).

Batching (notes <3>, <14>; digest B.7): after a quiet period of more than 14 minutes the first
notification arms a 1-minute timer, otherwise the timer runs to 15 minutes after the last
processing; when it fires the notifications received meanwhile are processed in arrival order,
or, if 100 or more arrived, they are dropped and every queue the queue manager owns is refreshed
from the directory. `immediate` mode processes each notification on arrival (NT 4 / Windows 2000).

Reading the directory (v2 events 1, 2 and 4, and the refresh): the directory is the MQDSRP
replicas. The read is "as of" the processing time: the latest replica version whose event time
is not later. A version that reaches this operator late (the replicas are computed by another
streaming query) but is not later than a read corrects that read, so the result does not depend
on how far the two queries are apart. An object no replica holds yet leaves its notification
unresolved until the object appears.
"""
from dataclasses import dataclass, field

from ..wire.guid import GUID_NULL
from ..wire.mqcn import ChangeNotificationMessage
from ..wire.properties import object_type_of
from ..wire.propids import PROPIDS

MQDS_QUEUE, MQDS_MACHINE = 1, 2
MINUTE = 60_000
VERSIONS_KEPT = 2                    # directory versions kept per object and replica for "as of" reads

# [MS-MQDMPR] 3.1.7.1.33 Set Queue Defaults, as PROPIDs (revision 17 of MQCN 3.2.5.1).
QUEUE_DEFAULTS = {"PROPID_Q_LABEL": "", "PROPID_Q_TYPE": GUID_NULL, "PROPID_Q_JOURNAL": 0, "PROPID_Q_QUOTA": 0xFFFFFFFF,
                  "PROPID_Q_JOURNAL_QUOTA": 0xFFFFFFFF, "PROPID_Q_AUTHENTICATE": 0, "PROPID_Q_PRIV_LEVEL": 1, "PROPID_Q_TRANSACTION": 0,
                  "PROPID_Q_BASEPRIORITY": 0}
# 3.2.5.1 v1 create: the attributes taken from the message.
V1_CREATE = ("PROPID_Q_TYPE", "PROPID_Q_INSTANCE", "PROPID_Q_BASEPRIORITY", "PROPID_Q_JOURNAL", "PROPID_Q_QUOTA", "PROPID_Q_JOURNAL_QUOTA", "PROPID_Q_CREATE_TIME",
             "PROPID_Q_MODIFY_TIME", "PROPID_Q_SECURITY", "PROPID_Q_PATHNAME", "PROPID_Q_LABEL", "PROPID_Q_AUTHENTICATE", "PROPID_Q_PRIV_LEVEL",
             "PROPID_Q_TRANSACTION", "PROPID_Q_SCOPE")
# 3.2.5.1 v1 update queue: "All other PROPIDs are not used, and they MUST be ignored."
V1_QUEUE_UPDATE = ("PROPID_Q_BASEPRIORITY", "PROPID_Q_JOURNAL", "PROPID_Q_QUOTA", "PROPID_Q_JOURNAL_QUOTA", "PROPID_Q_SECURITY", "PROPID_Q_AUTHENTICATE",
                   "PROPID_Q_PRIV_LEVEL")
V1_QM_UPDATE = {"PROPID_QM_QUOTA": "quota", "PROPID_QM_JOURNAL_QUOTA": "journal_quota", "PROPID_QM_SECURITY": "security"}
# 3.2.5.2 Read Directory attribute list for a queue (MulticastAddress and DirectoryPath have no
# PROPID in the replicated directory; Scope is not in the list).
V2_QUEUE_READ = ("PROPID_Q_TYPE", "PROPID_Q_INSTANCE", "PROPID_Q_BASEPRIORITY", "PROPID_Q_JOURNAL", "PROPID_Q_QUOTA", "PROPID_Q_JOURNAL_QUOTA",
                 "PROPID_Q_CREATE_TIME", "PROPID_Q_MODIFY_TIME", "PROPID_Q_SECURITY", "PROPID_Q_PATHNAME", "PROPID_Q_LABEL", "PROPID_Q_AUTHENTICATE",
                 "PROPID_Q_PRIV_LEVEL", "PROPID_Q_TRANSACTION")
V2_EVENTS = {"1": "create queue", "2": "change queue", "3": "delete queue", "4": "change queue manager"}


@dataclass
class Settings:
    mode: str = "batched"                     # batched | immediate
    quiet_ms: int = 14 * MINUTE               # "more than 14 minutes" since the last processing
    first_wait_ms: int = 1 * MINUTE
    window_ms: int = 15 * MINUTE
    refresh_threshold: int = 100


@dataclass
class Notification:
    message_id: str
    arrival_ms: int
    version: int
    sender_identifier_type: str | None
    authentication_level: str | None
    source: str | None
    updates: list = field(default_factory=list)       # v1: (command, use_guid, path, guid, [(prop_id, value)])
    event: str | None = None                          # v2
    object_guid: str | None = None
    domain_controller: str | None = None


@dataclass
class Version:
    """One replica's version of a directory object (from the MQDSRP operator)."""
    event_ms: int
    server: str
    seq_number: int
    deleted: bool
    object_type: str
    properties: dict[str, object]                     # PROPID name -> value


@dataclass
class QueueRecord:
    attributes: dict[str, object]                     # PROPID name -> value
    deleted: bool = False
    last_notification: str | None = None
    updated_ms: int = 0
    read_ms: int | None = None                        # when last read from the directory
    read_event_ms: int | None = None                  # event time of the version that read used


@dataclass
class QMState:
    machine_id: str
    machine_name: str | None = None
    quota: int | None = None
    journal_quota: int | None = None
    security: object = None
    qm_read_ms: int | None = None
    qm_read_event_ms: int | None = None
    updated_ms: int = 0
    queues: dict[str, QueueRecord] = field(default_factory=dict)
    pending: list[Notification] = field(default_factory=list)
    timer_ms: int | None = None
    timer_started_ms: int | None = None
    last_processed_ms: int | None = None
    batches: int = 0
    directory: dict[str, list[Version]] = field(default_factory=dict)
    unresolved: dict[str, list[tuple[str, int, str, int]]] = field(default_factory=dict)
    # object guid -> [(message_id, index, event, batch)]


@dataclass
class Outcome:
    message_id: str
    index: int                        # the Notification Update's index (v1), 0 for v2
    version: int
    action: str                       # the v1 command or v2 event, in words
    object_guid: str | None
    outcome: str                      # applied | discarded | unresolved | superseded-by-refresh | ignored
    reason: str | None
    batch: int | None
    arrival_ms: int
    processed_ms: int


@dataclass
class Batch:
    batch: int
    timer_started_ms: int | None
    fired_ms: int
    count: int
    refresh_all: bool


class QueueManager:
    def __init__(self, state: QMState, settings: Settings | None = None):
        self.s = state
        self.settings = settings or Settings()
        self.outcomes: list[Outcome] = []
        self.batches: list[Batch] = []
        self.queues_touched: set[str] = set()
        self.qm_touched = False

    # ------------------------------------------------------------ arrival (1.6, note <3>)
    def receive(self, n: Notification, destination_name: str | None = None) -> None:
        if destination_name:
            self.s.machine_name = destination_name
        if self.settings.mode == "immediate":
            self.s.batches += 1
            self._process(n, n.arrival_ms, self.s.batches)
            self.batches.append(Batch(self.s.batches, None, n.arrival_ms, 1, False))
            self.s.last_processed_ms = n.arrival_ms
            return
        self.s.pending.append(n)
        if self.s.timer_ms is None:
            last = self.s.last_processed_ms
            if last is None or n.arrival_ms - last > self.settings.quiet_ms:
                self.s.timer_ms = n.arrival_ms + self.settings.first_wait_ms
            else:
                self.s.timer_ms = last + self.settings.window_ms        # "the remainder of the 15 minutes"
            self.s.timer_started_ms = n.arrival_ms

    def next_timer_ms(self) -> int | None:
        return self.s.timer_ms

    def on_timer(self, now_ms: int) -> None:
        """Fire every timer due by now_ms, in event-time order. A batch holds the notifications that
        arrived before its timer fired; later ones (a micro-batch can bring them together) start the
        next window as if they had arrived after it."""
        while self.s.timer_ms is not None and self.s.timer_ms <= now_ms:
            fired = self.s.timer_ms
            due = [n for n in self.s.pending if n.arrival_ms <= fired]
            later = [n for n in self.s.pending if n.arrival_ms > fired]
            self._fire(fired, due)
            self.s.pending = []
            for n in sorted(later, key=lambda m: m.arrival_ms):
                self.receive(n)

    def _fire(self, fired: int, pending: list[Notification]) -> None:
        self.s.batches += 1
        batch = self.s.batches
        refresh = len(pending) >= self.settings.refresh_threshold
        if refresh:
            for n in pending:
                rejected = self._v1_rejection(n) if n.version == 1 else None
                if rejected:                    # disregarded whatever the batch: recorded as such
                    self._record(n, 0, self._action(n), None, "discarded", rejected, batch, fired)
                    continue
                self._record(n, 0, self._action(n), n.object_guid, "superseded-by-refresh",
                             f"{len(pending)} notifications in one window: all public queues refreshed instead "
                             f"(MQCN note <3>)", batch, fired)
            self.refresh_all(fired)
        else:
            for n in sorted(pending, key=lambda m: m.arrival_ms):
                self._process(n, fired, batch)
        self.batches.append(Batch(batch, self.s.timer_started_ms, fired, len(pending), refresh))
        self.s.timer_ms = self.s.timer_started_ms = None
        self.s.last_processed_ms = fired

    # ------------------------------------------------------------ 3.2.5 processing
    def _process(self, n: Notification, now: int, batch: int) -> None:
        if n.version == 1:
            self._process_v1(n, now, batch)
        elif n.version == 2:
            self._process_v2(n, now, batch)
        else:
            self._record(n, 0, f"version {n.version}", None, "ignored", "only versions 1 and 2 are processed "
                         "(note <4>)", batch, now)

    def _process_v1(self, n: Notification, now: int, batch: int) -> None:
        """3.2.5.1: any failed check disregards the whole message (checked before anything applies)."""
        reason = self._v1_rejection(n)
        if reason:
            for i, u in enumerate(n.updates or [(None, None, None, None, [])]):
                self._record(n, i, _v1_action(u), u[3], "discarded", reason, batch, now)
            return
        for i, (command, _use_guid, path, guid, props) in enumerate(n.updates):
            values = {PROPIDS[k][0]: v for k, v in props if k in PROPIDS}
            kind = object_type_of(props[0][0]) if command in (0, 1) else MQDS_QUEUE
            action = _v1_action((command, None, path, guid, props))
            if guid is None and command in (1, 2) and kind == MQDS_QUEUE:
                guid = self._queue_by_path(path)
                if guid is None:
                    self._record(n, i, action, path, "ignored", "no queue with this PathName in the "
                                 "QueueCollection (3.2.5.1: the update names its queue by PathName)", batch, now)
                    continue
            if command == 0 and kind == MQDS_QUEUE:
                self._v1_create(n, i, values, now, batch, action)
            elif command == 1 and kind == MQDS_QUEUE:
                self._v1_update_queue(n, i, guid, values, now, batch, action)
            elif command == 1 and kind == MQDS_MACHINE:
                for name, attr in V1_QM_UPDATE.items():
                    if name in values:
                        setattr(self.s, attr, values[name])
                self.s.updated_ms, self.qm_touched = now, True
                self._record(n, i, action, guid, "applied", None, batch, now)
            elif command == 2:
                self._delete(n, i, guid, now, batch, action)
            else:
                self._record(n, i, action, guid or path, "ignored", "a queue manager create has no action",
                             batch, now)

    def _v1_rejection(self, n: Notification) -> str | None:
        if n.sender_identifier_type != "QueueManagerIdentifier":
            return f"SenderIdentifierType {n.sender_identifier_type}, not QueueManagerIdentifier (3.2.5.1)"
        if n.authentication_level in (None, "None"):
            return "AuthenticationLevel None (3.2.5.1)"
        for i, (command, _ug, _path, _guid, props) in enumerate(n.updates):
            if command in (0, 1):
                kind = object_type_of(props[0][0]) if props else 0
                if kind not in (MQDS_QUEUE, MQDS_MACHINE):
                    return f"update {i}: object type {kind} from PropertyId[0] is neither a queue nor a queue " \
                           f"manager (3.2.5.1)"
            elif command == 2:
                if len(props) < 2 or props[1][1] != MQDS_QUEUE:
                    return f"update {i}: delete of PropertyValue[1] = {props[1][1] if len(props) > 1 else None}, " \
                           f"not MQDS_QUEUE (3.2.5.1)"
            else:
                return f"update {i}: Command {command} is not 0, 1 or 2"
        return None

    def _queue_by_path(self, path: str | None) -> str | None:
        """3.2.5.1: "the state of the queue ... referenced by the PathName field or the GuidIdentifier
        field". A live queue of the QueueCollection with that path name, else None. [INFERENCE] path
        names compare without regard to case, as MSMQ's do ([MS-MQMQ] 2.1.1 gives only the syntax)."""
        if not path:
            return None
        wanted = path.casefold()
        for guid, q in self.s.queues.items():
            name = q.attributes.get("PROPID_Q_PATHNAME")
            if not q.deleted and isinstance(name, str) and name.casefold() == wanted:
                return guid
        return None

    def _v1_create(self, n, i, values, now, batch, action) -> None:
        attrs = dict(QUEUE_DEFAULTS)                       # revision 17: Set Queue Defaults first
        attrs.update({k: values[k] for k in V1_CREATE if k in values})
        guid = attrs.get("PROPID_Q_INSTANCE")
        if not guid:
            self._record(n, i, action, None, "ignored", "no PROPID_Q_INSTANCE: the queue has no identifier",
                         batch, now)
            return
        self.s.queues[guid] = QueueRecord(attrs, False, n.message_id, now)
        self.queues_touched.add(guid)
        self._record(n, i, action, guid, "applied", None, batch, now)

    def _v1_update_queue(self, n, i, guid, values, now, batch, action) -> None:
        q = self.s.queues.get(guid)
        if q is None or q.deleted:
            self._record(n, i, action, guid, "ignored", "no such queue in the QueueCollection", batch, now)
            return
        q.attributes.update({k: values[k] for k in V1_QUEUE_UPDATE if k in values})
        q.last_notification, q.updated_ms = n.message_id, now
        self.queues_touched.add(guid)
        self._record(n, i, action, guid, "applied", None, batch, now)

    def _delete(self, n, i, guid, now, batch, action) -> None:
        for message_id, arrival, event, b in self.s.unresolved.pop(guid, []):
            # the queue is gone before any replica showed it: nothing left to read
            self.outcomes.append(Outcome(message_id, 0, 2, V2_EVENTS.get(event, event), guid, "ignored",
                                         "the queue was deleted before any replica held it", b, arrival, now))
        q = self.s.queues.get(guid)
        if q is None:
            q = self.s.queues[guid] = QueueRecord({"PROPID_Q_INSTANCE": guid})
        q.deleted, q.last_notification, q.updated_ms = True, n.message_id, now
        self.queues_touched.add(guid)
        self._record(n, i, action, guid, "applied", None, batch, now)

    def _process_v2(self, n: Notification, now: int, batch: int) -> None:
        """3.2.5.2: events 1, 2 and 4 read the object from the directory; 3 deletes without a read."""
        action = self._action(n)
        if n.event == "3":
            self._delete(n, 0, n.object_guid, now, batch, action)
        elif n.event in ("1", "2", "4"):
            if self._read_into(n.object_guid, now, n.message_id, n.event):
                self._record(n, 0, action, n.object_guid, "applied", None, batch, now)
                return
            self.s.unresolved.setdefault(n.object_guid, []).append((n.message_id, n.arrival_ms, n.event, batch))
            self._record(n, 0, action, n.object_guid, "unresolved", "no replica holds the object yet: "
                         "retried when it appears", batch, now)
        else:
            self._record(n, 0, action, n.object_guid, "ignored", f"Event {n.event} is not 1 to 4 (note <10>)",
                         batch, now)

    # ------------------------------------------------------------ the directory (Read Directory)
    def directory_object(self, guid: str, version: Version) -> None:
        """A replica's version of one of this queue manager's queues or of its machine object."""
        versions = self.s.directory.setdefault(guid, [])
        versions.append(version)
        versions.sort(key=lambda v: (v.event_ms, v.seq_number))
        per_server = [v for v in versions if v.server == version.server]
        for old in per_server[:-VERSIONS_KEPT]:          # a few recent versions per replica
            versions.remove(old)
        if guid == self.s.machine_id and self.s.quota is None and version.object_type == "machine":
            # [INFERENCE] A queue manager knows its own attributes before any notification changes
            # them (it registered its machine object itself): taken from the directory until then.
            self._apply_machine(version, version.event_ms)
            self.s.qm_read_ms = None
        self._late_correction(guid, version)
        for message_id, arrival, event, batch in self.s.unresolved.pop(guid, []):
            self._read_into(guid, max(version.event_ms, arrival), message_id, event, exact=version)
            self.outcomes.append(Outcome(message_id, 0, 2, V2_EVENTS.get(event, event), guid, "applied",
                                         "resolved when the object appeared in a replica", batch, arrival,
                                         version.event_ms))

    def read(self, guid: str, as_of_ms: int) -> Version | None:
        """The directory as of a time: of the versions the replicas had by then, the one with the highest
        sequence number (the most recent change; a deletion carries its own sequence number). A read
        that finds none takes the first version after it: a micro-batch of the replication operator
        reports only an object's last version, so the one that existed at the read may be folded
        into a later one."""
        seen = [v for v in self.s.directory.get(guid, []) if v.event_ms <= as_of_ms]
        return max(seen, key=lambda v: (v.seq_number, v.event_ms)) if seen else None

    def _first_after(self, guid: str, as_of_ms: int) -> Version | None:
        later = [v for v in self.s.directory.get(guid, []) if v.event_ms > as_of_ms]
        return min(later, key=lambda v: (v.event_ms, v.seq_number)) if later else None

    def _read_into(self, guid: str, now: int, message_id: str | None, event: str, exact: Version | None = None) -> bool:
        v = exact or self.read(guid, now) or self._first_after(guid, now)
        if v is None:
            return False
        if event == "4" or v.object_type == "machine":
            self._apply_machine(v, now)
        else:
            self._apply_queue(guid, v, now, message_id)
        return True

    def _apply_queue(self, guid: str, v: Version, now: int, message_id: str | None) -> None:
        q = self.s.queues.get(guid) or QueueRecord({})
        self.s.queues[guid] = q
        if v.deleted:
            q.deleted = True
        else:
            q.attributes.update({k: v.properties[k] for k in V2_QUEUE_READ if k in v.properties})
            q.attributes.setdefault("PROPID_Q_INSTANCE", guid)
            q.deleted = False
        q.read_ms, q.read_event_ms, q.updated_ms = now, v.event_ms, now
        if message_id:
            q.last_notification = message_id
        self.queues_touched.add(guid)

    def _apply_machine(self, v: Version, now: int) -> None:
        for name, attr in V1_QM_UPDATE.items():
            if name in v.properties:
                setattr(self.s, attr, v.properties[name])
        self.s.qm_read_ms, self.s.qm_read_event_ms, self.s.updated_ms = now, v.event_ms, now
        self.qm_touched = True

    def _late_correction(self, guid: str, v: Version) -> None:
        """A version that was already the directory's when a read happened, but reached this operator
        after it, corrects that read."""
        q = self.s.queues.get(guid)
        if q is not None and q.read_ms is not None and v.event_ms <= q.read_ms \
                and (q.read_event_ms is None or v.event_ms > q.read_event_ms):
            self._apply_queue(guid, self.read(guid, q.read_ms), q.read_ms, None)
        if guid == self.s.machine_id and self.s.qm_read_ms is not None and v.event_ms <= self.s.qm_read_ms \
                and (self.s.qm_read_event_ms is None or v.event_ms > self.s.qm_read_event_ms):
            self._apply_machine(self.read(guid, self.s.qm_read_ms), self.s.qm_read_ms)

    def refresh_all(self, now: int) -> None:
        """Note <14>: "refreshes all public queues" the queue manager owns, from the directory."""
        for guid in sorted(self.s.directory):
            v = self.read(guid, now) or self._first_after(guid, now)
            if v is not None and v.object_type == "queue":
                self._apply_queue(guid, v, now, None)
            elif v is not None and guid == self.s.machine_id:
                # [INFERENCE] (digest B.7 open point c) the dropped notifications may have changed the
                # queue manager itself; its attributes are re-read with its queues.
                self._apply_machine(v, now)

    # ------------------------------------------------------------ records
    def _action(self, n: Notification) -> str:
        if n.version == 2:
            return V2_EVENTS.get(n.event, f"event {n.event}")
        return ", ".join(_v1_action(u) for u in n.updates) or "v1"

    def _record(self, n: Notification, index: int, action: str, guid, outcome: str, reason, batch, now) -> None:
        self.outcomes.append(Outcome(n.message_id, index, n.version, action, guid, outcome, reason, batch,
                                     n.arrival_ms, now))


def _v1_action(update) -> str:
    command, _ug, _path, _guid, props = update
    if command == 2:
        return "delete queue"
    kind = object_type_of(props[0][0]) if props else 0
    target = {MQDS_QUEUE: "queue", MQDS_MACHINE: "queue manager"}.get(kind, f"object type {kind}")
    return {0: f"create {target}", 1: f"update {target}"}.get(command, f"command {command}")


def notification_from(msg: ChangeNotificationMessage, *, message_id: str, arrival_ms: int,
                      sender_identifier_type: str | None, authentication_level: str | None,
                      source: str | None) -> Notification:
    n = Notification(message_id, arrival_ms, msg.version, sender_identifier_type, authentication_level, source)
    if msg.version == 1:
        n.updates = [(u.command, u.use_guid, u.path_name, u.guid_identifier,
                      [(p.prop_id, json_value(p.value)) for p in u.properties]) for u in msg.updates]
    elif msg.body is not None:
        n.event, n.object_guid, n.domain_controller = msg.body.event, msg.body.object_guid, msg.body.domain_controller
    return n


def json_value(value):
    """Attribute values as the sink and the truth keep them: BLOBs as hex."""
    return value.hex() if isinstance(value, (bytes, bytearray)) else value


def queue_manager_of(destination_queue: str | None) -> str | None:
    """NOTIFY_QUEUE_PRIVATE is PRIVATE=<queue manager GUID>\\<queue number> (MQCN 1.9)."""
    if not destination_queue or not destination_queue.upper().startswith("PRIVATE="):
        return None
    guid = destination_queue[len("PRIVATE="):].split("\\", 1)[0].strip("{}").lower()
    return guid if len(guid) == 36 else None

