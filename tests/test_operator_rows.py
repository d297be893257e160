"""The operator queries' writer: a micro-batch's output rows travel as typed Arrow chunks per
table, are grouped by table in the order written and read as the sink reads them, never all held
twice; the tables come out as they do when the rows are written as dicts."""
import random

import pyarrow as pa

from streaming.sinks import open_sink
from streaming.sinks.typed import record_batch
from streaming.spark.stateful import batch_rows, typed_frame

def _site(i: int, seen: str) -> dict:
    return {"site_id": f"site{i % 7}", "directory_server": f"ds{i % 5}", "ip_supported": True,
            "ipx_supported": None, "connected_networks": [f"net{i}"], "first_seen": seen, "last_seen": seen}


def _request(i: int) -> dict:
    return {"request_id": f"r{i % 40}", "enterprise_id": "e", "client_site": "s", "client": f"c{i}",
            "sent_at": f"2026-01-01T00:00:{i % 60:02d}.000+00:00", "outcome": "local-site",
            "directory_servers": [], "connected_networks": [], "replies": i,
            "completed_at": "2026-01-01T00:01:00.000+00:00"}


def _dead_letter(i: int, rng) -> dict:
    return {"topic": "msmq.cn.raw", "kafka_partition": i % 3, "kafka_offset": i, "protocol": "mqcn",
            "raw_value": rng.randbytes(rng.randrange(1, 9)).hex(), "error": "bad",
            "arrival_time": "2026-01-01T00:00:01.250+00:00",
            "recorded_at": f"2026-01-01T00:00:02.{rng.randrange(10**6):06d}+00:00"}


def _time_text(rng) -> str:
    """One instant written as operators and Python write times: the sink's own form (UTC,
    milliseconds), microseconds, Z, another offset."""
    minute, second, ms = rng.randrange(60), rng.randrange(60), rng.randrange(1000)
    return rng.choice([f"2026-01-01T00:{minute:02d}:{second:02d}.{ms:03d}+00:00",
                       f"2026-01-01T00:{minute:02d}:{second:02d}.{ms:03d}{rng.randrange(1000):03d}+00:00",
                       f"2026-01-01T00:{minute:02d}:{second:02d}.{ms:03d}Z",
                       f"2026-01-01T02:{minute:02d}:{second:02d}.{ms:03d}+02:00"])


def _output(seed: int, n: int = 600) -> list[tuple[str, dict]]:
    """Rows of (table, row) as a discovery operator writes them, tables interleaved, keys repeated
    (so the order within a table decides what an upsert keeps)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append(rng.choice([("site_topology", _site(i, _time_text(rng))), ("discovery_requests", _request(i)),
                               ("dead_letters", _dead_letter(i, rng))]))
    return out


def _arrow(frames) -> pa.Table:
    """The frames an operator yielded as Spark hands them to the writer (df.toArrow())."""
    tables = [pa.Table.from_pandas(f, preserve_index=False) for f in frames]
    return pa.concat_tables(tables) if tables else pa.table({"table_name": pa.array([], pa.string()),
                                                              "rows": pa.array([], pa.binary())})


def _cut(output: list, rng) -> list[list]:
    """A key's output cut into the frames it yields, in order."""
    cuts = [0] + sorted(rng.sample(range(1, len(output)), min(len(output) - 1, 9))) + [len(output)]
    return [output[a:b] for a, b in zip(cuts, cuts[1:])]


def _as_typed(table: str, rows: list[dict]) -> list[dict]:
    return record_batch(table, rows).to_pylist()


def test_rows_are_grouped_by_table_in_the_order_written_and_read_typed():
    for seed in range(5):
        output = _output(seed)
        grouped = batch_rows(_arrow([typed_frame(output)]))
        assert list(grouped) == list(dict.fromkeys(t for t, _ in output))
        for table in grouped:
            expected = _as_typed(table, [r for t, r in output if t == table])
            assert len(grouped[table]) == len(expected)
            assert list(grouped[table]) == expected and list(grouped[table]) == expected   # read twice


