"""MQSD client correlation (MS-MQSD 3.1.5.2, 3.1.6.1) as a sans-IO state machine, one per RequestID.

The job sees each TopologyClientRequest and the TopologyServerReply packets answering it (by
CorrelationID) and decides, as the requesting client would with one network (i == N), which reply
populates its DirectoryServerList and ConnectedNetworkIdentifierList:

- case C, a local-site reply (DirectoryServiceServerSize 0): completes at once. Read as the MQSD
  digest suggests: the reply is copied into LastTopologyServerReply before populating, so its
  connected networks win and, its size being 0, the server list is not populated (stays empty);
- case D, the first remote-site reply: kept; the 15-second Wait For Response timer restarts;
- case E, a further remote-site reply: completes with the kept (first) reply;
- the timer (3.1.6.1): completes with the kept reply, or as no-reply when there is none.

Time is event time (the envelope's arrival time, in ms), so a replay gives the same outcomes.
Replies that arrive before their request (reordered in transport) wait up to 30 minutes. A
completed request is remembered FORGET_AFTER_MS past its deadline, to recognise late replies (and
learn the site a late local-site reply serves); then it is forgotten. What is due happens before a
message that arrives after it (on_time), so the outcome never depends on where micro-batches end.
"""
from dataclasses import dataclass, field, fields

from .server_registry import Check

__all__ = ["Discovery", "DiscoveryState", "EARLY_REPLY_WAIT_MS", "forget", "FORGET_AFTER_MS", "forget_at",
           "Orphan", "Outcome", "Reply", "reply_check", "Request", "state_from_json", "state_to_json",
           "WAIT_FOR_RESPONSE_MS"]

WAIT_FOR_RESPONSE_MS = 15_000          # 3.1.2.1 Wait For Response Timer
FORGET_AFTER_MS = 15_000               # not in the spec: how long a completed request is remembered
# Not in the spec either: how long a reply waits for a request delivered after it. Its client sent the
# request before, and counts the reply if it came within the wait of the request's first copy; a
# request's copy can be held back in transport for minutes (as MSMQ's duplicate detection, [MS-MQQB]
# 3.1.5.8.1, a 30-minute bound).
EARLY_REPLY_WAIT_MS = 30 * 60_000


@dataclass
class Reply:
    arrival_ms: int
    responder: str                     # the responder's address (envelope source)
    server_size: int                   # DirectoryServiceServerSize
    servers: list[tuple[bool, bool, str]]    # (IP, IPX, name) from DirectoryServiceServerArray
    connected_networks: list[str]
    responding_site_id: str | None


@dataclass
class Request:
    arrival_ms: int
    enterprise_id: str
    site_id: str
    client: str                        # the requester's address (envelope source)


@dataclass
class DiscoveryState:
    request: Request | None = None
    kept: Reply | None = None          # LastTopologyServerReply
    early: list[Reply] = field(default_factory=list)      # replies seen before their request
    deadline_ms: int | None = None
    replies: int = 0
    done: bool = False


@dataclass
class Outcome:
    """A completed request: the row of discovery_requests."""
    request_id: str
    request: Request | None
    outcome: str                       # local-site, remote-site or no-reply
    completed_ms: int
    directory_servers: list[str]
    connected_networks: list[str]
    replies: int


@dataclass
class Orphan:
    """A reply no request claimed within the wait: recorded, not lost."""
    request_id: str
    reply: Reply
    reason: str


