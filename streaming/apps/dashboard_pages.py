"""The dashboard's pages, one function each, and the drill-downs its callbacks show: everything
here reads the sink through a SinkReader and returns Dash components."""
import json

from dash import dash_table, dcc, html

from ..sinks import as_bool
from . import health
from .sink_reader import SinkReader

__all__ = ["directory_objects", "directory_page", "discovery_page", "drill", "empty", "evidence_text",
           "HEALTH_COLOURS", "HOW_TO_FILL", "notifications_page", "pipeline_page", "queue_manager", "replica_diff",
           "replication_page", "ROUTES", "security_page", "stat", "table"]

HEALTH_COLOURS = {"in sync": "#2e7d32", "pending changes": "#f9a825", "gap being resynced": "#ef6c00",
                  "initial sync outstanding": "#90a4ae", "sync0": "#6a1b9a", "behind the purge horizon": "#c62828",
                  "own partition": "#e0e0e0"}
HOW_TO_FILL = {
    "pipeline_progress": "Run the job (`dirstream run --sink ...`): every micro-batch adds a row.",
    "dead_letters": "No dead letters: every record decoded. Corrupt input (e.g. `dirstream produce simulate "
                    "--corrupt 0.01`) lands here.",
    "replication_partitions": "No replication state yet: publish MQDSRP traffic (`dirstream produce simulate`) and "
                              "run the job.",
    "directory_objects": "No directory objects yet: the replication operator fills this from MQDSRP traffic.",
    "security_findings": "No security findings: no malformed MQQB packet in a capture, unsigned replication "
                         "message, replication message from a machine that is no directory server, rogue "
                         "discovery reply, unauthenticated notification or notification flood so far "
                         "(`dirstream produce simulate --attack ...` injects them).",
    "notifications": "No notifications yet: the MQCN operator fills this from msmq.cn.raw (timers fire 1 to 15 "
                     "minutes of event time after a notification).",
    "discovery_requests": "No discovery requests yet: the MQSD operator fills this from msmq.sd.raw.",
    "site_topology": "No site topology yet: MQSD replies name the directory servers of each site.",
}


def _json(value):
    return json.loads(value) if isinstance(value, str) else value


def empty(table: str):
    return html.P(HOW_TO_FILL.get(table, f"{table} is empty."), className="empty", id=f"empty-{table}",
                  style={"color": "#666", "fontStyle": "italic"})

def stat(ident: str, label: str, value) -> html.Div:
    return html.Div([html.Div(label, style={"fontSize": "0.8em", "color": "#555"}),
                     html.Div(str(value), id=ident, style={"fontSize": "1.6em"})],
                    style={"display": "inline-block", "marginRight": "2.5em"})

def table(ident: str, rows: list[dict], columns: list[str], page_size: int = 15):
    return dash_table.DataTable(id=ident, data=[{c: _cell(r.get(c)) for c in columns} for r in rows],
                                columns=[{"name": c, "id": c} for c in columns], page_size=page_size,
                                style_cell={"fontFamily": "monospace", "fontSize": "0.8em", "maxWidth": "420px",
                                            "overflow": "hidden", "textOverflow": "ellipsis"},
                                sort_action="native", filter_action="native")

