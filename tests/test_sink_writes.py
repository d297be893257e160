"""A micro-batch's rows go to the sink with each key written once, and directory_history's rows with
the valid_to the batch itself gives them: the tables come out as writing the rows one at a time
would leave them, over many random batches (rows repeated within a batch, versions spread over
batches, in SQLite and PostgreSQL)."""
import random
from datetime import datetime, timedelta, timezone

import pytest

from streaming.sinks import open_sink
from streaming.sinks.tables import TABLES

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
SERVERS, GUIDS = ("ds1", "ds2"), ("g1", "g2", "g3")


def _object(rng, server: str) -> dict:
    return {"server": server, "object_guid": rng.choice(GUIDS), "partition_id": "p", "object_type": "queue",
            "path_name": rng.choice(["a", "b", None]), "seq_number": f"{rng.randrange(99):016x}",
            "deleted": rng.random() < 0.2, "properties": {"label": rng.choice(["x", "y"])},
            "updated_at": (T0 + timedelta(seconds=rng.randrange(60))).isoformat()}


def _dead_letter(rng) -> dict:
    return {"topic": "msmq.sd.raw", "kafka_partition": 0, "kafka_offset": rng.randrange(6),
            "error_reason": rng.choice(["short", "bad"]), "raw_value": bytes([rng.randrange(256)]), "stage": "decode"}


def _site(rng) -> dict:
    seen = [(T0 + timedelta(milliseconds=rng.randrange(10**6))).isoformat() for _ in range(2)]
    return {"site_id": rng.choice(["s1", "s2"]), "directory_server": rng.choice(SERVERS),
            "ip_supported": rng.random() < 0.5, "connected_networks": [rng.randrange(3)],
            "first_seen": rng.choice([min(seen), None]) if rng.random() < 0.1 else min(seen), "last_seen": max(seen)}


def _history(rng, versions: dict) -> dict:
    server, guid = rng.choice(SERVERS), rng.choice(GUIDS)
    versions[server] = versions.get(server, 0) + 1          # a replica's running count
    return {"server": server, "object_guid": guid, "version": versions[server], "kind": "changed",
            "partition_id": "p", "object_type": "queue", "properties": '{"label": "x"}',
            "valid_from": (T0 + timedelta(seconds=versions[server])).isoformat()}


def _batches(seed: int) -> list[dict[str, list[dict]]]:
    rng, versions = random.Random(seed), {}
    return [{"directory_objects": [_object(rng, rng.choice(SERVERS)) for _ in range(rng.randrange(12))],
             "dead_letters": [_dead_letter(rng) for _ in range(rng.randrange(5))],
             "site_topology": [_site(rng) for _ in range(rng.randrange(8))],
             "directory_history": [_history(rng, versions) for _ in range(rng.randrange(8))]}
            for _ in range(rng.randrange(1, 6))]


def _tables(url: str) -> dict:
    s = open_sink(url)
    try:
        return {t: sorted(map(repr, (sorted(r.items()) for r in s.query(f"SELECT * FROM {t}"))))
                for t in ("directory_objects", "dead_letters", "directory_history", "site_topology")}
    finally:
        s.close()


def _write(url: str, batches, one_at_a_time: bool) -> dict:
    s = open_sink(url)
    try:
        n = 0
        for batch in batches:
            for rows in ([{t: [r]} for t, rs in batch.items() for r in rs] if one_at_a_time else [batch]):
                s.write_batch("q", n, rows)
                n += 1
        return dict(s.upserts)
    finally:
        s.close()