def test_chunked_frames_give_the_rows_one_chunk_gives():
    """An operator's frames, each table's rows cut into chunks of any size, are grouped into the same
    rows, in the same order, as the same rows in one frame and one chunk per table."""
    for seed in range(6):
        rng = random.Random(seed)
        output = _output(seed, n=rng.randrange(1, 400)) + [("site_topology", _site(0, "2026-01-01T00:00:00Z")
                                                            | {"site_id": "a\nb\tc"})]
        chunk_rows = rng.choice([1, 2, 7, 1000])
        one, cut = batch_rows(_arrow([typed_frame(output)])), \
            batch_rows(_arrow([typed_frame(f, chunk_rows) for f in _cut(output, rng)]))
        assert list(one) == list(cut)
        for table in one:
            assert list(cut[table]) == list(one[table]) and len(cut[table]) == len(one[table])


def test_a_row_that_fits_no_column_is_a_dead_letter_and_the_others_are_kept():
    """An operator row with a value its table cannot store (a text in a bigint column) does not fail
    the micro-batch: it becomes a dead letter naming the table and column, the same on a replay."""
    output = _output(11, n=50)
    bad = ("discovery_requests", _request(3) | {"replies": "many"})
    rows = output[:20] + [bad] + output[20:]
    typed = batch_rows(_arrow([typed_frame(rows)]))
    expected = [r for t, r in output if t == "discovery_requests"]
    assert list(typed["discovery_requests"]) == _as_typed("discovery_requests", expected)
    unfit = [d for d in typed["dead_letters"] if d["topic"] == "(output to discovery_requests)"]
    assert len(unfit) == 1 and "discovery_requests.replies (bigint)" in unfit[0]["error"]
    again = batch_rows(_arrow([typed_frame(rows)]))["dead_letters"]
    assert [d["kafka_offset"] for d in again if d["topic"].startswith("(output")] == [unfit[0]["kafka_offset"]]


def test_the_sink_writes_typed_rows_as_it_writes_the_same_rows_as_dicts(tmp_path):
    for seed in range(3):
        rng = random.Random(seed)
        output = _output(seed)
        lists = {t: [p for tt, p in output if tt == t] for t in dict.fromkeys(t for t, _ in output)}
        typed = batch_rows(_arrow([typed_frame(f, rng.choice([3, 2000])) for f in _cut(output, rng)]))
        tables = []
        for name, rows in (("dicts", lists), ("typed", typed)):
            sink = open_sink(f"sqlite:///{tmp_path}/{name}-{seed}.db")
            try:
                assert sink.write_batch("q", 0, rows)
                tables.append({t: sorted(map(repr, sink.query(f"SELECT * FROM {t}"))) for t in lists})
            finally:
                sink.close()
        assert tables[0] == tables[1] and all(tables[0].values())


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
            "source_machine": ["m"] * n, "destination_machine": [None] * n, "destination_queue": ["q"] * n,
            "capture": [rng.choice([None, '{"capture": "c.pcap", "position": "packet 3"}']) for _ in range(n)]})
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


def test_a_steps_versions_cross_to_each_queue_manager_in_one_row_and_arrive_as_their_own_rows():
    """The first operator packs a step's directory versions for one queue manager in one row; the
    queue manager's input unpacks them into exactly the DIRECTORY rows one row per version gave
    (pickled alike: the held rows of its state do not change), in order, beside the other rows."""
    import pickle
    import pandas as pd
    from streaming.operators.notification_input import DIRECTORY, DIRECTORY_VERSIONS, Row
    from streaming.spark.job_query import FIRST_COLUMNS, ROW_FIELDS, DirectoryProcessor
    from streaming.spark.notification_query import input_rows
    from streaming.spark.replication_query import step_frame
    for seed in range(30):
        rng = random.Random(seed)
        versions = [type("V", (), {"owner": rng.choice(["qm1", "qm2", "qm3"]), "event_ms": 1_767_225_600_000 +
                                   rng.randrange(50), "text": rng.choice(["", "{}", '{"a": "\u00e9"}']) * rng.randrange(3)})
                    for _ in range(rng.randrange(1, 40))]
        registry = [{"event_ms": 1_767_225_600_000, "text": "r"}] * rng.randrange(3)
        out = step_frame([("dead_letters", _dead_letter(1, rng))] * rng.randrange(2), versions, registry)
        processor = DirectoryProcessor()
        processor.seq = iter(range(10**6))
        frame = processor._frame("R|ds1", out)
        packed = frame[frame["kind"] == DIRECTORY_VERSIONS]
        assert sorted(packed["route_key"]) == sorted({v.owner for v in versions})   # one row per queue manager
        assert list(frame.columns) == list(FIRST_COLUMNS)
        for owner in {v.owner for v in versions}:
            mine = frame[frame["route_key"] == owner][list(ROW_FIELDS)]
            got = input_rows(iter([mine.reset_index(drop=True)]))
            expected = [Row(v.event_ms, DIRECTORY, None, None, None, v.text.encode(), None, None, None, None, None, None)
                        for v in versions if v.owner == owner]
            assert got == expected and pickle.dumps([tuple(r) for r in got]) == pickle.dumps([tuple(r) for r in expected])
        # a frame mixing packed rows with notifications keeps each in its place
        mixed = pd.concat([frame[frame["route_key"] == versions[0].owner][list(ROW_FIELDS)],
                           pd.DataFrame([dict.fromkeys(ROW_FIELDS) | {"event_ms": 5, "kind": "mqcn", "body": b"x"}])])
        rows = input_rows(iter([mixed.reset_index(drop=True)]))
        assert rows[-1].kind == "mqcn" and rows[-1].body == b"x" and all(r.kind == DIRECTORY for r in rows[:-1])


