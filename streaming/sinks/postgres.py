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
            raise SinkError(f"cannot open PostgreSQL sink {masked(self.url)}: {exc}") from None

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
