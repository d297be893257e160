"""Read-only access to a sink URL for the dashboard: SQLite opened read-only (WAL lets it read
while the job writes), PostgreSQL sessions read-only."""
import sqlite3
from urllib.parse import urlparse

from ..sinks import masked

__all__ = ["SinkReader", "SinkUnavailable"]


class SinkUnavailable(RuntimeError):
    pass


class SinkReader:
    """Read-only access to a sink URL."""

    def __init__(self, url: str):
        self.url = url
        scheme = urlparse(url).scheme
        self.dialect = "sqlite" if scheme == "sqlite" else "postgresql"
        if scheme == "sqlite":
            path = url[len("sqlite:///"):]
            try:
                self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False, timeout=10)
                self.conn.execute("SELECT 1 FROM sqlite_master LIMIT 1")
            except sqlite3.Error as exc:
                raise SinkUnavailable(f"cannot open the SQLite sink {path!r}: {exc}") from None
        elif scheme in ("postgresql", "postgres"):
            import psycopg
            try:
                self.conn = psycopg.connect(url.replace("postgres://", "postgresql://", 1), connect_timeout=10,
                                            autocommit=True, options="-c default_transaction_read_only=on")
            except psycopg.OperationalError as exc:
                raise SinkUnavailable(f"cannot open the PostgreSQL sink {masked(url)}: {exc}") from None
        else:
            raise SinkUnavailable(f"unsupported sink URL {masked(url)!r}: use sqlite:///path.db or postgresql://...")

    def has_table(self, name: str) -> bool:
        if self.dialect == "sqlite":
            sql, params = "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        else:
            sql, params = "SELECT tablename FROM pg_tables WHERE tablename = %s", (name,)
        return bool(self._rows(sql, params))

    def query(self, table: str, sql: str, params: tuple = ()) -> list[dict]:
        """Rows of a query over `table`, or [] when the job has not created the table yet."""
        if not self.has_table(table):
            return []
        if self.dialect == "postgresql":
            sql = sql.replace("?", "%s")
        return self._rows(sql, params)

    def _rows(self, sql: str, params: tuple) -> list[dict]:
        cur = self.conn.cursor()
        cur.execute(sql, params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]
