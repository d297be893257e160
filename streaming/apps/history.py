"""`dirstream history`: what each replica held about a directory object, version by version or at
one moment (the sink's directory_history table)."""
import argparse
import json
import sys
from datetime import datetime, timezone

from ..sinks import iso
from .run import DEFAULT_SINK
from .sink_reader import SinkReader, SinkUnavailable

__all__ = ["cmd_history", "COLUMNS", "json_lines", "moment_param", "object_history", "parse_time", "register",
           "text_lines"]

COLUMNS = "server, object_guid, version, kind, seq_number, object_type, path_name, properties, valid_from, valid_to"


def register(sub) -> None:
    h = sub.add_parser("history", help="print what each replica held about a directory object, and when",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Print what each replica held about a directory object, and when.\n\n"
                                   "Every version of the object as each replica held it (valid from, valid to,\n"
                                   "sequence number, kind, the properties that changed); with --at, the version\n"
                                   "each replica held at that moment, whole. Exits 1 if no replica holds it.",
                       epilog="example:\n"
                              "  dirstream history --object 'qm0-1\\queue0' --sink sqlite:///var/dirstream.db\n"
                              "  dirstream history --object 'qm0-1\\queue0' --server psc1 --at 2026-01-01T00:05:00Z "
                              "--sink sqlite:///var/dirstream.db")
    h.add_argument("--object", required=True, help="the object's GUID (or its path name)")
    h.add_argument("--server", help="only this replica (directory server)")
    h.add_argument("--at", type=parse_time, help="a moment (ISO-8601; UTC unless it says otherwise)")
    h.add_argument("--json", action="store_true", help="one JSON object per version instead of text")
    h.add_argument("--sink", default=DEFAULT_SINK, help=f"the job's sink URL (default {DEFAULT_SINK})")
    h.set_defaults(func=cmd_history)


def moment_param(reader, at: datetime):
    """A moment as a query parameter: SQLite keeps timestamps as ISO text, PostgreSQL as timestamptz."""
    return iso(at) if reader.dialect == "sqlite" else at


def parse_time(text: str) -> datetime:
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 time: {text!r}") from None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def cmd_history(args) -> int:
    try:
        reader = SinkReader(args.sink)
    except SinkUnavailable as exc:
        print(f"dirstream: {exc}", file=sys.stderr)
        return 2
    versions = object_history(reader, args.object, args.server, args.at)
    if not versions:
        where = f" on {args.server}" if args.server else ""
        when = f" at {iso(args.at)}" if args.at else ""
        print(f"dirstream: no replica{where} holds {args.object}{when} (directory_history)", file=sys.stderr)
        return 1
    for line in (json_lines(versions) if args.json else text_lines(versions, whole=args.at is not None)):
        print(line)
    return 0


def object_history(reader: SinkReader, obj: str, server: str | None = None, at: datetime | None = None) -> list[dict]:
    """The object's versions (by GUID, else by path name), per server in order; with `at`, only the
    version each server held then: valid_from <= at < valid_to (valid_to null: still current)."""
    guid = obj.strip().strip("{}").lower()
    rows = _versions(reader, "object_guid = ?", (guid,), server, at)
    if not rows:
        rows = _versions(reader, "object_guid IN (SELECT object_guid FROM directory_history WHERE lower(path_name) "
                                 "= ?)", (obj.lower(),), server, at)
    return rows


def _versions(reader, where: str, params: tuple, server, at) -> list[dict]:
    if server:
        where, params = f"{where} AND lower(server) = ?", params + (server.lower(),)
    if at is not None:
        moment = moment_param(reader, at)
        where, params = f"{where} AND valid_from <= ? AND (valid_to IS NULL OR valid_to > ?)", params + (moment, moment)
    return reader.query("directory_history", f"SELECT {COLUMNS} FROM directory_history WHERE {where} "
                                             f"ORDER BY server, version", params)


def _props(row: dict) -> dict:
    p = row["properties"]
    return json.loads(p) if isinstance(p, str) else (p or {})


def _time(value) -> str:
    return "(current)" if value is None else value if isinstance(value, str) else iso(value)


def text_lines(versions: list[dict], whole: bool = False):
    """Per version: when, what kind, the sequence number; then the properties it changed against the
    replica's previous version (all of them for the first, or with whole)."""
    previous: dict[str, dict] = {}
    for v in versions:
        props = _props(v)
        yield (f"{v['server']}  v{v['version']}  {v['kind']:<8}  seq {v['seq_number']}  {_time(v['valid_from'])}"
               f" .. {_time(v['valid_to'])}  {v['object_type']} {v['object_guid']} {v['path_name'] or ''}".rstrip())
        before = {} if whole else previous.get(v["server"], {})
        for name in sorted(set(props) | set(before)):
            if props.get(name) != before.get(name):
                yield f"    {name} = {json.dumps(props.get(name))}"
        previous[v["server"]] = props


def json_lines(versions: list[dict]):
    for v in versions:
        yield json.dumps({**v, "properties": _props(v), "valid_from": _time(v["valid_from"]),
                          "valid_to": None if v["valid_to"] is None else _time(v["valid_to"])})
