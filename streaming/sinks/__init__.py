"""Idempotent sinks: SQLite (embedded default, WAL) and PostgreSQL, chosen by URL.

Every micro-batch is written in one transaction together with its (query id, batch id) in
`sink_batches`; a batch already recorded there is skipped, so a replay after a crash neither
duplicates nor loses rows. Tables are created on first use.

A database that goes away (stopped, restarting, unreachable) is waited for: the batch is written
again from its start once a new connection succeeds, for up to WAIT_S (`OUTAGE` is what the
metrics export and the console says meanwhile); only then does the job stop, resumable from its
checkpoint.
"""
import json
import logging
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

__all__ = ["as_bool", "DEAD_LETTERS", "DELETED_OBJECTS", "DIRECTORY_HISTORY", "DIRECTORY_OBJECTS",
           "DISCOVERY_REQUESTS", "DISCOVERY_UNMATCHED", "iso", "log", "masked", "NOTIFICATION_BATCHES",
           "NOTIFICATIONS", "open_sink", "OUTAGE", "OUTBOUND_MESSAGES", "PENDING_CHANGES", "PIPELINE_PROGRESS",
           "PostgresSink", "QM_QUEUES", "QUEUE_MANAGERS", "RAW_MESSAGES_SEEN", "REPLICATION_PARTITIONS",
           "REPLICATION_SERVERS", "RETRY_S", "SAY_EVERY_S", "SECURITY_FINDINGS", "Sink", "SINK_BATCHES",
           "SinkError", "SinkOutage", "SITE_TOPOLOGY", "SQLITE_LOCK_WAIT_S", "SQLiteSink", "Table", "table",
           "TABLES", "utcnow", "WAIT_S"]


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]        # (name, type): text, bigint, double, bool, bytes, timestamp, json
    key: tuple[str, ...]
    mode: str = "insert"                        # insert (keep first) | accumulate (add counts) | replace (upsert)
    counters: tuple[str, ...] = ()
    keep_min: tuple[str, ...] = ()              # replace mode: columns that keep the smaller value (first seen)
    keep_max: tuple[str, ...] = ()              # replace mode: columns that keep the larger value (last seen)
    first_by: str = ""                          # replace mode: a row replaces the stored one only if this
    #                                             column is not later (the earliest row of a key stays)
    successor: tuple = ()   # (ends, starts, series columns, order): a row's `ends` is set to the `starts`
    #                         of the next row (by `order`) of its series, once that row is written

    @property
    def column_names(self) -> list[str]:
        return [c for c, _ in self.columns]


TABLES: dict[str, Table] = {}


def _open_rows_index(t: Table) -> str:
    """The rows of a series not closed yet (successor tables): closing them is one index lookup, not
    a walk over every row the series ever had (a queue gathers hundreds of versions of
    directory_history in an hour, and the writer would slow down as they grow)."""
    ends, _starts, series, _order = t.successor
    return f"CREATE INDEX IF NOT EXISTS {t.name}_open ON {t.name} ({', '.join(series)}) WHERE {ends} IS NULL"
SQLITE_LOCK_WAIT_S = 600


def table(name, columns, key, mode="insert", counters=(), keep_min=(), keep_max=(), first_by="",
          successor=()) -> Table:
    t = Table(name, tuple(columns), tuple(key), mode, tuple(counters), tuple(keep_min), tuple(keep_max), first_by,
              tuple(successor))
    TABLES[name] = t
    return t


SINK_BATCHES = table("sink_batches", [("query_id", "text"), ("batch_id", "bigint"), ("committed_at", "timestamp")],
                     ["query_id", "batch_id"])
DEAD_LETTERS = table("dead_letters", [
    ("topic", "text"), ("kafka_partition", "bigint"), ("kafka_offset", "bigint"), ("batch_id", "bigint"),
    ("kafka_key", "text"), ("protocol", "text"), ("error_structure", "text"), ("error_field", "text"),
    ("error_offset", "bigint"), ("error_reason", "text"), ("error", "text"), ("raw_value", "bytes"),
    ("message_id", "text"), ("source_machine", "text"), ("destination_machine", "text"),
    ("arrival_time", "timestamp"), ("recorded_at", "timestamp"), ("stage", "text")],
    ["topic", "kafka_partition", "kafka_offset"])
