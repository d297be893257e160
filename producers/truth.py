"""Ground truth of a simulated run, as JSON: what every consumer of the traffic must end with.

- `partitions`: each directory partition as its object authority holds it at the end (live objects
  with properties and sequence numbers, deleted objects not yet purged). Every directory server
  keeps a replica of every partition (MQDSRP 1.3), so each server's replicas of the partitions it
  does not own must equal these. (An authority's own partition also changes by local
  administration, which is not on the wire; the authority responder plays that role.)
- `queue_managers`: each queue manager's own attributes and its QueueCollection (MQCN 3.2.1) as the
  authority holds them, and `delivered`: what its notifications told it, in the order they came.
- `discovery`: each request's correct result by the client rules of MQSD 3.1.5.2 / 3.1.6.1, over
  the traffic as delivered (reordered, duplicated): what the client saw.
- `dead_letters`, `discarded_notifications`, `dropped`, `duplicates`, `nacks`: injected faults.
- `unreachable`: per server, the objects whose creation or last property values it lost with a dropped
  propagation and no sync reply can bring back; `set_by`: the change that created each live object
  and the one that set each property's value (`LostChanges`).
"""
from collections import OrderedDict

from streaming.wire.propids import PROPIDS, propid
from streaming.wire.propvariant import VT_BLOB
from streaming.wire.seqnum import seq_hex

from . import enterprise as ent

__all__ = ["build_truth", "DeliveredNotifications", "discovery_result", "DISCOVERY_WAIT_MS", "DiscoveryOutcomes",
           "end_sections", "LostChanges", "partition_json", "properties_from_json", "properties_to_json",
           "QM_ATTRIBUTES", "queue_manager_json", "servers_json", "TruthRecord", "value_from_json",
           "value_to_json", "write_end"]

DISCOVERY_WAIT_MS = 15_000
QM_ATTRIBUTES = {"quota": "QM_QUOTA", "journal_quota": "QM_JOURNAL_QUOTA", "security": "QM_SECURITY"}


def value_to_json(prop_id: int, value):
    return value.hex() if isinstance(value, (bytes, bytearray)) else value


def value_from_json(prop_id: int, value):
    return bytes.fromhex(value) if PROPIDS[prop_id][1] == VT_BLOB else value


def properties_to_json(properties: dict[int, object]) -> dict[str, object]:
    return {PROPIDS[k][0]: value_to_json(k, v) for k, v in properties.items()}


def properties_from_json(data: dict[str, object]) -> dict[int, object]:
    return {propid(name): value_from_json(propid(name), v) for name, v in data.items()}


def end_sections(sim):
    """(section, value, is a mapping) of what only the run's end knows: the directory as its
    authorities hold it, the queue managers, the servers and the run's totals."""
    e, delivered = sim.ent, sim.mqcn_delivered.views
    yield "seed", sim.seed, False
    yield "enterprise_id", e.enterprise_id, False
    yield "servers", servers_json(e), True
    yield "partitions", {pid: partition_json(p) for pid, p in e.partitions.items()}, True
    yield "queue_managers", {qm.machine_id: dict(queue_manager_json(e, qm, sim.cn_mode[qm.name]),
                                                 delivered=delivered.get(qm.name, {"queues": {}, "machine": {}}))
                             for qm in e.queue_managers()}, True
    yield "unreachable", sim.lost_changes.unreachable(), True
    yield "set_by", sim.lost_changes.setters(), True
    yield "counts", dict(sim.counts), False
    yield "last_arrival_ms", sim.last_arrival_ms, False       # the traffic's event-time end


def build_truth(sim) -> dict:
    """The whole truth of a run that held it (no TruthWriter): the end's sections, the faults and
    attacks as they were made, every discovery request's result."""
    truth = {section: value for section, value, _mapping in end_sections(sim)}
    truth.update(sim.record.held())
    truth["discovery"] = dict(truth["discovery"], **sim.discovery.open_results())     # the run may go on
    return truth


def write_end(sim, writer) -> None:
    """A streaming run's end: the discovery requests still open, then the end's sections."""
    sim.discovery.settle_all()
    for section, value, mapping in end_sections(sim):
        if mapping:
            for key, entry in value.items():
                writer.entry(section, key, entry)
        else:
            writer.value(section, value)


