"""What a queue manager could have read: `dirstream verify` judges each attribute a queue
manager took from the directory by the replicas' versions at its read time (directory_history), not
by the authority's final value.

MS-MQCN 3.2.5.2 (Read Directory) reads the directory as it is when the queue manager processes the
notification, and a replica may lag the authority that sent the notification (MC-MQDSRP 3.1.1). So an
attribute read from the directory and not set since by a notification must be the one of the
version the replicas held at the read time: of the versions any replica had received by then, the one
with the highest sequence number (a deletion carries the deleted object's own number and comes after
it). The check is independent of the operator: it recomputes that version from the sink's history.

- the recorded read must be that version (same sequence number): an operator that read a version
  dated after its read time, or missed one dated before it, fails;
- the attribute must be that version's value: a tampered or mis-applied value fails;
- if that value differs from the authority's, the difference is explained by replica lag when a
  replica later received a version with the authority's value: listed apart, with the lag; and as
  never held by a replica when no replica held it in a version newer than the one read (the
  replicas had lost the change: the protocol's limit, which the replication check judges).
"""
import json
from dataclasses import dataclass
from datetime import datetime

from ..operators.notifications import Result
from ..operators.replication_rows import ts
from ..wire.seqnum import seq_from_hex, seq_hex

__all__ = ["epoch_ms", "HeldVersion", "ReadJudge", "ReadRecord", "ReplicaHistory"]


@dataclass(frozen=True)
class HeldVersion:
    """One version of one object as one replica held it (a directory_history row)."""
    received_ms: int
    seq: int
    deleted: bool
    server: str
    properties: dict
    version: int = 0                 # the replica's running count: the last tie-breaker (recency)

    def recency(self) -> tuple:
        """Which version a read takes: the highest sequence number, a deletion after the live version
        of the same number, then the earliest received (the change as propagated, not a copy a
        replica applied to an object that missed an earlier change), then the server's name."""
        return self.seq, self.deleted, -self.received_ms, self.server, self.version


def epoch_ms(value) -> int | None:
    """A timestamp column (datetime, or ISO text from SQLite) as epoch milliseconds."""
    if value is None:
        return None
    at = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return round(at.timestamp() * 1000)


class ReplicaHistory:
    """The replicas' versions of the queue and machine objects, by object GUID: of the copies of one
    version (same sequence number, deletion and properties) the first any replica received, since a
    read takes the most recent version received by its time and a later copy changes none."""

    def __init__(self, rows: list[dict]):
        first: dict[tuple, HeldVersion] = {}
        for r in rows:
            props = r["properties"]
            text = props if isinstance(props, str) else json.dumps(props, sort_keys=True)
            v = HeldVersion(epoch_ms(r["valid_from"]), seq_from_hex(r["seq_number"]), r["kind"] == "deleted",
                            r["server"], json.loads(text) if isinstance(props, str) else (props or {}),
                            int(r.get("version") or 0))
            key = (r["object_guid"], v.seq, v.deleted, text)
            if key not in first or (v.received_ms, v.server) < (first[key].received_ms, first[key].server):
                first[key] = v
        self.versions: dict[str, list[HeldVersion]] = {}
        for (guid, *_), v in first.items():
            self.versions.setdefault(guid, []).append(v)

    def as_of(self, guid: str, at_ms: int) -> HeldVersion | None:
        """What a read at at_ms returns: the most recent version any replica had received by then."""
        seen = [v for v in self.versions.get(guid, ()) if v.received_ms <= at_ms]
        return max(seen, key=HeldVersion.recency) if seen else None

    def ever(self, guid: str, wanted) -> bool:
        """Did any replica ever hold a live version of guid for which wanted(version) holds?"""
        return any(not v.deleted and wanted(v) for v in self.versions.get(guid, ()))

    def first_after(self, guid: str, seq: int, wanted) -> HeldVersion | None:
        """The earliest-received version newer than seq for which wanted(version) holds."""
        later = [v for v in self.versions.get(guid, ()) if v.seq > seq and wanted(v)]
        return min(later, key=lambda v: (v.received_ms, v.server)) if later else None


@dataclass
class ReadRecord:
    """One object's last read as the sink records it."""
    guid: str
    read_ms: int | None
    read_seq: int | None
    since_read: frozenset

    @classmethod
    def of_queue(cls, row: dict) -> "ReadRecord":
        return cls(row["queue_guid"], epoch_ms(row.get("read_at")), _seq(row.get("read_seq")),
                   frozenset(_json_list(row.get("since_read"))))

    @classmethod
    def of_manager(cls, row: dict) -> "ReadRecord":
        return cls(row["machine_id"], epoch_ms(row.get("qm_read_at")), _seq(row.get("qm_read_seq")),
                   frozenset(_json_list(row.get("qm_since_read"))))


