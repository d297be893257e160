"""What every stateful operator query shares: the output schema of its processor (rows of
(table_name, JSON payload)), its one timer per key, the guard that keeps one message an operator
cannot handle from failing the micro-batch, and the foreachBatch writer that upserts the rows into
the sink tables in one transaction per micro-batch."""
import bisect
import json
import os
from datetime import datetime, timezone

OUTPUT_DDL = "table_name string, payload string"
# Test-only: message ids that make every operator raise while handling them (a poison message).
POISON_IDS = frozenset(filter(None, os.environ.get("DIRSTREAM_TEST_POISON_IDS", "").split(",")))


class PoisonForTests(RuntimeError):
    pass


def raise_if_poison(message_id) -> None:
    if message_id in POISON_IDS:
        raise PoisonForTests(f"message {message_id} is poison (DIRSTREAM_TEST_POISON_IDS)")


def apply_guarded(load, items: list, apply):
    """Builds the key's state machine with load() and applies the items in order. An item whose
    application raises is left out: the machine is built again from the stored state (nothing is
    saved before the batch ends) and the other items are applied again, so the key's state is as if
    that message had never come, and a replay gives the same. Returns (machine, [(item, exception)])."""
    steps = GuardedSteps(load, items, apply, take=None, every=len(items))
    for _ in steps:
        pass                                            # one step: nothing is taken before the end
    return steps.machine, steps.poisoned


class GuardedSteps:
    """apply_guarded in steps: iterating yields take(machine) after every `every` items but the
    last ones (which the caller takes with its batch's end), so a key's output is handed on as it
    is made instead of held until its last message (a replica's 2,000 messages of a
    catch-up micro-batch made 120,000 rows, 260 MB in one Python worker). A step never ends between
    two items that together(a, b) keeps in one. After a raising item the machine is built again
    from load() and the other items applied again; the steps already yielded are taken again
    (applying is deterministic: the same rows) and not yielded twice. After the iteration:
    .machine and .poisoned ([(item, exception)]), as apply_guarded returns."""

    def __init__(self, load, items: list, apply, take, every: int, together=None):
        self.load, self.items, self.apply, self.take = load, items, apply, take
        self.bounds = _step_bounds(items, max(every, 1), together)
        self.machine, self.poisoned = None, []

    def __iter__(self):
        poisoned: dict[int, Exception] = {}
        yielded = 0                                     # steps handed on so far
        while True:
            machine, current = self.load(), None
            try:
                for step, (start, end) in enumerate(self.bounds):
                    for i in range(start, end):
                        if i not in poisoned:
                            current = i
                            self.apply(machine, self.items[i])
                    current = None
                    if step + 1 == len(self.bounds):
                        break                           # the last step: the caller's
                    out = self.take(machine)            # taken again after a poison: the same rows
                    if step >= yielded:
                        yielded = step + 1
                        yield out
            except Exception as exc:      # noqa: BLE001 -- any exception: the message is the poison
                if current is None:
                    raise
                poisoned[current] = exc
                continue
            self.machine = machine
            self.poisoned = [(self.items[i], exc) for i, exc in sorted(poisoned.items())]
            return


def _step_bounds(items: list, every: int, together) -> list[tuple[int, int]]:
    bounds, start = [], 0
    while start < len(items):
        end = min(start + every, len(items))
        while together is not None and end < len(items) and together(items[end - 1], items[end]):
            end += 1
        bounds.append((start, end))
        start = end
    return bounds


ARRIVAL_ORDER = ("arrival_ms", "topic", "partition", "offset")


def ordered_rows(frames, order: tuple[str, ...] = ARRIVAL_ORDER) -> list:
    """A key's input rows (the pandas frames Spark hands over) as named tuples, sorted by `order`.
    Without pandas' concat, sort_values and itertuples, which cost about a millisecond per call
    whatever the rows: more than all the work of a key of a few rows (an MQSD request)."""
    rows: list = []
    columns: tuple[str, ...] = ()
    for frame in frames:
        columns = tuple(frame.columns)
        record = _record_type(columns)
        rows.extend(map(record._make, zip(*(frame[c].tolist() for c in columns))))
    if rows:
        at = [columns.index(name) for name in order]
        rows.sort(key=lambda row: [row[i] for i in at])
    return rows


