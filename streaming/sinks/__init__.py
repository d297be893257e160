"""Idempotent sinks: SQLite (embedded default, WAL) and PostgreSQL, chosen by URL.

Every micro-batch is written in one transaction together with its (query id, batch id) in
`sink_batches`; a batch already recorded there is skipped, so a replay after a crash neither
duplicates nor loses rows. Tables are created on first use.

A database that goes away (stopped, restarting, unreachable) is waited for: the batch is written
again from its start once a new connection succeeds, for up to WAIT_S (`OUTAGE` is what the
metrics export and the console says meanwhile); only then does the job stop, resumable from its
checkpoint.
"""
from urllib.parse import urlparse

from .outage import OUTAGE, WAIT_S
from .postgres import PostgresSink
from .sink import Sink, SinkError
from .sqlite import SQLiteSink
from .tables import DIRECTORY_HISTORY, TABLES, Table
from .values import as_bool, iso, masked, utcnow

__all__ = ["DIRECTORY_HISTORY", "OUTAGE", "PostgresSink", "SQLiteSink", "Sink", "SinkError", "TABLES", "Table", "WAIT_S",
           "as_bool", "iso", "masked", "open_sink", "utcnow"]


def open_sink(url: str, create: bool = True) -> "Sink":
    """The sink at url; create: make its tables when missing (the job's), else only read them (a
    reader's role may hold SELECT alone)."""
    scheme = urlparse(url).scheme
    if scheme == "sqlite":
        return SQLiteSink(url, create)
    if scheme in ("postgresql", "postgres"):
        return PostgresSink(url, create)
    raise SinkError(f"unsupported sink URL {masked(url)!r}: use sqlite:///path.db or postgresql://user@host/db")
