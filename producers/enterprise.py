"""A deterministic model of an MSMQ enterprise: sites, directory servers, queue managers, queues,
and the directory objects their object authorities own (MC-MQDSRP 1.3, 3.1.1).

Sans-IO: no Kafka, no clock. The simulator drives it; the authority responder and the ground
truth read it.
"""
import random
import uuid
from dataclasses import dataclass, field

from streaming.operators.replication import DeletedObject  # noqa: F401  (3.1.1.2.2; re-exported)
from streaming.wire.guid import GUID_NULL
from streaming.wire.properties import (MQDS_CN, MQDS_ENTERPRISE, MQDS_MACHINE, MQDS_QUEUE,
                                      MQDS_ROUTINGLINK, MQDS_SITE, MQDS_USER, OBJECT_TYPE_NAMES, Property)
from streaming.wire.propids import propid

__all__ = ["DeletedObject", "DirObject", "Enterprise", "ENTERPRISE_TYPES", "ID_PROPERTY", "IndexedSet",
           "MQDS_QUEUE", "MUTABLE", "Partition", "PEC_PARTITION_ID", "props", "SCOPE_ENTERPRISE", "SCOPE_SITE",
           "security_descriptor", "SeqLog", "Server", "SERVICE_BSC", "SERVICE_NONE", "SERVICE_PEC", "SERVICE_PSC"]

ENTERPRISE_TYPES = (MQDS_ENTERPRISE, MQDS_SITE, MQDS_CN, MQDS_USER, MQDS_ROUTINGLINK)
SCOPE_SITE, SCOPE_ENTERPRISE = 0, 1
SERVICE_NONE, SERVICE_BSC, SERVICE_PSC, SERVICE_PEC = 0x0, 0x2, 0x4, 0x8
PEC_PARTITION_ID = GUID_NULL

# The property that carries each type's identity; it is the first property of a create, so the
# receiver's "type of the first PROPID" (3.1.7.2.3) names the right object type.
ID_PROPERTY = {MQDS_QUEUE: "Q_INSTANCE", MQDS_MACHINE: "QM_MACHINE_ID", MQDS_SITE: "S_SITEID", MQDS_CN: "CN_GUID",
               MQDS_ENTERPRISE: "E_ID", MQDS_USER: "U_ID", MQDS_ROUTINGLINK: "L_ID"}
# Properties an update may change, per type (a subset of the 3.2.7.8 refTable's DirectoryChange lists).
MUTABLE = {
    MQDS_QUEUE: ("Q_QUOTA", "Q_JOURNAL_QUOTA", "Q_BASEPRIORITY", "Q_JOURNAL", "Q_LABEL", "Q_AUTHENTICATE",
                 "Q_PRIV_LEVEL", "Q_SECURITY"),
    MQDS_MACHINE: ("QM_QUOTA", "QM_JOURNAL_QUOTA", "QM_SECURITY"),
    MQDS_SITE: ("S_INTERVAL1", "S_INTERVAL2"),
    MQDS_CN: ("CN_NAME",),
    MQDS_ENTERPRISE: ("E_LONG_LIVE", "E_NAMESTYLE"),
    MQDS_USER: ("U_SIGN_CERT", "U_DIGEST"),
    MQDS_ROUTINGLINK: ("L_COST",),
}


@dataclass
class DirObject:
    object_type: int
    guid: str
    partition_id: str
    path_name: str
    seq_number: int
    properties: dict[int, object]                  # PROPID -> value, in creation order

    def property_list(self) -> list[Property]:
        return [Property(k, v) for k, v in self.properties.items()]


class SeqLog:
    """Which object of a partition holds each sequence number, in ascending order: an authority
    answers a sync request for [From, To] by walking only that range (MC-MQDSRP 3.2.7.3), whatever
    the partition's size. Every change takes the partition's next sequence number (3.1.7.1.2), so
    the log only grows at its end; an object changed again leaves a stale entry behind, skipped,
    and the log is rebuilt from the live entries when the stale ones outnumber them, so it holds at
    most about twice the objects (created, updated or deleted and not purged yet)."""

    def __init__(self):
        self.seqs: list[int] = []
        self.guids: list[str] = []
        self.live: dict[str, int] = {}             # guid -> the sequence number it holds now

    def record(self, seq: int, guid: str) -> None:
        if self.seqs and seq <= self.seqs[-1]:
            raise ValueError(f"sequence number {seq} after {self.seqs[-1]}: a partition's changes only go up")
        self.seqs.append(seq)
        self.guids.append(guid)
        self.live[guid] = seq
        if len(self.seqs) > 2 * len(self.live) + 64:
            self._compact()

    def forget(self, guid: str) -> None:
        """A deleted object purged (3.1.7.2.9): no longer in any sync reply."""
        self.live.pop(guid, None)

    def between(self, first: int, last: int):
        """(seq, guid) of every live entry with first <= seq <= last, ascending."""
        import bisect
        i = bisect.bisect_left(self.seqs, first)
        while i < len(self.seqs) and self.seqs[i] <= last:
            if self.live.get(self.guids[i]) == self.seqs[i]:
                yield self.seqs[i], self.guids[i]
            i += 1

    def _compact(self) -> None:
        ordered = sorted((seq, guid) for guid, seq in self.live.items())
        self.seqs, self.guids = [seq for seq, _ in ordered], [guid for _, guid in ordered]


