"""Ground truth of a simulated run, as JSON: what every consumer of the traffic must end with.

- `partitions`: each directory partition as its object authority holds it at the end (live objects
  with properties and sequence numbers, deleted objects not yet purged). Every directory server
  keeps a replica of every partition (MQDSRP 1.3), so each server's replicas of the partitions it
  does not own must equal these. (An authority's own partition also changes by local
  administration, which is not on the wire; the authority responder plays that role.)
- `queue_managers`: each queue manager's own attributes and its QueueCollection (MQCN 3.2.1).
- `discovery`: each request's correct result by the client rules of MQSD 3.1.5.2 / 3.1.6.1.
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
    e = sim.ent
    return {
        "seed": sim.seed,
        "enterprise_id": e.enterprise_id,
        "servers": {s.name: {"role": s.role, "site_id": s.site_id, "machine_id": s.machine_id, "ip": s.ip,
                             "replicates": [p for p, part in e.partitions.items() if part.authority != s.name]
                             if s.role != "QM" else []}
                    for s in e.servers.values()},
        "partitions": {pid: partition_json(p) for pid, p in e.partitions.items()},
        "queue_managers": {qm.machine_id: queue_manager_json(e, qm, sim.cn_mode[qm.name]) for qm in e.queue_managers()},
        "discovery": {r.request_id: discovery_result(r) for r in sim.requests},
        "dead_letters": sim.dead_letters,
        "discarded_notifications": sim.discarded,
        "dropped": sim.dropped,
        "duplicates": sim.duplicates,
        "nacks": sim.nacks,
        "counts": dict(sim.counts),
    }


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


def discovery_result(req) -> dict:
    """MQSD client with one network (i == N): digest §5 cases C, D, E and the timer of 3.1.6.1.

    Case C is read as the digest suggests: the local-site reply is copied into
    LastTopologyServerReply before populating, so its connected networks win and, its
    DirectoryServiceServerSize being 0, the server list is not populated (stays empty)."""
    deadline = req.sent_ms + DISCOVERY_WAIT_MS
    last, outcome, completed_at = None, None, None
    replies = sorted((r for r in req.replies if r.packet is not None), key=lambda r: r.at_ms)
    for r in replies:
        if r.at_ms > deadline:
            break
        if r.packet.directory_service_server_size == 0:        # case C
            last, outcome, completed_at = r, "local-site", r.at_ms
            break
        if last is None:                                        # case D: keep it, restart the timer
            last, deadline = r, r.at_ms + DISCOVERY_WAIT_MS
        else:                                                   # case E: complete with the kept reply
            outcome, completed_at = "remote-site", r.at_ms
            break
    if outcome is None:
        outcome, completed_at = ("no-reply", deadline) if last is None else ("remote-site", deadline)
    servers = [s.name for s in (last.packet.directory_service_server_array or [])] if last else []
    return {
        "client": req.client.name, "client_site": req.client.site_id, "sent_ms": req.sent_ms,
        "scenario": req.scenario, "outcome": outcome, "completed_ms": completed_at,
        "directory_servers": servers,
        "connected_networks": list(last.packet.connected_network_array) if last else [],
        "replies": len(replies),
    }

