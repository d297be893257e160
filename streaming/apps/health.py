"""The job's and the directory's health as the sink tables tell it: one computation that the
dashboard shows and the Prometheus metrics export (docs/monitoring.md, "Metrics"), so the
two never disagree.

Pure functions over rows read through a SinkReader; event times are the sink's timestamps."""
from dataclasses import dataclass
from datetime import datetime, timezone

from ..operators import replication
from ..operators.replication import PurgeState
from ..sinks import as_bool
from ..wire.seqnum import seq_hex

__all__ = ["dead_letter_counts", "discovery_outcomes", "epoch_s", "finding_counts", "INITIAL_WINDOW", "NO_WINDOW",
           "PURGE_STATES", "query_summary", "queue_manager_health", "queue_managers", "QueueManagerHealth",
           "reason_class", "replica_clock", "replica_health", "ReplicaHealth", "replicas", "SYNC0_STATES"]

PURGE_STATES = tuple(state.label for state in PurgeState)        # replication_partitions.purge_state
SYNC0_STATES = tuple(state.label for state in PurgeState if state != PurgeState.NORMAL)
# replication_partitions.change_missing_window's two marks (MC-MQDSRP 3.1.1.2.3)
NO_WINDOW, INITIAL_WINDOW = seq_hex(replication.NO_WINDOW), seq_hex(replication.INITIAL_SYNC_WINDOW)


