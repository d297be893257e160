"""What every stateful operator query shares: the output schema of its processor (rows of
(table_name, JSON payload)), its one timer per key, and the foreachBatch writer that upserts the
rows into the sink tables in one transaction per micro-batch."""
import json
from datetime import datetime

OUTPUT_DDL = "table_name string, payload string"


def replace_timers(handle, due_ms: int | None) -> None:
    """Each operator keeps at most one timer per key: the next thing due (None: nothing)."""
    for t in list(handle.listTimers()):
        handle.deleteTimer(t)
    if due_ms is not None:
        handle.registerTimer(due_ms)



class TableWriter:
    """foreachBatch for operator outputs: rows of (table_name, JSON payload) upserted in one transaction."""

    def __init__(self, sink_url: str, query_id: str, echo=print, label: str = "discovery"):
        self.sink_url, self.query_id, self.echo, self.label = sink_url, query_id, echo, label
        self._sink = None

    def __call__(self, df, batch_id: int) -> None:
        from ..sinks import open_sink
        if self._sink is None:
            self._sink = open_sink(self.sink_url)
        rows: dict[str, list[dict]] = {}
        for r in df.collect():
            payload = json.loads(r["payload"])
            for k, v in payload.items():
                if k.endswith(("_at", "_seen", "_time")) and isinstance(v, str):
                    payload[k] = datetime.fromisoformat(v)
            rows.setdefault(r["table_name"], []).append(payload)
        written = self._sink.write_batch(self.query_id, batch_id, rows)
        self.after_write(rows)
        if any(rows.values()):
            self.echo(f"{self.label} batch {batch_id}: " + ", ".join(f"{len(v)} {k}" for k, v in rows.items())
                      + ("" if written else " (already written: skipped)"))

    def after_write(self, rows: dict[str, list[dict]]) -> None:
        """Called after every batch, also one already written (a replay): side effects go here."""