class TruthRecord:
    """Where a run's truth goes as it is made (the faults injected, the attacks, each discovery
    request's result once final): held for `truth()`, written out at once to a TruthWriter (a long
    run holds none of it), or only counted (no truth asked for)."""

    def __init__(self, writer=None, keep: bool = True):
        from .truth_file import LIST_SECTIONS
        self.writer, self.keep = writer, keep
        self.lists: dict[str, list] = {s: [] for s in LIST_SECTIONS}
        self.discovery: dict[str, dict] = {}
        self.counted: dict[str, int] = dict.fromkeys(LIST_SECTIONS, 0)

    def item(self, section: str, value) -> None:
        self.counted[section] += 1
        if self.writer is not None:
            self.writer.item(section, value)
        elif self.keep:
            self.lists[section].append(value)

    def result(self, request_id: str, result: dict) -> None:
        if self.writer is not None:
            self.writer.entry("discovery", request_id, result)
        elif self.keep:
            self.discovery[request_id] = result

    def count(self, section: str) -> int:
        return self.counted[section]

    def held(self) -> dict:
        if self.writer is not None or not self.keep:
            raise RuntimeError("this run's truth was written out as it was made (or not kept): nothing is held")
        return {"discovery": self.discovery, **self.lists}


def servers_json(e: ent.Enterprise) -> dict:
    return {s.name: {"role": s.role, "site_id": s.site_id, "machine_id": s.machine_id, "ip": s.ip,
                     "replicates": [p for p, part in e.partitions.items() if part.authority != s.name]
                     if s.role != "QM" else []}
            for s in e.servers.values()}


def partition_json(p: ent.Partition) -> dict:
    return {
        "authority": p.authority,
        "last_seq_number": seq_hex(p.last_seq_number),
        "purged_seq_number": seq_hex(p.purged_seq_number),
        "objects": {g: {"object_type": ent.OBJECT_TYPE_NAMES[o.object_type], "path_name": o.path_name,
                        "seq_number": seq_hex(o.seq_number), "properties": properties_to_json(o.properties)}
                    for g, o in sorted(p.objects.items())},
        "deleted_objects": [{"identifier": d.identifier, "seq_number": seq_hex(d.seq_number),
                             "object_type": ent.OBJECT_TYPE_NAMES[d.object_type], "scope": d.scope}
                            for d in sorted(p.deleted.values(), key=lambda d: d.seq_number)],
    }


def queue_manager_json(e: ent.Enterprise, qm: ent.Server, mode: str) -> dict:
    machine = e.find(qm.machine_id)
    attrs = {k: value_to_json(propid(v), machine.properties[propid(v)]) for k, v in QM_ATTRIBUTES.items()}
    return {"machine_name": qm.name, "notification_version": mode, **attrs,
            "queues": {q.guid: {"path_name": q.path_name, "properties": properties_to_json(q.properties)}
                       for q in sorted(e.queues_of(qm.machine_id), key=lambda q: q.guid)}}


class DeliveredNotifications:
    """What each queue manager was told, built as the notifications are delivered, in that
    order (arrival times never go back in delivery order), each message once (a copy has the same
    MessageID: MessageIDHistoryTable) and the unauthenticated copies left out (3.2.5.1). Per queue:
    `last`, the last create or delete ([kind, message id, arrival ms]); for v1, `set`: the last value
    each property was given by a create or update, with its message and arrival. Per queue manager,
    `machine`: the same for its own attributes (v1 machine updates). The authority's order is in the
    other fields; reordered notifications make the two differ (3.2.5: a queue manager processes them
    as they come).

    Kept small for a long run: a message's id is remembered for the next REMEMBERED_IDS
    notifications (the simulator delivers a copy within its reorder window of the original; a
    queue manager's own MessageIDHistoryTable is bounded in time too), and no notification is kept."""
    REMEMBERED_IDS = 100_000

    def __init__(self):
        self.views: dict[str, dict] = {}
        self._seen: OrderedDict[str, None] = OrderedDict()

    def deliver(self, env: dict) -> None:
        from streaming.wire import decode
        if env["message_id"] in self._seen:
            return
        self._seen[env["message_id"]] = None
        if len(self._seen) > self.REMEMBERED_IDS:
            self._seen.popitem(last=False)
        view = self.views.setdefault(env["destination_machine"], {"queues": {}, "machine": {}})
        said = [env["message_id"], _ms(env["arrival_time"])]
        msg = decode("mqcn", env["body"])
        if msg.version == 2:
            if msg.body.event in ("1", "3"):
                queue = view["queues"].setdefault(msg.body.object_guid, {"set": {}})
                queue["last"] = ["create" if msg.body.event == "1" else "delete"] + said
            return
        for u in msg.updates:
            _told(view, u, said)


