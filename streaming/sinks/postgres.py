"""The PostgreSQL sink (psycopg 3): a server that goes away is waited for (Sink.write_batch)."""
from .sink import Sink, SinkError
from .values import masked

__all__ = ["PostgresSink"]


class PostgresSink(Sink):
    dialect = "postgresql"
    placeholder = "%s"

    def _connect(self):
        import psycopg
        try:
            return psycopg.connect(self.url.replace("postgres://", "postgresql://", 1), connect_timeout=10)
        except psycopg.OperationalError as exc:
            said = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())    # one line
            raise SinkError(f"cannot open PostgreSQL sink {masked(self.url)}: {said}", _unreachable(exc)) from None

    def _transaction(self):
        return _PostgresTransaction(self.conn)

    def _connection_lost(self, exc: Exception) -> bool:
        """The server went away (stopped, restarted, the network): psycopg marks the connection
        broken, or it could not be opened again."""
        import psycopg
        return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)) and \
            (self.conn.closed or self.conn.broken)


class _PostgresTransaction:
    def __init__(self, conn):
        self.conn = conn

    def __enter__(self):
        self.tx = self.conn.transaction()
        self.tx.__enter__()
        return self.conn.cursor()

    def __exit__(self, *exc):
        return self.tx.__exit__(*exc)


def _unreachable(exc) -> bool:
    """The server was not reached (refused, timed out, no route): what the server itself refuses (a
    password, a role, a database) carries an SQLSTATE, and a password libpq lacks is named."""
    return getattr(exc, "sqlstate", None) is None and "password" not in str(exc).lower()