RAW_MESSAGES_SEEN = table("raw_messages_seen", [
    ("protocol", "text"), ("server", "text"), ("minute", "timestamp"), ("messages", "bigint"),
    ("dead_letters", "bigint")], ["protocol", "server", "minute"], mode="accumulate",
    counters=("messages", "dead_letters"))
PIPELINE_PROGRESS = table("pipeline_progress", [
    ("query_id", "text"), ("batch_id", "bigint"), ("started_at", "timestamp"), ("finished_at", "timestamp"),
    ("input_rows", "bigint"), ("good_rows", "bigint"), ("dead_letters", "bigint"), ("rows_per_second", "double"),
    ("duration_ms", "bigint"), ("end_offsets", "json"), ("lag", "json"), ("total_lag", "bigint"),
    ("skipped_offsets", "bigint"), ("query_name", "text"), ("state_rows", "bigint"), ("state_memory_bytes", "bigint"),
    ("late_rows", "bigint"), ("timers_fired", "bigint")], ["query_id", "batch_id"])

DISCOVERY_REQUESTS = table("discovery_requests", [
    ("request_id", "text"), ("enterprise_id", "text"), ("client_site", "text"), ("client", "text"),
    ("sent_at", "timestamp"), ("outcome", "text"), ("directory_servers", "json"), ("connected_networks", "json"),
    ("replies", "bigint"), ("completed_at", "timestamp")], ["request_id"], mode="replace", first_by="sent_at")
# first_by: a copy of a request delivered after its request was completed and forgotten (MQSD
# discovery operator) starts it again; the client decided on its first copy (MS-MQSD 3.1.6.1), so
# that row stays, whichever is written first.
SITE_TOPOLOGY = table("site_topology", [
    ("site_id", "text"), ("directory_server", "text"), ("ip_supported", "bool"), ("ipx_supported", "bool"),
    ("connected_networks", "json"), ("first_seen", "timestamp"), ("last_seen", "timestamp")],
    ["site_id", "directory_server"], mode="replace", keep_min=("first_seen",), keep_max=("last_seen",))
DISCOVERY_UNMATCHED = table("discovery_unmatched_replies", [
    ("request_id", "text"), ("responder", "text"), ("arrival_time", "timestamp"), ("reason", "text"),
    ("directory_service_server_size", "bigint"), ("connected_networks", "json")],
    ["request_id", "responder", "arrival_time"])

# MC-MQDSRP replicas (streaming/spark/replication_query.py): one row per server, partition, object, ...
REPLICATION_SERVERS = table("replication_servers", [
    ("server", "text"), ("role", "text"), ("site_id", "text"), ("psc_name", "text"), ("pec_name", "text"),
    ("psc_neighbors", "json"), ("bsc_neighbors", "json"), ("deleted_objects", "bigint"),
    ("forwarded_requests", "bigint"), ("updated_at", "timestamp")], ["server"], mode="replace")
REPLICATION_PARTITIONS = table("replication_partitions", [
    ("server", "text"), ("partition_id", "text"), ("authority", "text"), ("owned", "bool"), ("last_seq", "text"),
    ("purged_seq", "text"), ("allowed_purge_seq", "text"), ("purge_state", "text"), ("pending_count", "bigint"),
    ("change_missing_window", "text"), ("updated_at", "timestamp"), ("seen_seq", "text"),
    ("last_change_at", "timestamp")], ["server", "partition_id"], mode="replace")
DIRECTORY_OBJECTS = table("directory_objects", [
    ("server", "text"), ("object_guid", "text"), ("partition_id", "text"), ("object_type", "text"),
    ("path_name", "text"), ("seq_number", "text"), ("deleted", "bool"), ("properties", "json"),
    ("updated_at", "timestamp")], ["server", "object_guid"], mode="replace")
