"""The one timer per key each operator keeps."""

__all__ = ["replace_timers"]


def replace_timers(handle, due_ms: int | None, fired_ms: int | None = None) -> None:
    """Each operator keeps at most one timer per key: the next thing due (None: nothing). fired_ms:
    the timer being handled, which Spark removes itself (deleting it too logs a warning). A timer
    already due when it should be stays: deleting and registering it again costs two round trips
    to the JVM and leaves a deleted entry for every task's expired-timer scan to step over."""
    existing = [t for t in handle.listTimers() if t != fired_ms]
    if due_ms is not None and existing == [due_ms]:
        return
    for t in existing:
        handle.deleteTimer(t)
    if due_ms is not None:
        handle.registerTimer(due_ms)
