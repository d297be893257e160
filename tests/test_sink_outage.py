"""A sink outage is ridden through: a PostgreSQL server stopped while the job writes is waited for,
the micro-batch written again on a new connection once it is back (once: the batch marker keeps it
idempotent), a line on the console while it waits, a metric and an alert if it lasts; a database
that does not come back stops the job with one clear line. Here the sink on its own (a real server
stopped and started); the whole job riding through a 30 s outage, its tables then equal to a fresh
checkpoint's --once, is part of the short soak (tests/test_soak.py)."""
import logging
import threading
import time

import pytest

from conftest import temporary_postgres
from streaming.sinks import OUTAGE, SinkError, open_sink


@pytest.fixture
def own_postgres():
    """A server of this test's own: it is stopped and started again mid-test."""
    yield from temporary_postgres("dirstream-pg-outage-")


def _rows(n: int, first: int = 0) -> dict:
    return {"raw_messages_seen": [{"protocol": "mqcn", "server": f"s{i}", "minute": "2026-01-01T00:00:00+00:00",
                                   "messages": 1, "dead_letters": 0} for i in range(first, first + n)]}


def test_a_batch_waits_for_its_database_and_is_written_once_when_it_is_back(own_postgres, caplog):
    url = own_postgres.create_database("outage")
    sink = open_sink(url)
    try:
        assert sink.write_batch("q", 0, _rows(3))
        own_postgres.stop()                                  # the database goes away between two batches
        back = threading.Timer(8.0, own_postgres.resume)
        back.start()
        seen_waiting = []                                    # the metric, as a scrape would read it

        def scrape():
            from streaming.apps.metrics import sink_outage_families
            for _ in range(12):
                seen_waiting.append(sink_outage_families()[0].samples[0].value)
                time.sleep(0.5)
        watcher = threading.Thread(target=scrape, daemon=True)
        watcher.start()
        outages = OUTAGE.outages
        with caplog.at_level(logging.WARNING, logger="dirstream.sink"):
            assert sink.write_batch("q", 1, _rows(4, first=3), wait_s=600)
        back.join()
        watcher.join(60)
        assert max(seen_waiting) > 0, f"dirstream_sink_unavailable_seconds never showed the wait: {seen_waiting}"
        assert OUTAGE.since is None and OUTAGE.outages == outages + 1
        said = [r.getMessage() for r in caplog.records]
        assert any("does not answer" in m and "micro-batch 1 of q waits" in m for m in said), said
        assert any("answers again" in m for m in said), said
        assert not sink.write_batch("q", 1, _rows(4, first=3))          # already written: skipped
        assert sink.query("SELECT COUNT(*) AS n FROM raw_messages_seen")[0]["n"] == 7
        assert sink.query("SELECT SUM(messages) AS n FROM raw_messages_seen")[0]["n"] == 7
    finally:
        sink.close()


def test_a_database_that_does_not_come_back_stops_the_writer_with_one_clear_line(own_postgres):
    url = own_postgres.create_database("gone")
    sink = open_sink(url)
    try:
        own_postgres.stop()
        with pytest.raises(SinkError, match=r"the postgresql sink postgresql://postgres@127\.0\.0\.1:\d+/gone did "
                                             r"not answer for \d+ s \(.*\); start it, then run the job again: it "
                                             r"resumes from its checkpoint"):
            sink.write_batch("q", 0, _rows(1), wait_s=3)
        assert OUTAGE.since is None
    finally:
        own_postgres.resume()
        sink.close()