def _seq(text) -> int | None:
    return seq_from_hex(text) if text else None


def _json_list(value) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        return json.loads(value)
    return list(value)


class ReadJudge:
    """Judges one object's read against the history; collects failures and lag explanations."""

    def __init__(self, history: ReplicaHistory):
        self.history = history
        self.diffs: list[str] = []
        self.stale: list[str] = []             # explained by replica lag
        self.delivered: list[str] = []         # explained by the order the notifications came in
        self.unreachable: list[str] = []       # explained by values no replica ever received
        self._checked: set[str] = set()

    def read_version(self, where: str, what: str, read: ReadRecord) -> HeldVersion | None:
        """The version the read must have used, after checking that the sink recorded that one
        (once per object); None when there was no read to judge by or it is wrong."""
        if read.read_ms is None:
            return None
        held = self.history.as_of(read.guid, read.read_ms)
        if read.guid not in self._checked:
            self._checked.add(read.guid)
            if held is None:
                self.diffs.append(f"{where}: {what} read at {ts(read.read_ms)}, before any replica held it")
            elif held.seq != read.read_seq:
                self.diffs.append(f"{where}: {what} read at {ts(read.read_ms)} used seq {_hex(read.read_seq)}, "
                                  f"but the replicas held seq {_hex(held.seq)} then ({held.server})")
        if held is None or held.seq != read.read_seq:
            return None
        return held

    def attribute(self, where: str, what: str, read: ReadRecord, propid: str, value, authority) -> bool:
        """A value that differs from the authority's: True if handled here (explained by replica lag,
        or reported against the version read), False if the caller reports the plain difference."""
        if propid in read.since_read:
            return False                              # set by a notification: no read to blame
        held = self.read_version(where, what, read)
        if held is None or held.deleted or propid not in held.properties:
            return False
        if held.properties[propid] != value:
            self.diffs.append(f"{where}: {what} {_short(propid)} is {value!r}, but the version read at "
                              f"{ts(read.read_ms)} (seq {_hex(held.seq)}) holds {held.properties[propid]!r}")
            return True                               # reported here, with what it should be
        later = self.history.first_after(read.guid, held.seq,
                                         lambda v: not v.deleted and v.properties.get(propid) == authority)
        text = f"{what} {_short(propid)} is {value!r}, the authority's {authority!r}"
        if later is None:
            # no replica held the authority's value in a newer version, ever: no read at or after this
            # one could return it. The replicas had lost the change that set it (verify's replication
            # check names it; docs/design.md, "The protocol's own limit"), in the copy the read took or in all
            # of them (an older version may have held it: a later change the authority made, then
            # the one that set it back, lost; seen in the short soak)
            elsewhere = self.history.ever(read.guid, lambda v: v.seq == held.seq
                                          and v.properties.get(propid) == authority)
            once = self.history.ever(read.guid, lambda v: v.properties.get(propid) == authority)
            self.unreachable.append(
                f"{where}: {text}: the version read at {ts(read.read_ms)} (seq {_hex(held.seq)}, first held by "
                f"{held.server}) holds {value!r}: {held.server} had lost the authority's value (the protocol's "
                f"limit, see replication)" + ("" if elsewhere else "; only an older version held it"
                                              if once else "; no replica ever held it"))
            return True
        return self._lagged(where, text, read, later)

    def extra(self, where: str, what: str, read: ReadRecord) -> bool:
        """A queue the sink holds but the authority deleted: True if it was live at the read and no
        replica had received the deletion by then (stale), or the read is reported wrong."""
        if "deleted" in read.since_read:
            return False
        held = self.read_version(where, what, read)
        if held is None:
            return False
        if held.deleted:
            self.diffs.append(f"{where}: {what} is live, but the version read at {ts(read.read_ms)} "
                              f"(seq {_hex(held.seq)}) is its deletion")
            return True
        later = self.history.first_after(read.guid, held.seq - 1, lambda v: v.deleted)
        return self._lagged(where, f"{what} is live, the authority deleted it", read, later)

    def missing(self, where: str, what: str, guid: str, refreshes: list[int],
                reads: list[tuple[str, str, int]]) -> bool:
        """A queue the authority holds but the queue manager does not: True if no read could have
        found it. Only two kinds of read add a queue to the QueueCollection: a refresh (note <3>:
        every public queue the queue manager owns, as stored in the directory when the timer
        expires; `refreshes`: when this queue manager's refreshes fired), and the read of a create
        (3.2.5.2 Event 1; a v1 create carries the queue and needs none). A read of a notification
        that named the queue and found no replica holding it waits UNRESOLVED_WAIT_MS more (`reads`:
        the action, outcome and processing time of each notification about the queue). Any other
        processing is no such read (seen in a soak: the last processing, a batch of 42
        notifications at 01:01:29, came after a replica received the queue, but only ignored a
        change of it). In a soak, replicas that fall behind the purge horizon are reset
        by sync0 (MC-MQDSRP 3.3.7.5) and hold a new queue only when it ends."""
        from ..operators.notifications import UNRESOLVED_WAIT_MS
        ends = list(refreshes)
        for action, outcome, processed_ms in reads:
            if outcome in (Result.DISCARDED, Result.DUPLICATE):
                continue
            if outcome == Result.IGNORED:                      # processed when its wait ran out, or at once
                if action.startswith("create"):
                    ends.append(processed_ms)
                # else a change (3.2.5.2 Event 2; a v1 update, 3.2.5.1) updates a queue of the
                # QueueCollection and never adds one: ignored, its read could not have found it
                # (the third hour's soak: 9 queues a change's read found as the sync0 replies came)
            elif outcome == Result.SUPERSEDED_BY_REFRESH:      # the refresh's own read of it waits
                ends.append(processed_ms + UNRESOLVED_WAIT_MS)
            else:
                return False                              # applied or still waiting: not explained here
        first = self.history.first_after(guid, -1, lambda v: not v.deleted)      # the first live version held
        if not ends or (first is not None and first.received_ms <= max(ends)):
            return False
        self.stale.append(f"{where}: missing {what}: stale by replica lag: no replica held it by "
                          f"{ts(max(ends))}, the last read that could have found it" +
                          (f"; the replica {first.server} received it at {ts(first.received_ms)}" if first else ""))
        return True

    def _lagged(self, where: str, text: str, read: ReadRecord, later: HeldVersion | None) -> bool:
        if later is None or later.received_ms <= read.read_ms:
            return False
        self.stale.append(f"{where}: {text}: stale by replica lag: {later.received_ms - read.read_ms} ms, read at "
                          f"{ts(read.read_ms)}, the replica {later.server} received the change at "
                          f"{ts(later.received_ms)}")
        return True

    # ------------------------------------------------------------ as the notifications were delivered
    def notified(self, where: str, what: str, read: ReadRecord, propid: str, value, authority, told: dict,
                 outcomes: dict) -> bool:
        """An attribute a notification set after the last read (3.2.5.1 v1 create or update): True if it
        is what the last notification delivered that set it says, and the queue manager applied
        that one (reordered notifications: the truth's `delivered` view)."""
        if read.read_ms is not None and propid not in read.since_read:
            return False
        said = told.get(propid)
        if said is None or said[0] != value or outcomes.get(said[1]) != Result.APPLIED:
            return False
        self.delivered.append(f"{where}: {what} {_short(propid)} is {value!r}, the authority's {authority!r}: as "
                              f"delivered, the last notification that set it ({said[1]}, arrival {ts(said[2])}) "
                              f"says {value!r}")
        return True

    def kept(self, where: str, what: str, guid: str, last: list | None, outcomes: dict, processed: dict) -> bool:
        """A queue the authority deleted but the queue manager holds: True if, as the notifications
        were delivered, it could not know: the last one about the queue was its creation (the
        deletion came before it), or the deletion came in a window of 100 or more that a refresh
        replaced (note <3>) while no replica held the queue (the refresh reads, as an Event 2,
        nothing to update)."""
        if last is None:
            return False
        kind, message, arrival = last
        if kind == "create":
            self.delivered.append(f"{where}: {what} is live, the authority deleted it: as delivered, the last "
                                  f"notification about it was its creation ({message}, arrival {ts(arrival)})")
            return True
        refreshed = processed.get(message)
        if outcomes.get(message) != Result.SUPERSEDED_BY_REFRESH or refreshed is None:
            return False
        if self.history.as_of(guid, refreshed) is not None:
            return False
        self.delivered.append(f"{where}: {what} is live, the authority deleted it: as delivered, its deletion "
                              f"({message}) came in a window of 100 or more notifications that a refresh replaced "
                              f"at {ts(refreshed)}, when no replica held the queue")
        return True


def _hex(seq: int | None) -> str:
    return seq_hex(seq) if seq is not None else "none"


def _short(propid: str) -> str:
    return propid.removeprefix("PROPID_").lower()
