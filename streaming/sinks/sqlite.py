"""The embedded sink: one SQLite file in WAL mode, which the dashboard and verify read while the job
writes."""
import sqlite3
from pathlib import Path

from .sink import Sink, SinkError
from .values import sqlite_bool, sqlite_time

__all__ = ["SQLITE_LOCK_WAIT_S", "SQLiteSink"]

SQLITE_LOCK_WAIT_S = 600


class SQLiteSink(Sink):
    dialect = "sqlite"

    def _connect(self):
        # sqlite:///relative/path.db or sqlite:////absolute/path.db
        path = self.url[len("sqlite:///"):] if self.url.startswith("sqlite:///") else ""
        if not path:
            raise SinkError(f"sqlite URL {self.url!r} names no file")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # The job's writer and the readers (dashboard, verify, history) share the file: a writer waits
        # for a long transaction to end rather than failing with "database is locked".
        conn = sqlite3.connect(path, timeout=SQLITE_LOCK_WAIT_S, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")          # readers (the dashboard) watch while the job writes
        conn.execute("PRAGMA synchronous=NORMAL")
        return _SQLiteConnection(conn)

    def _transaction(self):
        return _SQLiteTransaction(self.conn.raw)

    def _arrow_column(self, ty: str, array, rows: int) -> list:
        """Times as the sink's iso() text (UTC, milliseconds, truncated as iso() truncates), booleans as
        0/1: in Arrow, not a Python call per value."""
        if array is not None and ty == "timestamp":
            import pyarrow as pa
            import pyarrow.compute as pc
            ms = array.cast(pa.timestamp("ms", tz="UTC"), safe=False)
            array = pc.binary_join_element_wise(pc.strftime(ms, format="%Y-%m-%dT%H:%M:%S"), "+00:00", "")
        elif array is not None and ty == "bool":
            import pyarrow as pa
            array = array.cast(pa.int64())
        return super()._arrow_column(ty, array, rows)

    def _converter(self, ty: str):
        if ty == "timestamp":
            return sqlite_time
        if ty == "bool":
            return sqlite_bool
        return super()._converter(ty)


class _SQLiteConnection:
    """sqlite3 in autocommit mode, with explicit BEGIN IMMEDIATE transactions."""

    def __init__(self, raw):
        self.raw = raw

    def cursor(self):
        return self.raw.cursor()

    def commit(self):
        pass

    def close(self):
        self.raw.close()


class _SQLiteTransaction:
    def __init__(self, raw):
        self.raw = raw

    def __enter__(self):
        self.cur = self.raw.cursor()
        self.cur.execute("BEGIN IMMEDIATE")
        return self.cur

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.cur.execute("COMMIT")
        elif self.raw.in_transaction:
            # SQLite rolls a transaction back itself after some errors (a full disk: "database or disk
            # is full"); a ROLLBACK then would fail and hide that error behind its own
            self.cur.execute("ROLLBACK")
        return False