# ------------------------------------------------------------------ pages
def pipeline_page(r: SinkReader):
    every = r.query("pipeline_progress", "SELECT * FROM pipeline_progress ORDER BY finished_at")
    progress = [p for p in every if p.get("query_name") in (None, "dirstream")]      # the raw query's batches
    dead = r.query("dead_letters", "SELECT * FROM dead_letters ORDER BY recorded_at DESC, kafka_offset DESC")
    if not progress:
        return [html.H3("Pipeline"), empty("pipeline_progress")]
    queries = health.query_summary(r)
    latest = progress[-1]
    lag = _json(latest["lag"]) or {}
    by_reason: dict[str, int] = {}
    for (stage, reason), n in sorted(health.dead_letter_counts(r).items()):      # as the metrics count them
        by_reason[f"{stage}: {reason}"] = n
    per_minute: dict[str, int] = {}
    for d in dead:
        minute = str(d["recorded_at"])[:16]
        per_minute[minute] = per_minute.get(minute, 0) + 1
    return [
        html.H3("Pipeline"),
        html.Div([stat("pipeline-batches", "micro-batches", len(progress)),
                  stat("pipeline-input-rows", "input rows", sum(p["input_rows"] for p in progress)),
                  stat("pipeline-dead-letters", "dead letters", len(dead)),
                  stat("pipeline-total-lag", "total lag", latest["total_lag"]),
                  stat("pipeline-late-rows", "late rows (dropped by a watermark)", sum(q["late_rows"] for q in queries))]),
        html.H4("Queries"),
        table("pipeline-queries", queries, ["query", "batches", "input_rows", "late_rows", "state_rows",
                                            "state_memory_bytes", "timers_fired", "last_batch_ms"]),
        dcc.Graph(id="pipeline-rate", figure=_line([str(p["finished_at"]) for p in progress], {
            "input rows": [p["input_rows"] for p in progress],
            "processed rows/s": [round(p["rows_per_second"]) for p in progress]}, "rows per micro-batch")),
        dcc.Graph(id="pipeline-durations", figure=_line([str(p["finished_at"]) for p in progress], {
            "duration ms": [p["duration_ms"] for p in progress]}, "batch durations")),
        dcc.Graph(id="pipeline-lag", figure=_bar(list(lag), list(lag.values()), "source lag per topic-partition")),
        html.H4("Dead letters"),
        *([dcc.Graph(id="dead-by-reason", figure=_bar(list(by_reason), list(by_reason.values()),
                                                      "dead letters by reason")),
           dcc.Graph(id="dead-over-time", figure=_bar(list(per_minute), list(per_minute.values()),
                                                      "dead letters per minute recorded")),
           table("dead-letters-table", [dict(d, raw_value=_hex(d["raw_value"])) for d in dead[:200]],
                 ["topic", "kafka_partition", "kafka_offset", "protocol", "stage", "error_field", "error_offset",
                  "error_reason", "raw_value", "recorded_at"])] if dead else [empty("dead_letters")]),
    ]

def replication_page(r: SinkReader):
    parts = r.query("replication_partitions", "SELECT * FROM replication_partitions ORDER BY server, partition_id")
    if not parts:
        return [html.H3("Replication"), empty("replication_partitions")]
    servers = sorted({p["server"] for p in parts})
    pids = sorted({p["partition_id"] for p in parts})
    cell = {(h.server, h.partition_id): h for h in health.replica_health(parts)}      # as the metrics see them
    header = html.Tr([html.Th("server")] + [html.Th(pid[:8] + "…", title=pid) for pid in pids])
    body = []
    for s in servers:
        tds = [html.Th(s)]
        for pid in pids:
            h = cell.get((s, pid))
            if h is None:
                tds.append(html.Td("—"))
                continue
            lines = [html.Div("the object authority", title="its own partition changes locally, not on the wire")
                     ] if h.owned else [
                html.Div(f"last {h.last_seq} · purged {h.purged_seq}"),
                html.Div(f"lag {h.lag}" + (f" · {h.pending} pending" if h.pending else ""))]
            tds.append(html.Td([html.Div(h.health, className="health")] + lines,
                               className="replica-cell", title=f"{s} / {pid}",
                               style={"background": HEALTH_COLOURS[h.health], "color": "white" if h.health not in (
                                   "own partition", "initial sync outstanding") else "black",
                                   "padding": "0.4em", "fontSize": "0.8em"}))
        body.append(html.Tr(tds))
    options = [{"label": f"{p['server']} / {p['partition_id']}", "value": f"{p['server']}|{p['partition_id']}"}
               for p in parts]
    return [
        html.H3("Replication"),
        html.Div([stat("replication-servers", "directory servers", len(servers)),
                  stat("replication-replicas", "partitions × servers", len(parts))]),
        html.Table([header] + body, id="replication-grid", style={"borderCollapse": "collapse"}),
        html.Div([html.Span(k, style={"background": v, "padding": "0.2em 0.5em", "marginRight": "0.4em",
                                      "fontSize": "0.75em"}) for k, v in HEALTH_COLOURS.items()],
                 style={"margin": "0.6em 0"}),
        html.H4("Drill-down"),
        dcc.Dropdown(id="drill-replica", options=options, value=options[0]["value"], clearable=False),
        html.Div(id="drill-body"),
    ]

