"""A sink's database gone away: how long a batch waits for it, and what the process's writers tell
the metrics and the console meanwhile (OUTAGE)."""
import threading
import time

__all__ = ["OUTAGE", "RETRY_S", "SAY_EVERY_S", "SinkOutage", "WAIT_S"]

WAIT_S = 600.0                 # how long a batch waits for its database to come back
RETRY_S = 2.0                  # between two attempts to reconnect
SAY_EVERY_S = 15.0             # a console line while it waits


class SinkOutage:
    """The process's writers waiting for their database: since when (Unix time; None when none
    waits), how many outages and reconnection attempts so far. Read by the metrics at every scrape."""

    def __init__(self):
        self._lock = threading.Lock()
        self._waiting: dict[int, float] = {}     # writer -> since
        self.outages = 0
        self.retries = 0

    def begin(self, writer: object) -> None:
        with self._lock:
            if not self._waiting:
                self.outages += 1
            self._waiting.setdefault(id(writer), time.time())

    def retried(self) -> None:
        with self._lock:
            self.retries += 1

    def end(self, writer: object) -> None:
        with self._lock:
            self._waiting.pop(id(writer), None)

    @property
    def since(self) -> float | None:
        with self._lock:
            return min(self._waiting.values(), default=None)


OUTAGE = SinkOutage()
