"""The dead_letters rows an operator writes for what it could not handle: a message it raised on, a timer it
raised in, an output row that fits no column of its table."""
import zlib
from datetime import datetime, timezone

__all__ = ["dead_letter", "timer_dead_letter", "unfit_output_row"]


def dead_letter(stage: str, protocol: str, row, exc: Exception) -> tuple[str, dict]:
    """A dead_letters row for a message an operator raised on: stage, exception, raw bytes and
    Kafka coordinates."""
    def get(name):
        return getattr(row, name, None)
    arrival = get("arrival_ms")
    why = f"{type(exc).__name__}: {exc}"
    return "dead_letters", {
        "topic": get("topic"), "kafka_partition": int(get("partition")), "kafka_offset": int(get("offset")),
        "protocol": protocol, "stage": stage, "error": f"{stage} raised {why}", "error_reason": why,
        "raw_value": bytes(get("body")).hex() if get("body") is not None else None,
        "message_id": get("message_id"), "source_machine": get("source_machine"),
        "arrival_time": _iso(int(arrival)) if arrival is not None else None,
        "recorded_at": datetime.now(timezone.utc).isoformat()}


def timer_dead_letter(stage: str, protocol: str, key: str, due_ms: int, exc: Exception) -> tuple[str, dict]:
    """A dead_letters row for a timer an operator raised in: no message to blame, so the row names
    the key and the due time (topic "(timer of KEY)", offset = the due time in milliseconds)."""
    why = f"{type(exc).__name__}: {exc}"
    return "dead_letters", {
        "topic": f"(timer of {key})", "kafka_partition": 0, "kafka_offset": int(due_ms), "kafka_key": key,
        "protocol": protocol, "stage": stage, "error_reason": why,
        "error": f"{stage} raised {why} in the timer due at {_iso(int(due_ms))}; the key's state stays as it "
                 f"was before the timer and its timers wait for its next message",
        "raw_value": None, "arrival_time": _iso(int(due_ms)), "recorded_at": datetime.now(timezone.utc).isoformat()}


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")


def unfit_output_row(table: str, row: dict, exc: Exception) -> dict:
    """A dead_letters row for an operator's output row that fits no column of its table: topic
    "(output to TABLE)", offset a digest of the row (the same row gives the same key on a replay)."""
    text = repr(sorted(row.items(), key=lambda kv: kv[0]))
    why = f"{type(exc).__name__}: {exc}"
    return {"topic": f"(output to {table})", "kafka_partition": 0, "kafka_offset": zlib.crc32(text.encode()),
            "stage": "operator output", "error_reason": why,
            "error": f"a row for {table} could not be stored ({why}): {text[:2000]}",
            "recorded_at": datetime.now(timezone.utc).isoformat()}