_RECORD_TYPES: dict[tuple[str, ...], type] = {}


def _record_type(columns: tuple[str, ...]) -> type:
    if columns not in _RECORD_TYPES:
        from collections import namedtuple
        _RECORD_TYPES[columns] = namedtuple("Row", columns, rename=True)
    return _RECORD_TYPES[columns]


def dead_letter(stage: str, protocol: str, row, exc: Exception) -> tuple[str, dict]:
    """A dead_letters row for a message an operator raised on: stage, exception, raw bytes and
    Kafka coordinates."""
    def get(name):
        return getattr(row, name, None)
    arrival = get("arrival_ms")
    why = f"{type(exc).__name__}: {exc}"
    return "dead_letters", {
        "topic": get("topic"), "kafka_partition": int(get("partition")), "kafka_offset": int(get("offset")),
        "protocol": protocol, "stage": stage, "error": f"{stage} raised {why}", "error_reason": why,
        "raw_value": bytes(get("body")).hex() if get("body") is not None else None,
        "message_id": get("message_id"), "source_machine": get("source_machine"),
        "arrival_time": _iso(int(arrival)) if arrival is not None else None,
        "recorded_at": datetime.now(timezone.utc).isoformat()}


def timer_dead_letter(stage: str, protocol: str, key: str, due_ms: int, exc: Exception) -> tuple[str, dict]:
    """A dead_letters row for a timer an operator raised in: no message to blame, so the row names
    the key and the due time (topic "(timer of KEY)", offset = the due time in milliseconds)."""
    why = f"{type(exc).__name__}: {exc}"
    return "dead_letters", {
        "topic": f"(timer of {key})", "kafka_partition": 0, "kafka_offset": int(due_ms), "kafka_key": key,
        "protocol": protocol, "stage": stage, "error_reason": why,
        "error": f"{stage} raised {why} in the timer due at {_iso(int(due_ms))}; the key's state stays as it "
                 f"was before the timer and its timers wait for its next message",
        "raw_value": None, "arrival_time": _iso(int(due_ms)), "recorded_at": datetime.now(timezone.utc).isoformat()}


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")


def replace_timers(handle, due_ms: int | None, fired_ms: int | None = None) -> None:
    """Each operator keeps at most one timer per key: the next thing due (None: nothing). fired_ms:
    the timer being handled, which Spark removes itself (deleting it too logs a warning)."""
    for t in list(handle.listTimers()):
        if t != fired_ms:
            handle.deleteTimer(t)
    if due_ms is not None:
        handle.registerTimer(due_ms)


class TableWriter:
    """foreachBatch for operator outputs: rows of (table_name, JSON payload) upserted in one transaction."""

    # rows of these pseudo-tables go to after_write only (published, not written to the sink), as the
    # payload strings the operator wrote
    SIDE_TABLES: tuple[str, ...] = ()

    def __init__(self, sink_url: str, query_id: str, echo=print, label: str = "discovery"):
        self.sink_url, self.query_id, self.echo, self.label = sink_url, query_id, echo, label
        self._sink = None
        self.batch_id: int | None = None
        self.query_name, self.observer = label, None         # set by pipeline._start

    def __call__(self, df, batch_id: int) -> None:
        from ..sinks import open_sink
        if self._sink is None:
            self._sink = open_sink(self.sink_url)
        rows = batch_rows(df.toArrow(), frozenset(self.SIDE_TABLES))   # Arrow: far cheaper than collect()
        side = {name: rows.pop(name) for name in self.SIDE_TABLES if name in rows}
        written = self._sink.write_batch(self.query_id, batch_id, for_sink(rows))
        self.batch_id = batch_id
        self.after_write({**rows, **side})
        if self.observer is not None:
            self.observer.batch(self.query_name, batch_id, None, {t: len(v) for t, v in rows.items()},
                                list(rows.get("dead_letters") or []))
        if any(rows.values()):
            self.echo(f"{self.label} batch {batch_id}: " + ", ".join(f"{len(v)} {k}" for k, v in rows.items())
                      + ("" if written else " (already written: skipped)"))

    def after_write(self, rows: dict[str, list[dict]]) -> None:
        """Called after every batch, also one already written (a replay): side effects go here."""


PACKED_LINES = 2000


