"""`dirstream dashboard`: a read-only web dashboard (Plotly Dash) over the sink tables.

Pages: Pipeline, Replication, Directory, Notifications, Discovery. Every page re-reads the sink
on a timer, so it follows a running job. Nothing is written: SQLite is opened read-only (WAL
lets it read while the job writes) and PostgreSQL sessions are read-only. An empty table shows
how to fill it; a sink that cannot be opened is reported as such.
"""
import argparse
import sys

from ..sinks import masked
from .sink_reader import SinkReader, SinkUnavailable

__all__ = ["cmd_dashboard", "create_app", "PAGES", "register"]

PAGES = [("/pipeline", "Pipeline"), ("/replication", "Replication"), ("/directory", "Directory"),
         ("/notifications", "Notifications"), ("/discovery", "Discovery"), ("/security", "Security")]
# ====================================================================== the app
def create_app(sink_url: str, refresh_ms: int = 5000, users: dict[str, str] | None = None):
    """users: name -> argon2 hash; with them every page, asset and callback needs credentials."""
    from dash import Dash, Input, Output, dcc, html

    from . import dashboard_pages as pages

    app = Dash(__name__, title="msmq-dirstream", suppress_callback_exceptions=True)
    if users:
        from .dashboard_auth import BasicAuth, protect
        protect(app.server, BasicAuth(users))
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
                  Input("dir-search", "value"), Input("dir-as-of", "value"))
    def directory_objects_callback(server, object_type, search, as_of):
        return pages.directory_objects(reader(), server, object_type, search, as_of)

    @app.callback(Output("diff-body", "children"), Input("diff-a", "value"), Input("diff-b", "value"),
                  Input("diff-partition", "value"))
    def replica_diff_callback(a, b, pid):
        return pages.replica_diff(reader(), a, b, pid)

    @app.callback(Output("qm-body", "children"), Input("qm-pick", "value"))
    def queue_manager_callback(machine_id):
        return pages.queue_manager(reader(), machine_id)

    return app


def _add_user(args) -> int:
    import getpass
    from .dashboard_auth import AuthFileError, add_user
    if not args.auth_file:
        print("dirstream dashboard: --add-user needs --auth-file FILE", file=sys.stderr)
        return 2
    password = getpass.getpass(f"password for {args.add_user}: ") if sys.stdin.isatty() else sys.stdin.readline()
    try:
        add_user(args.auth_file, args.add_user, password.rstrip("\n"))
    except AuthFileError as exc:
        print(f"dirstream dashboard: {exc}", file=sys.stderr)
        return 2
    print(f"dirstream dashboard: {args.add_user} can sign in (argon2 hash in {args.auth_file}, mode 0600)")
    return 0


def register(sub) -> None:
    d = sub.add_parser("dashboard", help="serve a read-only web dashboard over the sink tables",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Serve a read-only web dashboard over the sink tables.",
                       epilog="example:\n"
                              "  dirstream dashboard --sink sqlite:///var/dirstream.db --port 8050\n"
                              "  dirstream dashboard --add-user operator --auth-file var/dashboard-users\n"
                              "  dirstream dashboard --host 0.0.0.0 --auth-file var/dashboard-users")
    d.add_argument("--sink", default="sqlite:///var/dirstream.db", help="the job's sink URL")
    d.add_argument("--host", default="127.0.0.1", help="the address to serve on (default 127.0.0.1; any other "
                                                       "needs --auth-file)")
    d.add_argument("--port", type=int, default=8050, help="the port to serve on (default 8050)")
    d.add_argument("--refresh", type=float, default=5.0, help="seconds between refreshes (default 5)")
    d.add_argument("--auth-file", help="users and argon2 password hashes (user:hash lines): every page and callback "
                                       "then needs HTTP Basic credentials; required for a --host other than loopback")
    d.add_argument("--add-user", metavar="NAME", help="add (or replace) NAME in --auth-file, the password read from "
                                                      "the terminal (or one line of stdin), then exit")
    d.set_defaults(func=cmd_dashboard)


def cmd_dashboard(args) -> int:
    from .dashboard_auth import AuthFileError, is_loopback, read_users
    if args.add_user:
        return _add_user(args)
    try:
        users = read_users(args.auth_file) if args.auth_file else None
    except AuthFileError as exc:
        print(f"dirstream dashboard: {exc}", file=sys.stderr)
        return 2
    if users is None and not is_loopback(args.host):
        print(f"dirstream dashboard: refusing to serve on {args.host} without credentials: pass --auth-file FILE "
              f"(users from --add-user NAME), or keep it on 127.0.0.1 behind a reverse proxy that authenticates",
              file=sys.stderr)
        return 2
    try:
        SinkReader(args.sink)
    except SinkUnavailable as exc:
        print(f"dirstream dashboard: {exc}", file=sys.stderr)
        return 2
    app = create_app(args.sink, int(args.refresh * 1000), users)
    guarded = f"; {len(users)} user(s) from {args.auth_file}" if users else ""
    print(f"dirstream dashboard: http://{args.host}:{args.port}/pipeline (sink {masked(args.sink)}{guarded})",
          flush=True)
    app.run(host=args.host, port=args.port, debug=False)
    return 0