DELETED_OBJECTS = table("deleted_objects", [
    ("server", "text"), ("identifier", "text"), ("partition_id", "text"), ("seq_number", "text"),
    ("object_type", "text"), ("scope", "bigint"), ("status", "text"), ("updated_at", "timestamp")],
    ["server", "identifier"], mode="replace")
DIRECTORY_HISTORY = table("directory_history", [
    ("server", "text"), ("object_guid", "text"), ("version", "bigint"), ("partition_id", "text"),
    ("object_type", "text"), ("path_name", "text"), ("seq_number", "text"), ("kind", "text"),
    ("properties", "json"), ("valid_from", "timestamp"), ("valid_to", "timestamp")],
    ["server", "object_guid", "version"], successor=("valid_to", "valid_from", ("server", "object_guid"), "version"))
PENDING_CHANGES = table("pending_changes", [
    ("server", "text"), ("partition_id", "text"), ("seq_number", "text"), ("previous_seq_number", "text"),
    ("command", "text"), ("object", "text"), ("status", "text"), ("updated_at", "timestamp")],
    ["server", "partition_id", "seq_number"], mode="replace")
OUTBOUND_MESSAGES = table("outbound_messages", [
    ("message_id", "text"), ("server", "text"), ("destination", "text"), ("operation", "text"), ("reason", "text"),
    ("partition_id", "text"), ("detail", "json"), ("body", "text"), ("sent_at", "timestamp")], ["message_id"])

# MS-MQCN queue managers (streaming/spark/notification_query.py)
QUEUE_MANAGERS = table("queue_managers", [
    ("machine_id", "text"), ("machine_name", "text"), ("quota", "bigint"), ("journal_quota", "bigint"),
    ("security", "text"), ("updated_at", "timestamp"), ("notifications_waiting", "bigint"),
    ("unresolved_reads", "bigint"), ("last_processed_at", "timestamp"), ("qm_read_at", "timestamp"),
    ("qm_read_seq", "text"), ("qm_since_read", "json")], ["machine_id"], mode="replace")
QM_QUEUES = table("qm_queues", [
    ("queue_manager", "text"), ("queue_guid", "text"), ("path_name", "text"), ("type", "text"), ("label", "text"),
    ("base_priority", "bigint"), ("journal", "bigint"), ("quota", "bigint"), ("journal_quota", "bigint"),
    ("create_time", "bigint"), ("modify_time", "bigint"), ("security", "text"), ("authenticate", "bigint"),
    ("priv_level", "bigint"), ("transactional", "bigint"), ("scope", "bigint"), ("deleted", "bool"),
    ("last_notification", "text"), ("updated_at", "timestamp"), ("read_at", "timestamp"), ("read_seq", "text"),
    ("since_read", "json")], ["queue_manager", "queue_guid"], mode="replace")
NOTIFICATIONS = table("notifications", [
    ("queue_manager", "text"), ("message_id", "text"), ("update_index", "bigint"), ("version", "bigint"),
    ("action", "text"), ("object_guid", "text"), ("outcome", "text"), ("reason", "text"), ("batch", "bigint"),
    ("arrival_at", "timestamp"), ("processed_at", "timestamp")], ["queue_manager", "message_id", "update_index"],
    mode="replace")
NOTIFICATION_BATCHES = table("notification_batches", [
    ("queue_manager", "text"), ("batch", "bigint"), ("timer_started", "timestamp"), ("fired_at", "timestamp"),
    ("count", "bigint"), ("refresh_all", "bool")], ["queue_manager", "batch"], mode="replace")

# Security findings (streaming/operators/findings.py): one row per (kind, source, target) and hour,
# the whole aggregate so far (an operator key keeps it in its state).
SECURITY_FINDINGS = table("security_findings", [
    ("kind", "text"), ("severity", "text"), ("source", "text"), ("target", "text"), ("bucket", "timestamp"),
    ("first_seen", "timestamp"), ("last_seen", "timestamp"), ("count", "bigint"), ("evidence", "json"),
    ("detail", "json")], ["kind", "source", "target", "bucket"], mode="replace")

