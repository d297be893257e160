"""Sink rows for one replica after a step of the state machine (sans-IO).

Each function returns rows for the tables documented in docs/tables.md: replication_servers,
replication_partitions, directory_objects, deleted_objects, pending_changes, outbound_messages.
GUIDs are lowercase canonical text and sequence numbers 16-digit lowercase hex.
"""
import hashlib
import json
import marshal
import uuid
from collections import OrderedDict
from datetime import datetime, timezone
from functools import lru_cache
from typing import NamedTuple

from ..wire import encode, mqdsrp
from ..wire.guid import GUID_NULL
from ..wire.properties import MQDS_MACHINE, MQDS_QUEUE, OBJECT_TYPE_NAMES
from ..wire.propids import PROPIDS, propid
from ..wire.seqnum import seq_hex
from .findings import BUCKET_MS
from .server_registry import check_text, fact_text, servers_named
from .replica_store import DirObject
from .replication import PURGE_STATE_NAMES, Outbound, Replica, ReplicaOutputs

__all__ = ["deleted_rows", "detail", "finding_rows", "history_rows", "json_value", "object_rows",
           "OUTBOUND_NAMESPACE", "outbound_row", "outbound_rows", "pending_rows", "properties_json",
           "published_version", "REGISTRY", "registry_rows", "server_rows", "step_rows", "ts", "version_rows",
           "VersionRecord"]

OUTBOUND_NAMESPACE = uuid.UUID("6f0c3d1e-5a8b-4c1e-9d2f-2b7e4a9c0d11")


@lru_cache(maxsize=1 << 16)
def ts(ms: int) -> str:
    """Event time as ISO-8601 text with milliseconds in UTC, as datetime.isoformat gives it
    (memoised: a step stamps many rows with the same time), built from the second's text (also
    memoised: a notification window's rows each have their own arrival time, within few seconds)."""
    second, millis = divmod(ms, 1000)
    return f"{_second_text(second)}.{millis:03d}+00:00"


@lru_cache(maxsize=1 << 12)
def _second_text(second: int) -> str:
    return datetime.fromtimestamp(second, timezone.utc).isoformat(timespec="seconds")[:-len("+00:00")]


def json_value(value):
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value


_PROPID_NAMES = {k: name for k, (name, _type) in PROPIDS.items()}


def properties_json(props: dict[int, object]) -> dict[str, object]:
    names = _PROPID_NAMES
    return {names[k]: (v.hex() if isinstance(v, (bytes, bytearray)) else v) for k, v in props.items() if k in names}


def server_rows(r: Replica) -> list[tuple[str, dict]]:
    s, now = r.state, ts(r.state.now_ms)
    rows = [("replication_servers", {
        "server": s.name, "role": r.role(), "site_id": s.site_id, "psc_name": s.my_psc_name,
        "pec_name": r.enterprise().authority or None, "psc_neighbors": sorted(s.psc_neighbors),
        "bsc_neighbors": sorted(s.bsc_neighbors), "deleted_objects": len(s.deleted),
        "forwarded_requests": len(s.forwarded), "updated_at": now})]
    for p in s.partitions.values():
        rows.append(("replication_partitions", {
            "server": s.name, "partition_id": p.partition_id, "authority": p.authority,
            "owned": r.owns(p), "last_seq": seq_hex(p.last_seq), "purged_seq": seq_hex(p.purged_seq),
            "allowed_purge_seq": seq_hex(p.allowed_purge_seq), "purge_state": PURGE_STATE_NAMES[p.purge_state],
            "pending_count": len(p.pending), "change_missing_window": seq_hex(p.change_missing_window),
            "seen_seq": seq_hex(p.seen_seq), "last_change_at": ts(p.last_change_ms) if p.last_change_ms else None,
            "updated_at": now}))
    return rows


def object_rows(r: Replica, touched: dict[str, DirObject | None], removed: dict[str, DirObject],
                touched_at: dict[str, int]) -> list:
    """updated_at is the event time of the object's last change (the MQCN operator reads the
    directory "as of" a time from these rows)."""
    return [("directory_objects", _object_row(r, guid, obj or removed[guid], obj is None,
                                              touched_at.get(guid, r.state.now_ms)))
            for guid, obj in touched.items()]


