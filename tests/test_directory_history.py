"""directory_history: every version of every object as each replica held it, written by the real
SQLite sink one transaction per micro-batch, against the replicas' own tables."""
import json
import random

import pytest

from producers.simulator import Faults, Simulator
from replication_harness import OfflineJob
from streaming.sinks import as_bool, iso, open_sink


def _history_sink(tmp_path, envelopes, truth, cuts, name, url=None):
    """The replication operator fed in the given micro-batches (sync answered by the authorities); each
    micro-batch's directory_history rows written as the job's writer does. Returns (sink, job)."""
    sink = open_sink(url or f"sqlite:///{tmp_path}/{name}.db")
    job = OfflineJob(truth, pec_name="pec0")
    bounds = [0] + sorted(set(cuts)) + [len(envelopes)]
    batch_id = 0
    for lo, hi in zip(bounds, bounds[1:]):
        if hi <= lo:
            continue
        job.feed(envelopes[lo:hi])
        job.run_until_quiet()
        rows, job.history = _as_the_writer_reads(job.history), []
        assert sink.write_batch("q", batch_id, rows)
        assert not sink.write_batch("q", batch_id, rows)     # a replay: skipped
        batch_id += 1
    return sink, job


def _as_the_writer_reads(history: list[dict]) -> dict:
    """The rows as the job's TableWriter hands them to the sink: typed Arrow chunks, read each time
    they are iterated (sinks.typed.TypedRows), properties as their JSON text as the operator renders it."""
    import pyarrow as pa
    from streaming.spark.stateful import batch_rows, typed_frame
    rows = [("directory_history", {**h, "properties": json.dumps(h["properties"], sort_keys=True)}) for h in history]
    frame = typed_frame(rows, 50, rendered={"directory_history": ("properties",)})
    return batch_rows(pa.Table.from_pandas(frame, preserve_index=False))


def _simulated(seed: int, count: int):
    sim = Simulator(seed=seed, faults=Faults(reorder=0.05, duplicate=0.03, drop=0.03, nack=0.01))
    return [m.envelope for m in sim.messages(count)], sim.truth()


def _text(value) -> str:
    """A timestamp as SQLite holds it (PostgreSQL returns datetimes)."""
    return value if value is None or isinstance(value, str) else iso(value)


@pytest.mark.parametrize("seed", range(4))
def test_each_replica_s_history_chains_to_its_current_objects_whatever_the_micro_batches(tmp_path, seed, request):
    envelopes, truth = _simulated(60 + seed, 1200)
    rng = random.Random(seed)
    url = request.getfixturevalue("pg_url") if seed == 0 else None        # PostgreSQL once, SQLite always
    whole, job = _history_sink(tmp_path, envelopes, truth, [], "whole", url)
    history = [{**h, "valid_from": _text(h["valid_from"]), "valid_to": _text(h["valid_to"]),
                "properties": h["properties"] if isinstance(h["properties"], dict) else json.loads(h["properties"])}
               for h in whole.query("SELECT * FROM directory_history ORDER BY server, object_guid, version")]
    assert len(history) > 500
    kinds = {h["kind"] for h in history}
    assert {"created", "modified"} <= kinds

    # each version ends where the next one of the same replica and object starts; the last is open
    series: dict[tuple, list[dict]] = {}
    for h in history:
        series.setdefault((h["server"], h["object_guid"]), []).append(h)
    for rows in series.values():
        for older, newer in zip(rows, rows[1:]):
            assert older["valid_to"] == newer["valid_from"] and older["valid_from"] <= newer["valid_from"]
        assert rows[-1]["valid_to"] is None

    # the open version of each object is what the replica holds now (directory_objects)
    objects = job.rows("directory_objects")
    assert len(objects) == len(series)
    for o in objects:
        last = series[(o["server"], o["object_guid"])][-1]
        assert (last["kind"] == "deleted") == as_bool(o["deleted"])
        assert last["seq_number"] == o["seq_number"] and last["path_name"] == o["path_name"]
        assert last["object_type"] == o["object_type"] and last["properties"] == o["properties"]
        assert last["valid_from"] == o["updated_at"]

    # the same table, numbers and times included, in random micro-batches (without the authorities'
    # sync answers, whose times depend on when the job asked: a pure function of the input)
    cuts = rng.sample(range(1, len(envelopes)), rng.randint(5, 80))
    tables = [_history_sink(tmp_path, envelopes, None, c, f"unanswered{i}")[0] for i, c in enumerate(([], cuts))]
    every = "SELECT * FROM directory_history ORDER BY server, object_guid, version"
    assert tables[0].query(every) == tables[1].query(every) != []
    for sink in (whole, *tables):
        sink.close()


