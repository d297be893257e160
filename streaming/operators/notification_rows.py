"""Sink rows of one queue manager after a step (sans-IO), and the directory versions the MQDSRP
operator's object rows give the MQCN operator.

Tables (README): queue_managers, qm_queues, notifications, notification_batches.
"""
from datetime import datetime

from .notifications import QueueManager, Version
from .replication_rows import ts

QUEUE_COLUMNS = {
    "PROPID_Q_PATHNAME": "path_name", "PROPID_Q_TYPE": "type", "PROPID_Q_LABEL": "label",
    "PROPID_Q_BASEPRIORITY": "base_priority", "PROPID_Q_JOURNAL": "journal", "PROPID_Q_QUOTA": "quota",
    "PROPID_Q_JOURNAL_QUOTA": "journal_quota", "PROPID_Q_CREATE_TIME": "create_time",
    "PROPID_Q_MODIFY_TIME": "modify_time", "PROPID_Q_SECURITY": "security", "PROPID_Q_AUTHENTICATE": "authenticate",
    "PROPID_Q_PRIV_LEVEL": "priv_level", "PROPID_Q_TRANSACTION": "transactional", "PROPID_Q_SCOPE": "scope",
}


def step_rows(qm: QueueManager) -> list[tuple[str, dict]]:
    s, rows = qm.s, []
    if qm.qm_touched or qm.outcomes:
        rows.append(("queue_managers", {"machine_id": s.machine_id, "machine_name": s.machine_name,
                                        "quota": s.quota, "journal_quota": s.journal_quota,
                                        "security": s.security, "updated_at": ts(s.updated_ms) if s.updated_ms
                                        else None}))
    for guid in sorted(qm.queues_touched):
        q = s.queues[guid]
        row = {"queue_manager": s.machine_id, "queue_guid": guid, "deleted": q.deleted,
               "last_notification": q.last_notification, "updated_at": ts(q.updated_ms)}
        row.update({col: q.attributes.get(name) for name, col in QUEUE_COLUMNS.items()})
        rows.append(("qm_queues", row))
    for o in qm.outcomes:
        rows.append(("notifications", {
            "queue_manager": s.machine_id, "message_id": o.message_id, "update_index": o.index,
            "version": o.version, "action": o.action, "object_guid": o.object_guid, "outcome": o.outcome,
            "reason": o.reason, "batch": o.batch, "arrival_at": ts(o.arrival_ms), "processed_at": ts(o.processed_ms)}))
    for b in qm.batches:
        rows.append(("notification_batches", {
            "queue_manager": s.machine_id, "batch": b.batch,
            "timer_started": ts(b.timer_started_ms) if b.timer_started_ms is not None else None,
            "fired_at": ts(b.fired_ms), "count": b.count, "refresh_all": b.refresh_all}))
    qm.outcomes, qm.batches, qm.queues_touched, qm.qm_touched = [], [], set(), False
    return rows


def directory_version(row: dict) -> tuple[str, str, Version] | None:
    """(queue manager GUID, object GUID, version) for a directory_objects row of a queue or machine."""
    if row["object_type"] == "queue":
        owner = row["properties"].get("PROPID_Q_QMID")
    elif row["object_type"] == "machine":
        owner = row["object_guid"]
    else:
        return None
    if not owner:
        return None
    return owner, row["object_guid"], Version(version_event_ms(row), row["server"], int(row["seq_number"], 16),
                                              bool(row["deleted"]), row["object_type"], row["properties"])


def version_event_ms(row: dict) -> int:
    updated = row["updated_at"]
    return int((updated if isinstance(updated, datetime) else datetime.fromisoformat(updated)).timestamp() * 1000)