def epoch_s(value) -> float | None:
    """A sink timestamp (ISO text in SQLite, a datetime in PostgreSQL) as Unix seconds."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


# ---------------------------------------------------------------------- replicas
@dataclass(frozen=True)
class ReplicaHealth:
    server: str
    partition_id: str
    health: str                       # the dashboard's category (HEALTH_COLOURS)
    owned: bool
    last_seq: int
    purged_seq: int
    authority_seq: int                # the highest SeqNumber the authority is known to have issued
    pending: int
    purge_state: str
    sync_outstanding: bool            # a sync request awaits its reply (ChangeMissingWindow != 0)
    last_change_s: float | None       # event time LastSeqNumber last moved
    seconds_since_last_change: float | None      # the directory's event clock minus last_change_s

    @property
    def lag(self) -> int:
        return 0 if self.owned else max(self.authority_seq - self.last_seq, 0)


def replica_health(parts: list[dict]) -> list[ReplicaHealth]:
    """Every replica (a server's copy of a partition) from replication_partitions rows. The authority's
    highest sequence number is what any replica applied (the authority issued it) or saw announced in a
    change or a SeqNumberHeader; the directory's clock is the newest event time a replica reached."""
    issued: dict[str, int] = {}
    for p in parts:
        if not as_bool(p["owned"]):
            seen = max(int(p["last_seq"], 16), int(p.get("seen_seq") or NO_WINDOW, 16))
            issued[p["partition_id"]] = max(issued.get(p["partition_id"], 0), seen)
    clock = max((epoch_s(p["updated_at"]) or 0.0 for p in parts), default=0.0)
    out = []
    for p in parts:
        last_change = epoch_s(p.get("last_change_at"))
        out.append(ReplicaHealth(
            p["server"], p["partition_id"], _category(p, issued.get(p["partition_id"], 0)), as_bool(p["owned"]),
            int(p["last_seq"], 16), int(p["purged_seq"], 16), issued.get(p["partition_id"], 0), p["pending_count"] or 0,
            p["purge_state"], not as_bool(p["owned"]) and p["change_missing_window"] != NO_WINDOW, last_change,
            None if last_change is None else max(clock - last_change, 0.0)))
    return out


def _category(p: dict, issued: int) -> str:
    if as_bool(p["owned"]):
        return "own partition"
    if p["purge_state"] in SYNC0_STATES:
        return "sync0"
    if p["change_missing_window"] == INITIAL_WINDOW:
        return "initial sync outstanding"
    if int(p["purged_seq"], 16) > int(p["last_seq"], 16):
        return "behind the purge horizon"
    if p["change_missing_window"] != NO_WINDOW:
        return "gap being resynced"
    if p["pending_count"]:
        return "pending changes"
    return "in sync" if int(p["last_seq"], 16) >= issued else "pending changes"


def replicas(reader) -> list[ReplicaHealth]:
    return replica_health(reader.query("replication_partitions",
                                       "SELECT * FROM replication_partitions ORDER BY server, partition_id"))


# ---------------------------------------------------------------------- queue managers
@dataclass(frozen=True)
class QueueManagerHealth:
    machine_id: str
    machine_name: str | None
    waiting: int                      # notifications in the batching window
    unresolved: int                   # notifications' reads waiting for the object to appear
    last_processed_s: float | None
    seconds_since_last_processing: float | None


def queue_manager_health(managers: list[dict], clock_s: float | None) -> list[QueueManagerHealth]:
    """clock_s: the directory's event clock (replica_clock); without replication traffic, the newest
    processing of any queue manager."""
    processed = {m["machine_id"]: epoch_s(m.get("last_processed_at")) for m in managers}
    clock = clock_s or max((t for t in processed.values() if t is not None), default=None)
    return [QueueManagerHealth(m["machine_id"], m["machine_name"], m.get("notifications_waiting") or 0,
                               m.get("unresolved_reads") or 0, processed[m["machine_id"]],
                               None if clock is None or processed[m["machine_id"]] is None
                               else max(clock - processed[m["machine_id"]], 0.0)) for m in managers]


def queue_managers(reader, clock_s: float | None = None) -> list[QueueManagerHealth]:
    return queue_manager_health(reader.query("queue_managers", "SELECT * FROM queue_managers ORDER BY machine_id"),
                                clock_s)


def replica_clock(reader) -> float | None:
    rows = reader.query("replication_partitions", "SELECT MAX(updated_at) AS clock FROM replication_partitions")
    return epoch_s(rows[0]["clock"]) if rows else None


# ---------------------------------------------------------------------- the job
def query_summary(reader) -> list[dict]:
    """Per query (pipeline_progress.query_name): batches, input and late rows over all batches, and
    the latest batch's state rows, state memory, timers, duration, lag and end offsets."""
    totals = reader.query("pipeline_progress", "SELECT COALESCE(query_name, 'dirstream') AS query, "
                          "COUNT(*) AS batches, SUM(input_rows) AS input_rows, "
                          "SUM(COALESCE(late_rows, 0)) AS late_rows, MAX(finished_at) AS finished_at "
                          "FROM pipeline_progress GROUP BY COALESCE(query_name, 'dirstream')")
    out = []
    for t in sorted(totals, key=lambda r: r["query"]):
        last = reader.query("pipeline_progress", "SELECT * FROM pipeline_progress WHERE COALESCE(query_name, "
                            "'dirstream') = ? ORDER BY finished_at DESC, batch_id DESC LIMIT 1", (t["query"],))[0]
        out.append({"query": t["query"], "batches": t["batches"], "input_rows": t["input_rows"] or 0,
                    "late_rows": t["late_rows"] or 0, "state_rows": last.get("state_rows"),
                    "state_memory_bytes": last.get("state_memory_bytes"), "timers_fired": last.get("timers_fired"),
                    "last_batch_ms": last["duration_ms"], "finished_at": t["finished_at"],
                    "total_lag": last.get("total_lag"), "end_offsets": last.get("end_offsets")})
    return out


def reason_class(row: dict) -> str:
    """A dead letter's reason as a bounded word: the wire structure and field that failed, or the
    exception an operator raised (the full text stays in dead_letters.error_reason)."""
    if row.get("error_structure"):
        return f"{row['error_structure']}.{row.get('error_field') or ''}".rstrip(".")
    reason = row.get("error_reason") or row.get("error") or ""
    head = reason.split(":", 1)[0].strip()
    return head if head.isidentifier() else "other"


def dead_letter_counts(reader) -> dict[tuple[str, str], int]:
    """Dead letters by (stage, reason class); stage 'decode' for the raw query's. Wire errors are
    counted in SQL; the rest (an operator's exceptions: rare) row by row."""
    wire = reader.query("dead_letters", "SELECT stage, error_structure, error_field, COUNT(*) AS n FROM dead_letters "
                        "WHERE error_structure IS NOT NULL GROUP BY stage, error_structure, error_field")
    other = reader.query("dead_letters", "SELECT stage, error_reason, error FROM dead_letters "
                         "WHERE error_structure IS NULL")
    out: dict[tuple[str, str], int] = {}
    for r in wire + [dict(r, n=1) for r in other]:
        key = (r["stage"] or "decode", reason_class(r))
        out[key] = out.get(key, 0) + r["n"]
    return out


def discovery_outcomes(reader) -> dict[str, int]:
    """discovery_requests by outcome (local-site, remote-site, no-reply)."""
    rows = reader.query("discovery_requests", "SELECT outcome, COUNT(*) AS n FROM discovery_requests GROUP BY outcome")
    return {r["outcome"]: r["n"] for r in rows}


def finding_counts(reader) -> dict[tuple[str, str], int]:
    """Security findings: messages per (kind, severity) so far, every known kind present (0 before
    its first finding, so that an alert on its increase sees the first one)."""
    from ..operators.findings import KINDS
    rows = reader.query("security_findings", "SELECT kind, severity, SUM(count) AS n FROM security_findings "
                                             "GROUP BY kind, severity")
    out = {(kind, severity): 0 for kind, (severity, _why) in KINDS.items()}
    for r in rows:
        out[(r["kind"], r["severity"])] = int(r["n"] or 0)
    return out
