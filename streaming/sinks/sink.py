"""What every sink does, whatever its database: the schema made or extended, a micro-batch written
in one transaction with its marker (idempotent), a lost connection waited for, rows read back."""
import logging
import time
from collections import Counter

from .outage import OUTAGE, RETRY_S, SAY_EVERY_S, WAIT_S
from .tables import SINK_BATCHES, SQL_TYPES, TABLES, Table, open_rows_index
from .values import as_datetime, first_line, json_text, masked, raw_bytes, utcnow

__all__ = ["closed_in_batch", "once_per_key", "Sink", "SinkError"]


class SinkError(RuntimeError):
    """environment: the sink did not answer (the machine's, not a setting: starting again may help)."""

    def __init__(self, message: str, environment: bool = False):
        super().__init__(message)
        self.environment = environment


log = logging.getLogger("dirstream.sink")


class Sink:
    dialect = ""
    placeholder = "?"

    def __init__(self, url: str, create: bool = True):
        self.url = url
        self._builders: dict = {}
        self.upserts: Counter = Counter()       # rows written (upserted, or closed by a later batch), by table
        self.conn = self._connect()
        if create:
            self.ensure_schema()

    # ---------------------------------------------------------------- schema
    def ensure_schema(self, tables=None) -> None:
        cur = self.conn.cursor()
        for t in (tables or TABLES.values()):
            cols = ", ".join(f"{c} {SQL_TYPES[self.dialect][ty]}" for c, ty in t.columns)
            cur.execute(f"CREATE TABLE IF NOT EXISTS {t.name} ({cols}, PRIMARY KEY ({', '.join(t.key)}))")
            have = self._columns(cur, t.name)
            for c, ty in t.columns:            # a sink made by an earlier release gets the new columns
                if c not in have:
                    cur.execute(f"ALTER TABLE {t.name} ADD COLUMN {c} {SQL_TYPES[self.dialect][ty]}")
            if t.successor:
                cur.execute(open_rows_index(t))
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
                                        f"({first_line(exc)}); start it, then run the job again: it resumes from its "
                                        f"checkpoint", environment=True) from None
                    if waited - said >= SAY_EVERY_S:
                        said = waited
                        log.warning("the sink %s does not answer (%s): micro-batch %s of %s waits, retrying every "
                                    "%.0f s for up to %.0f s", masked(self.url), first_line(exc), batch_id, query_id,
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
                    self._write_table(cur, TABLES[name], table_rows)
            cur.execute(self._upsert_sql(SINK_BATCHES), (query_id, batch_id, self._value("timestamp", utcnow())))
        return True

    def _write_table(self, cur, t: Table, table_rows) -> None:
        """One table's rows of a batch, each key once (as the rows one by one would leave it), and a
        successor table's rows with the ends the batch itself gives them."""
        values = self._typed_values(t, table_rows) if hasattr(table_rows, "batches") else \
            map(self._row_builder(t), table_rows)
        values = once_per_key(values, t)
        closing = ()
        if t.successor:
            values, closing = closed_in_batch(values, t)
        cur.executemany(self._upsert_sql(t), values)
        closed = 0
        if closing:
            cur.executemany(self._successor_sql(t), closing)
            closed = max(cur.rowcount, 0)       # the stored rows it closed (most series start in the batch)
        self.upserts[t.name] += len(values) + closed

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
        """Close the stored open rows of one series that come before the batch's first row of it (its
        parameters: closed_in_batch's): each takes the start of the series' next row."""
        ends, starts, series, order = t.successor
        same = " AND ".join(f"n.{c} = {t.name}.{c}" for c in series)
        where = " AND ".join(f"{c} = {self.placeholder}" for c in series)
        return (f"UPDATE {t.name} SET {ends} = (SELECT n.{starts} FROM {t.name} AS n WHERE {same} AND "
                f"n.{order} > {t.name}.{order} ORDER BY n.{order} LIMIT 1) WHERE {where} AND {ends} IS NULL "
                f"AND +{order} < {self.placeholder}")      # unary +: the open rows' index, not the key's range

    def _row_builder(self, t: Table):
        """A function from a row dict to the table's parameter list: each column's value fetched in
        one C-level map, then converted only in the columns whose type needs it (not a Python call
        per column and row: the writer takes millions of rows an hour)."""
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
            return json_text
        if ty == "timestamp":
            return as_datetime
        if ty == "bytes":
            return raw_bytes
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


def once_per_key(values, t: Table) -> list:
    """A batch's parameter rows with each key once, leaving the table as executing them all in order
    would: the first of a key where a stored row is kept (insert); where a row replaces the stored one,
    the last, its keep_min / keep_max columns the least / greatest of the key's rows (a key with a
    null there keeps all its rows: the databases order nulls apart). Tables whose rows replace the
    stored one only if not later (first_by) and accumulating ones pass as they are."""
    keep_first = t.mode == "insert"
    if not keep_first and (t.mode != "replace" or t.first_by):
        return list(values)
    names = t.column_names
    at = [names.index(c) for c in t.key]
    kept: dict = {}
    if keep_first or not (t.keep_min or t.keep_max):
        for v in values:
            key = tuple(v[i] for i in at)
            if not keep_first or key not in kept:
                kept[key] = v
        return list(kept.values())
    for v in values:
        kept.setdefault(tuple(v[i] for i in at), []).append(v)
    return [v for rows in kept.values() for v in _merged(rows, t)]


def _merged(rows: list, t: Table) -> list:
    """One key's rows of a replace table with keep_min / keep_max columns, as one row where it can."""
    if len(rows) == 1:
        return rows
    names = t.column_names
    least, greatest = [names.index(c) for c in t.keep_min], [names.index(c) for c in t.keep_max]
    kept = [row[i] for row in rows for i in least + greatest]
    if None in kept or len({type(v) for v in kept}) > 1:
        return rows
    merged = list(rows[-1])
    for i in least:
        merged[i] = min(row[i] for row in rows)
    for i in greatest:
        merged[i] = max(row[i] for row in rows)
    return [merged]


def closed_in_batch(values: list, t: Table) -> tuple[list, list]:
    """A successor table's rows (each key once) with their ends set where the series' next row is in
    the batch, and for each series (its columns, then its first order in the batch) the update that
    closes the stored row before it. A series' rows in a batch all come after its stored ones
    (directory_history: a replica numbers its versions with a running count)."""
    ends, starts, series, order = t.successor
    names = t.column_names
    ends_at, starts_at, order_at = names.index(ends), names.index(starts), names.index(order)
    series_at = [names.index(c) for c in series]
    rows = [list(v) for v in values]
    by_series: dict[tuple, list] = {}
    for row in rows:
        by_series.setdefault(tuple(row[i] for i in series_at), []).append(row)
    closing = []
    for key, members in by_series.items():
        members.sort(key=lambda row: row[order_at])
        for row, following in zip(members, members[1:]):
            if row[ends_at] is None:
                row[ends_at] = following[starts_at]
        closing.append((*key, members[0][order_at]))
    return rows, sorted(closing)
