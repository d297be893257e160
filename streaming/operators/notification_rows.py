"""Sink rows of one queue manager after a step (sans-IO), and the directory versions the MQDSRP
operator's object rows give the MQCN operator.

Tables (docs/tables.md): queue_managers, qm_queues, notifications, notification_batches.
"""
import hashlib
import json
from collections import OrderedDict
from datetime import datetime

from .notifications import QueueManager, Version
from ..wire.seqnum import seq_hex
from .replication_rows import VersionRecord, ts

__all__ = ["directory_version", "FirstArrivals", "health_columns", "QUEUE_COLUMNS", "read_columns", "step_rows",
           "version_event_ms", "version_owner", "version_record"]

QUEUE_COLUMNS = {
    "PROPID_Q_PATHNAME": "path_name", "PROPID_Q_TYPE": "type", "PROPID_Q_LABEL": "label",
    "PROPID_Q_BASEPRIORITY": "base_priority", "PROPID_Q_JOURNAL": "journal", "PROPID_Q_QUOTA": "quota",
    "PROPID_Q_JOURNAL_QUOTA": "journal_quota", "PROPID_Q_CREATE_TIME": "create_time",
    "PROPID_Q_MODIFY_TIME": "modify_time", "PROPID_Q_SECURITY": "security", "PROPID_Q_AUTHENTICATE": "authenticate",
    "PROPID_Q_PRIV_LEVEL": "priv_level", "PROPID_Q_TRANSACTION": "transactional", "PROPID_Q_SCOPE": "scope",
}


def step_rows(qm: QueueManager) -> list[tuple[str, dict]]:
    s, rows, out = qm.state, [], qm.take_outputs()
    if out.qm_touched or out.outcomes or out.batches or out.arrived:     # whenever a column below can change
        rows.append(("queue_managers", {"machine_id": s.machine_id, "machine_name": s.machine_name,
                                        "quota": s.quota, "journal_quota": s.journal_quota,
                                        "security": s.security, "updated_at": ts(s.updated_ms) if s.updated_ms
                                        else None, **health_columns(s),
                                        **read_columns("qm_", s.qm_read_ms, s.qm_read_seq, s.qm_since_read)}))
    for guid in sorted(out.queues_touched):
        q = s.queues[guid]
        row = {"queue_manager": s.machine_id, "queue_guid": guid, "deleted": q.deleted,
               "last_notification": q.last_notification, "updated_at": ts(q.updated_ms),
               **read_columns("", q.read_ms, q.read_seq, q.since_read)}
        row.update({col: q.attributes.get(name) for name, col in QUEUE_COLUMNS.items()})
        rows.append(("qm_queues", row))
    for o in out.outcomes:
        rows.append(("notifications", {
            "queue_manager": s.machine_id, "message_id": o.message_id, "update_index": o.index,
            "version": o.version, "action": o.action, "object_guid": o.object_guid, "outcome": o.outcome,
            "reason": o.reason, "batch": o.batch, "arrival_at": ts(o.arrival_ms), "processed_at": ts(o.processed_ms)}))
    for b in out.batches:
        rows.append(("notification_batches", {
            "queue_manager": s.machine_id, "batch": b.batch,
            "timer_started": ts(b.timer_started_ms) if b.timer_started_ms is not None else None,
            "fired_at": ts(b.fired_ms), "count": b.count, "refresh_all": b.refresh_all}))
    if s.findings is not None:
        rows += s.findings.rows()
    return rows


def read_columns(prefix: str, read_ms: int | None, read_seq: int | None, since_read: set) -> dict:
    """When the object was last read from the directory (3.2.5.2 Read Directory), the sequence number
    of the version read, and the attributes later notifications set since (verify judges
    the rest by what the replicas held at that time)."""
    return {f"{prefix}read_at": ts(read_ms) if read_ms is not None else None,
            f"{prefix}read_seq": seq_hex(read_seq) if read_seq is not None else None,
            f"{prefix}since_read": sorted(since_read)}


def health_columns(s) -> dict:
    """What the queue manager is waiting on (docs/monitoring.md, "Metrics"): notifications in
    the batching window, notifications' reads retried until the object appears (a refresh's own
    reads are not counted: each change of this count records an outcome), and when it last
    processed notifications."""
    return {"notifications_waiting": len(s.pending),
            "unresolved_reads": sum(e[0] is not None for entries in s.unresolved.values() for e in entries),
            "last_processed_at": ts(s.last_processed_ms) if s.last_processed_ms is not None else None}


