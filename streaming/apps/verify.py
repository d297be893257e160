"""`dirstream verify`: compare the sink with the simulator's ground truth and print every difference."""
import argparse
import json
import sys

from ..operators.notifications import Result
from ..operators.server_registry import DECIDE_AFTER_MS
from ..sinks import as_bool, open_sink
from .verify_reads import ReadJudge, ReadRecord, ReplicaHistory, epoch_ms

__all__ = ["check_discovery", "check_findings", "CHECK_FUNCTIONS", "check_notifications", "check_replication",
           "CHECK_SECTIONS", "CHECKS", "cmd_verify", "compare_discovery", "compare_findings",
           "compare_notifications", "compare_replication", "lost_values", "NAMED_TYPES", "register",
           "REGISTRY_KINDS", "V1_COMPARED", "V2_COMPARED", "WATERMARK_DELAY_MS"]

CHECKS = ("discovery", "replication", "notifications", "findings")


def register(sub) -> None:
    v = sub.add_parser("verify", help="compare the sink tables with a simulated run's ground truth",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Compare the sink tables with a simulated run's ground truth.\n\n"
                                   "Prints every difference (missing, extra, different value); exits 1 if any.",
                       epilog="example:\n"
                              "  dirstream verify --truth var/truth.json --sink sqlite:///var/dirstream.db\n"
                              "  dirstream verify --truth var/truth.json --sink sqlite:///var/dirstream.db "
                              "--only replication")
    v.add_argument("--truth", required=True, help="ground truth from `dirstream produce simulate --truth`")
    v.add_argument("--sink", required=True, help="the job's sink URL")
    v.add_argument("--only", choices=CHECKS, action="append", help="run only these checks (repeatable)")
    v.add_argument("--strict-authority", action="store_true",
                   help="judge queue managers by the authority's final values alone, not by what they could "
                        "read from the replicas (directory_history) at their read times")
    v.set_defaults(func=cmd_verify)


# the truth's sections each check reads (a long run's truth is read a check at a time)
CHECK_SECTIONS = {"discovery": ("discovery",), "replication": ("servers", "partitions", "unreachable", "set_by"),
                  "notifications": ("queue_managers", "discarded_notifications"),
                  "findings": ("attacks", "last_arrival_ms")}


