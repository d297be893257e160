"""Typed rows (Arrow record batches of a table's own column types) are what the operators hand to
the sink: for every sink table, random rows written typed give the same stored rows as the same
rows written from dicts, on SQLite and on PostgreSQL; an IPC chunk reads back as written; a value
that fits no column says which table and column."""
import json
import random
from datetime import datetime, timedelta, timezone

import pytest

from streaming.sinks import TABLES, open_sink
from streaming.sinks.typed import JsonText, TypedRows, arrow_schema, pack, record_batch, unpack

_BASE = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _time(rng):
    """An instant as operators and Python write one: the operators' ISO text (UTC, milliseconds),
    microseconds, Z, another offset, a datetime."""
    at = _BASE + timedelta(microseconds=rng.randrange(10**12))
    return rng.choice([at.isoformat(timespec="milliseconds"), at.isoformat(), at.isoformat().replace("+00:00", "Z"),
                       at.astimezone(timezone(timedelta(hours=2))).isoformat(timespec="milliseconds"), at])


def _json(rng):
    return rng.choice([{"b": rng.randrange(9), "a": [1, "x\ny", None]}, ["s", 2.5], "text", 7, True,
                       {"k": {"z": 1, "a": "\t"}}])


def _value(ty: str, rng, key: bool):
    if not key and rng.random() < 0.15:
        return None
    return {"text": lambda: rng.choice(["a", "qm-1", "é\tz", "x" * rng.randrange(40)]) + str(rng.randrange(50)),
            "bigint": lambda: rng.randrange(-2**40, 2**40), "double": lambda: rng.uniform(-1e6, 1e6),
            "bool": lambda: rng.random() < 0.5, "bytes": lambda: rng.randbytes(rng.randrange(12)),
            "timestamp": lambda: _time(rng), "json": lambda: _json(rng)}[ty]()


def _rows(name: str, rng, n: int) -> list[dict]:
    t = TABLES[name]
    rows = []
    for _ in range(n):
        row = {c: _value(ty, rng, c in t.key) for c, ty in t.columns}
        if "raw_value" in row and row["raw_value"] is not None and rng.random() < 0.5:
            row["raw_value"] = row["raw_value"].hex()          # dead letters: raw bytes as hex text
        rows.append(row)
    return rows


def _stored(sink, name: str) -> list:
    return sorted(map(repr, sink.query(f"SELECT * FROM {name}")))


def _both_ways(url_of, tables):
    """Each table's stored rows written from dicts and written typed (in IPC chunks), per seed."""
    for seed in range(3):
        rng = random.Random(seed)
        rows = {name: _rows(name, rng, rng.randrange(1, 60)) for name in tables}
        typed = {name: TypedRows(name, [pack(name, r[i:i + 7]) for i in range(0, len(r), 7)])
                 for name, r in rows.items()}
        stored = []
        for variant, batch in (("dicts", rows), ("typed", typed)):
            sink = open_sink(url_of(f"{variant}{seed}"))
            try:
                assert sink.write_batch("q", 0, batch)
                stored.append({name: _stored(sink, name) for name in tables})
            finally:
                sink.close()
        assert stored[0] == stored[1], seed
        assert all(stored[0].values())


_WRITTEN = [n for n in TABLES if n != "sink_batches"]


def test_typed_rows_are_stored_as_dict_rows_are_in_sqlite(tmp_path):
    _both_ways(lambda name: f"sqlite:///{tmp_path}/{name}.db", _WRITTEN)


def test_typed_rows_are_stored_as_dict_rows_are_in_postgresql(postgres_server):
    import uuid
    _both_ways(lambda name: postgres_server.create_database(f"typed_{name}_{uuid.uuid4().hex[:8]}"), _WRITTEN)


def test_a_chunk_reads_back_as_written():
    rng = random.Random(5)
    rows = _rows("outbound_messages", rng, 20)
    [batch] = unpack(pack("outbound_messages", rows))
    assert batch.schema == arrow_schema("outbound_messages")
    again = TypedRows("outbound_messages", [batch])
    assert len(again) == 20 and list(again) == list(again)
    for before, after in zip(rows, again):
        assert after["message_id"] == before["message_id"]
        assert after["detail"] == (None if before["detail"] is None else json.dumps(before["detail"], sort_keys=True))


def test_json_text_is_taken_as_it_is():
    batch = record_batch("directory_objects", [{"server": "s", "object_guid": "g",
                                                "properties": JsonText('{"b": 1, "a": 2}')}])
    assert batch.column("properties").to_pylist() == ['{"b": 1, "a": 2}']


def test_a_value_that_fits_no_column_names_the_table_and_column():
    with pytest.raises(TypeError, match=r"queue_managers\.quota \(bigint\)"):
        record_batch("queue_managers", [{"machine_id": "m", "quota": "many"}])
