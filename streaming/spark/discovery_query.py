"""MQSD discovery as a stateful streaming operator: transformWithStateInPandas keyed by RequestID,
driven by the sans-IO core in streaming/operators/discovery.py, with event-time timers.

Outputs go to discovery_requests (each request's outcome as its client would decide it),
site_topology (which directory servers serve which site, with their connected networks) and
discovery_unmatched_replies (replies no request claimed: recorded, not lost).
"""
from datetime import datetime, timezone

from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from pyspark.sql.types import StringType, StructField, StructType

from ..operators.discovery import (Discovery, DiscoveryState, Orphan, Outcome, Reply, Request, forget_at,
                                  reply_check, state_from_json, state_to_json)
from ..operators.findings import evidence
from ..operators.server_registry import Check, check_text
from ..wire import decode
from .replication_query import step_frame
from .stateful import (apply_guarded, dead_letter, ordered_rows, replace_timers,
                       timer_dead_letter, typed_frame)

__all__ = ["DiscoveryProcessor"]


def _ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")


class DiscoveryProcessor(StatefulProcessor):
    def init(self, handle) -> None:
        self.handle = handle
        self.state = handle.getValueState("discovery", StructType([StructField("json", StringType())]))
        self.core = Discovery()

    def _load(self) -> DiscoveryState:
        stored = self.state.get()  # get() is None when unset: one round trip to the JVM, not exists() then get()
        return state_from_json(stored[0]) if stored is not None else DiscoveryState()

    def _save(self, st: DiscoveryState) -> None:
        self.state.update((state_to_json(st),))
        replace_timers(self.handle, forget_at(st) if st.done else st.deadline_ms, self.fired_ms)

    def handleInputRows(self, key, rows, timerValues):
        self.fired_ms = None
        request_id = key[0]

        def apply(work, row) -> None:
            st, out = work
            arrival, source = int(row.arrival_ms), row.source_machine
            out += self.core.on_time(st, request_id, arrival)      # what was due before it happens first
            packet = decode("mqsd", bytes(row.body))
            if packet.client_request is not None:
                r = packet.client_request
                out += self.core.on_request(st, request_id, Request(arrival, r.enterprise_id, r.site_id, source))
            else:
                r = packet.server_reply
                reply = Reply(arrival, source, r.directory_service_server_size,
                              [(e.ip_supported, e.ipx_supported, e.name) for e in r.directory_service_server_array or []],
                              list(r.connected_network_array), r.responding_site_id)
                out += self.core.on_reply(st, request_id, reply)
                out += self._topology(st, reply)
                out.append(reply_check(reply, row.destination_machine,
                                       evidence(row.topic, row.partition, row.offset, row.message_id,
                                                getattr(row, "capture", None))))

        (st, out), poisoned = apply_guarded(lambda: (self._load(), []), ordered_rows(rows), apply)
        # what is due by the watermark happens now, as Spark's timers would after this batch's rows (a
        # request held back behind its remote-site reply must not leave a timer in the past)
        out += self.core.on_time(st, request_id, timerValues.getCurrentWatermarkInMs() + 1)
        yield from self._emit(st, out, [dead_letter("operator:discovery", "mqsd", row, exc) for row, exc in poisoned])

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        self.fired_ms = expiredTimerInfo.getExpiryTimeInMs()          # Spark removes it itself
        st = self._load()
        # everything due by the watermark happens now, as before a message arriving just after it: a
        # deadline's completion may already be past its forget time (never a timer in the past)
        now = max(self.fired_ms, timerValues.getCurrentWatermarkInMs()) + 1
        try:
            out = self.core.on_time(st, key[0], now)
        except Exception as exc:          # noqa: BLE001 -- never fail the micro-batch: nothing is saved
            replace_timers(self.handle, None, self.fired_ms)
            row = timer_dead_letter("operator:discovery", "mqsd", key[0], self.fired_ms, exc)
            yield typed_frame([row])
            return
        yield from self._emit(st, out)

    def _emit(self, st: DiscoveryState, out: list, dead: list | None = None):
        rows, checks = list(dead or []), []
        for item in out:
            if isinstance(item, Check):
                checks.append({"event_ms": item.at_ms, "text": check_text(item)})
            elif isinstance(item, Outcome):
                rows.append(("discovery_requests", {
                    "request_id": item.request_id, "enterprise_id": item.request.enterprise_id,
                    "client_site": item.request.site_id, "client": item.request.client,
                    "sent_at": _ts(item.request.arrival_ms), "outcome": item.outcome,
                    "directory_servers": item.directory_servers, "connected_networks": item.connected_networks,
                    "replies": item.replies, "completed_at": _ts(item.completed_ms)}))
            elif isinstance(item, Orphan):
                rows.append(("discovery_unmatched_replies", {
                    "request_id": item.request_id, "responder": item.reply.responder,
                    "arrival_time": _ts(item.reply.arrival_ms), "reason": item.reason,
                    "directory_service_server_size": item.reply.server_size,
                    "connected_networks": item.reply.connected_networks}))
            else:
                rows.append(item)
        if st == DiscoveryState() or (st.done and st.request is None):     # forgotten, or orphaned
            self.state.clear()
            replace_timers(self.handle, None, self.fired_ms)
        else:
            self._save(st)
        if checks:
            yield step_frame(rows, [], checks)
        elif rows:
            yield typed_frame(rows)

    @staticmethod
    def _topology(st: DiscoveryState, reply: Reply) -> list:
        """Which directory servers serve which site: a remote reply names them (3.2.5.1); a local one
        only tells that its sender serves the requester's site."""
        seen = _ts(reply.arrival_ms)
        if reply.server_size and reply.responding_site_id:
            return [("site_topology", {
                "site_id": reply.responding_site_id, "directory_server": name, "ip_supported": ip,
                "ipx_supported": ipx, "connected_networks": reply.connected_networks, "first_seen": seen,
                "last_seen": seen}) for ip, ipx, name in reply.servers]
        if st.request is not None and reply.server_size == 0:
            return [("site_topology", {
                "site_id": st.request.site_id, "directory_server": reply.responder, "ip_supported": True,
                "ipx_supported": None, "connected_networks": reply.connected_networks, "first_seen": seen,
                "last_seen": seen})]
        return []

    def close(self) -> None:
        pass

