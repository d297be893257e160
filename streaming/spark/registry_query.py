"""The server registry (streaming/operators/server_registry.py) as one key of the job's second
operator: the facts and checks the replicas and the discovery requests hand on wait until the
watermark passes them, as a queue manager's rows do; then the checks the clock has passed by the
registry's grace are decided, and the findings they make go to security_findings.

It keeps its state in the second operator's one value state (under its own key), so adding it
changed no state schema of a checkpoint.
"""
import pickle

from .notification_query import input_rows
from .stateful import replace_timers, timer_dead_letter, typed_frame
from ..operators.notification_input import Row
from ..operators.server_registry import ServerRegistry, advance

__all__ = ["RegistryProcessor", "SERVERS", "STAGE"]

SERVERS = "~servers"                        # its route key
STAGE = "operator:server-registry"


class RegistryProcessor:
    def __init__(self, pec_name: str | None = None):
        self.configured = (pec_name,) if pec_name else ()

    def init(self, handle, state) -> None:
        self.handle, self.state = handle, state

    def handleInputRows(self, key, rows, timerValues):
        self.fired_ms = None
        watermark = timerValues.getCurrentWatermarkInMs()
        yield from self._guarded(key[0], watermark, lambda registry, held: held + input_rows(rows))

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        self.fired_ms = expiredTimerInfo.getExpiryTimeInMs()          # Spark removes it itself
        yield from self._guarded(key[0], timerValues.getCurrentWatermarkInMs(), lambda registry, held: held)

    def _guarded(self, key: str, watermark_ms: int, rows_of):
        """Never fails the micro-batch: if the registry raises, its state stays as it was, its timer
        goes (its next input arms one again) and a dead letter says why."""
        try:
            registry, held = self._stored()
            out = list(self._advance(registry, rows_of(registry, held), watermark_ms))
        except Exception as exc:          # noqa: BLE001 -- whatever it is, the job goes on
            replace_timers(self.handle, None, self.fired_ms)
            yield typed_frame([timer_dead_letter(STAGE, "registry", key, self.fired_ms or watermark_ms, exc)])
            return
        yield from out

    def _stored(self) -> tuple[ServerRegistry, list[Row]]:
        stored = self.state.get()  # get() is None when unset: one round trip to the JVM, not exists() then get()
        if stored is None:
            return ServerRegistry(configured=self.configured), []
        raw, held = pickle.loads(bytes(stored[0]))
        return ServerRegistry.from_bytes(raw, self.configured), [Row(*r) for r in held]

    def _advance(self, registry: ServerRegistry, held: list[Row], watermark_ms: int):
        registry, waiting = advance(registry, held, watermark_ms)
        self.state.update((pickle.dumps((registry.to_bytes(), [tuple(r) for r in waiting]), protocol=5),))
        due = [t for t in [registry.next_timer_ms()] + [r.event_ms for r in waiting] if t is not None]
        replace_timers(self.handle, min(due) if due else None, self.fired_ms)
        rows = registry.findings.rows()
        if rows:
            yield typed_frame(rows)

    def close(self) -> None:
        pass