def _told(view: dict, u, said: list) -> None:
    """One v1 update (3.2.5.1) into a queue manager's delivered view."""
    values = {PROPIDS[p.prop_id][0]: value_to_json(p.prop_id, p.value) for p in u.properties if p.prop_id in PROPIDS}
    if u.command == 2:
        view["queues"].setdefault(u.guid_identifier, {"set": {}})["last"] = ["delete"] + said
    elif "PROPID_QM_MACHINE_ID" in values:
        view["machine"].update({k: [v] + said for k, v in values.items()})
    else:
        queue = view["queues"].setdefault(values.get("PROPID_Q_INSTANCE") if u.command == 0 else u.guid_identifier,
                                          {"set": {}})
        if u.command == 0:
            queue["last"] = ["create"] + said
        queue["set"].update({k: [v] + said for k, v in values.items()})


class DiscoveryOutcomes:
    """Each discovery request's result, as its client saw the traffic delivered (every copy of the
    request and of its replies at its arrival time, after the faults), settled as soon as nothing
    can change it: every reply it was planned to get sent, and every copy made of the request and
    its replies (duplicates, rogue replies) delivered. A settled request is forgotten, so a long
    run holds only the few requests of its last seconds. A request never delivered has no result."""
    SETTLE_EVERY = 16               # discovery deliveries between two looks for settled requests

    def __init__(self, record: TruthRecord):
        self.record = record
        self.by_message: dict[str, tuple] = {}      # message id -> (request, reply or None)
        self.open: dict[str, list] = {}             # request id -> [request, copies in flight, message ids, copies]
        self.order = 0                              # deliveries so far: ties in arrival time keep this order

    def sent(self, message_id: str, req, reply=None) -> None:
        """A message of a request's exchange made: the request itself, a reply, a rogue reply."""
        self.by_message[message_id] = (req, reply)
        state = self.open.setdefault(req.request_id, [req, 0, [], []])
        state[1] += 1
        state[2].append(message_id)

    def sent_as(self, message_id: str) -> tuple:
        return self.by_message[message_id]

    def copied(self, message_id: str) -> None:
        """A duplicate made of a message already sent."""
        self.open[self.by_message[message_id][0].request_id][1] += 1

    def delivered(self, message_id: str, arrival) -> None:
        if self.order % self.SETTLE_EVERY == 0:
            self._settle_done()         # before this copy counts: every copy made so far is counted
        req, reply = self.by_message[message_id]
        state = self.open[req.request_id]
        state[1] -= 1
        state[3].append((_ms(arrival), self.order, reply))
        self.order += 1

    def _settle_done(self) -> None:
        done = [rid for rid, (req, in_flight, _ids, _copies) in self.open.items()
                if in_flight == 0 and all(r.packet is not None for r in req.replies)]
        for rid in done:
            self._settle(rid)

    def settle_all(self) -> None:
        """The run's end: every open request's result from what was delivered."""
        for rid in list(self.open):
            self._settle(rid)

    def open_results(self) -> dict[str, dict]:
        """The open requests' results from what was delivered so far, leaving them open."""
        results = ((rid, discovery_result(req, copies)) for rid, (req, _n, _ids, copies) in self.open.items())
        return {rid: result for rid, result in results if result is not None}

    def _settle(self, request_id: str) -> None:
        req, _in_flight, message_ids, copies = self.open.pop(request_id)
        for message_id in message_ids:
            del self.by_message[message_id]
        result = discovery_result(req, copies)
        if result is not None:
            self.record.result(request_id, result)


def _ms(value) -> int:
    return value if isinstance(value, int) else int(value.timestamp() * 1000)


