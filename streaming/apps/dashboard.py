"""`dirstream dashboard`: a read-only web dashboard (Plotly Dash) over the sink tables.

Pages: Pipeline, Replication, Directory, Notifications, Discovery. Every page re-reads the sink
on a timer, so it follows a running job. Nothing is written: SQLite is opened read-only (WAL
lets it read while the job writes) and PostgreSQL sessions are read-only. An empty table shows
how to fill it; a sink that cannot be opened is reported as such.
"""
import sys

from .sink_reader import SinkReader, SinkUnavailable

PAGES = [("/pipeline", "Pipeline"), ("/replication", "Replication"), ("/directory", "Directory"),
         ("/notifications", "Notifications"), ("/discovery", "Discovery")]
# ====================================================================== the app
def create_app(sink_url: str, refresh_ms: int = 5000):
    from dash import Dash, Input, Output, dcc, html

    from . import dashboard_pages as pages

    app = Dash(__name__, title="msmq-dirstream", suppress_callback_exceptions=True)
    readers: dict[str, SinkReader] = {}

    def reader() -> SinkReader:
        if "r" not in readers:
            readers["r"] = SinkReader(sink_url)
        return readers["r"]

    nav = html.Nav([dcc.Link(title, href=path, id=f"nav-{path.strip('/')}", style={"marginRight": "1.5em"})
                    for path, title in PAGES], style={"padding": "0.6em 0", "borderBottom": "1px solid #ccc"})
    app.layout = html.Div([
        dcc.Location(id="url"), html.H2("msmq-dirstream"), nav,
        dcc.Interval(id="tick", interval=refresh_ms),
        html.Div(id="page"),
    ], style={"fontFamily": "sans-serif", "margin": "0 2em"})

    @app.callback(Output("page", "children"), Input("url", "pathname"), Input("tick", "n_intervals"))
    def render(pathname, _n):
        try:
            return pages.ROUTES.get(pathname or "/pipeline", pages.pipeline_page)(reader())
        except SinkUnavailable as exc:
            readers.clear()
            return html.P(str(exc), id="sink-error", style={"color": "#c62828"})

    @app.callback(Output("drill-body", "children"), Input("drill-replica", "value"))
    def drill_callback(value):
        return pages.drill(reader(), value)

    @app.callback(Output("dir-body", "children"), Input("dir-server", "value"), Input("dir-type", "value"),
                  Input("dir-search", "value"))
    def directory_objects_callback(server, object_type, search):
        return pages.directory_objects(reader(), server, object_type, search)

    @app.callback(Output("diff-body", "children"), Input("diff-a", "value"), Input("diff-b", "value"),
                  Input("diff-partition", "value"))
    def replica_diff_callback(a, b, pid):
        return pages.replica_diff(reader(), a, b, pid)

    @app.callback(Output("qm-body", "children"), Input("qm-pick", "value"))
    def queue_manager_callback(machine_id):
        return pages.queue_manager(reader(), machine_id)

    return app


def register(sub) -> None:
    d = sub.add_parser("dashboard", help="serve a read-only web dashboard over the sink tables")
    d.add_argument("--sink", default="sqlite:///var/dirstream.db", help="the job's sink URL")
    d.add_argument("--host", default="127.0.0.1")
    d.add_argument("--port", type=int, default=8050)
    d.add_argument("--refresh", type=float, default=5.0, help="seconds between refreshes (default 5)")
    d.set_defaults(func=cmd_dashboard)


def cmd_dashboard(args) -> int:
    try:
        SinkReader(args.sink)
    except SinkUnavailable as exc:
        print(f"dirstream dashboard: {exc}", file=sys.stderr)
        return 2
    app = create_app(args.sink, int(args.refresh * 1000))
    print(f"dirstream dashboard: http://{args.host}:{args.port}/pipeline (sink {args.sink})", flush=True)
    app.run(host=args.host, port=args.port, debug=False)
    return 0
