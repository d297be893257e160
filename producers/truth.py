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
"""
from streaming.wire.propids import PROPIDS, propid
from streaming.wire.propvariant import VT_BLOB
from streaming.wire.seqnum import seq_hex

from . import enterprise as ent

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


def build_truth(sim) -> dict:
    e, delivered = sim.ent, notifications_as_delivered(sim)
    return {
        "seed": sim.seed,
        "enterprise_id": e.enterprise_id,
        "servers": servers_json(e),
        "partitions": {pid: partition_json(p) for pid, p in e.partitions.items()},
        "queue_managers": {qm.machine_id: dict(queue_manager_json(e, qm, sim.cn_mode[qm.name]),
                                               delivered=delivered.get(qm.name, {"queues": {}, "machine": {}}))
                           for qm in e.queue_managers()},
        "discovery": discovery_results(sim),
        "dead_letters": sim.dead_letters,
        "discarded_notifications": sim.discarded,
        "dropped": sim.dropped,
        "duplicates": sim.duplicates,
        "nacks": sim.nacks,
        "counts": dict(sim.counts),
    }


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


def notifications_as_delivered(sim) -> dict[str, dict]:
    """What each queue manager was told (issue 32), in the order it was delivered (arrival time, then
    delivery order), each message once (a copy has the same MessageID: MessageIDHistoryTable) and
    the unauthenticated copies left out (3.2.5.1). Per queue: `last`, the last create or delete
    ([kind, message id, arrival ms]); for v1, `set`: the last value each property was given by a
    create or update, with its message and arrival. Per queue manager, `machine`: the same for its
    own attributes (v1 machine updates). The authority's order is in the other fields; reordered
    notifications make the two differ (3.2.5: a queue manager processes them as they come)."""
    from streaming.wire import decode
    out: dict[str, dict] = {}
    seen: set[str] = set()
    ordered = sorted(enumerate(sim.mqcn_delivered), key=lambda item: (_ms(item[1]["arrival_time"]), item[0]))
    for _order, env in ordered:
        if env["message_id"] in seen:
            continue
        seen.add(env["message_id"])
        view = out.setdefault(env["destination_machine"], {"queues": {}, "machine": {}})
        said = [env["message_id"], _ms(env["arrival_time"])]
        msg = decode("mqcn", env["body"])
        if msg.version == 2:
            if msg.body.event in ("1", "3"):
                queue = view["queues"].setdefault(msg.body.object_guid, {"set": {}})
                queue["last"] = ["create" if msg.body.event == "1" else "delete"] + said
            continue
        for u in msg.updates:
            _told(view, u, said)
    return out


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


def discovery_results(sim) -> dict:
    """Each request's result as its client saw the traffic delivered (issue 32): every copy of the
    request and of its replies at its arrival time, after the faults (reordered, duplicated); a
    request that was never delivered has no result."""
    copies: dict[str, list] = {}
    for order, (message_id, arrival) in enumerate(sim.mqsd_delivered):
        req, reply = sim.mqsd_sent[message_id]
        copies.setdefault(req.request_id, []).append((_ms(arrival), order, reply))
    results = {}
    for req in sim.requests:
        result = discovery_result(req, copies.get(req.request_id, []))
        if result is not None:
            results[req.request_id] = result
    return results


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