def _arrow_bytes_held_while(iterate) -> int:
    """The most Arrow memory allocated beyond what was held before, sampled at every item."""
    before, most = pa.total_allocated_bytes(), 0
    for _ in iterate:
        most = max(most, pa.total_allocated_bytes() - before)
    return most


def test_a_large_batch_is_never_held_twice_while_written():
    """A catch-up's batch is hundreds of MB of typed chunks. Grouping it by table and reading it as
    the sink writes it hold a chunk or so more than the batch itself, never a second copy of it
    (decoded at once, or concatenated by a take)."""
    rng = random.Random(3)
    output = [(rng.choice(["site_topology", "discovery_requests"]), _site(i, "2026-01-01T00:00:00Z") | _request(i))
              for i in range(60_000)]
    table = _arrow([typed_frame(output[f:f + 6_000], 500) for f in range(0, len(output), 6_000)])
    size = table.nbytes
    before = pa.total_allocated_bytes()
    rows = batch_rows(table)
    grouped = pa.total_allocated_bytes() - before
    assert grouped < 0.05 * size, f"grouping held {grouped:,} bytes of a {size:,}-byte batch"
    for name, table_rows in rows.items():
        held = _arrow_bytes_held_while(table_rows.batches())
        assert held < 0.05 * size, f"{name}: {held:,} bytes held while read, of a {size:,}-byte batch"


def test_the_one_querys_writer_puts_every_keys_rows_back_in_the_order_it_wrote_them():
    """The job's sink rows cross two shuffles (streaming.spark.job_query): whatever order Spark hands
    them over in, each key's rows of a table come out in the order that key wrote them, as chunks
    of the same bytes."""
    from streaming.spark.job_query import key_order
    for seed in range(10):
        rng = random.Random(seed)
        written = []                            # (origin, seq, table, chunk) in each key's order
        for origin in (f"R|s{k}" for k in range(rng.randrange(1, 6))):
            seq = rng.randrange(1000)
            for _ in range(rng.randrange(1, 12)):
                seq += rng.randrange(1, 50)      # a task's counter: increasing, with gaps
                table = rng.choice(["site_topology", "discovery_requests"])
                written.append((origin, seq, table, f"{origin}:{seq}".encode()))
        handed = written[:]
        rng.shuffle(handed)
        cut = rng.randrange(len(handed) + 1)
        table = pa.concat_tables([pa.table({"origin": [h[0] for h in part], "seq": [h[1] for h in part],
                                            "table_name": [h[2] for h in part], "rows": [h[3] for h in part]},
                                           schema=pa.schema([("origin", pa.string()), ("seq", pa.int64()),
                                                             ("table_name", pa.string()), ("rows", pa.binary())]))
                                  for part in (handed[:cut], handed[cut:])])
        got = batch_rows(table, key_order(table))
        for name in {w[2] for w in written}:
            expected = [w[3] for w in sorted(written, key=lambda w: (w[0], w[1])) if w[2] == name]
            assert [bytes(b) for b in got[name].chunks] == expected


def test_event_times_are_the_text_datetime_gives_them_over_many_times():
    """ts builds the text from the second's (memoised) and the milliseconds: the same as isoformat."""
    import random
    from datetime import datetime, timezone
    from streaming.operators.replication_rows import ts
    rng = random.Random(7)
    times = [rng.randrange(-10**12, 4_102_444_800_000) for _ in range(20_000)] + [-1, 0, 999, 1000, 1_796_562_834_147]
    assert [ts(ms) for ms in times] == [
        datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds") for ms in times]
