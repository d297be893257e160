"""What every stateful operator shares: its sink rows as (table_name, an Arrow IPC chunk of that
table's typed rows), its one timer per key, and the guard that keeps one message an operator cannot
handle from failing the micro-batch."""
from datetime import datetime, timezone

__all__ = ["apply_guarded", "ARRIVAL_ORDER", "batch_rows", "CHUNK_ROWS", "dead_letter", "GuardedSteps",
           "ordered_rows", "replace_timers", "timer_dead_letter", "typed_chunks", "typed_frame"]


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
    the timer being handled, which Spark removes itself (deleting it too logs a warning). A timer
    already due when it should be stays: deleting and registering it again costs two round trips
    to the JVM and leaves a deleted entry for every task's expired-timer scan to step over."""
    existing = [t for t in handle.listTimers() if t != fired_ms]
    if due_ms is not None and existing == [due_ms]:
        return
    for t in existing:
        handle.deleteTimer(t)
    if due_ms is not None:
        handle.registerTimer(due_ms)


CHUNK_ROWS = 2000


def typed_frame(rows: list[tuple[str, dict]], chunk_rows: int = CHUNK_ROWS, rendered: dict | None = None):
    """An operator's output (table, row dict) rows as the frame it yields: each table's rows, in
    order, as Arrow IPC chunks of the table's own column types (sinks.typed), at most `chunk_rows`
    to a chunk. Spark carries a few binary rows from the Python worker to the driver instead of one
    per sink row, and the driver hands them to the sink without parsing anything (the replication
    operator writes about 30 rows per MQDSRP message). rendered: {table: json columns whose values
    are already their sink JSON text}."""
    import pandas as pd
    return pd.DataFrame(typed_chunks(rows, chunk_rows, rendered), columns=["table_name", "rows"])


def typed_chunks(rows: list[tuple[str, dict]], chunk_rows: int = CHUNK_ROWS,
                 rendered: dict | None = None) -> list[tuple[str, bytes]]:
    """typed_frame's (table_name, IPC chunk) pairs, as a list."""
    from ..sinks.typed import JsonText
    by_table: dict[str, list] = {}
    for table, row in rows:
        by_table.setdefault(table, []).append(row)
    for table, columns in (rendered or {}).items():
        for row in by_table.get(table, ()):
            for c in columns:
                if row.get(c) is not None:
                    row[c] = JsonText(row[c])
    chunks = [(table, items[i:i + chunk_rows]) for table, items in by_table.items()
              for i in range(0, len(items), chunk_rows)]
    return [packed for table, items in chunks for packed in _packed(table, items)]


def _packed(table: str, rows: list[dict]) -> list[tuple[str, bytes]]:
    """The rows as one chunk; if a value fits no column (an operator row the sink could not store
    either), the others as their chunk and each such row as a dead letter naming the table and
    column: the micro-batch goes on."""
    from ..sinks.typed import pack
    try:
        return [(table, pack(table, rows))]
    except (TypeError, OverflowError):
        fit, unfit = [], []
        for row in rows:
            try:
                pack(table, [row])
                fit.append(row)
            except (TypeError, OverflowError) as exc:
                unfit.append(_unfit_row(table, row, exc))
        return ([(table, pack(table, fit))] if fit else []) + [("dead_letters", pack("dead_letters", unfit))]


def _unfit_row(table: str, row: dict, exc: Exception) -> dict:
    """A dead_letters row for an operator's output row that fits no column of its table: topic
    "(output to TABLE)", offset a digest of the row (the same row gives the same key on a replay)."""
    import zlib
    text = repr(sorted(row.items(), key=lambda kv: kv[0]))
    why = f"{type(exc).__name__}: {exc}"
    return {"topic": f"(output to {table})", "kafka_partition": 0, "kafka_offset": zlib.crc32(text.encode()),
            "stage": "operator output", "error_reason": why,
            "error": f"a row for {table} could not be stored ({why}): {text[:2000]}",
            "recorded_at": datetime.now(timezone.utc).isoformat()}


def batch_rows(table, order: list[int] | None = None) -> dict:
    """An operator's output (an Arrow table of table_name, rows) by table, in the order the operator
    wrote them (or in `order`, positions of the table's rows): TypedRows over the IPC chunks, decoded
    (zero-copy) as the sink reads them, so a micro-batch's output is held once, as Spark handed it over."""
    from ..sinks.typed import TypedRows
    names = table.column("table_name").to_pylist()
    buffers = [chunk[i].as_buffer() for chunk in table.column("rows").chunks for i in range(len(chunk))]
    out: dict[str, list] = {}
    for i in (range(len(names)) if order is None else order):
        out.setdefault(names[i], []).append(buffers[i])
    return {name: TypedRows(name, chunks) for name, chunks in out.items()}
