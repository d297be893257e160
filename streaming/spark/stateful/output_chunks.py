"""An operator's sink rows as (table_name, an Arrow IPC chunk of that table's typed rows), and back on the
driver as the sink reads them."""
from .dead_letters import unfit_output_row

__all__ = ["batch_rows", "CHUNK_ROWS", "typed_chunks", "typed_frame"]


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
    from ...sinks.typed import JsonText
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
    from ...sinks.typed import pack
    try:
        return [(table, pack(table, rows))]
    except (TypeError, OverflowError):
        fit, unfit = [], []
        for row in rows:
            try:
                pack(table, [row])
                fit.append(row)
            except (TypeError, OverflowError) as exc:
                unfit.append(unfit_output_row(table, row, exc))
        return ([(table, pack(table, fit))] if fit else []) + [("dead_letters", pack("dead_letters", unfit))]


def batch_rows(table, order: list[int] | None = None) -> dict:
    """An operator's output (an Arrow table of table_name, rows) by table, in the order the operator
    wrote them (or in `order`, positions of the table's rows): TypedRows over the IPC chunks, decoded
    (zero-copy) as the sink reads them, so a micro-batch's output is held once, as Spark handed it over."""
    from ...sinks.typed import TypedRows
    names = table.column("table_name").to_pylist()
    buffers = [chunk[i].as_buffer() for chunk in table.column("rows").chunks for i in range(len(chunk))]
    out: dict[str, list] = {}
    for i in (range(len(names)) if order is None else order):
        out.setdefault(names[i], []).append(buffers[i])
    return {name: TypedRows(name, chunks) for name, chunks in out.items()}