@pytest.mark.parametrize("seed", range(40))
def test_each_key_once_leaves_the_tables_as_one_row_at_a_time_in_sqlite(tmp_path, seed):
    batches = _batches(seed)
    whole, single = f"sqlite:///{tmp_path}/whole.db", f"sqlite:///{tmp_path}/single.db"
    upserts = _write(whole, batches, one_at_a_time=False)
    _write(single, batches, one_at_a_time=True)
    assert _tables(whole) == _tables(single)
    kept = {t: len(rows) for t, rows in _tables(whole).items()}
    assert upserts.get("directory_objects", 0) <= sum(len(b["directory_objects"]) for b in batches)
    # each row once, and once more a row whose next version came in a later batch (its valid_to)
    assert upserts.get("directory_history", 0) == kept["directory_history"] + _closed_later(batches)


def _closed_later(batches) -> int:
    """directory_history rows whose series' next row came in a later batch: one per series and batch
    after the first that holds the series."""
    seen, closed = set(), 0
    for batch in batches:
        series = {(r["server"], r["object_guid"]) for r in batch["directory_history"]}
        closed += len(series & seen)
        seen |= series
    return closed


def test_each_key_once_in_postgresql(postgres_server):
    for seed in range(5):
        whole, single = (postgres_server.create_database(f"dirstream_writes_{seed}_{side}") for side in "ws")
        batches = _batches(seed)
        upserts = _write(whole, batches, one_at_a_time=False)
        _write(single, batches, one_at_a_time=True)
        assert _tables(whole) == _tables(single)
        assert upserts.get("directory_history", 0) == len(_tables(whole)["directory_history"]) + _closed_later(batches)


def test_a_batch_repeating_a_key_writes_it_once_with_its_last_row(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    rows = [dict(_object(random.Random(1), "ds1"), object_guid="g1", path_name=name) for name in ("a", "b", "c")]
    upserts = _write(url, [{"directory_objects": rows}], one_at_a_time=False)
    assert upserts == {"directory_objects": 1}
    s = open_sink(url)
    assert [r["path_name"] for r in s.query("SELECT path_name FROM directory_objects")] == ["c"]


def test_the_successor_table_is_the_one_these_rules_read():
    t = TABLES["directory_history"]
    assert t.successor == ("valid_to", "valid_from", ("server", "object_guid"), "version") and t.mode == "insert"


def test_a_site_seen_again_in_a_batch_is_written_once_with_its_first_and_last_sighting(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    rows = [dict(_site(random.Random(i)), site_id="s1", directory_server="ds1") for i in range(6)]
    rows = [dict(r, first_seen=r["first_seen"] or r["last_seen"]) for r in rows]
    upserts = _write(url, [{"site_topology": rows}], one_at_a_time=False)
    assert upserts == {"site_topology": 1}
    stored = open_sink(url).query("SELECT first_seen, last_seen FROM site_topology")[0]
    assert str(stored["first_seen"])[:19] == min(r["first_seen"] for r in rows)[:19]
    assert str(stored["last_seen"])[:19] == max(r["last_seen"] for r in rows)[:19]


def test_a_full_disk_is_the_error_a_failed_batch_reports_and_it_leaves_nothing_written(tmp_path):
    """SQLite rolls a transaction back itself when the database cannot grow ("database or disk is
    full"): the batch fails with that error, not with a ROLLBACK's "no transaction is active"."""
    import sqlite3
    url = f"sqlite:///{tmp_path}/s.db"
    s = open_sink(url)
    try:
        pages = s.conn.raw.execute("PRAGMA page_count").fetchone()[0]
        s.conn.raw.execute(f"PRAGMA max_page_count={pages + 4}")     # the file cannot grow past a few pages
        batch = {"dead_letters": [dict(_dead_letter(random.Random(i)), kafka_offset=i, raw_value=bytes(4096))
                                  for i in range(200)]}
        with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
            s.write_batch("q", 0, batch)
        assert s.query("SELECT COUNT(*) AS n FROM dead_letters")[0]["n"] == 0
        s.conn.raw.execute("PRAGMA max_page_count=1073741823")
        assert s.write_batch("q", 0, batch)
        assert s.query("SELECT COUNT(*) AS n FROM dead_letters")[0]["n"] == 200
    finally:
        s.close()