# The object types whose versions the MQCN operator reads (MQCN 3.2.5: queues and the queue manager).
_Q_QMID, _QM_QUOTA = propid("Q_QMID"), propid("QM_QUOTA")


class VersionRecord(NamedTuple):
    """A directory version as the replication query publishes it for the MQCN operator."""
    owner: str                  # the owning queue manager's GUID: the record's key
    first_key: str              # what FirstArrivals compares ("": always passed on)
    event_ms: int
    text: str                   # the record's value: the directory_objects row as JSON

    def encode(self) -> str:
        """One line for the trip from the operator to the writer (JSON text has no raw tab)."""
        return f"{self.owner}\t{self.first_key}\t{self.event_ms}\t{self.text}"

    @classmethod
    def decode(cls, line: str) -> "VersionRecord":
        owner, key, ms, text = line.split("\t", 3)
        return cls(owner, key, int(ms), text)


def version_rows(r: Replica, versions: list, contents: list) -> list:
    """Every version the step produced, in order (pseudo-table object_versions: published for the
    MQCN operator, not a sink table): its reads are "as of" a time, so a batch of this operator must
    not fold an object's versions into its last one, or the result would depend on the batching.
    Only queues and machines with an owner, as VersionRecords (published_version). contents: each
    version's _content, computed once by step_rows for this and history_rows."""
    rows, name = [], json.dumps(r.name)
    for (_guid, obj, _removed, at, _kind), content in zip(versions, contents):
        if obj.object_type in (MQDS_QUEUE, MQDS_MACHINE):
            record = _published(name, content, at)
            if record is not None:
                rows.append(("object_versions", record))
    return rows


def history_rows(r: Replica, versions: list, contents: list) -> list:
    """directory_history: every version of every object as this replica held it, numbered by the
    replica's running count (so versions at the same event time keep their order). The object's
    part is memoised by content, as published_version's, with `properties` as its JSON text with
    sorted keys, as the sink stores it (the one column of these rows that is not a Python value).
    valid_to is the sink's: the valid_from of the object's next version on this replica
    (Table.successor)."""
    rows = []
    for (_guid, _obj, _removed, at, kind), content in zip(versions, contents):
        r.state.versions_recorded += 1
        rows.append(("directory_history", {"server": r.name, "version": r.state.versions_recorded, "kind": kind,
                                           "valid_from": ts(at), **content[3]}))
    return rows


# The replicas apply one version within seconds of each other: the memo only needs the recent ones.
# It forgets the oldest first; 200,000 entries (about 1.5 KB each) kept each Python worker growing
# for 45 minutes of the soak before it emptied at once.
_CONTENT_MEMO: OrderedDict[bytes, tuple[str | None, str, str, dict]] = OrderedDict()
_CONTENT_MEMO_SIZE = 20_000


def published_version(server: str, guid: str, obj: DirObject, deleted: bool, at_ms: int) -> VersionRecord | None:
    """The VersionRecord of a queue or machine version with an owner (else None), its text exactly
    json.dumps(_object_row(...)) (notification_rows.version_record is the reference built from that
    row; a test keeps them equal)."""
    return _published(json.dumps(server), _content(guid, obj, deleted), at_ms)


def _published(server_json: str, content: tuple, at_ms: int) -> VersionRecord | None:
    owner, first_key, middle, _fields = content
    if owner is None:
        return None
    text = f'{{"server": {server_json}, {middle}, "updated_at": "{ts(at_ms)}"}}'
    return VersionRecord(owner, first_key, _event_ms(at_ms), text)


def _content(guid: str, obj: DirObject, deleted: bool) -> tuple[str | None, str, str, dict]:
    """(owner, FirstArrivals key, the row's JSON members between server and updated_at, the history
    row's object columns); the owner is None but for a queue or machine that has one, and then the
    row's members are "" (only owned versions are published). Every replica applies the same
    version, so this replica-independent part is memoised per process by the object's content."""
    content = (guid, obj.partition_id, obj.object_type, obj.path_name, obj.seq_number, deleted, obj.properties)
    try:
        key = marshal.dumps(content)
    except ValueError:                      # a value marshal cannot write: no memo
        return _content_part(guid, obj, deleted)
    part = _CONTENT_MEMO.get(key)
    if part is None:
        part = _content_part(guid, obj, deleted)
        _CONTENT_MEMO[key] = part
        while len(_CONTENT_MEMO) > _CONTENT_MEMO_SIZE:
            _CONTENT_MEMO.popitem(last=False)
    return part