def discovery_result(req, copies: list[tuple[int, int, object]]) -> dict | None:
    """MQSD client with one network (i == N): digest §5 cases C, D, E and the timer of 3.1.6.1, over
    the delivered copies (arrival ms, delivery order, reply or None for the request itself). The
    Wait For Response timer starts when the request goes out (its first copy); the replies count
    in arrival order, each duplicate as a reply of its own (the client cannot tell them apart).

    Case C is read as the digest suggests: the local-site reply is copied into
    LastTopologyServerReply before populating, so its connected networks win and, its
    DirectoryServiceServerSize being 0, the server list is not populated (stays empty)."""
    sent = [at for at, _order, reply in copies if reply is None]
    if not sent:
        return None
    deadline = min(sent) + DISCOVERY_WAIT_MS
    last, outcome, completed_at = None, None, None
    replies = sorted((at, order, reply) for at, order, reply in copies if reply is not None)
    for at, _order, r in replies:
        if at > deadline:
            break
        if r.packet.directory_service_server_size == 0:        # case C
            last, outcome, completed_at = r, "local-site", at
            break
        if last is None:                                        # case D: keep it, restart the timer
            last, deadline = r, at + DISCOVERY_WAIT_MS
        else:                                                   # case E: complete with the kept reply
            outcome, completed_at = "remote-site", at
            break
    if outcome is None:
        outcome, completed_at = ("no-reply", deadline) if last is None else ("remote-site", deadline)
    servers = [s.name for s in (last.packet.directory_service_server_array or [])] if last else []
    return {
        "client": req.client.name, "client_site": req.client.site_id, "sent_ms": min(sent),
        "scenario": req.scenario, "outcome": outcome, "completed_ms": completed_at,
        "directory_servers": servers,
        "connected_networks": list(last.packet.connected_network_array) if last else [],
        "replies": len(replies),
    }


class LostChanges:
    """What a directory server cannot get back by the protocol (MC-MQDSRP 3.2.7.3): a change lost with a
    dropped propagation is in no sync reply once a later change of the same object moved the object's
    SeqNumber past the window the server asks for (an object is sent only when its current SeqNumber
    lies in it), and a later *partial* update does not carry the property values it set (docs/design.md,
    "The protocol's own limit"). Per live object: the change that last set each
    property, and the changes of it lost on the way to each server, pruned to those that still set
    a property (so the bookkeeping is bounded by the directory, not the run)."""

    def __init__(self):
        self.set_at: dict[str, dict[int, int]] = {}          # guid -> PROPID -> SeqNumber that set it
        self.created_at: dict[str, int] = {}
        self.guid_of_path: dict[str, str] = {}
        self.lost: dict[str, dict[str, set[int]]] = {}       # guid -> server -> lost SeqNumbers

    def created(self, guid: str, path: str, seq: int, properties) -> None:
        self.set_at[guid] = dict.fromkeys(properties, seq)
        self.created_at[guid], self.guid_of_path[path] = seq, guid

    def updated(self, guid: str, seq: int, properties) -> None:
        self.set_at[guid].update(dict.fromkeys(properties, seq))
        still = set(self.set_at[guid].values()) | {self.created_at[guid]}
        for server, seqs in list(self.lost.get(guid, {}).items()):
            seqs &= still
            if not seqs:
                del self.lost[guid][server]

    def deleted(self, guid: str, path: str) -> None:
        for table in (self.set_at, self.created_at, self.lost):
            table.pop(guid, None)
        self.guid_of_path.pop(path, None)

    def dropped(self, server: str, changes) -> None:
        for c in changes:
            guid = c.guid_identifier or self.guid_of_path.get(c.path_name)
            if guid in self.set_at:
                self.lost.setdefault(guid, {}).setdefault(server, set()).add(c.seq_number)

    def unreachable(self) -> dict[str, dict[str, dict]]:
        """server -> object GUID -> {"created": its creation was lost, "properties": [names of the
        properties whose last value was lost]}."""
        out: dict[str, dict[str, dict]] = {}
        for guid, servers in self.lost.items():
            for server, seqs in servers.items():
                names = sorted(PROPIDS[p][0] for p, s in self.set_at[guid].items() if s in seqs and p in PROPIDS)
                if names or self.created_at[guid] in seqs:
                    out.setdefault(server, {})[guid] = {"created": self.created_at[guid] in seqs, "properties": names}
        return out

    def setters(self) -> dict[str, dict]:
        """object GUID -> {"created": the SeqNumber that created it, "properties": {name: the SeqNumber
        that set its value}}: what verify needs to tell a value a server could not get (its change
        lost in transit, or dropped from a full pending collection, 3.1.7.2.2) from a wrong one."""
        return {guid: {"created": seq_hex(self.created_at[guid]),
                       "properties": {PROPIDS[p][0]: seq_hex(s) for p, s in props.items() if p in PROPIDS}}
                for guid, props in self.set_at.items()}