@dataclass
class Partition:
    partition_id: str
    authority: str
    last_seq_number: int = 0
    purged_seq_number: int = 0
    objects: dict[str, DirObject] = field(default_factory=dict)
    deleted: dict[str, DeletedObject] = field(default_factory=dict)
    log: SeqLog = field(default_factory=SeqLog)    # objects and deletions by sequence number


@dataclass
class Server:
    name: str
    role: str                                      # PEC, PSC, BSC or QM (a queue manager without a DS)
    site_id: str
    machine_id: str
    ip: str

    @property
    def is_psc(self) -> bool:                      # "a statement about a PSC also applies to the PEC"
        return self.role in ("PEC", "PSC")


class IndexedSet:
    """Objects with O(1) add, remove and seeded random choice (the simulator picks from thousands)."""

    def __init__(self):
        self.items: list = []
        self.positions: dict[str, int] = {}

    def add(self, key: str, item) -> None:
        self.positions[key] = len(self.items)
        self.items.append((key, item))

    def remove(self, key: str) -> None:
        pos = self.positions.pop(key)
        last = self.items.pop()
        if pos < len(self.items):
            self.items[pos] = last
            self.positions[last[0]] = pos

    def choice(self, rng: random.Random):
        return self.items[rng.randrange(len(self.items))][1]

    def values(self) -> list:
        return [item for _key, item in self.items]

    def __len__(self) -> int:
        return len(self.items)


class Enterprise:
    """Sites 0..N-1; site 0's PSC is the PEC. Every site has M BSCs and K plain queue managers."""

    def __init__(self, rng: random.Random, sites: int = 3, bscs_per_site: int = 1, qms_per_site: int = 3):
        self.rng = rng
        self.enterprise_id = self.new_guid()
        self.enterprise_name = "corp"
        self.servers: dict[str, Server] = {}
        self.sites: list[str] = []
        self.site_cns: dict[str, str] = {}
        for s in range(sites):
            site_id = self.new_guid()
            self.sites.append(site_id)
            self.site_cns[site_id] = self.new_guid()
            self._add_server("pec0" if s == 0 else f"psc{s}", "PEC" if s == 0 else "PSC", site_id, s, 1)
            for b in range(bscs_per_site):
                self._add_server(f"bsc{s}-{b + 1}", "BSC", site_id, s, 10 + b)
            for q in range(qms_per_site):
                self._add_server(f"qm{s}-{q + 1}", "QM", site_id, s, 100 + q)
        self.partitions: dict[str, Partition] = {PEC_PARTITION_ID: Partition(PEC_PARTITION_ID, "pec0")}
        self.by_type: dict[int, IndexedSet] = {t: IndexedSet() for t in OBJECT_TYPE_NAMES}
        self.queues_by_qm: dict[str, IndexedSet] = {}
        for s, site_id in enumerate(self.sites):
            self.partitions[site_id] = Partition(site_id, self.psc_of(site_id).name)

    def new_guid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _add_server(self, name: str, role: str, site_id: str, site_index: int, host: int) -> None:
        self.servers[name] = Server(name, role, site_id, self.new_guid(), f"10.{site_index}.0.{host}")

    # -- topology -----------------------------------------------------------------------
    def psc_of(self, site_id: str) -> Server:
        return next(s for s in self.servers.values() if s.site_id == site_id and s.is_psc)

    def pscs(self) -> list[Server]:
        return [s for s in self.servers.values() if s.is_psc]

    def bscs_of(self, site_id: str) -> list[Server]:
        return [s for s in self.servers.values() if s.site_id == site_id and s.role == "BSC"]

    def directory_servers(self) -> list[Server]:
        return [s for s in self.servers.values() if s.role != "QM"]

    def queue_managers(self) -> list[Server]:
        return [s for s in self.servers.values() if s.role == "QM"]

    def site_index(self, site_id: str) -> int:
        return self.sites.index(site_id)

    def owner_partition(self, object_type: int, site_id: str | None) -> str:
        return PEC_PARTITION_ID if object_type in ENTERPRISE_TYPES else site_id

    # -- objects --------------------------------------------------------------------------
    def find(self, guid: str) -> DirObject | None:
        for p in self.partitions.values():
            if guid in p.objects:
                return p.objects[guid]
        return None

    def queues_of(self, machine_guid: str) -> list[DirObject]:
        return self.queues_by_qm.get(machine_guid, IndexedSet()).values()

    def add_object(self, obj: DirObject) -> None:
        self.partitions[obj.partition_id].objects[obj.guid] = obj
        self.partitions[obj.partition_id].log.record(obj.seq_number, obj.guid)
        self.by_type[obj.object_type].add(obj.guid, obj)
        if obj.object_type == MQDS_QUEUE:
            self.queues_by_qm.setdefault(obj.properties[propid("Q_QMID")], IndexedSet()).add(obj.guid, obj)

    def remove_object(self, obj: DirObject) -> None:
        del self.partitions[obj.partition_id].objects[obj.guid]
        self.by_type[obj.object_type].remove(obj.guid)
        if obj.object_type == MQDS_QUEUE:
            self.queues_by_qm[obj.properties[propid("Q_QMID")]].remove(obj.guid)

    def server_by_machine(self, machine_guid: str) -> Server:
        return next(s for s in self.servers.values() if s.machine_id == machine_guid)


def props(*pairs) -> dict[int, object]:
    return {propid(name): value for name, value in pairs}


def security_descriptor(rng: random.Random) -> bytes:
    # A self-relative SECURITY_DESCRIPTOR header ([MS-DTYP] 2.4.6) with no ACLs: enough to be opaque data.
    return bytes([1, 0, 0x04, 0x80]) + bytes(12) + rng.randbytes(4)