def directory_page(r: SinkReader):
    servers = [row["server"] for row in r.query("directory_objects",
                                                "SELECT DISTINCT server FROM directory_objects ORDER BY server")]
    if not servers:
        return [html.H3("Directory"), empty("directory_objects")]
    types = [row["object_type"] for row in r.query(
        "directory_objects", "SELECT DISTINCT object_type FROM directory_objects ORDER BY object_type")]
    parts = [row["partition_id"] for row in r.query(
        "directory_objects", "SELECT DISTINCT partition_id FROM directory_objects ORDER BY partition_id")]
    return [
        html.H3("Directory"),
        html.Div([dcc.Dropdown(id="dir-server", options=servers, value=servers[0], clearable=False,
                               style={"width": "14em", "display": "inline-block"}),
                  dcc.Dropdown(id="dir-type", options=["all"] + types, value="all", clearable=False,
                               style={"width": "14em", "display": "inline-block", "marginLeft": "1em"}),
                  dcc.Input(id="dir-search", placeholder="path name or GUID contains…", debounce=True,
                            persistence=True, persistence_type="session",
                            style={"marginLeft": "1em", "width": "20em"}),
                  dcc.Input(id="dir-as-of", placeholder="as of (ISO time, UTC); empty: now", debounce=True,
                            persistence=True, persistence_type="session",     # kept when the page refreshes
                            style={"marginLeft": "1em", "width": "20em"})]),
        html.Div(id="dir-body"),
        html.H4("Difference between two replicas of a partition"),
        html.Div([dcc.Dropdown(id="diff-a", options=servers, value=servers[0], clearable=False,
                               style={"width": "12em", "display": "inline-block"}),
                  dcc.Dropdown(id="diff-b", options=servers, value=servers[-1], clearable=False,
                               style={"width": "12em", "display": "inline-block", "marginLeft": "1em"}),
                  dcc.Dropdown(id="diff-partition", options=parts, value=parts[0], clearable=False,
                               style={"width": "26em", "display": "inline-block", "marginLeft": "1em"})]),
        html.Div(id="diff-body"),
    ]

def notifications_page(r: SinkReader):
    managers = r.query("queue_managers", "SELECT * FROM queue_managers")
    managers.sort(key=lambda m: (m["machine_name"] is None, m["machine_name"] or "", m["machine_id"]))
    if not managers:
        return [html.H3("Notifications"), empty("notifications")]
    options = [{"label": f"{m['machine_name']} ({m['machine_id']})", "value": m["machine_id"]} for m in managers]
    counts = r.query("notifications", "SELECT outcome, COUNT(*) AS n FROM notifications GROUP BY outcome "
                                      "ORDER BY outcome")
    return [
        html.H3("Notifications"),
        html.Div([stat(f"notifications-{c['outcome']}", c["outcome"], c["n"]) for c in counts]),
        dcc.Dropdown(id="qm-pick", options=options, value=options[0]["value"], clearable=False),
        html.Div(id="qm-body"),
    ]

def discovery_page(r: SinkReader):
    requests = r.query("discovery_requests", "SELECT * FROM discovery_requests ORDER BY sent_at DESC")
    topology = r.query("site_topology", "SELECT * FROM site_topology ORDER BY site_id, directory_server")
    if not requests and not topology:
        return [html.H3("Discovery"), empty("discovery_requests")]
    by_outcome = health.discovery_outcomes(r)
    return [
        html.H3("Discovery"),
        html.Div([stat("discovery-requests", "requests", len(requests))]
                 + [stat(f"discovery-{k}", k, v) for k, v in sorted(by_outcome.items())]),
        dcc.Graph(id="site-topology", figure=_topology(topology)) if topology else empty("site_topology"),
        html.H4("Recent discovery requests"),
        table("discovery-table", requests[:300], ["request_id", "client", "client_site", "sent_at", "outcome",
                                                  "directory_servers", "connected_networks", "replies"]),
    ]


def drill(r: SinkReader, value):
    server, pid = value.split("|", 1)
    pending = r.query("pending_changes", "SELECT * FROM pending_changes WHERE server = ? AND partition_id = ? "
                                         "AND status = 'pending' ORDER BY seq_number", (server, pid))
    out = r.query("outbound_messages", "SELECT * FROM outbound_messages WHERE server = ? AND operation IN "
                                       "('SyncRequest', 'PSCAck', 'BSCAck') ORDER BY sent_at DESC", (server,))
    return [html.H5(f"Pending changes of {server} / {pid}: {len(pending)}", id="drill-pending-count"),
            table("drill-pending", pending, ["seq_number", "previous_seq_number", "command", "object", "status"])
            if pending else html.P("No change waiting for its predecessors."),
            html.H5(f"Sync requests and acks sent by {server}: {len(out)}", id="drill-outbound-count"),
            table("drill-outbound", [dict(o, detail=json.dumps(_json(o["detail"]))) for o in out],
                  ["sent_at", "operation", "reason", "destination", "partition_id", "detail"])]


