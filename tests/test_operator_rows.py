"""The operator queries' writer: a micro-batch's output rows are grouped by table in
Arrow and parsed as the sink reads them, never all held as dicts at once; the tables come out as
they did when every row was parsed first."""
import json
import random

import pyarrow as pa

from streaming.sinks import open_sink
from streaming.spark.stateful import PayloadRows, batch_rows, for_sink, packed, parse_payload


def _site(i: int, seen: str) -> str:
    return json.dumps({"site_id": f"site{i % 7}", "directory_server": f"ds{i % 5}", "ip_supported": True,
                       "ipx_supported": None, "connected_networks": [f"net{i}"], "first_seen": seen,
                       "last_seen": seen})


def _request(i: int) -> str:
    return json.dumps({"request_id": f"r{i % 40}", "enterprise_id": "e", "client_site": "s", "client": f"c{i}",
                       "sent_at": f"2026-01-01T00:00:{i % 60:02d}.000+00:00", "outcome": "local-site",
                       "directory_servers": [], "connected_networks": [], "replies": i,
                       "completed_at": "2026-01-01T00:01:00.000+00:00"})


def _dead_letter(i: int, rng) -> str:
    return json.dumps({"topic": "msmq.cn.raw", "kafka_partition": i % 3, "kafka_offset": i, "protocol": "mqcn",
                       "raw_value": rng.randbytes(rng.randrange(1, 9)).hex(), "error": "bad",
                       "arrival_time": "2026-01-01T00:00:01.250+00:00",
                       "recorded_at": f"2026-01-01T00:00:02.{rng.randrange(10**6):06d}+00:00"})


def _time_text(rng) -> str:
    """One instant written as operators and Python write times: the sink's own form (UTC,
    milliseconds), microseconds, Z, another offset, naive (read as UTC)."""
    minute, second, ms = rng.randrange(60), rng.randrange(60), rng.randrange(1000)
    return rng.choice([f"2026-01-01T00:{minute:02d}:{second:02d}.{ms:03d}+00:00",
                       f"2026-01-01T00:{minute:02d}:{second:02d}.{ms:03d}{rng.randrange(1000):03d}+00:00",
                       f"2026-01-01T00:{minute:02d}:{second:02d}.{ms:03d}Z",
                       f"2026-01-01T02:{minute:02d}:{second:02d}.{ms:03d}+02:00",
                       f"2026-01-01T00:{minute:02d}:{second:02d}"])


