"""A key's input rows as Spark hands them over (pandas frames), as named tuples in arrival order."""

__all__ = ["ARRIVAL_ORDER", "ordered_rows"]


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