def directory_objects(r: SinkReader, server, object_type, search, as_of=None):
    """The replica's objects now (directory_objects), or as it held them at a moment (directory_history:
    the version valid then, deleted ones left out)."""
    try:
        moment = _moment(r, as_of)
    except ValueError as exc:
        return [html.P(str(exc), id="dir-as-of-error", style={"color": "#c62828"})]
    if moment is None:
        table_name, sql, params = "directory_objects", "SELECT * FROM directory_objects WHERE server = ? AND deleted = ?", \
            [server, _false(r)]
    else:
        table_name = "directory_history"
        sql = ("SELECT * FROM directory_history WHERE server = ? AND kind <> 'deleted' AND valid_from <= ? "
               "AND (valid_to IS NULL OR valid_to > ?)")
        params = [server, moment, moment]
    if object_type and object_type != "all":
        sql, params = sql + " AND object_type = ?", params + [object_type]
    if search:
        sql, params = sql + " AND (lower(path_name) LIKE ? OR object_guid LIKE ?)", params + [
            f"%{search.lower()}%", f"%{search.lower()}%"]
    rows = r.query(table_name, sql + " ORDER BY object_type, path_name", tuple(params))
    when = "" if moment is None else f" as of {as_of.strip()}"
    return [html.H5(f"{len(rows)} objects{when}", id="dir-count"),
            table("dir-table", [dict(o, properties=json.dumps(_json(o["properties"]))) for o in rows],
                  ["object_type", "path_name", "object_guid", "seq_number", "partition_id", "properties"])]


def _moment(r: SinkReader, text):
    """The "as of" input as a query parameter (None: now); ValueError when it is not a time."""
    if not text or not text.strip():
        return None
    import argparse
    from .history import moment_param, parse_time
    try:
        return moment_param(r, parse_time(text))
    except argparse.ArgumentTypeError:
        raise ValueError(f"not a time: {text.strip()!r} (ISO-8601, e.g. 2026-01-01T00:05:00Z)") from None


def replica_diff(r: SinkReader, a, b, pid):
    rows = r.query("directory_objects", "SELECT * FROM directory_objects WHERE partition_id = ? AND "
                                               "server IN (?, ?) AND deleted = ?", (pid, a, b, _false(r)))
    side = {a: {}, b: {}}
    for o in rows:
        side[o["server"]][o["object_guid"]] = o
    diffs = []
    for guid in sorted(set(side[a]) | set(side[b])):
        x, y = side[a].get(guid), side[b].get(guid)
        if x is None or y is None:
            diffs.append({"object_guid": guid, "difference": f"only on {a if y is None else b}"})
        elif x["seq_number"] != y["seq_number"] or _json(x["properties"]) != _json(y["properties"]):
            diffs.append({"object_guid": guid, "difference": f"seq {x['seq_number']} vs {y['seq_number']}"})
    return [html.H5(f"{len(diffs)} differences", id="diff-count"),
            table("diff-table", diffs, ["object_guid", "difference"]) if diffs else html.P("Identical.")]


def queue_manager(r: SinkReader, machine_id):
    batches = r.query("notification_batches", "SELECT * FROM notification_batches WHERE queue_manager = ? "
                                              "ORDER BY batch", (machine_id,))
    notes = r.query("notifications", "SELECT * FROM notifications WHERE queue_manager = ? ORDER BY arrival_at, "
                                     "update_index", (machine_id,))
    queues = r.query("qm_queues", "SELECT * FROM qm_queues WHERE queue_manager = ? AND deleted = ? ORDER BY "
                                  "path_name", (machine_id, _false(r)))
    waiting = next((h for h in health.queue_managers(r, health.replica_clock(r)) if h.machine_id == machine_id),
                   None)                                    # as the metrics see it
    return [html.Div([stat("qm-batches", "batches", len(batches)), stat("qm-notifications", "notifications",
                                                                        len(notes)),
                      stat("qm-queues", "queues", len(queues)),
                      stat("qm-waiting", "waiting in a window", waiting.waiting if waiting else 0),
                      stat("qm-unresolved", "unresolved reads", waiting.unresolved if waiting else 0)]),
            dcc.Graph(id="qm-timeline", figure=_timeline(batches)),
            table("qm-notifications-table", notes, ["arrival_at", "version", "action", "object_guid", "outcome",
                                                    "reason", "batch", "processed_at"]),
            html.H5("QueueCollection"),
            table("qm-queues-table", queues, ["path_name", "queue_guid", "label", "quota", "journal_quota",
                                              "base_priority", "authenticate", "priv_level", "updated_at"])]