_SQL_TYPES = {
    "sqlite": {"text": "TEXT", "bigint": "INTEGER", "double": "REAL", "bool": "INTEGER", "bytes": "BLOB",
               "timestamp": "TEXT", "json": "TEXT"},
    "postgresql": {"text": "TEXT", "bigint": "BIGINT", "double": "DOUBLE PRECISION", "bool": "BOOLEAN",
                   "bytes": "BYTEA", "timestamp": "TIMESTAMPTZ", "json": "JSONB"},
}


class SinkError(RuntimeError):
    pass


log = logging.getLogger("dirstream.sink")
WAIT_S = 600.0                 # how long a batch waits for its database to come back
RETRY_S = 2.0                  # between two attempts to reconnect
SAY_EVERY_S = 15.0             # a console line while it waits


class SinkOutage:
    """The process's writers waiting for their database: since when (Unix time; None when none
    waits), how many outages and reconnection attempts so far. Read by the metrics at every scrape."""

    def __init__(self):
        self._lock = threading.Lock()
        self._waiting: dict[int, float] = {}     # writer -> since
        self.outages = 0
        self.retries = 0

    def begin(self, writer: object) -> None:
        with self._lock:
            if not self._waiting:
                self.outages += 1
            self._waiting.setdefault(id(writer), time.time())

    def retried(self) -> None:
        with self._lock:
            self.retries += 1

    def end(self, writer: object) -> None:
        with self._lock:
            self._waiting.pop(id(writer), None)

    @property
    def since(self) -> float | None:
        with self._lock:
            return min(self._waiting.values(), default=None)


OUTAGE = SinkOutage()


def open_sink(url: str, create: bool = True) -> "Sink":
    """The sink at url; create: make its tables when missing (the job's), else only read them (a
    reader's role may hold SELECT alone)."""
    scheme = urlparse(url).scheme
    if scheme == "sqlite":
        return SQLiteSink(url, create)
    if scheme in ("postgresql", "postgres"):
        return PostgresSink(url, create)
    raise SinkError(f"unsupported sink URL {masked(url)!r}: use sqlite:///path.db or postgresql://user@host/db")


