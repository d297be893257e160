"""Values on their way into a sink and back: the conversions a column's type needs, times as the
sink's text, a URL as it may be shown."""
import json
from datetime import datetime, timezone
from urllib.parse import urlparse

__all__ = ["as_bool", "as_datetime", "first_line", "iso", "json_text", "masked", "raw_bytes", "sqlite_bool",
           "sqlite_time", "utcnow"]


def first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def json_text(v) -> str:
    return json.dumps(v, sort_keys=True)


def as_datetime(v):
    if isinstance(v, str):
        try:
            return datetime.fromisoformat(v)
        except ValueError:
            return v                        # not a time: written as it came
    return v


def raw_bytes(v):
    return bytes.fromhex(v) if isinstance(v, str) else v


def sqlite_time(v) -> str:
    """SQLite keeps times as iso() text: an operator's text already in that form (UTC, milliseconds)
    is kept as it is, anything else goes through datetime."""
    if isinstance(v, str):
        if len(v) == 29 and v[19] == "." and v.endswith("+00:00"):
            return v
        v = as_datetime(v)
    return iso(v) if isinstance(v, datetime) else v


def sqlite_bool(v) -> int:
    return int(bool(v))


def masked(url: str) -> str:
    """A sink URL as it may be shown: its password replaced by ***."""
    parts = urlparse(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return parts._replace(netloc=f"{user}:***@{netloc[1]}").geturl()


def as_bool(value) -> bool:
    """A bool column as read back: SQLite stores 0/1, PostgreSQL booleans."""
    return value in (True, 1, "1", "t", "true")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def iso(ts: datetime) -> str:
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=timezone.utc)
    return ts.astimezone(timezone.utc).isoformat(timespec="milliseconds")
