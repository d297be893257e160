"""The operators' progress in pipeline_progress: a StreamingQueryListener on the driver turns each
micro-batch's Spark progress into one row (input rows, duration, state rows and memory, timers fired,
and the rows the watermark dropped as late, which would otherwise vanish silently), query_name
"dirstream-operators". The job's writer commits its own row (records read, dead letters, lag) with the
batch's tables (streaming/spark/pipeline.py)."""
import json
import logging
from datetime import datetime, timezone

from pyspark.sql.streaming import StreamingQueryListener

__all__ = ["JsonProgressListener", "log", "operator_progress_row", "OperatorProgress", "source_lag"]

log = logging.getLogger("dirstream.progress")


def operator_progress_row(p, query_id: str) -> dict:
    """One pipeline_progress row from a StreamingQueryProgress."""
    ops = list(p.stateOperators or [])
    metric = lambda name: sum(int((op.customMetrics or {}).get(name, 0) or 0) for op in ops)  # noqa: E731
    durations = p.durationMs or {}
    rows = int(p.numInputRows or 0)
    started = datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")) if p.timestamp else None
    return {"query_id": query_id, "query_name": p.name, "batch_id": int(p.batchId), "started_at": started,
            "finished_at": datetime.now(timezone.utc), "input_rows": rows, "good_rows": rows, "dead_letters": 0,
            "rows_per_second": float(p.processedRowsPerSecond or 0.0),
            "duration_ms": int(durations.get("triggerExecution", 0)),
            "state_rows": sum(int(op.numRowsTotal or 0) for op in ops),
            "state_memory_bytes": sum(int(op.memoryUsedBytes or 0) for op in ops),
            "late_rows": sum(int(op.numRowsDroppedByWatermark or 0) for op in ops),
            "timers_fired": metric("numExpiredTimers"), "skipped_offsets": 0, **source_lag(p)}


def source_lag(p) -> dict:
    """end_offsets ({"topic[partition]": offset}, as the raw query writes them), lag per partition and
    total_lag: the records each partition had beyond the batch's end when the batch was planned
    (the source's reported latest offsets)."""
    ends, latest = {}, {}
    for source in p.sources or []:
        ends.update(_offsets(source.endOffset))
        latest.update(_offsets(source.latestOffset))
    lag = {tp: max(latest.get(tp, end) - end, 0) for tp, end in sorted(ends.items())}
    return {"end_offsets": ends, "lag": lag, "total_lag": sum(lag.values())}


def _offsets(text) -> dict[str, int]:
    """A Kafka source offset (JSON {"topic": {"partition": offset}}) as {"topic[partition]": offset}."""
    try:
        nested = json.loads(text) if isinstance(text, str) else text
        return {f"{t}[{part}]": int(o) for t, parts in (nested or {}).items() for part, o in parts.items()}
    except (ValueError, TypeError, AttributeError):      # another source's offset format
        return {}


class JsonProgressListener(StreamingQueryListener):
    """A listener given each progress as pyspark's StreamingQueryProgress, built from the JSON text
    the JVM makes of it in one call: pyspark's own wrapper (fromJObject) walks every map and list of
    the progress through py4j, a round trip per element: a large share of the driver's CPU in small
    micro-batches (docs/benchmarks.md has the figures)."""

    @property
    def _jlistener(self):
        if not hasattr(self, "_jlistenerobj"):
            from pyspark import SparkContext
            self._jlistenerobj = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_JsonEvents(self))
        return self._jlistenerobj

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass


class _JsonEvents:
    """The Java side's PythonStreamingQueryListener (py4j): progress events as JSON, the others unused."""

    def __init__(self, listener: JsonProgressListener):
        self.listener = listener

    def onQueryStarted(self, jevent) -> None:
        pass

    def onQueryProgress(self, jevent) -> None:
        from pyspark.sql.streaming.listener import QueryProgressEvent
        try:
            event = QueryProgressEvent.fromJson({"progress": json.loads(jevent.progress().json())})
        except Exception as exc:          # noqa: BLE001 -- progress must never stop the job
            log.warning("could not read a query's progress: %s", exc)
            return
        self.listener.onQueryProgress(event)

    def onQueryIdle(self, jevent) -> None:
        pass

    def onQueryTerminated(self, jevent) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class OperatorProgress(JsonProgressListener):
    """Writes a row per micro-batch of the named queries (query name -> the query id its writer uses)."""

    def __init__(self, sink_url: str, query_ids: dict[str, str], observer=None, labels: dict[str, str] | None = None):
        self.sink_url, self.query_ids, self._sink = sink_url, dict(query_ids), None
        self.labels = dict(labels or {})    # query name -> pipeline_progress.query_name of its rows
        self.observer = observer            # told of every row (streaming.apps.console.JobConsole.progress)

    def onQueryProgress(self, event) -> None:
        p = event.progress
        query_id = self.query_ids.get(p.name)
        if query_id is None:
            return
        try:
            from ..sinks import open_sink
            if self._sink is None:
                self._sink = open_sink(self.sink_url)
            row = operator_progress_row(p, query_id)
            row["query_name"] = self.labels.get(p.name, p.name)
            if p.name in self.labels:       # the query's own row holds its offsets: unread counted once
                row["end_offsets"] = {}
            # its own exactly-once marker: the writer's (query id, batch id) marks the batch's tables
            self._sink.write_batch(f"{query_id}/progress", row["batch_id"], {"pipeline_progress": [row]})
            if self.observer is not None:
                self.observer.progress(row)
            if row["late_rows"]:
                log.warning("%s batch %d: %d rows arrived behind the watermark and were dropped (late_rows)",
                            p.name, row["batch_id"], row["late_rows"])
        except Exception as exc:          # noqa: BLE001 -- progress must never stop the job
            log.warning("could not record the progress of %s: %s", p.name, exc)
