"""`dirstream verify`: compare the sink with the simulator's ground truth and print every difference."""
import json

from .sinks import open_sink

CHECKS = ("discovery",)


def register(sub) -> None:
    v = sub.add_parser("verify", help="compare the sink tables with a simulated run's ground truth",
                       description="Prints every difference (missing, extra, different value); exits 1 if any.")
    v.add_argument("--truth", required=True, help="ground truth from `dirstream produce simulate --truth`")
    v.add_argument("--sink", required=True, help="the job's sink URL")
    v.add_argument("--only", choices=CHECKS, action="append", help="run only these checks (repeatable)")
    v.set_defaults(func=cmd_verify)


def cmd_verify(args) -> int:
    with open(args.truth) as fh:
        truth = json.load(fh)
    sink = open_sink(args.sink)
    try:
        total = 0
        for name in args.only or CHECKS:
            differences, summary = CHECK_FUNCTIONS[name](truth, sink)
            for d in differences:
                print(f"{name}: {d}")
            print(f"{name}: {summary}, {len(differences)} differences")
            total += len(differences)
    finally:
        sink.close()
    return 1 if total else 0


def _json(value):
    return json.loads(value) if isinstance(value, str) else value


def check_discovery(truth: dict, sink) -> tuple[list[str], str]:
    """Each request's outcome, directory servers and connected networks (MS-MQSD 3.1.5.2)."""
    expected = truth["discovery"]
    rows = {r["request_id"]: r for r in sink.query("SELECT * FROM discovery_requests")}
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


CHECK_FUNCTIONS = {"discovery": check_discovery}
