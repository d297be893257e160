"""Typed rows: a sink table's rows as Arrow record batches of the table's own column types, the
form in which operator outputs travel from the Python workers to the sink (serialised as Arrow IPC
streams, a chunk of rows at a time) instead of JSON text parsed again on the driver.

Column types map as: text -> string, bigint -> int64, double -> float64, bool -> bool, bytes ->
binary, timestamp -> timestamp[us, UTC], json -> string holding the JSON text exactly as the sink
stores it (sorted keys), so that a row written typed is the row written from a dict.
"""
import json
from datetime import datetime, timezone

from .tables import TABLES

__all__ = ["arrow_schema", "columns_of", "ipc_bytes", "JsonText", "pack", "record_batch", "TypedRows", "unpack"]

_ARROW_TYPES = {"text": "string", "bigint": "int64", "double": "float64", "bool": "bool_", "bytes": "binary",
                "json": "string"}
_SCHEMAS: dict = {}


class JsonText(str):
    """A json column's value already rendered as the sink stores it (json.dumps with sorted keys):
    taken as it is, not dumped again (an operator that memoises rendered parts passes these)."""


def columns_of(name: str) -> tuple[tuple[str, str], ...]:
    return TABLES[name].columns


def arrow_schema(name: str):
    """The Arrow schema of a sink table: one field per column, in the table's order."""
    schema = _SCHEMAS.get(name)
    if schema is None:
        import pyarrow as pa
        schema = pa.schema([(c, _arrow_type(ty)) for c, ty in columns_of(name)])
        _SCHEMAS[name] = schema
    return schema


def _arrow_type(ty: str):
    import pyarrow as pa
    if ty == "timestamp":
        return pa.timestamp("us", tz="UTC")
    return getattr(pa, _ARROW_TYPES[ty])()


def record_batch(name: str, rows: list[dict]):
    """The rows (dicts as operators make them: times as ISO text or datetimes, raw bytes as bytes or
    hex text, json values as Python values or JsonText) as one record batch of the table's schema.
    Keys a row has beyond the table's columns are left out, as the sink leaves them out."""
    import pyarrow as pa
    arrays = [_column(name, c, ty, [row.get(c) for row in rows]) for c, ty in columns_of(name)]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(name))


def _column(table: str, column: str, ty: str, values: list):
    import pyarrow as pa
    try:
        if ty == "json":
            return pa.array([None if v is None else v if isinstance(v, JsonText) else
                             json.dumps(v, sort_keys=True, default=str) for v in values], pa.string())
        if ty == "timestamp":
            return _timestamps(values)
        if ty == "bytes":
            return pa.array([bytes.fromhex(v) if isinstance(v, str) else v for v in values], pa.binary())
        return pa.array(values, _arrow_type(ty))
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, TypeError, OverflowError) as exc:
        raise TypeError(f"{table}.{column} ({ty}): a value does not fit: {exc}") from None


def _timestamps(values: list):
    """ISO text (what operators write) is parsed by Arrow in one call; datetimes and text without a
    zone (read as UTC, as the sink reads it) go through Python."""
    import pyarrow as pa
    ty = pa.timestamp("us", tz="UTC")
    if all(v is None or isinstance(v, str) for v in values):
        try:
            return pa.array(values, pa.string()).cast(ty)
        except pa.ArrowInvalid:
            pass
    return pa.array([_utc(v) for v in values], ty)


def _utc(v):
    if isinstance(v, str):
        v = datetime.fromisoformat(v)
    if isinstance(v, datetime) and v.tzinfo is None:
        v = v.replace(tzinfo=timezone.utc)
    return v


def pack(name: str, rows: list[dict]) -> bytes:
    """The rows as one Arrow IPC stream (a record batch of the table's schema)."""
    return ipc_bytes(record_batch(name, rows))


def ipc_bytes(batch) -> bytes:
    import pyarrow as pa
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def unpack(data) -> list:
    """The record batches of one IPC stream (bytes or an Arrow buffer): zero-copy views on it."""
    import pyarrow as pa
    return list(pa.ipc.open_stream(pa.py_buffer(data) if isinstance(data, (bytes, bytearray, memoryview))
                                   else data))


class TypedRows:
    """One table's rows of a micro-batch as record batches, each decoded from its IPC chunk when it
    is read: iterating gives row dicts (times as datetimes, json columns as their text), batches()
    the record batches themselves, which the sink writes column by column."""

    def __init__(self, name: str, chunks: list, rows: int | None = None):
        self.name, self.chunks = name, chunks          # IPC streams (bytes or Arrow buffers), or RecordBatches
        self._rows = rows

    def batches(self):
        for chunk in self.chunks:
            if hasattr(chunk, "num_rows"):
                yield chunk
            else:
                yield from unpack(chunk)

    def __len__(self) -> int:
        if self._rows is None:
            self._rows = sum(b.num_rows for b in self.batches())
        return self._rows

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self):
        for batch in self.batches():
            yield from batch.to_pylist()

    def column(self, name: str):
        """One column over every batch, as a pyarrow ChunkedArray."""
        import pyarrow as pa
        arrays = [b.column(name) for b in self.batches()]
        return pa.chunked_array(arrays, type=arrow_schema(self.name).field(name).type)