def _output(seed: int, n: int = 600) -> list[tuple[str, str]]:
    """Rows of (table, payload) as a discovery operator writes them, tables interleaved, keys repeated
    (so the order within a table decides what an upsert keeps)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append(rng.choice([("site_topology", _site(i, _time_text(rng))), ("discovery_requests", _request(i)),
                               ("versions", f"line {i}"), ("dead_letters", _dead_letter(i, rng))]))
    return out


def _arrow(rows: list[tuple[str, str]], chunk: int = 64) -> pa.Table:
    batches = [pa.record_batch([pa.array([t for t, _ in rows[i:i + chunk]], pa.string()),
                                pa.array([p for _, p in rows[i:i + chunk]], pa.string())],
                               names=["table_name", "payload"]) for i in range(0, len(rows), chunk)]
    return pa.Table.from_batches(batches)


def test_rows_are_grouped_by_table_in_the_order_written_and_parsed_as_read():
    for seed in range(5):
        output = _output(seed)
        grouped = batch_rows(_arrow(output), frozenset({"versions"}))
        for table in ("site_topology", "discovery_requests"):
            expected = [parse_payload(p) for t, p in output if t == table]
            assert isinstance(grouped[table], PayloadRows) and len(grouped[table]) == len(expected)
            assert list(grouped[table]) == expected and list(grouped[table]) == expected   # read twice
        assert grouped["versions"].to_pylist() == [p for t, p in output if t == "versions"]
        assert list(grouped) == list(dict.fromkeys(t for t, _ in output))


def test_packed_frames_give_the_rows_one_row_per_payload_gives():
    """An operator's frames packed many payloads to a row (as the replication operator yields them)
    are grouped into the same rows, in the same order, as the same payloads one to a row; payloads
    with escaped newlines and tabs stay whole."""
    for seed in range(6):
        rng = random.Random(seed)
        output = _output(seed, n=rng.randrange(1, 400)) + [("site_topology", json.dumps({"site_id": "a\nb\tc"}))]
        cuts = [0] + sorted(rng.sample(range(1, len(output)), min(len(output) - 1, 9))) + [len(output)]
        frames = [output[a:b] for a, b in zip(cuts, cuts[1:])]        # a key's frames, in order
        lines = rng.choice([1, 2, 7, 1000])
        packed_rows = [tuple(r) for f in frames for r in packed(f, lines).itertuples(index=False)]
        assert len(packed_rows) <= len(output)
        plain, grouped = batch_rows(_arrow(output), frozenset({"versions"})), \
            batch_rows(_arrow(packed_rows, chunk=3), frozenset({"versions"}))
        assert list(plain) == list(grouped)
        for table in plain:
            if table == "versions":
                assert grouped[table].to_pylist() == plain[table].to_pylist()
            else:
                assert list(grouped[table]) == list(plain[table]) and len(grouped[table]) == len(plain[table])


def test_the_sink_writes_lazily_parsed_rows_as_it_wrote_parsed_lists(tmp_path):
    for seed in range(3):
        output = [(t, p) for t, p in _output(seed) if t != "versions"]
        lists = {t: [parse_payload(p) for tt, p in output if tt == t] for t in dict.fromkeys(t for t, _ in output)}
        tables = []
        variants = (("lists", lists), ("lazy", batch_rows(_arrow(output))),
                    ("as the TableWriter writes", for_sink(batch_rows(_arrow(output)))))
        for name, rows in variants:
            sink = open_sink(f"sqlite:///{tmp_path}/{name}-{seed}.db")
            try:
                assert sink.write_batch("q", 0, rows)
                tables.append({t: sorted(map(repr, sink.query(f"SELECT * FROM {t}"))) for t in lists})
            finally:
                sink.close()
        assert tables[0] == tables[1] == tables[2] and all(tables[0].values())


def test_ordered_rows_are_the_pandas_rows_in_the_same_order():
    """A key's input as the discovery operator reads it: the rows pandas' concat, sort_values and
    itertuples gave, in the same order and with the same values, over random frames."""
    import pandas as pd
    from streaming.spark.stateful import ARRIVAL_ORDER, ordered_rows
    for seed in range(30):
        rng = random.Random(seed)
        frames = []
        for _ in range(rng.randrange(0, 4)):
            n = rng.randrange(0, 6)
            ms = [1_767_225_600_000 + rng.randrange(0, 5) for _ in range(n)]
            frames.append(pd.DataFrame({
                "state_key": [f"k{seed}"] * n, "arrival_ms": ms,
                "arrival_time": pd.to_datetime(ms, unit="ms", utc=True),
                "topic": [rng.choice(["msmq.sd.raw", "msmq.cn.raw"]) for _ in range(n)],
                "partition": [rng.randrange(4) for _ in range(n)], "offset": rng.sample(range(1000), n),
                "body": [rng.randbytes(rng.randrange(8)) for _ in range(n)],
                "message_id": [None if rng.random() < 0.3 else f"m{rng.randrange(99)}" for _ in range(n)]}))
        got = ordered_rows(iter(frames))
        if not any(len(f) for f in frames):
            assert got == []
            continue
        expected = list(pd.concat(frames).sort_values(list(ARRIVAL_ORDER)).itertuples(index=False))
        assert [tuple(r) for r in got] == [tuple(r) for r in expected]
        assert [r.body for r in got] == [r.body for r in expected] and got[0]._fields == expected[0]._fields


def test_notification_input_rows_are_the_frames_rows_alike_however_they_are_chunked():
    """The notification operator's input as Rows: the values pandas' concat and itertuples gave
    (NaN as None), over random frames; and the same whatever the chunks Spark cuts the key's rows
    into (a column with a null comes as floats: its integers are ints again, so the pickled state
    does not depend on the chunking)."""
    import pickle
    import pandas as pd
    from streaming.operators.notification_input import ROW_FIELDS
    from streaming.spark.notification_query import input_rows
    for seed in range(30):
        rng = random.Random(seed)
        n = rng.randrange(1, 12)
        whole = pd.DataFrame({
            "event_ms": [1_767_225_600_000 + rng.randrange(0, 5) for _ in range(n)],
            "kind": [rng.choice(["mqcn", "directory"]) for _ in range(n)],
            "topic": [rng.choice(["msmq.cn.raw", None]) for _ in range(n)],
            "partition": pd.array([rng.choice([rng.randrange(4), None]) for _ in range(n)], dtype="Int64"),
            "offset": rng.sample(range(1000), n), "body": [rng.randbytes(rng.randrange(8)) for _ in range(n)],
            "message_id": [None if rng.random() < 0.3 else f"m{rng.randrange(99)}" for _ in range(n)],
            "sender_identifier_type": pd.array([rng.choice([0, 2, None]) for _ in range(n)], dtype="Int64"),
            "authentication_level": pd.array([rng.choice([0, 1, None]) for _ in range(n)], dtype="Int64"),
            "source_machine": ["m"] * n, "destination_machine": [None] * n, "destination_queue": ["q"] * n})
        whole = whole.astype({c: "float64" for c in ("partition", "sender_identifier_type", "authentication_level")})
        cut = sorted(rng.sample(range(1, n), rng.randrange(0, n - 1))) if n > 1 else []
        chunks = [whole.iloc[a:b].reset_index(drop=True) for a, b in zip([0] + cut, cut + [n])]
        chunks = [c.astype({k: "int64" for k in ("partition", "sender_identifier_type", "authentication_level")
                            if c[k].notna().all()}) for c in chunks]       # as Arrow gives a chunk without nulls
        got = input_rows(iter(chunks))
        expected = [tuple(None if isinstance(v, float) and v != v else v for v in r)
                    for r in pd.concat(chunks)[list(ROW_FIELDS)].itertuples(index=False, name=None)]
        assert [tuple(r) for r in got] == expected
        assert all(type(v) is int for r in got for v in (r.event_ms, r.offset, r.partition) if v is not None)
        assert pickle.dumps(got) == pickle.dumps(input_rows(iter([whole])))


def test_first_arrival_records_in_arrow_are_first_arrivals_select():
    """The replication writer's selection over Arrow lines publishes what FirstArrivals.select over
    decoded VersionRecords did, in the same order, batch after batch (its memory carried over,
    and forgetting with a small capacity)."""
    from streaming.operators.notification_rows import FirstArrivals
    from streaming.operators.replication_rows import VersionRecord
    from streaming.spark.replication_query import first_arrival_records
    for seed in range(20):
        rng = random.Random(seed)
        capacity = rng.choice([3, 50, 500_000])
        reference, arrow = FirstArrivals(capacity), FirstArrivals(capacity)
        for _ in range(4):
            lines = [VersionRecord(f"qm{rng.randrange(4)}", rng.choice(["", f"k{rng.randrange(12)}"]),
                                   1_767_225_600_000 + rng.randrange(30),
                                   json.dumps({"n": rng.randrange(10**6), "tab": "a\tb"})).encode()
                     for _ in range(rng.randrange(0, 120))]
            expected = [(r.text.encode(), r.owner.encode())
                        for r in reference.select([VersionRecord.decode(line) for line in lines])]
            chunked = pa.chunked_array([lines[:len(lines) // 2], lines[len(lines) // 2:]], pa.string())
            assert list(first_arrival_records(arrow, chunked, chunk=rng.choice([1, 7, 1000]))) == expected


def test_postgresql_takes_the_rows_as_the_table_writer_hands_them_over(postgres_server):
    """The same rows on PostgreSQL: payloads only loaded from JSON (times, raw bytes as text) give
    the tables that fully parsed rows give."""
    import uuid
    output = [(t, p) for t, p in _output(7) if t != "versions"]
    lists = {t: [parse_payload(p) for tt, p in output if tt == t] for t in dict.fromkeys(t for t, _ in output)}
    tables = []
    for rows in (lists, for_sink(batch_rows(_arrow(output)))):
        sink = open_sink(postgres_server.create_database(f"dirstream_test_{uuid.uuid4().hex[:10]}"))
        try:
            assert sink.write_batch("q", 0, rows)
            tables.append({t: sorted(map(repr, sink.query(f"SELECT * FROM {t}"))) for t in lists})
        finally:
            sink.close()
    assert tables[0] == tables[1] and all(tables[0].values())


def _arrow_bytes_held_while(iterate) -> int:
    """The most Arrow memory allocated beyond what was held before, sampled at every item."""
    before, most = pa.total_allocated_bytes(), 0
    for _ in iterate:
        most = max(most, pa.total_allocated_bytes() - before)
    return most


def test_a_large_batch_is_never_held_twice_while_written_and_published():
    """A catch-up's replication batch is hundreds of MB of packed payloads. Grouping it by
    table, writing it to the sink and publishing its versions hold a few packed rows more than the
    batch itself, never a second copy of it (split at once, or concatenated by a take)."""
    from streaming.operators.notification_rows import FirstArrivals
    from streaming.spark.replication_query import first_arrival_records
    rng = random.Random(3)
    output = []
    for i in range(60_000):
        if rng.random() < 0.4:
            output.append(("versions", f"qm{i % 9}\tk{rng.randrange(20_000)}\t{1_767_225_600_000 + i}\t{_site(i, '')}"))
        else:
            output.append((rng.choice(["site_topology", "discovery_requests"]), _site(i, "2026-01-01T00:00:00")))
    table = _arrow([tuple(r) for f in range(0, len(output), 6_000)
                    for r in packed(output[f:f + 6_000], 500).itertuples(index=False)], chunk=8)
    size = table.nbytes
    before = pa.total_allocated_bytes()
    rows = batch_rows(table, frozenset({"versions"}))
    versions = rows.pop("versions")
    grouped = pa.total_allocated_bytes() - before - versions.nbytes
    assert grouped < 0.05 * size, f"grouping held {grouped:,} bytes of a {size:,}-byte batch"
    for name, table_rows in for_sink(rows).items():
        held = _arrow_bytes_held_while(table_rows)
        assert held < 0.05 * size, f"{name}: {held:,} bytes held while read, of a {size:,}-byte batch"
    held = _arrow_bytes_held_while(first_arrival_records(FirstArrivals(), versions, chunk=5_000))
    assert held < 0.25 * versions.nbytes, f"publishing held {held:,} bytes over {versions.nbytes:,} of versions"