@lru_cache(maxsize=1 << 16)
def _event_ms(at_ms: int) -> int:
    """The time the MQCN operator reads from the published text (notification_rows.version_event_ms
    of ts(at_ms)): exactly as the reference computes it."""
    return int(datetime.fromisoformat(ts(at_ms)).timestamp() * 1000)


def _content_part(guid: str, obj: DirObject, deleted: bool) -> tuple[str | None, str, str, dict]:
    props = properties_json(obj.properties)
    fields = {"object_guid": guid, "partition_id": obj.partition_id,
              "object_type": OBJECT_TYPE_NAMES.get(obj.object_type, str(obj.object_type)), "path_name": obj.path_name,
              "seq_number": seq_hex(obj.seq_number), "properties": json.dumps(props, sort_keys=True, default=str)}
    if obj.object_type == MQDS_QUEUE:
        owner = json_value(obj.properties.get(_Q_QMID)) or None
    elif obj.object_type == MQDS_MACHINE:
        owner = guid or None
    else:
        owner = None
    if owner is None:                       # not published: no row text to build
        return None, "", "", fields
    middle = json.dumps({"object_guid": guid, "partition_id": obj.partition_id,
                         "object_type": fields["object_type"], "path_name": obj.path_name,
                         "seq_number": fields["seq_number"], "deleted": deleted, "properties": props}, default=str)
    quota_unknown = obj.object_type == MQDS_MACHINE and obj.properties.get(_QM_QUOTA) is None
    first_key = "" if quota_unknown else hashlib.blake2b(middle.encode(), digest_size=16).hexdigest()
    return owner, first_key, middle[1:-1], fields


def _object_row(r: Replica, guid: str, obj: DirObject, deleted: bool, at_ms: int) -> dict:
    return {"server": r.name, "object_guid": guid, "partition_id": obj.partition_id,
            "object_type": OBJECT_TYPE_NAMES.get(obj.object_type, str(obj.object_type)), "path_name": obj.path_name,
            "seq_number": seq_hex(obj.seq_number), "deleted": deleted, "properties": properties_json(obj.properties),
            "updated_at": ts(at_ms)}


def deleted_rows(r: Replica, outputs: ReplicaOutputs) -> list:
    """updated_at is the event time of the entry's last change (not the micro-batch's last event)."""
    return [("deleted_objects", {
        "server": r.name, "identifier": ident, "partition_id": d.partition_id, "seq_number": seq_hex(d.seq_number),
        "object_type": OBJECT_TYPE_NAMES.get(d.object_type, str(d.object_type)), "scope": d.scope, "status": status,
        "updated_at": ts(at)}) for ident, (d, status, at) in outputs.deleted_touched.items()]


def pending_rows(r: Replica, outputs: ReplicaOutputs) -> list:
    latest = {}
    for e in outputs.pending_events:                     # the last status of each change wins
        latest[(e.partition_id, e.change.seq_number)] = e
    return [("pending_changes", {
        "server": r.name, "partition_id": pid, "seq_number": seq_hex(seq),
        "previous_seq_number": seq_hex(e.change.previous_seq_number),
        "command": mqdsrp.COMMANDS.get(e.change.command, str(e.change.command)),
        "object": e.change.guid_identifier or e.change.path_name, "status": e.status, "updated_at": ts(e.at_ms)})
        for (pid, seq), e in latest.items()]


def outbound_rows(r: Replica, outputs: ReplicaOutputs, batch_ms: int, id_scope: str = "") -> list:
    """Message ids are uuid5 of (scope, server, running count): the same after a replay from the
    checkpoint, and distinct between jobs whose scope (the checkpoint's query id) differs."""
    rows = []
    for o in outputs.sent:
        r.state.messages_sent += 1
        message_id = str(uuid.uuid5(OUTBOUND_NAMESPACE, f"{id_scope}:{r.name.lower()}:{r.state.messages_sent}"))
        rows.append(("outbound_messages", outbound_row(r, o, message_id, o.sent_ms if o.sent_ms is not None
                                                       else batch_ms)))
    return rows