def packed(rows: list[tuple[str, str]], lines: int = PACKED_LINES):
    """An operator's output (table, payload) rows as the frame it yields: each table's payloads, in
    order, joined by newlines, at most `lines` to a row. A payload is one line (JSON escapes a
    newline in a string; a version line is tab-separated JSON), and batch_rows splits them again:
    Spark carries a few long rows instead of one per payload from the Python worker to the driver
    (the replication operator writes about 30 rows per MQDSRP message)."""
    import pandas as pd
    by_table: dict[str, list[str]] = {}
    for table, payload in rows:
        by_table.setdefault(table, []).append(payload)
    return pd.DataFrame([(table, "\n".join(texts[i:i + lines])) for table, texts in by_table.items()
                         for i in range(0, len(texts), lines)], columns=["table_name", "payload"])


def batch_rows(table, side_tables: frozenset = frozenset()) -> dict:
    """An operator's output rows (an Arrow table of table_name, payload) by sink table, in the order
    the operator wrote them: PayloadRows, split and parsed as they are read, a few packed rows at a
    time, so that a large micro-batch's rows are never all held as dicts, nor its text twice (a
    catch-up's replication batch is 500 MB of payloads: split at once it doubled the driver's
    memory); a side table's rows stay its payloads in Arrow. A payload may hold several,
    one per line (packed)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    names, payloads = table.column("table_name"), table.column("payload")
    if payloads.type == pa.null():
        payloads = payloads.cast(pa.string())                       # an empty table built from lists
    lines = pc.add(pc.count_substring(payloads, "\n"), 1)          # payloads per packed row
    out: dict = {}
    for name in pc.unique(names).to_pylist():
        mine = pc.equal(names, name)
        if name in side_tables:
            out[name] = pc.list_flatten(pc.split_pattern(payloads.filter(mine), "\n"))
        else:
            out[name] = PayloadRows(payloads, pc.indices_nonzero(mine), pc.sum(lines.filter(mine)).as_py())
    return out


PACKED_AT_ONCE = 16                             # packed rows taken from Arrow at a time (<= 32,000 payloads)


class PayloadRows:
    """One sink table's rows of a micro-batch: the packed payloads at rows `at` of the operator's
    output, split into JSON payloads and parsed into row dicts each time they are iterated (the sink
    writes them once; after_write may read a small table again), a packed row at a time."""

    def __init__(self, payloads, at, lines: int, parse=None):
        self.payloads, self.at = payloads, at   # a pyarrow ChunkedArray of packed payloads, this table's indices
        self.lines = lines                      # the payloads they hold
        self.parse = parse or parse_payload

    def __len__(self) -> int:
        return self.lines

    def texts(self):
        """The payloads, one JSON text per row, in order: taken from each chunk a few packed rows at
        a time (a ChunkedArray's take would concatenate all its chunks first)."""
        at, start = self.at.to_pylist(), 0                  # ascending
        for chunk in self.payloads.chunks:
            end = bisect.bisect_left(at, start + len(chunk))
            mine, at = [i - start for i in at[:end]], at[end:]
            for first in range(0, len(mine), PACKED_AT_ONCE):
                for text in chunk.take(mine[first:first + PACKED_AT_ONCE]).to_pylist():
                    yield from text.split("\n")
            start += len(chunk)

    def __iter__(self):
        return map(self.parse, self.texts())


def for_sink(rows: dict) -> dict:
    """The rows as the sink takes them: payloads only loaded from JSON, their times and raw bytes
    left as text for the sink's column types to convert (sinks._sqlite_time keeps the operators'
    ISO text as it is: no datetime made and formatted again per value)."""
    return {name: PayloadRows(r.payloads, r.at, r.lines, json.loads) if isinstance(r, PayloadRows) else r
            for name, r in rows.items()}


def parse_payload(text: str) -> dict:
    """A row dict from an operator's JSON payload: times and raw bytes back to their types."""
    payload = json.loads(text)
    for k, v in payload.items():
        if (k.endswith(("_at", "_seen", "_time")) or k in ("valid_from", "valid_to")) and isinstance(v, str):
            payload[k] = datetime.fromisoformat(v)
        elif k == "raw_value" and isinstance(v, str):
            payload[k] = bytes.fromhex(v)
    return payload