class Discovery:
    """Pure transitions; the caller keeps DiscoveryState per RequestID and arms timers at deadline_ms."""

    def on_request(self, state: DiscoveryState, request_id: str, request: Request) -> list:
        if state.request is not None:
            return []                                  # a duplicate of the request: nothing new
        state.request = request
        state.deadline_ms = request.arrival_ms + WAIT_FOR_RESPONSE_MS       # timer starts with the send
        out = []
        early, state.early = sorted(state.early, key=lambda r: r.arrival_ms), []
        for reply in early:
            out += self.on_reply(state, request_id, reply)
        return out

    def on_reply(self, state: DiscoveryState, request_id: str, reply: Reply) -> list:
        if state.request is None:
            state.early.append(reply)
            state.deadline_ms = min(state.deadline_ms or 2**62, reply.arrival_ms + EARLY_REPLY_WAIT_MS)
            return []
        if state.done:
            return [Orphan(request_id, reply, "late: the request had already completed")]
        deadline_ms = state.deadline_ms
        assert deadline_ms is not None                      # a request's deadline is set with it
        if reply.arrival_ms > deadline_ms:
            return self.on_timer(state, request_id, deadline_ms) + [
                Orphan(request_id, reply, "late: after the Wait For Response timer")]
        state.replies += 1
        if reply.server_size == 0:                                 # case C: a server of the client's site
            state.kept = reply
            return [self._complete(state, request_id, "local-site", reply.arrival_ms)]
        if state.kept is None:                                      # case D: keep it, restart the timer
            state.kept = reply
            state.deadline_ms = reply.arrival_ms + WAIT_FOR_RESPONSE_MS
            return []
        return [self._complete(state, request_id, "remote-site", reply.arrival_ms)]     # case E

    def on_time(self, state: DiscoveryState, request_id: str, now_ms: int) -> list:
        """Event time reached now_ms (a message of this RequestID arrives then): the Wait For Response
        timer due before it fires first, and a request completed and remembered long enough before it
        is forgotten, as Spark's timers would have done had a micro-batch ended in between."""
        out = []
        if not state.done and state.deadline_ms is not None and state.deadline_ms < now_ms:
            out = self.on_timer(state, request_id, state.deadline_ms)
        due = forget_at(state)
        if due is not None and due < now_ms:
            forget(state)
        return out

    def on_timer(self, state: DiscoveryState, request_id: str, now_ms: int) -> list:
        if state.done or state.deadline_ms is None or now_ms < state.deadline_ms:
            return []
        if state.request is None:                                   # replies whose request never came
            orphans = [Orphan(request_id, r, "no request with this RequestID") for r in state.early]
            state.early, state.deadline_ms, state.done = [], None, True
            return orphans
        outcome = "no-reply" if state.kept is None else "remote-site"
        return [self._complete(state, request_id, outcome, state.deadline_ms)]

    @staticmethod
    def _complete(state: DiscoveryState, request_id: str, outcome: str, at_ms: int) -> Outcome:
        state.done = True
        kept = state.kept
        servers = [name for _ip, _ipx, name in kept.servers] if kept and kept.server_size else []
        return Outcome(request_id, state.request, outcome, at_ms, servers,
                       list(kept.connected_networks) if kept else [], state.replies)


def forget_at(state: DiscoveryState) -> int | None:
    """When a completed request is forgotten: FORGET_AFTER_MS past its deadline (it completed by then),
    at once when it never came (its replies are orphans); None while it is not complete."""
    if not state.done:
        return None
    if state.request is None:
        return 0
    assert state.deadline_ms is not None                    # a request's deadline is set with it
    return state.deadline_ms + FORGET_AFTER_MS


def forget(state: DiscoveryState) -> None:
    fresh = DiscoveryState()
    for name in [f.name for f in fields(DiscoveryState)]:    # no vars(): a compiled class has no __dict__
        setattr(state, name, getattr(fresh, name))


def state_to_json(state: DiscoveryState) -> str:
    import dataclasses
    import json
    return json.dumps(dataclasses.asdict(state))


def state_from_json(text: str) -> DiscoveryState:
    import json
    d = json.loads(text)
    reply = lambda r: Reply(r["arrival_ms"], r["responder"], r["server_size"], [tuple(s) for s in r["servers"]],
                            r["connected_networks"], r["responding_site_id"])  # noqa: E731
    return DiscoveryState(Request(**d["request"]) if d["request"] else None,
                          reply(d["kept"]) if d["kept"] else None, [reply(r) for r in d["early"]],
                          d["deadline_ms"], d["replies"], d["done"])


def reply_check(reply: Reply, client: str | None, where: dict) -> Check:
    """mqsd-rogue-reply (MS-MQSD 5.1: discovery has no security, any host can answer a client): the
    responder's address and every directory server the reply lists must be directory servers the
    replicas know (streaming.operators.server_registry)."""
    return Check("mqsd-rogue-reply", reply.arrival_ms, reply.responder, client or "(unknown)",
                 [reply.responder] + [name for _ip, _ipx, name in reply.servers], where)