def cmd_verify(args) -> int:
    from .verify_progress import VerifyProgress, truth_reader
    checks = args.only or CHECKS
    progress = VerifyProgress(checks)
    sink = progress.watching(open_sink(args.sink, create=False))      # a reader: SELECT is enough
    try:
        read = truth_reader(args.truth)
    except OSError as exc:
        sink.close()
        print(f"dirstream verify: cannot read the truth file {args.truth}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        total = 0
        for name in checks:
            progress.check(name)
            truth = read(CHECK_SECTIONS[name], progress.reading_truth)
            if name == "notifications":
                differences, summary, stale = check_notifications(truth, sink, args.strict_authority)
            elif name == "replication":
                differences, summary, stale = check_replication(truth, sink, args.strict_authority)
            else:
                (differences, summary), stale = CHECK_FUNCTIONS[name](truth, sink), []
            for d in differences:
                print(f"{name}: {d}")
            if stale:
                print(f"{name}: " + ("explained by what the queue manager could see (replica lag, the order the "
                                     "notifications came in, values no replica received; not failures):"
                                     if name == "notifications" else
                                     "explained by the protocol's own limit (a change lost with a dropped "
                                     "propagation, or dropped or discarded as stale while pending, that a later "
                                     "change of the object keeps out of every sync reply, MC-MQDSRP 3.2.7.3; "
                                     "not failures):"))
                for d in stale:
                    print(f"{name}:   {d}")
            progress.done(name)
            print(f"{name}: {summary}, {len(differences)} differences", flush=True)
            total += len(differences)
    finally:
        progress.close()
        sink.close()
    return 1 if total else 0


def check_findings(truth: dict, sink) -> tuple[list[str], str]:
    return compare_findings(truth, sink.query("SELECT kind, source, target, count FROM security_findings"))


REGISTRY_KINDS = ("dsrp-unknown-sender", "mqsd-rogue-reply")     # decided by the server registry
WATERMARK_DELAY_MS = 10_000                   # the job's (streaming.spark.job_query.WATERMARK_DELAY)


def compare_findings(truth: dict, rows: list[dict]) -> tuple[list[str], str]:
    """security_findings against the attacks the truth lists (produce simulate --attack, and the
    --unauthenticated fault): each found by kind, source and target as often as injected (a flood at
    least once: what it counts is past the job's --flood-per-minute); nothing else found."""
    from collections import Counter
    if "attacks" not in truth:
        return [], "the truth lists no attacks (an earlier simulator's): not checked"
    injected: Counter = Counter()
    undecided: Counter = Counter()       # within the server registry's grace of the traffic's end
    end = truth.get("last_arrival_ms")
    for a in truth["attacks"]:
        key = (a["kind"], a["source"] or "(unknown)", a["target"])
        injected[key] += 1
        if a["kind"] in REGISTRY_KINDS and (end is None or a["arrival_ms"] + DECIDE_AFTER_MS + WATERMARK_DELAY_MS > end):
            undecided[key] += 1
    found: Counter = Counter()
    for r in rows:
        found[(r["kind"], r["source"], r["target"])] += int(r["count"])
    diffs = []
    for (kind, source, target), n in sorted(injected.items()):
        got, pending = found.get((kind, source, target), 0), undecided[(kind, source, target)]
        if got == 0 and pending < n:
            diffs.append(f"{kind} from {source} to {target}: injected {n} times, not found")
        elif not n - pending <= got <= n and kind != "mqcn-flood":
            diffs.append(f"{kind} from {source} to {target}: injected {n} times, found {got}")
    for (kind, source, target), n in sorted(found.items()):
        if (kind, source, target) not in injected:
            diffs.append(f"{kind} from {source} to {target}: {n} messages found, no attack injected")
    waiting = f", {sum(undecided.values())} within the last {DECIDE_AFTER_MS // 1000} s of the traffic (decided " \
              f"once the clock passes them by that much: counted if found)" if undecided else ""
    return diffs, f"{sum(injected.values())} attacks injected, {len(found)} findings (kind, source, target){waiting}"


def _json(value):
    return json.loads(value) if isinstance(value, str) else value


def check_discovery(truth: dict, sink) -> tuple[list[str], str]:
    return compare_discovery(truth, sink.query("SELECT * FROM discovery_requests"))


def compare_discovery(truth: dict, requests: list[dict]) -> tuple[list[str], str]:
    """Each request's outcome, directory servers and connected networks (MS-MQSD 3.1.5.2), as its
    client saw the traffic delivered (the truth follows the faults)."""
    expected = truth["discovery"]
    rows = {r["request_id"]: r for r in requests}
    diffs = []
    for rid, exp in sorted(expected.items()):
        got = rows.get(rid)
        if got is None:
            diffs.append(f"missing request {rid} (expected {exp['outcome']})")
            continue
        for field in ("outcome", "directory_servers", "connected_networks"):
            value = got[field] if field == "outcome" else _json(got[field])
            if value != exp[field]:
                diffs.append(f"request {rid}: {field} is {value!r}, expected {exp[field]!r}")
    for rid in sorted(set(rows) - set(expected)):
        diffs.append(f"extra request {rid} ({rows[rid]['outcome']})")
    return diffs, f"{len(expected)} requests"


def check_replication(truth: dict, sink, strict: bool = False) -> tuple[list[str], str, list[str]]:
    """Every directory server's replica of every partition it does not own (MC-MQDSRP 3.1.1):
    (differences, summary, differences the protocol's own limit explains; none when strict)."""
    explained: list[str] | None = None if strict else []
    diffs, summary = compare_replication(
        truth, sink.query("SELECT * FROM directory_objects"), sink.query("SELECT * FROM deleted_objects"),
        sink.query("SELECT * FROM replication_partitions"), explained,
        sink.query("SELECT server, partition_id, seq_number FROM pending_changes "
                   "WHERE status IN ('dropped', 'stale')"))
    if explained:
        summary += f", {len(explained)} values lost to the protocol's limit"
    return diffs, summary, explained or []


NAMED_TYPES = ("queue", "machine", "site")      # types whose path name is an immutable property


def compare_replication(truth: dict, objects: list[dict], deleted: list[dict], partitions: list[dict],
                        explained: list[str] | None = None, dropped_pending: list[dict] = ()):
    """Differences between replicas (sink rows) and the authorities' final partitions (truth).

    Live objects must match exactly: type, sequence number, every property, and the path name of
    queues, machines and sites. Each deleted object the authority still keeps must be deleted
    here too; a replica may keep more, but only below the authority's purge horizon (it purges
    later, bounded by what the authority allows: 3.1.7.2.9).

    With `explained` (a list), a missing object whose creation, or a property whose last value, the
    server could not get goes there instead of into the differences (docs/design.md, "The
    protocol's own limit"): the change was lost with a dropped propagation (the truth's
    `unreachable`), dropped from the server's full pending collection (3.1.7.2.2), or held pending and discarded as stale once a
    sync reply moved LastSeqNumber past it (`dropped_pending`: pending_changes rows with status
    dropped or stale), and a later change of the object keeps it out of every sync reply (3.2.7.3:
    an authority answering after that change leaves the object out of the window)."""
    live, gone, parts = {}, {}, {}
    for o in objects:
        if not as_bool(o["deleted"]):
            live.setdefault((o["server"], o["partition_id"]), {})[o["object_guid"]] = o
    for d in deleted:
        if d["status"] == "deleted":
            gone.setdefault((d["server"], d["partition_id"]), {})[d["identifier"]] = d
    for p in partitions:
        parts[(p["server"], p["partition_id"])] = p
    diffs, compared = [], 0
    for server, info in sorted(truth["servers"].items()):
        for pid in info["replicates"]:
            expected, key = truth["partitions"][pid], (server, pid)
            where = f"{server} partition {pid}"
            part = parts.get(key)
            if part is None:
                diffs.append(f"{where}: missing partition")
                continue
            compared += 1
            if part["last_seq"] != expected["last_seq_number"]:
                diffs.append(f"{where}: last_seq {part['last_seq']}, expected {expected['last_seq_number']}")
            if part["purge_state"] != "normal":
                diffs.append(f"{where}: purge_state {part['purge_state']}")
            lost = lost_values(truth, server, pid, dropped_pending) if explained is not None else {}
            diffs += _object_diffs(where, expected["objects"], live.get(key, {}), lost, explained)
            diffs += _deleted_diffs(where, expected, gone.get(key, {}))
    return diffs, f"{compared} replicas"


def lost_values(truth: dict, server: str, pid: str, dropped_pending) -> dict[str, dict]:
    """Object GUID -> {"created": bool, "properties": names}: what `server` could not get of partition
    `pid`, lost in transit, dropped from its full pending collection, or discarded as stale."""
    out = {guid: {"created": v["created"], "properties": set(v["properties"])}
           for guid, v in truth.get("unreachable", {}).get(server, {}).items()}
    dropped = {d["seq_number"] for d in dropped_pending if d["server"] == server and d["partition_id"] == pid}
    set_by = truth.get("set_by", {})
    for guid in truth["partitions"][pid]["objects"] if dropped else ():
        setters = set_by.get(guid)
        if setters is None:
            continue
        entry = out.setdefault(guid, {"created": False, "properties": set()})
        entry["created"] |= setters["created"] in dropped
        entry["properties"] |= {name for name, seq in setters["properties"].items() if seq in dropped}
    return out


def _object_diffs(where: str, expected: dict, got: dict, lost: dict | None = None,
                  explained: list[str] | None = None) -> list[str]:
    """The differences; those `lost` names (object GUID -> {"created", "properties"}: what the server
    could not get) go to `explained` instead."""
    diffs, lost = [], lost or {}
    for guid, exp in expected.items():
        row = got.get(guid)
        gone = lost.get(guid, {})
        if row is None:
            (explained if gone.get("created") else diffs).append(
                f"{where}: missing {exp['object_type']} {guid} ({exp['path_name']})")
            continue
        if row["object_type"] != exp["object_type"]:
            diffs.append(f"{where}: {guid} is a {row['object_type']}, expected {exp['object_type']}")
        if row["seq_number"] != exp["seq_number"]:
            diffs.append(f"{where}: {guid} seq_number {row['seq_number']}, expected {exp['seq_number']}")
        if exp["object_type"] in NAMED_TYPES and row["path_name"] != exp["path_name"]:
            diffs.append(f"{where}: {guid} path_name {row['path_name']!r}, expected {exp['path_name']!r}")
        props = _json(row["properties"])
        for name in sorted(set(props) | set(exp["properties"])):
            if props.get(name) != exp["properties"].get(name):
                (explained if name in gone.get("properties", ()) else diffs).append(
                    f"{where}: {guid} {name} is {props.get(name)!r}, expected {exp['properties'].get(name)!r}")
    for guid in sorted(set(got) - set(expected)):
        diffs.append(f"{where}: extra {got[guid]['object_type']} {guid} ({got[guid]['path_name']})")
    return diffs


def _deleted_diffs(where: str, expected: dict, got: dict) -> list[str]:
    diffs, horizon = [], expected["purged_seq_number"]
    wanted = {d["identifier"]: d for d in expected["deleted_objects"]}
    for ident, d in wanted.items():
        if ident not in got:
            diffs.append(f"{where}: deleted object {ident} (seq {d['seq_number']}) not recorded")
        elif got[ident]["seq_number"] != d["seq_number"]:
            diffs.append(f"{where}: deleted object {ident} seq {got[ident]['seq_number']}, expected {d['seq_number']}")
    for ident, row in got.items():
        if ident not in wanted and row["seq_number"] > horizon:
            diffs.append(f"{where}: extra deleted object {ident} (seq {row['seq_number']}) above the purge horizon")
    return diffs


def check_notifications(truth: dict, sink, strict: bool = False) -> tuple[list[str], str, list[str]]:
    """Each queue manager's own attributes and QueueCollection (MS-MQCN 3.2.1), judged by what it
    could read from the replicas (verify_reads), or by the authority's truth alone (strict)."""
    history = None if strict else sink.query(
        "SELECT server, object_guid, version, seq_number, kind, properties, valid_from FROM directory_history "
        "WHERE object_type IN ('queue', 'machine')")
    return compare_notifications(truth, sink.query("SELECT * FROM queue_managers"),
                                 sink.query("SELECT * FROM qm_queues"), sink.query("SELECT * FROM notifications"),
                                 history, sink.query("SELECT queue_manager, fired_at, refresh_all "
                                                     "FROM notification_batches"))


# v1 updates change only these queue attributes (3.2.5.1: "All other PROPIDs ... MUST be ignored"),
# so a v1 queue manager's label and modify time stay as created; v2 reads every listed attribute.
V1_COMPARED = ("path_name", "type", "base_priority", "journal", "quota", "journal_quota", "create_time", "security",
               "authenticate", "priv_level", "transactional")
V2_COMPARED = V1_COMPARED + ("label", "modify_time")


def compare_notifications(truth: dict, managers: list[dict], queues: list[dict], notifications: list[dict],
                          history: list[dict] | None = None,
                          batches: list[dict] | None = None) -> tuple[list[str], str, list[str]]:
    """(differences, summary, differences explained). Without history (strict), every attribute is
    compared with the authority's final value; with directory_history's rows, a value read from the
    directory is judged by the version the replicas held at the read, and one a notification set by
    the notifications as they were delivered (the truth's `delivered`; verify_reads)."""
    from ..operators.notification_rows import QUEUE_COLUMNS
    from ..operators.notifications import V1_QM_UPDATE
    judge = ReadJudge(ReplicaHistory(history)) if history is not None else None
    first = [n for n in notifications if n["outcome"] != Result.DUPLICATE]          # a copy's outcome is its own
    outcomes, processed = {}, {}
    about: dict[tuple[str, str], list[tuple[str, str, int]]] = {}   # (queue manager, object): (action, outcome, processed)
    for n in first:
        at = epoch_ms(n["processed_at"])
        outcomes[n["message_id"]], processed[n["message_id"]] = n["outcome"], at
        about.setdefault((n["queue_manager"], n["object_guid"]), []).append((n["action"], n["outcome"], at))
    # When each queue manager refreshed (note <3>): the only reads that bring in a queue no notification
    # it processed created. From notification_batches; without them, from the notifications a refresh
    # replaced (each carries the refresh's time).
    refreshed: dict[str, list[int]] = {}
    fired = [(b["queue_manager"], b["fired_at"]) for b in batches if as_bool(b["refresh_all"])] \
        if batches is not None else \
        [(n["queue_manager"], n["processed_at"]) for n in first if n["outcome"] == Result.SUPERSEDED_BY_REFRESH]
    for machine_id, at in fired:
        refreshed.setdefault(machine_id, []).append(epoch_ms(at))
    diffs = []
    by_id = {m["machine_id"]: m for m in managers}
    live: dict[str, dict[str, dict]] = {}
    for q in queues:
        if not as_bool(q["deleted"]):
            live.setdefault(q["queue_manager"], {})[q["queue_guid"]] = q
    for machine_id, exp in sorted(truth["queue_managers"].items()):
        where = f"{exp['machine_name']} ({exp['notification_version']})"
        got = by_id.get(machine_id)
        if got is None:
            diffs.append(f"{where}: missing queue manager")
            continue
        qm_read, told = ReadRecord.of_manager(got), exp.get("delivered", {"queues": {}, "machine": {}})
        for propid, attr in V1_QM_UPDATE.items():
            if got[attr] != exp[attr] and not (judge and (
                    judge.attribute(where, "queue manager", qm_read, propid, got[attr], exp[attr])
                    or judge.notified(where, "queue manager", qm_read, propid, got[attr], exp[attr],
                                      told["machine"], outcomes))):
                diffs.append(f"{where}: {attr} is {got[attr]!r}, expected {exp[attr]!r}")
        if judge:
            judge.read_version(where, "queue manager", qm_read)
        compared = V2_COMPARED if exp["notification_version"] == "v2" else V1_COMPARED
        mine = live.get(machine_id, {})
        for guid, q in sorted(exp["queues"].items()):
            row = mine.get(guid)
            if row is None:
                if not (judge and not got.get("notifications_waiting") and judge.missing(
                        where, f"queue {guid} ({q['path_name']})", guid, refreshed.get(machine_id, []),
                        about.get((machine_id, guid), []))):
                    diffs.append(f"{where}: missing queue {guid} ({q['path_name']})")
                continue
            read, what = ReadRecord.of_queue(row), f"queue {guid}"
            said = told["queues"].get(guid, {}).get("set", {})
            for name, col in QUEUE_COLUMNS.items():
                want = q["properties"].get(name)
                if col in compared and row[col] != want and not (judge and (
                        judge.attribute(where, what, read, name, row[col], want)
                        or judge.notified(where, what, read, name, row[col], want, said, outcomes))):
                    diffs.append(f"{where}: queue {guid} {col} is {row[col]!r}, expected {want!r}")
            if judge:
                judge.read_version(where, what, read)
        for guid in sorted(set(mine) - set(exp["queues"])):
            what = f"queue {guid}"
            if not (judge and (judge.extra(where, what, ReadRecord.of_queue(mine[guid]))
                               or judge.kept(where, what, guid, told["queues"].get(guid, {}).get("last"),
                                             outcomes, processed))):
                diffs.append(f"{where}: extra queue {guid} ({mine[guid]['path_name']})")
    for d in truth.get("discarded_notifications", []):
        if outcomes.get(d["message_id"]) != Result.DISCARDED:
            diffs.append(f"notification {d['message_id']} to {d['queue_manager']}: outcome "
                         f"{outcomes.get(d['message_id'])}, expected discarded ({d['reason']})")
    # A notification left unresolved is a difference when its object exists at the end; one whose
    # object never reached a replica and is gone (created and deleted in between) is only counted.
    existing = {g for qm in truth["queue_managers"].values() for g in qm["queues"]} | set(truth["queue_managers"])
    unresolved = [n for n in notifications if n["outcome"] == Result.UNRESOLVED]
    for n in unresolved:
        if n["object_guid"] in existing:
            diffs.append(f"notification {n['message_id']} ({n['action']} {n['object_guid']}) still unresolved")
    explained = judge.stale + judge.delivered + judge.unreachable if judge else []
    if judge:
        diffs += judge.diffs
    summary = f"{len(truth['queue_managers'])} queue managers, {len(unresolved)} notifications unresolved"
    if judge:
        summary += (f", {len(judge.stale)} stale by replica lag, {len(judge.delivered)} as delivered, "
                    f"{len(judge.unreachable)} never held by a replica")
    return diffs, summary, explained


CHECK_FUNCTIONS = {"discovery": check_discovery, "replication": check_replication,
                   "notifications": check_notifications, "findings": check_findings}
