"""A replica's ServerState as the bytes the replication operator's state store keeps (marshal of
plain values: ints, text, tuples, lists, dicts), and back.

The layout is version 1; later fields were appended over releases, so a state without them (a
checkpoint of an earlier release) is read with their defaults. PurgeState is stored as its int.
"""
import marshal
from typing import Any, cast

from ..wire.mqdsrp import DirectoryChange
from ..wire.properties import Property
from .findings import FindingLog
from .replica_store import StoreLayout
from .replication import DeletedObject, ForwardedRequest, Neighbor, Partition, PurgeState, ServerState

__all__ = ["STATE_VERSION", "state_from_bytes", "state_to_bytes"]

STATE_VERSION = 1


def _change_tuple(c: DirectoryChange) -> tuple:
    return (c.command, c.use_guid, c.path_name, c.guid_identifier, c.partition_id, c.previous_seq_number,
            c.seq_number, c.purged_seq_number, [(p.prop_id, p.value) for p in c.properties])


def _change_from(t) -> DirectoryChange:
    command, use_guid, path_name, guid, partition_id, previous_seq, seq, purged_seq, props = t
    return DirectoryChange(command, use_guid, path_name, guid, partition_id, previous_seq, seq, purged_seq,
                           [Property(k, v) for k, v in props])


def _neighbor_tuple(n: Neighbor) -> tuple:
    return (n.partition_id, n.machine_name, n.acked_seq, n.acked_pec_seq, n.last_acked_ms,
            [_change_tuple(c) for c in n.available], n.next_tick_ms)


def _neighbor_from(t) -> Neighbor:
    pid, name, acked, acked_pec, last_acked, available, tick = t
    return Neighbor(pid, name, acked, acked_pec, last_acked, [_change_from(c) for c in available], tick)


def state_to_bytes(s: ServerState) -> bytes:
    partitions = [(p.partition_id, p.authority, p.last_seq, p.purged_seq, p.allowed_purge_seq, int(p.purge_state),
                   p.previous_purged_seq, p.change_missing_window, [_change_tuple(c) for c in p.pending],
                   p.initial_sync_sent, p.seen_seq, p.last_change_ms) for p in s.partitions.values()]
    return marshal.dumps((
        STATE_VERSION, s.name, s.site_id, s.my_psc_name, partitions,
        [_neighbor_tuple(n) for n in s.psc_neighbors.values()], [_neighbor_tuple(n) for n in s.bsc_neighbors.values()],
        [(d.identifier, d.partition_id, d.seq_number, d.object_type, d.scope) for d in s.deleted.values()],
        [(k, f.requester, f.request_id, f.psc_name, f.deadline_ms) for k, f in s.forwarded.items()],
        s.nack_resends, s.bsc_ack_due_ms, s.now_ms, s.messages_sent, s.initialized, s.store_layout.to_tuple(),
        s.versions_recorded, s.findings.to_list() if s.findings else []))


def state_from_bytes(raw: bytes) -> ServerState:
    (version, name, site_id, my_psc, partitions, pscs, bscs, deleted, forwarded, nack_resends, bsc_ack_due,
     now_ms, sent, initialized, *later) = marshal.loads(raw)
    if version != STATE_VERSION:
        raise ValueError(f"replica state of {name!r} is of version {version!r}: this release reads version "
                         f"{STATE_VERSION} (a checkpoint of a later release)")
    # a state written before the store layout (checkpoints of earlier versions) has 256 buckets, and
    # one written before directory_history numbers its versions from 0
    s = ServerState(name, site_id, my_psc,
                    store_layout=StoreLayout.from_tuple(later[0]) if later else StoreLayout.legacy(),
                    versions_recorded=later[1] if len(later) > 1 else 0,
                    findings=FindingLog(later[2]) if len(later) > 2 and later[2] else None)
    for pid, auth, last, purged, allowed, state, prev_purged, cmw, pending, initial, *health in partitions:
        # a state written before the health fields lacks them (checkpoints of earlier versions)
        s.partitions[pid] = Partition(pid, auth, last, purged, allowed, PurgeState(state), prev_purged, cmw,
                                      [_change_from(c) for c in pending], initial, *health)
    s.psc_neighbors = {cast(Any, n.machine_name): n for n in map(_neighbor_from, pscs)}
    s.bsc_neighbors = {cast(Any, n.machine_name): n for n in map(_neighbor_from, bscs)}
    s.deleted = {d[0]: DeletedObject(*d) for d in deleted}
    s.forwarded = {k: ForwardedRequest(*rest) for k, *rest in forwarded}
    s.nack_resends, s.bsc_ack_due_ms, s.now_ms, s.messages_sent, s.initialized = (
        nack_resends, bsc_ack_due, now_ms, sent, initialized)
    return s