def outbound_row(r: Replica, o: Outbound, message_id: str, sent_ms: int) -> dict:
    if o.body is not None:
        body = o.body
        operation = "resend" if o.message is None else type(o.message).__name__.removesuffix("Message")
    else:
        site = o.site_id if o.sent_ms is not None else r.state.site_id
        body = encode("mqdsrp", mqdsrp.new_message(site or GUID_NULL, o.message))
        operation = type(o.message).__name__.removesuffix("Message")
    return {"message_id": message_id, "server": r.name, "destination": o.destination, "operation": operation,
            "reason": o.reason, "partition_id": o.partition_id, "detail": detail(o), "body": body.hex(),
            "sent_at": ts(sent_ms)}


def detail(o: Outbound) -> dict:
    m = o.message
    if isinstance(m, mqdsrp.SyncRequestMessage):
        return {"from_seq": seq_hex(m.from_seq_number), "to_seq": seq_hex(m.to_seq_number),
                "known_purged_seq": seq_hex(m.known_purged_seq_number), "is_sync0": m.is_sync0, "scope": m.scope}
    if isinstance(m, mqdsrp.PSCAckMessage):
        return {"acked_partition_id": m.acked_partition_id, "acked_seq": seq_hex(m.acked_seq_number)}
    if isinstance(m, mqdsrp.ChangePropagationMessage):
        return {"flush": m.flush, "count": m.count,
                "seq_numbers": [seq_hex(c.seq_number) for c in m.directory_changes][:20]}
    if isinstance(m, mqdsrp.ChangeReplyMessage):
        return {"request_identifier": m.request_identifier, "result": m.result, "status": o.status,
                "requester": m.requester_name}
    if isinstance(m, mqdsrp.ChangeRequestMessage):
        return {"request_identifier": m.change_request_header.request_identifier,
                "requester": m.change_request_header.requester_name}
    return {}


REGISTRY = "server_registry"        # facts and checks for the server registry (not a sink table)


def finding_rows(r: Replica) -> list:
    """The findings touched since the last step; then those of buckets an hour behind the replica's
    clock are forgotten (a message that old is behind the watermark: Spark drops it as late)."""
    if r.state.findings is None:
        return []
    rows = r.state.findings.rows()
    r.state.findings.forget(r.state.now_ms - BUCKET_MS)
    return rows


def registry_rows(r: Replica, outputs: ReplicaOutputs, versions: list) -> list[tuple[str, dict]]:
    """What the server registry learns from a step (streaming.operators.server_registry): the
    directory servers its stored objects name, each at the earliest time of the step it was stored
    at, and the senders the replica did not know itself."""
    named: dict[str, int] = {}
    for _guid, obj, removed, at, _kind in versions:
        if not removed:
            for name in servers_named(obj.object_type, obj.properties):
                named[name] = min(named.get(name, at), at)
    rows = [(REGISTRY, {"event_ms": at, "text": fact_text(name)}) for name, at in sorted(named.items())]
    rows += [(REGISTRY, {"event_ms": c.at_ms, "text": check_text(c)}) for c in outputs.checks]
    return rows


def step_rows(r: Replica, batch_ms: int, id_scope: str = "") -> list[tuple[str, dict]]:
    """Every sink row one step produced, and what it hands on (REGISTRY); takes the step's collected
    changes and outputs."""
    touched, removed, touched_at = r.store.take_changes()
    versions = r.store.take_versions()
    outputs = r.take_outputs()
    contents = [_content(guid, obj, removed) for guid, obj, removed, _at, _kind in versions]   # once each
    rows = (server_rows(r) + object_rows(r, touched, removed, touched_at) + version_rows(r, versions, contents)
            + history_rows(r, versions, contents) + deleted_rows(r, outputs) + pending_rows(r, outputs)
            + outbound_rows(r, outputs, batch_ms, id_scope) + finding_rows(r) + registry_rows(r, outputs, versions))
    return rows