def security_page(r: SinkReader):
    """security_findings, most severe and latest first, each with where its first and latest message
    are in Kafka."""
    rows = r.query("security_findings", "SELECT * FROM security_findings ORDER BY last_seen DESC")
    if not rows:
        return [html.H3("Security"), empty("security_findings")]
    rows.sort(key=lambda f: f["severity"] != "high")                  # stable: latest first within a severity
    totals: dict[str, int] = {}
    for f in rows:
        totals[f["kind"]] = totals.get(f["kind"], 0) + int(f["count"])
    shown = [dict(f, first=evidence_text(_json(f["evidence"]).get("first")), latest=evidence_text(_json(f["evidence"]).get("last")))
             for f in rows[:500]]
    return [
        html.H3("Security"),
        html.Div([stat(f"findings-{kind}", kind, n) for kind, n in sorted(totals.items())]),
        table("findings-table", shown, ["severity", "kind", "source", "target", "count", "first_seen", "last_seen",
                                        "first", "latest", "detail"]),
    ]


def evidence_text(e: dict | None) -> str:
    """A finding's evidence as a Kafka coordinate, topic[partition]@offset, then the message id, or
    for a rejected MQQB packet the capture and the position in it."""
    if not e:
        return ""
    then = f"{e['capture']}:{e.get('position')}" if e.get("capture") else e.get("message_id")
    return f"{e.get('topic')}[{e.get('partition')}]@{e.get('offset')} ({then})"


ROUTES = {"/pipeline": pipeline_page, "/replication": replication_page, "/directory": directory_page,
          "/notifications": notifications_page, "/discovery": discovery_page, "/security": security_page}


def _false(r: SinkReader):
    return False if r.dialect == "postgresql" else 0


def _cell(v):
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return _hex(v)
    return v if v is None or isinstance(v, (int, float, str, bool)) else str(v)


def _hex(v) -> str | None:
    if v is None:
        return None
    data = bytes(v)
    return data[:64].hex(" ") + (" …" if len(data) > 64 else "")


def _line(x, series: dict, title: str):
    import plotly.graph_objects as go
    fig = go.Figure([go.Scatter(x=x, y=y, name=name, mode="lines+markers") for name, y in series.items()])
    return fig.update_layout(title=title, height=300, margin={"t": 40, "b": 30})


def _bar(x, y, title: str):
    import plotly.graph_objects as go
    return go.Figure([go.Bar(x=x, y=y)]).update_layout(title=title, height=300, margin={"t": 40, "b": 30})


def _timeline(batches: list[dict]):
    import plotly.graph_objects as go
    fig = go.Figure()
    for b in batches:
        colour = "#c62828" if as_bool(b["refresh_all"]) else "#1565c0"
        start = b["timer_started"] or b["fired_at"]
        fig.add_trace(go.Scatter(x=[str(start), str(b["fired_at"])], y=[b["count"], b["count"]], mode="lines+markers",
                                 line={"color": colour, "width": 6}, showlegend=False,
                                 hovertext=f"batch {b['batch']}: {b['count']} notifications"
                                           + (" (refresh all)" if as_bool(b["refresh_all"]) else "")))
    return fig.update_layout(title="batches: timer started → fired (height: notifications; red: refresh all)",
                             height=300, margin={"t": 40, "b": 30})


def _topology(rows: list[dict]):
    """Sites in a circle, each with its directory servers around it."""
    import math

    import plotly.graph_objects as go
    sites = sorted({r["site_id"] for r in rows})
    xs, ys, labels, ex, ey = [], [], [], [], []
    for i, site in enumerate(sites):
        angle = 2 * math.pi * i / max(len(sites), 1)
        sx, sy = 3 * math.cos(angle), 3 * math.sin(angle)
        xs.append(sx), ys.append(sy), labels.append(f"site {site[:8]}")
        servers = [r for r in rows if r["site_id"] == site]
        for j, r in enumerate(servers):
            a = angle + (j - (len(servers) - 1) / 2) * 0.5
            x, y = sx + 1.2 * math.cos(a), sy + 1.2 * math.sin(a)
            ex += [sx, x, None]
            ey += [sy, y, None]
            cns = ", ".join(c[:8] for c in _json(r["connected_networks"]) or [])
            xs.append(x), ys.append(y), labels.append(f"{r['directory_server']} [{cns}]")
    fig = go.Figure([go.Scatter(x=ex, y=ey, mode="lines", line={"color": "#999"}, hoverinfo="none"),
                     go.Scatter(x=xs, y=ys, mode="markers+text", text=labels, textposition="top center",
                                marker={"size": 14, "color": ["#1565c0" if t.startswith("site ") else "#2e7d32"
                                                              for t in labels]})])
    return fig.update_layout(title="site topology (sites, their directory servers [connected networks])",
                             showlegend=False, height=520, xaxis={"visible": False}, yaxis={"visible": False})