def version_owner(row: dict) -> str | None:
    """The queue manager a directory_objects row of a queue or machine belongs to (else None)."""
    if row["object_type"] == "queue":
        return row["properties"].get("PROPID_Q_QMID")
    if row["object_type"] == "machine":
        return row["object_guid"]
    return None


def directory_version(row: dict) -> tuple[str, str, Version] | None:
    """(queue manager GUID, object GUID, version) for a directory_objects row of a queue or machine."""
    owner = version_owner(row)
    if not owner:
        return None
    return owner, row["object_guid"], Version(version_event_ms(row), row["server"], int(row["seq_number"], 16),
                                              bool(row["deleted"]), row["object_type"], row["properties"])


def version_event_ms(row: dict) -> int:
    updated = row["updated_at"]
    return int((updated if isinstance(updated, datetime) else datetime.fromisoformat(updated)).timestamp() * 1000)


def version_record(row: dict) -> VersionRecord | None:
    """The published form of a directory_objects row of a queue or machine with an owner (else None):
    the reference for replication_rows.published_version, which the job uses. The text is exactly
    json.dumps(row); the key digests everything but the replica and the time."""
    owner = version_owner(row)
    if not owner:
        return None
    content = {k: v for k, v in row.items() if k not in ("server", "updated_at")}
    middle = json.dumps(content, default=str)
    text = (f'{{"server": {json.dumps(row["server"])}, {middle[1:-1]}, "updated_at": '
            f'{json.dumps(row["updated_at"], default=str)}}}')
    quota_unknown = row["object_type"] == "machine" and row["properties"].get("PROPID_QM_QUOTA") is None
    first_key = "" if quota_unknown else hashlib.blake2b(middle.encode(), digest_size=16).hexdigest()
    return VersionRecord(owner, first_key, version_event_ms(row), text)


class FirstArrivals:
    """Which directory versions the MQCN operator needs: every replica reports every
    change it applies, so each version of a queue or machine object comes once per replica. A read
    takes, of the versions dated at or before its time, the one with the highest sequence number,
    and a later copy of a version with the same content changes no read, no late correction
    (QueueManager._corrects wants a higher sequence number) and no first-version lookup (it takes the
    earliest): such a copy is not passed on. A copy that is earlier than every one passed so far, or
    differs in content, is. A machine version that does not set the quota is always passed: until the
    queue manager knows its quota, each version of its machine object is applied
    (QueueManager.directory_object).

    The memory is bounded (the oldest entries are forgotten first): forgetting only lets more copies
    through, which the operator takes as it always did, so what it computes is the same."""

    def __init__(self, capacity: int = 500_000):
        self.capacity = capacity
        # an OrderedDict forgets its oldest entry in constant time; a dict's next(iter(...)) walks
        # past every slot freed since it last compacted (100,000 forgettings took seconds)
        self._earliest: OrderedDict[str, int] = OrderedDict()

    def keep(self, first_key: str, event_ms: int) -> bool:
        if not first_key:
            return True
        earliest = self._earliest.get(first_key)
        if earliest is not None and earliest <= event_ms:
            return False
        self._earliest.pop(first_key, None)
        self._earliest[first_key] = event_ms
        while len(self._earliest) > self.capacity:
            self._earliest.popitem(last=False)
        return True

    def pre_select(self, records: list[VersionRecord]) -> list[VersionRecord]:
        """In a reading task, before select: the records in their order, less each copy
        that an earlier-or-equally dated copy of the same content, passed earlier by this task, makes
        redundant. Every record a task outputs reaches select in the same micro-batch (a failed task
        runs again with a new FirstArrivals), where that earlier copy sorts first and drops it anyway;
        so select passes on the same records, with fewer to format, ship and sort. Not sorted: an
        earlier copy coming second is passed too."""
        return [r for r in records if self.keep(r.first_key, r.event_ms)]

    def select(self, records: list[VersionRecord]) -> list[VersionRecord]:
        """The records to pass on, in event-time order (so that a batch's earliest copy is the one kept)."""
        timed = sorted(range(len(records)), key=lambda i: (records[i].event_ms, i))
        return [records[i] for i in timed if self.keep(records[i].first_key, records[i].event_ms)]