def test_a_deleted_object_s_history_ends_with_its_deletion(tmp_path):
    envelopes, truth = _simulated(7, 3000)
    sink, job = _history_sink(tmp_path, envelopes, truth, list(range(100, 3000, 100)), "deletions")
    deleted = sink.query("SELECT * FROM directory_history WHERE kind = 'deleted'")
    assert deleted, "the simulated history deletes queues"
    for d in deleted:
        later = sink.query("SELECT kind FROM directory_history WHERE server = ? AND object_guid = ? AND version > ? "
                           "ORDER BY version LIMIT 1", (d["server"], d["object_guid"], d["version"]))
        assert (d["valid_to"] is None) == (not later)
        assert not later or later[0]["kind"] == "created"        # only a new creation follows a deletion
    sink.close()


# ---------------------------------------------------------------- dirstream history
def test_dirstream_history_prints_each_replica_s_versions_and_what_it_held_at_a_moment(tmp_path):
    from conftest import dirstream
    envelopes, truth = _simulated(61, 1200)
    sink, _ = _history_sink(tmp_path, envelopes, truth, [400, 800], "cli")
    url = f"sqlite:///{tmp_path}/cli.db"
    # an object modified on several replicas
    guid, server = sink.query("SELECT object_guid, server FROM directory_history WHERE kind = 'modified' "
                              "GROUP BY object_guid, server HAVING count(*) >= 2 ORDER BY object_guid LIMIT 1")[0].values()
    versions = sink.query("SELECT * FROM directory_history WHERE object_guid = ? AND server = ? ORDER BY version",
                          (guid, server))

    done = dirstream("history", "--object", guid.upper(), "--server", server, "--json", "--sink", url)
    assert done.returncode == 0, done.stderr
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(p["version"], p["seq_number"], p["valid_from"], p["valid_to"]) for p in printed] == \
        [(v["version"], v["seq_number"], v["valid_from"], v["valid_to"]) for v in versions]

    # at a moment inside the second version's validity: that version, and only it, for that server
    second = versions[1]
    done = dirstream("history", "--object", guid, "--server", server, "--at", second["valid_from"], "--json",
                     "--sink", url)
    assert [json.loads(line)["version"] for line in done.stdout.splitlines()] == [second["version"]]
    before = dirstream("history", "--object", guid, "--server", server, "--at", "2000-01-01T00:00:00Z",
                       "--sink", url)
    assert before.returncode == 1 and "no replica on" in before.stderr

    # the text form: one line per version, then what it changed
    text = dirstream("history", "--object", guid, "--sink", url)
    assert text.returncode == 0
    assert sum(line.startswith(server) for line in text.stdout.splitlines()) == len(versions)
    changed = {k for k, v in json.loads(versions[1]["properties"]).items()
               if json.loads(versions[0]["properties"]).get(k) != v}
    assert changed and all(f"    {k} = " in text.stdout for k in changed)
    bad = dirstream("history", "--object", guid, "--at", "yesterday", "--sink", url)
    assert bad.returncode == 2 and "not an ISO-8601 time" in bad.stderr
    sink.close()


def test_closing_a_version_looks_up_the_objects_open_row_in_an_index(tmp_path):
    """The soak: closing an object's open row walked every version the object ever had, and
    the writer slowed down as the hour went on. The sink's partial index of the open rows serves the
    update (SQLite's plan says so), and an earlier sink gets the index when it is opened again."""
    import sqlite3
    from streaming.sinks import DIRECTORY_HISTORY
    path = tmp_path / "h.db"
    sink = open_sink(f"sqlite:///{path}")
    sink.close()
    conn = sqlite3.connect(path)
    plan = conn.execute("EXPLAIN QUERY PLAN " + sink._successor_sql(DIRECTORY_HISTORY), ("s", "g", 7)).fetchall()
    assert "USING INDEX directory_history_open" in plan[0][3], plan
    conn.execute("DROP INDEX directory_history_open")
    conn.commit()
    conn.close()
    open_sink(f"sqlite:///{path}").close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT sql FROM sqlite_master WHERE name = 'directory_history_open'").fetchone()[0].endswith(
        "WHERE valid_to IS NULL")