class Sink:
    dialect = ""
    placeholder = "?"

    def __init__(self, url: str, create: bool = True):
        self.url = url
        self._builders: dict = {}
        self.conn = self._connect()
        if create:
            self.ensure_schema()

    # ---------------------------------------------------------------- schema
    def ensure_schema(self, tables=None) -> None:
        cur = self.conn.cursor()
        for t in (tables or TABLES.values()):
            cols = ", ".join(f"{c} {_SQL_TYPES[self.dialect][ty]}" for c, ty in t.columns)
            cur.execute(f"CREATE TABLE IF NOT EXISTS {t.name} ({cols}, PRIMARY KEY ({', '.join(t.key)}))")
            have = self._columns(cur, t.name)
            for c, ty in t.columns:            # a sink made by an earlier release gets the new columns
                if c not in have:
                    cur.execute(f"ALTER TABLE {t.name} ADD COLUMN {c} {_SQL_TYPES[self.dialect][ty]}")
            if t.successor:
                cur.execute(_open_rows_index(t))
        self.conn.commit()

    def _columns(self, cur, table: str) -> set[str]:
        cur.execute(f"SELECT * FROM {table} WHERE 1 = 0")
        return {d[0] for d in cur.description}

    # ---------------------------------------------------------------- writing
    def write_batch(self, query_id: str, batch_id: int, rows: dict[str, list[dict]], wait_s: float | None = None) -> bool:
        """Write every table's rows and the batch marker atomically; False if the batch was already
        written. A lost connection is waited for (up to wait_s, default WAIT_S) and the whole batch
        written again on a new one: the rows are iterated again (lists, or typed rows), and the
        marker keeps the write idempotent."""
        wait_s = WAIT_S if wait_s is None else wait_s
        lost_at = None
        try:
            while True:
                try:
                    return self._write_batch_once(query_id, batch_id, rows)
                except Exception as exc:  # noqa: BLE001 -- only a lost connection is waited for
                    if not self._connection_lost(exc):
                        raise
                    if lost_at is None:
                        lost_at, said = time.monotonic(), float("-inf")
                        OUTAGE.begin(self)
                    waited = time.monotonic() - lost_at
                    if waited >= wait_s:
                        raise SinkError(f"the {self.dialect} sink {masked(self.url)} did not answer for {waited:.0f} s "
                                        f"({_first_line(exc)}); start it, then run the job again: it resumes from its "
                                        f"checkpoint") from None
                    if waited - said >= SAY_EVERY_S:
                        said = waited
                        log.warning("the sink %s does not answer (%s): micro-batch %s of %s waits, retrying every "
                                    "%.0f s for up to %.0f s", masked(self.url), _first_line(exc), batch_id, query_id,
                                    RETRY_S, wait_s)
                    time.sleep(RETRY_S)
                    self._reconnect()
        finally:
            if lost_at is not None:
                OUTAGE.end(self)
                log.warning("the sink %s answers again after %.0f s: micro-batch %s of %s written", masked(self.url),
                            time.monotonic() - lost_at, batch_id, query_id)

    def _connection_lost(self, exc: Exception) -> bool:
        return False

    def _reconnect(self) -> None:
        OUTAGE.retried()
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001 -- a broken connection may fail to close
            pass
        try:
            self.conn = self._connect()
        except SinkError:
            pass                                # still down: the next write attempt fails and waits again

    def _write_batch_once(self, query_id: str, batch_id: int, rows: dict[str, list[dict]]) -> bool:
        with self._transaction() as cur:
            cur.execute(f"SELECT 1 FROM sink_batches WHERE query_id = {self.placeholder} AND batch_id = "
                        f"{self.placeholder}", (query_id, batch_id))
            if cur.fetchone():
                return False
            for name, table_rows in rows.items():
                if table_rows:
                    t = TABLES[name]
                    series: set = set()
                    values = self._typed_values(t, table_rows) if hasattr(table_rows, "batches") else \
                        map(self._row_builder(t), table_rows)
                    if t.successor:
                        values = _noting_series(values, t, series)
                    cur.executemany(self._upsert_sql(t), values)
                    if series:
                        cur.executemany(self._successor_sql(t), sorted(series))
            cur.execute(self._upsert_sql(SINK_BATCHES), (query_id, batch_id, self._value("timestamp", utcnow())))
        return True

    def _upsert_sql(self, t: Table) -> str:
        names = t.column_names
        marks = ", ".join([self.placeholder] * len(names))
        conflict = f"ON CONFLICT ({', '.join(t.key)})"
        if t.mode == "insert":
            action = "DO NOTHING"
        elif t.mode == "accumulate":
            action = "DO UPDATE SET " + ", ".join(f"{c} = {t.name}.{c} + excluded.{c}" for c in t.counters)
        else:
            least, greatest = ("min", "max") if self.dialect == "sqlite" else ("LEAST", "GREATEST")
            action = "DO UPDATE SET " + ", ".join(
                f"{c} = {least}({t.name}.{c}, excluded.{c})" if c in t.keep_min else
                f"{c} = {greatest}({t.name}.{c}, excluded.{c})" if c in t.keep_max else
                f"{c} = excluded.{c}" for c in names if c not in t.key)
            if t.first_by:
                action += f" WHERE excluded.{t.first_by} <= {t.name}.{t.first_by}"
        return f"INSERT INTO {t.name} ({', '.join(names)}) VALUES ({marks}) {conflict} {action}"

    def _successor_sql(self, t: Table) -> str:
        """Close the open rows of one series: each takes the start of the series' next row (if any)."""
        ends, starts, series, order = t.successor
        same = " AND ".join(f"n.{c} = {t.name}.{c}" for c in series)
        where = " AND ".join(f"{c} = {self.placeholder}" for c in series)
        return (f"UPDATE {t.name} SET {ends} = (SELECT n.{starts} FROM {t.name} AS n WHERE {same} AND "
                f"n.{order} > {t.name}.{order} ORDER BY n.{order} LIMIT 1) WHERE {where} AND {ends} IS NULL")

    def _row_builder(self, t: Table):
        """A function from a row dict to the table's parameter list: each column's value fetched in
        one C-level map, then converted only in the columns whose type needs it (a call per
        column and row was a fifth of the replication writer's time)."""
        builder = self._builders.get(t.name)
        if builder is None:
            names = t.column_names
            fixes = [(i, convert) for i, (_c, ty) in enumerate(t.columns) if (convert := self._converter(ty))]

            def builder(row: dict) -> list:
                values = list(map(row.get, names))
                for i, convert in fixes:
                    if values[i] is not None:
                        values[i] = convert(values[i])
                return values
            self._builders[t.name] = builder
        return builder

    def _typed_values(self, t: Table, typed):
        """The parameter rows of typed rows (sinks.typed.TypedRows: record batches of the table's
        schema), converted a column at a time in Arrow where this database needs another form."""
        names = t.column_names
        for batch in typed.batches():
            columns = [self._arrow_column(ty, batch.column(names.index(c)) if c in batch.schema.names else None,
                                          batch.num_rows) for c, ty in t.columns]
            yield from zip(*columns)

    def _arrow_column(self, ty: str, array, rows: int) -> list:
        return [None] * rows if array is None else array.to_pylist()

    def _converter(self, ty: str):
        """What a value of a column of this type goes through (None: nothing): times and raw bytes
        may come as their text (an operator's JSON payload, read without conversion)."""
        if ty == "json":
            return _json_text
        if ty == "timestamp":
            return _datetime
        if ty == "bytes":
            return _raw_bytes
        return None

    def _value(self, ty: str, v):
        convert = self._converter(ty)
        return convert(v) if v is not None and convert else v

    # ---------------------------------------------------------------- reading (tests, verify, dashboard)
    def query(self, sql: str, params: tuple = ()) -> list[dict]:
        cur = self.conn.cursor()
        cur.execute(sql, params)
        names = [d[0] for d in cur.description]
        out = [dict(zip(names, row)) for row in cur.fetchall()]
        self.conn.commit()
        return out

    def last_progress(self, query_id: str) -> dict | None:
        rows = self.query(f"SELECT * FROM pipeline_progress WHERE query_id = {self.placeholder} "
                          f"ORDER BY batch_id DESC LIMIT 1", (query_id,))
        return rows[0] if rows else None

    def close(self) -> None:
        self.conn.close()


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
            return _sqlite_time
        if ty == "bool":
            return _sqlite_bool
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
        self.cur.execute("COMMIT" if exc_type is None else "ROLLBACK")
        return False


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


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _json_text(v) -> str:
    return json.dumps(v, sort_keys=True)


def _datetime(v):
    if isinstance(v, str):
        try:
            return datetime.fromisoformat(v)
        except ValueError:
            return v                        # not a time: written as it came
    return v


def _raw_bytes(v):
    return bytes.fromhex(v) if isinstance(v, str) else v


def _sqlite_time(v) -> str:
    """SQLite keeps times as iso() text: an operator's text already in that form (UTC, milliseconds)
    is kept as it is, anything else goes through datetime."""
    if isinstance(v, str):
        if len(v) == 29 and v[19] == "." and v.endswith("+00:00"):
            return v
        v = _datetime(v)
    return iso(v) if isinstance(v, datetime) else v


def _sqlite_bool(v) -> int:
    return int(bool(v))


def _noting_series(values, t: Table, series: set):
    """The values as they pass, noting each row's series (Table.successor)."""
    at = [t.column_names.index(c) for c in t.successor[2]]
    for v in values:
        series.add(tuple(v[i] for i in at))
        yield v


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
