"""The enterprise simulator: what an MSMQ enterprise's servers put on the wire, with ground truth.

Sans-IO and deterministic for a seed: `Simulator(seed=...).messages()` yields SimMessage records
(protocol, Kafka key, Avro envelope) in send order; `truth()` then returns the state every
consumer must end with. Event time is simulated: sent_time/arrival_time start at SIM_EPOCH.

What it models (MC-MQDSRP 3, MS-MQCN 3.3, MS-MQSD 3):
- object authorities (the PEC for the enterprise partition, each PSC for its site partition)
  creating, updating and deleting objects with consecutive sequence numbers (3.1.7.1.2);
- change propagation: authority -> every other PSC every 10 s, PSC -> its BSCs every 2 s
  (notes <2>-<10>), a non-empty SeqNumberHeader every 20 minutes per neighbour (note <12>);
- PSC acks every 256 changes (3.1.7.2.3), BSC acks at 5 s then every 12 h (notes <7>, <8>),
  authorities purging deleted objects up to the smallest PSC ack (3.1.7.2.9, digest readings);
- change requests forwarded to the authority and their replies (3.1.7.1.1, 3.2.7.6);
- change notifications to the owning queue manager: v1 from the directory service or v2 from a
  queue manager (MQCN 3.3.5), including bursts of 100 or more to one queue manager;
- discovery requests and local-site / remote-site replies (MQSD 3.1.5.2).
"""
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterator

from streaming.operators.findings import FLOOD_PER_MINUTE
from streaming.operators.replication import (BSC_ACK_FIRST_MS, BSC_ACK_MS, INTERSITE_MS, INTRASITE_MS, PURGE_BUFFER,
                                           SEQ_HEADER_MS)
from streaming.wire.envelope import make_envelope
from streaming.wire import decode, encode, mqcn, mqdsrp, mqsd
from streaming.wire.guid import GUID_NULL
from streaming.wire.topics import RECORD_BODY_BYTES
from streaming.wire.properties import Property
from streaming.wire.propids import propid

from . import enterprise as ent
from .truth import DeliveredNotifications, DiscoveryOutcomes, LostChanges, TruthRecord
from .enterprise import DeletedObject, DirObject, Enterprise, props, security_descriptor

__all__ = ["ACK_EVERY", "ATTACKS", "CAPTURE_ATTACKS", "Faults", "FLOOD_COPIES", "FLOOD_EVERY", "FLOOD_FIRST",
           "MESSAGE_ATTACKS", "NACK_CLASSES", "propagation_bodies", "propagation_parts", "QUIET_TAIL_MS",
           "ROGUE_ADDRESS", "ROGUE_REPLY_RATE", "ROGUE_SERVERS", "SIM_EPOCH_MS", "SimMessage", "Simulator", "UNAUTHENTICATED_KINDS",
           "UNAUTHENTICATED_RATE", "UNKNOWN_SENDER_RATE", "UNKNOWN_SENDER_TARGETS", "UNSIGNED_RATE",
           "UNSIGNED_TARGETS"]

SIM_EPOCH_MS = int(datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
ACK_EVERY = 256                                        # 3.1.7.2.3: 8th byte of LastSeqNumber == 0x00
# The quiet tail after the last operation: past the 15-minute MQCN batching window and the 20-minute
# SeqNumberHeader period (note <12>), so every server sends each neighbour one header after its last
# change and a replica that dropped changes from a full pending collection (MC-MQDSRP 3.1.7.2.2)
# learns of them and asks (a live enterprise's next header would).
QUIET_TAIL_MS = 21 * 60_000
NACK_CLASSES = ("NackBadSignature", "NackReachQueueTimeout", "NackBadDestQueue")
UNAUTHENTICATED_KINDS = ("v1:unauthenticated", "attack:mqcn-unauthenticated")    # discarded: never delivered
# --attack: each kind of hostile traffic the job reports as a security finding
ATTACKS = ("dsrp-unsigned", "dsrp-unknown-sender", "mqsd-rogue-reply", "mqcn-unauthenticated", "mqcn-flood",
           "mqqb-malformed")
# injected by the capture writer into --pcap captures (an MQQB packet exists only on the wire)
CAPTURE_ATTACKS = ("mqqb-malformed",)
MESSAGE_ATTACKS = tuple(a for a in ATTACKS if a not in CAPTURE_ATTACKS)     # what the simulator itself injects
UNSIGNED_TARGETS = ("ChangePropagation", "SyncReply", "PSCAck", "BSCAck", "AlreadyPurged")
UNSIGNED_RATE, UNAUTHENTICATED_RATE = 0.01, 0.02
# dsrp-unknown-sender: signed copies from a machine no directory object names, of the messages whose
# sender the receiving server does not use (a ChangePropagation's sender becomes a BSC's PSC)
UNKNOWN_SENDER_TARGETS = ("ChangeReply", "SyncReply", "PSCAck", "BSCAck", "AlreadyPurged")
UNKNOWN_SENDER_RATE, ROGUE_REPLY_RATE = 0.02, 0.05
ROGUE_SERVERS = ("rogue-ds1", "rogue-ds2")              # no machine object names them
ROGUE_ADDRESS = "10.250.0.{}"                           # nor any PROPID_QM_ADDRESS
FLOOD_EVERY, FLOOD_FIRST = 4_000, 100   # notifications between two floods, and before the first
FLOOD_COPIES = FLOOD_PER_MINUTE + 100
# A ChangePropagationMessage's fields besides its changes, with room to spare: the MQDSRP header, Flush,
# Count and a SeqNumberHeader of 32 bytes per partition with its sender's name (digest §9.3).
PROPAGATION_ROOM = 16_384
MAX_PROPAGATION_COUNT = 0xFFFF                          # Count is a u16


@dataclass
class Faults:
    """Each a rate in [0, 1]. Drops hit only MQDSRP change propagation, the one flow the protocol
    heals (sync requests); corruptions, unauthenticated v1 notifications and Nack copies are
    injected as extra messages, so the ground truth stays exact."""
    reorder: float = 0.0
    reorder_window: int = 8
    duplicate: float = 0.0
    drop: float = 0.0
    corrupt: float = 0.0
    unauthenticated: float = 0.0
    nack: float = 0.0

    def any(self) -> bool:
        return any((self.reorder, self.duplicate, self.drop, self.corrupt, self.unauthenticated, self.nack))


@dataclass
class SimMessage:
    protocol: str                 # mqcn, mqdsrp or mqsd
    key: str                      # the destination machine: the Kafka record key
    envelope: dict
    kind: str                     # what it is, e.g. "ChangePropagation", "v2:2", "reply:remote"
    droppable: bool = True        # False: the drop fault spares it (the quiet tail's SeqNumberHeaders)


@dataclass
class _Reply:
    at_ms: int
    where: str                    # "local" or "remote"
    responder: ent.Server
    packet: mqsd.TopologyServerReply | None = None      # set once sent


@dataclass
class _Request:
    request_id: str
    client: ent.Server
    sent_ms: int
    scenario: str
    replies: list[_Reply] = field(default_factory=list)


class Simulator:
    def __init__(self, seed: int = 1, sites: int = 3, bscs_per_site: int = 1, qms_per_site: int = 3,
                 queues_per_qm: int = 4, faults: Faults | None = None, burst_rate: float = 0.002,
                 v1_share: float = 0.4, op_interval_ms: tuple[int, int] = (20, 120),
                 attacks: frozenset[str] = frozenset(), clock=None):
        self.seed = seed
        self.rng = random.Random(seed)
        self.fault_rng = random.Random(seed * 7919 + 1)
        unknown = set(attacks) - set(ATTACKS)
        if unknown:
            raise ValueError(f"unknown attack {sorted(unknown)[0]!r}: one of {', '.join(ATTACKS)}")
        self.attacks = tuple(a for a in ATTACKS if a in attacks)
        self.attack_rng = random.Random(seed * 104_729 + 3)     # its own draws: the traffic stays the same
        self._mqcn_seen = 0
        self.last_arrival_ms = 0
        self.ent = Enterprise(self.rng, sites, bscs_per_site, qms_per_site)
        self.queues_per_qm = queues_per_qm
        self.faults = faults or Faults()
        self.burst_rate = burst_rate
        self.op_interval_ms = op_interval_ms        # simulated time between two directory operations
        # clock: the wall clock (ms) for an enterprise in real time: each operation happens when the
        # consumer asks for more (a producer holding --rate spaces them), each message is dated when it
        # is handed over (_on_the_clock); the quiet tail still runs on op_interval_ms (it would take 21
        # minutes otherwise). None: simulated time from SIM_EPOCH_MS, op_interval_ms between operations.
        self.clock = clock
        self.now = SIM_EPOCH_MS if clock is None else clock()
        self.start_ms = self.now
        self.tail_from_ms: int | None = None        # when the quiet tail started (self.stop())
        self.stopped = False
        self.avail: dict[tuple[str, str], list[mqdsrp.DirectoryChange]] = {}
        self.last_header_ms: dict[tuple[str, str], int] = {}
        self.acked: dict[tuple[str, str], int] = {}           # (psc, partition) -> acked seq at the authority
        self.cn_mode = {qm.name: ("v1" if self.rng.random() < v1_share else "v2") for qm in self.ent.queue_managers()}
        self.record = TruthRecord()                      # faults, attacks, discovery results as made
        self.discovery = DiscoveryOutcomes(self.record)  # each request's result, settled once final
        self._unauthenticated_awaiting: dict[str, list[dict]] = {}   # message id -> attack records
        self.mqcn_delivered = DeliveredNotifications()   # what each queue manager was told, as delivered
        self.lost_changes = LostChanges()                # changes no sync reply can bring back
        self._pending_replies: list[tuple[_Request, _Reply]] = []
        self.counts: dict[str, int] = {"mqcn": 0, "mqdsrp": 0, "mqsd": 0}
        self._out: list[SimMessage] = []
        self._request_id = 0

    # ================================================================== driving
    def write_truth_to(self, writer) -> None:
        """Write the truth out as it is made (a `TruthWriter`), before the first message: the run
        holds none of its faults, attacks and finished discovery results. `finish_truth()` at the
        end writes the rest and closes the file."""
        self.record = TruthRecord(writer)
        self.discovery.record = self.record

    def keep_no_truth(self) -> None:
        """No truth is asked for: what is made is counted, not held."""
        self.record = TruthRecord(keep=False)
        self.discovery.record = self.record

    def finish_truth(self) -> None:
        from .truth import write_end
        write_end(self, self.record.writer)
        self.record.writer.close()

    def stop(self) -> None:
        """End the operations phase; the quiet tail still flushes and lets timers fire."""
        self.stopped = True

    def messages(self, count: int | None = None) -> Iterator[SimMessage]:
        """count: stop after this many messages of the traffic (attack copies come on top)."""
        produced = 0
        stream = self._with_attacks(self._on_the_clock(self._faulty(self._raw_messages())))
        for msg in stream:
            self.last_arrival_ms = max(self.last_arrival_ms, msg.envelope["arrival_time"])
            if msg.protocol == "mqsd" and not msg.kind.startswith("corrupt:"):
                # what the clients see: each copy as delivered, after the faults
                self.discovery.delivered(msg.envelope["message_id"], msg.envelope["arrival_time"])
            elif msg.protocol == "mqcn" and msg.kind not in UNAUTHENTICATED_KINDS and not msg.kind.startswith("corrupt:"):
                self.mqcn_delivered.deliver(msg.envelope)
            elif msg.kind == "v1:unauthenticated":          # its arrival time is final now
                record = self._unauthenticated_awaiting[msg.envelope["message_id"]].pop(0)
                if not self._unauthenticated_awaiting[msg.envelope["message_id"]]:
                    del self._unauthenticated_awaiting[msg.envelope["message_id"]]
                self._attack_found(record, msg.envelope)
            yield msg
            if not msg.kind.startswith("attack:"):
                produced += 1
            if count is not None and produced >= count:
                self.stop()

    def _raw_messages(self) -> Iterator[SimMessage]:
        next_intra, next_inter = self.now + INTRASITE_MS, self.now + INTERSITE_MS
        next_bsc_ack, next_discovery = self.now + BSC_ACK_FIRST_MS, self.now + 3_000
        bootstrap = self._bootstrap_ops()
        tail_end = None
        while True:
            if tail_end is None and self.stopped:
                tail_end, self.tail_from_ms = self.now + QUIET_TAIL_MS, self.now
            if tail_end is not None and self.now >= tail_end:
                break
            self._tick(self.rng.randint(*self.op_interval_ms))
            if tail_end is None:
                op = next(bootstrap, None)
                (op or self._random_op)()
            if self.now >= next_intra:
                self._flush(intersite=False)
                next_intra += INTRASITE_MS
            if self.now >= next_inter:
                self._flush(intersite=True)
                next_inter += INTERSITE_MS
            if self.now >= next_bsc_ack:
                self._bsc_acks()
                next_bsc_ack += BSC_ACK_MS
            if self.now >= next_discovery:
                self._discovery_request()
                next_discovery += self.rng.randint(2_000, 8_000) if tail_end is None else 60_000
            self._deliver_replies()
            out, self._out = self._out, []
            yield from out
        self._flush(intersite=True)
        self._flush(intersite=False)
        self._deliver_replies(force=True)
        out, self._out = self._out, []
        yield from out

    # ================================================================== output
    def _emit(self, protocol: str, body: bytes, kind: str, *, source: str, dest: str, queue: str,
              message_class: str = "Normal", sender_type: str = "QueueManagerIdentifier",
              sender_id: str | None = None, auth: str = "Sig20", hash_alg: str | None = "SHA1",
              at_ms: int | None = None) -> SimMessage:
        sent = self.now if at_ms is None else at_ms
        env = make_envelope(protocol, body, source_machine=source, destination_machine=dest,
                            destination_queue=queue, sent_time=sent, arrival_time=sent + 5,
                            message_class=message_class, sender_identifier_type=sender_type,
                            sender_identifier=sender_id, authentication_level=auth, hash_algorithm=hash_alg,
                            message_id=self._message_id())
        msg = SimMessage(protocol, dest, env, kind)
        self._out.append(msg)
        return msg

    def _message_id(self) -> str:
        return str(self.ent.new_guid())

    def _emit_replication(self, sender: ent.Server, dest: str, inner, kind: str) -> SimMessage:
        return self._emit_replication_body(sender, dest, _replication_body(sender, inner), kind)

    def _emit_replication_body(self, sender: ent.Server, dest: str, body: bytes, kind: str) -> SimMessage:
        # 3.1.7.2.1: signed with MD5, SenderIdentifierType 2 (QM); sent to REPLICATION_QUEUE_DIRECT.
        return self._emit("mqdsrp", body, kind, source=sender.name, dest=dest,
                          queue=f"DIRECT=OS:{dest}\\private$\\mqis_queue$", sender_id=sender.machine_id,
                          auth="Sig10", hash_alg="MD5")

    # ================================================================== directory changes
    def _bootstrap_ops(self):
        e = self.ent
        yield lambda: self._create(ent.MQDS_ENTERPRISE, e.enterprise_id, e.enterprise_name, None)
        for site_id in e.sites:
            yield lambda s=site_id: self._create(ent.MQDS_SITE, s, f"site{e.site_index(s)}", None)
            yield lambda s=site_id: self._create(ent.MQDS_CN, e.site_cns[s], f"cn-ip-{e.site_index(s)}", None)
        for a, b in zip(e.sites, e.sites[1:]):
            yield lambda a=a, b=b: self._create(ent.MQDS_ROUTINGLINK, e.new_guid(),
                                                f"link-{e.site_index(a)}-{e.site_index(b)}", None, (a, b))
        for n in range(len(e.sites)):
            yield lambda n=n: self._create(ent.MQDS_USER, e.new_guid(), f"user{n}", None)
        # The sites reach every directory server (intersite, then intrasite propagation) before their
        # partitions' first objects do, as in an enterprise that is set up site by site.
        yield lambda: self._advance(INTERSITE_MS)
        yield lambda: self._advance(2 * INTRASITE_MS)
        for server in list(e.servers.values()):
            yield lambda s=server: self._create(ent.MQDS_MACHINE, s.machine_id, s.name, s.site_id, s)
        for qm in e.queue_managers():
            for q in range(self.queues_per_qm):
                yield lambda qm=qm, q=q: self._create_queue(qm, f"{qm.name}\\queue{q}")

    def _advance(self, ms: int) -> None:
        self.now += ms

    def _random_op(self) -> None:
        e, r = self.ent, self.rng.random()
        if r < self.burst_rate:
            return self._burst()
        if r < 0.45:
            return self._update_random(ent.MQDS_QUEUE)
        if r < 0.60:
            qm = self.rng.choice(e.queue_managers())
            return self._create_queue(qm, f"{qm.name}\\q{self.ent.new_guid()[:8]}")
        if r < 0.70:
            return self._delete_random(ent.MQDS_QUEUE)
        if r < 0.78:
            qm = self.rng.choice(e.queue_managers())
            return self._update(e.find(qm.machine_id))
        if r < 0.83:
            return self._create(ent.MQDS_USER, e.new_guid(), f"user-{e.new_guid()[:8]}", None)
        if r < 0.87:
            return self._delete_random(ent.MQDS_USER)
        if r < 0.91:
            return self._update_random(ent.MQDS_USER)
        if r < 0.95:
            return self._update_random(ent.MQDS_ROUTINGLINK)
        if r < 0.97:
            return self._update_random(ent.MQDS_CN)
        return self._update_random(ent.MQDS_SITE)

    def _burst(self) -> None:
        """100 or more notifications to one queue manager inside one batching window (MQCN note <3>)."""
        qm = self.rng.choice(self.ent.queue_managers())
        if not self.ent.queues_by_qm.get(qm.machine_id):
            self._create_queue(qm, f"{qm.name}\\burst")
        queues = self.ent.queues_by_qm[qm.machine_id]     # picked from in place: no copy of thousands
        for _ in range(self.rng.randint(100, 130)):
            self._tick(self.rng.randint(5, 40))
            self._update(queues.choice(self.rng))         # the same draw as rng.choice over its list

    def _tick(self, ms: int) -> None:
        """Time passing: simulated, or with a wall clock the clock's until the quiet tail (an
        operation or a burst that moved it on by its own steps would carry the enterprise's time
        ahead of the clock)."""
        if self.clock is None or self.tail_from_ms is not None:
            self.now += ms
        else:
            self.now = max(self.now, self.clock())

    def _initial_properties(self, object_type: int, guid: str, name: str, site_id: str | None, extra) -> dict:
        rng, e = self.rng, self.ent
        if object_type == ent.MQDS_ENTERPRISE:
            return props(("E_ID", guid), ("E_NAME", name), ("E_NAMESTYLE", 0), ("E_CSP_NAME", "Microsoft Base"),
                         ("E_PECNAME", "pec0"), ("E_LONG_LIVE", 7_776_000), ("E_VERSION", 200),
                         ("E_SECURITY", security_descriptor(rng)))
        if object_type == ent.MQDS_SITE:
            return props(("S_SITEID", guid), ("S_GATES", []), ("S_INTERVAL1", 2), ("S_INTERVAL2", 10),
                         ("S_PATHNAME", name), ("S_PSC", e.psc_of(guid).name), ("S_PSC_SIGNPK", rng.randbytes(16)),
                         ("S_SECURITY", security_descriptor(rng)))
        if object_type == ent.MQDS_CN:
            return props(("CN_GUID", guid), ("CN_NAME", name), ("CN_PROTOCOLID", 1),
                         ("CN_SECURITY", security_descriptor(rng)))
        if object_type == ent.MQDS_USER:
            return props(("U_ID", guid), ("U_SID", bytes([1, 1, 0, 0, 0, 0, 0, 5]) + rng.randbytes(4)),
                         ("U_DIGEST", [e.new_guid()]), ("U_SIGN_CERT", rng.randbytes(24)))
        if object_type == ent.MQDS_ROUTINGLINK:
            a, b = extra
            return props(("L_ID", guid), ("L_COST", rng.randint(1, 10)), ("L_NEIGHBOR1", a), ("L_NEIGHBOR2", b))
        if object_type == ent.MQDS_MACHINE:
            server = extra
            service = {"PEC": ent.SERVICE_PEC, "PSC": ent.SERVICE_PSC, "BSC": ent.SERVICE_BSC}.get(server.role, 0)
            return props(("QM_MACHINE_ID", guid), ("QM_FOREIGN", 0), ("QM_QUOTA", 0xFFFFFFFF),
                         ("QM_JOURNAL_QUOTA", 0xFFFFFFFF), ("QM_CNS", [e.site_cns[site_id]]),
                         ("QM_MACHINE_TYPE", "Windows NT 4.0 (MSMQ 1.0)"), ("QM_OS", 0x400),
                         ("QM_ADDRESS", bytes([4, 0, 1, 0]) + bytes(int(x) for x in server.ip.split("."))),
                         ("QM_CREATE_TIME", self.now // 1000), ("QM_MODIFY_TIME", self.now // 1000),
                         ("QM_PATHNAME", name), ("QM_SERVICE", service), ("QM_SITE_ID", site_id),
                         ("QM_SECURITY", security_descriptor(rng)), ("QM_SIGN_PK", rng.randbytes(16)),
                         ("QM_ENCRYPT_PK", rng.randbytes(16)), ("QM_INFRS", []), ("QM_OUTFRS", []))
        qm = extra
        return props(("Q_INSTANCE", guid), ("Q_SCOPE", ent.SCOPE_ENTERPRISE), ("Q_QMID", qm.machine_id),
                     ("Q_TYPE", GUID_NULL), ("Q_BASEPRIORITY", 0), ("Q_JOURNAL", 0), ("Q_QUOTA", 0xFFFFFFFF),
                     ("Q_JOURNAL_QUOTA", 0xFFFFFFFF), ("Q_CREATE_TIME", self.now // 1000),
                     ("Q_MODIFY_TIME", self.now // 1000), ("Q_PATHNAME", name), ("Q_LABEL", name.split("\\")[-1]),
                     ("Q_AUTHENTICATE", 0), ("Q_PRIV_LEVEL", 1), ("Q_TRANSACTION", rng.randint(0, 1)),
                     ("Q_SECURITY", security_descriptor(rng)))

    def _mutate(self, obj: DirObject) -> dict[int, object]:
        rng, e = self.rng, self.ent
        names = rng.sample(ent.MUTABLE[obj.object_type], k=rng.randint(1, min(3, len(ent.MUTABLE[obj.object_type]))))
        values = {
            "Q_QUOTA": lambda: rng.randint(1, 1 << 20), "Q_JOURNAL_QUOTA": lambda: rng.randint(1, 1 << 20),
            "Q_BASEPRIORITY": lambda: rng.randint(-100, 100), "Q_JOURNAL": lambda: rng.randint(0, 1),
            "Q_LABEL": lambda: f"label {rng.randint(0, 99999)}", "Q_AUTHENTICATE": lambda: rng.randint(0, 1),
            "Q_PRIV_LEVEL": lambda: rng.randint(0, 2), "Q_SECURITY": lambda: security_descriptor(rng),
            "QM_QUOTA": lambda: rng.randint(1, 1 << 24), "QM_JOURNAL_QUOTA": lambda: rng.randint(1, 1 << 24),
            "QM_SECURITY": lambda: security_descriptor(rng), "S_INTERVAL1": lambda: rng.randint(1, 10),
            "S_INTERVAL2": lambda: rng.randint(5, 60), "CN_NAME": lambda: f"cn-{rng.randint(0, 999)}",
            "E_LONG_LIVE": lambda: rng.randint(3600, 9_000_000), "E_NAMESTYLE": lambda: rng.randint(0, 2),
            "U_SIGN_CERT": lambda: rng.randbytes(24), "U_DIGEST": lambda: [e.new_guid()],
            "L_COST": lambda: rng.randint(1, 999),
        }
        return {propid(n): values[n]() for n in names}

    def _create_queue(self, qm: ent.Server, path: str) -> DirObject:
        return self._create(ent.MQDS_QUEUE, self.ent.new_guid(), path, qm.site_id, qm)

    def _create(self, object_type: int, guid: str, name: str, site_id: str | None, extra=None) -> DirObject:
        partition = self.ent.partitions[self.ent.owner_partition(object_type, site_id)]
        properties = self._initial_properties(object_type, guid, name, site_id, extra)
        change = self._apply(partition, mqdsrp.CMD_CREATE, guid, name, properties, use_guid=False)
        obj = DirObject(object_type, guid, partition.partition_id, name, change.seq_number, dict(properties))
        self.ent.add_object(obj)
        self.lost_changes.created(guid, name, change.seq_number, properties)
        self._notify(obj, "create", properties)
        return obj

    def _update(self, obj: DirObject) -> None:
        changed = self._mutate(obj)
        if obj.object_type == ent.MQDS_QUEUE:
            changed[propid("Q_MODIFY_TIME")] = self.now // 1000
        partition = self.ent.partitions[obj.partition_id]
        change = self._apply(partition, mqdsrp.CMD_UPDATE, obj.guid, obj.path_name, changed, use_guid=True)
        obj.properties.update(changed)
        obj.seq_number = change.seq_number
        partition.log.record(change.seq_number, obj.guid)
        self.lost_changes.updated(obj.guid, change.seq_number, changed)
        self._notify(obj, "update", changed)

    def _update_random(self, object_type: int) -> None:
        pool = self.ent.by_type[object_type]
        if pool:
            self._update(pool.choice(self.rng))

    def _delete_random(self, object_type: int) -> None:
        pool = self.ent.by_type[object_type]
        if len(pool) > 2:
            self._delete(pool.choice(self.rng))

    def _delete(self, obj: DirObject) -> None:
        partition = self.ent.partitions[obj.partition_id]
        scope = ent.SCOPE_ENTERPRISE if obj.object_type != ent.MQDS_QUEUE else obj.properties[propid("Q_SCOPE")]
        change = self._apply(partition, mqdsrp.CMD_DELETE, obj.guid, obj.path_name,
                             props(("D_SCOPE", scope), ("D_OBJTYPE", obj.object_type)), use_guid=True)
        self.ent.remove_object(obj)
        self.lost_changes.deleted(obj.guid, obj.path_name)
        partition.deleted[obj.guid] = DeletedObject(obj.guid, partition.partition_id, change.seq_number,
                                                    obj.object_type, scope)
        partition.log.record(change.seq_number, obj.guid)
        self._notify(obj, "delete", {})

    def _apply(self, partition: ent.Partition, command: int, guid: str, path: str, properties: dict,
               use_guid: bool) -> mqdsrp.DirectoryChange:
        """The authority applies a change and queues it for its neighbours (3.1.7.1.2)."""
        plist = [Property(k, v) for k, v in properties.items()]
        if self.rng.random() < 0.1:
            self._change_request(partition, command, path, plist)
        seq = partition.last_seq_number + 1
        change = mqdsrp.DirectoryChange(command, 1 if use_guid else 0, None if use_guid else path,
                                        guid if use_guid else None, partition.partition_id,
                                        partition.last_seq_number, seq, partition.purged_seq_number, plist)
        partition.last_seq_number = seq
        authority = self.ent.servers[partition.authority]
        for psc in self.ent.pscs():
            if psc.name != authority.name:
                self.avail.setdefault((authority.name, psc.name), []).append(change)
        for bsc in self.ent.bscs_of(authority.site_id):
            self.avail.setdefault((authority.name, bsc.name), []).append(change)
        return change

    def _change_request(self, partition: ent.Partition, command: int, path: str, plist: list[Property]) -> None:
        """A change made through another directory server: request to the authority, then a reply."""
        authority = self.ent.servers[partition.authority]
        requesters = [s for s in self.ent.directory_servers() if s.name != authority.name]
        requester = self.rng.choice(requesters)
        self._request_id += 1
        # 3.1.7.1.1: UseGuid 0x00 with the path name; sequence numbers MIN; a BSC names its PSC.
        psc_name = self.ent.psc_of(requester.site_id).name if requester.role == "BSC" else None
        header = mqdsrp.ChangeRequestHeader(partition.partition_id, self._request_id,
                                            len(requester.name) + 1 if psc_name else 0, requester.name, psc_name)
        change = mqdsrp.DirectoryChange(command, 0, path, None, partition.partition_id, 0, 0, 0, plist)
        next_hop = psc_name if psc_name and psc_name != authority.name else authority.name
        self._emit_replication(requester, next_hop, mqdsrp.ChangeRequestMessage(header, change), "ChangeRequest")
        reply = mqdsrp.ChangeReplyMessage(self._request_id, 0, requester.name)
        # 3.2.7.6: to the requester if it is a directory neighbour of the authority, else via its PSC
        # (which forwarded the request and relays the reply).
        neighbour = requester.is_psc or requester.site_id == authority.site_id
        self._emit_replication(authority, requester.name if neighbour else psc_name, reply, "ChangeReply")

    # ================================================================== propagation, acks, purge
    def _flush(self, intersite: bool) -> None:
        for (sender, receiver), changes in list(self.avail.items()):
            rcv = self.ent.servers[receiver]
            if (rcv.role == "BSC") == intersite:
                continue
            header = self._seq_number_header(self.ent.servers[sender], rcv, intersite)
            if not changes and header.count == 0:
                continue       # digest §11.2: an empty tick need not be sent
            self.avail[(sender, receiver)] = []
            for body in propagation_bodies(self.ent.servers[sender], changes, header):
                sent = self._emit_replication_body(self.ent.servers[sender], receiver, body, "ChangePropagation")
            if self.stopped and header.count:
                # The tail's header is a replica's only way to learn of changes it lost at the end of the
                # traffic (dropped in transit or from a full pending collection, 3.1.7.2.2): the truth
                # expects every replica to be current, so a finite run must deliver it (QUIET_TAIL_MS).
                sent.droppable = False
            if rcv.is_psc:
                self._psc_received(rcv, changes)

    def _seq_number_header(self, sender: ent.Server, receiver: ent.Server, intersite: bool) -> mqdsrp.SeqNumberHeader:
        key = (sender.name, receiver.name)
        if self.now - self.last_header_ms.get(key, self.start_ms) < SEQ_HEADER_MS:
            return mqdsrp.SeqNumberHeader(0)
        self.last_header_ms[key] = self.now
        if intersite:
            owned = [p for p in self.ent.partitions.values() if p.authority == sender.name]
        else:
            owned = list(self.ent.partitions.values())
        entries = [mqdsrp.PartitionSeqNumbers(p.partition_id, self._known_last(sender, p), p.purged_seq_number)
                   for p in owned]
        return mqdsrp.SeqNumberHeader(len(entries), sender.name, entries)

    def _known_last(self, server: ent.Server, partition: ent.Partition) -> int:
        if partition.authority == server.name:
            return partition.last_seq_number
        # the first change of this partition still pending from its authority (an authority that owns
        # two partitions, the PEC, has changes of both pending to the same neighbour)
        pending = self.avail.get((partition.authority, server.name), [])
        return next((c.previous_seq_number for c in pending if c.partition_id == partition.partition_id),
                    partition.last_seq_number)

    def _psc_received(self, psc: ent.Server, changes: list[mqdsrp.DirectoryChange]) -> None:
        """A PSC applies propagated changes: forwards them to its BSCs and acks every 256th."""
        for change in changes:
            for bsc in self.ent.bscs_of(psc.site_id):
                self.avail.setdefault((psc.name, bsc.name), []).append(change)
            if change.seq_number % ACK_EVERY == 0:
                partition = self.ent.partitions[change.partition_id]
                authority = self.ent.servers[partition.authority]
                ack = mqdsrp.PSCAckMessage(psc.site_id, partition.partition_id, change.seq_number, psc.name)
                self._emit_replication(psc, authority.name, ack, "PSCAck")
                self.acked[(psc.name, partition.partition_id)] = change.seq_number
                self._purge(partition)

    def _purge(self, partition: ent.Partition) -> None:
        """Authority purge (3.1.7.2.9) with the digest's readings: keep the 1024 buffer (c), skip while
        LastSeqNumber < 1024 (b), and advance PurgedSeqNumber after removing (a)."""
        if partition.last_seq_number < PURGE_BUFFER:
            return
        others = [p for p in self.ent.pscs() if p.name != partition.authority]
        min_acked = min((self.acked.get((p.name, partition.partition_id), 0) for p in others), default=0)
        purge_to = min(partition.last_seq_number - PURGE_BUFFER, min_acked)
        if purge_to <= partition.purged_seq_number:
            return
        for guid in [g for g, d in partition.deleted.items() if d.seq_number <= purge_to]:
            del partition.deleted[guid]
            partition.log.forget(guid)
        partition.purged_seq_number = purge_to

    def _bsc_acks(self) -> None:
        for site_id in self.ent.sites:
            psc = self.ent.psc_of(site_id)
            for bsc in self.ent.bscs_of(site_id):
                self._emit_replication(bsc, psc.name, mqdsrp.BSCAckMessage(bsc.machine_id, bsc.name), "BSCAck")

    # ================================================================== change notifications
    def _notify(self, obj: DirObject, operation: str, changed: dict) -> None:
        if obj.object_type == ent.MQDS_QUEUE:
            qm = self.ent.server_by_machine(obj.properties[propid("Q_QMID")])
        elif obj.object_type == ent.MQDS_MACHINE and operation == "update":
            qm = self.ent.server_by_machine(obj.guid)
            if qm.role != "QM":
                return
        else:
            return
        if self.cn_mode[qm.name] == "v1":
            self._notify_v1(qm, obj, operation, changed)
        else:
            event = {"create": 1, "update": 2, "delete": 3}[operation] if obj.object_type == ent.MQDS_QUEUE else 4
            self._notify_v2(qm, obj, event)

    def _notify_v1(self, qm: ent.Server, obj: DirObject, operation: str, changed: dict) -> None:
        ds = self.ent.psc_of(qm.site_id)
        if operation == "create":       # 3.3.5.2: the 15 queue properties, by path name
            update = mqcn.new_update(0x00, [Property(k, v) for k, v in obj.properties.items()],
                                     obj.partition_id, path_name=obj.path_name)
        elif operation == "delete":
            update = mqcn.new_update(0x02, [Property(propid("D_SCOPE"), 1), Property(propid("D_OBJTYPE"), 1)],
                                     obj.partition_id, guid_identifier=obj.guid)
        elif obj.object_type == ent.MQDS_QUEUE:
            update = mqcn.new_update(0x01, [Property(propid("Q_QMID"), qm.machine_id)]
                                     + [Property(k, v) for k, v in changed.items()],
                                     obj.partition_id, guid_identifier=obj.guid)
        else:
            update = mqcn.new_update(0x01, [Property(propid("QM_MACHINE_ID"), obj.guid), Property(propid("QM_FOREIGN"), 0)]
                                     + [Property(k, v) for k, v in changed.items()],
                                     obj.partition_id, guid_identifier=obj.guid)
        body = encode("mqcn", mqcn.new_v1([update]))
        msg = self._emit("mqcn", body, f"v1:{update.command}", source=ds.name, dest=qm.name,
                         queue=f"PRIVATE={qm.machine_id}\\3", sender_id=ds.machine_id, auth="Sig10", hash_alg="MD5")
        if self.fault_rng.random() < self.faults.unauthenticated:
            self._unauthenticated_copy(msg)

    def _notify_v2(self, qm: ent.Server, obj: DirObject, event: int) -> None:
        site_servers = [s for s in self.ent.servers.values() if s.site_id == qm.site_id]
        sender = self.rng.choice(site_servers)
        body = encode("mqcn", mqcn.new_v2(event, obj.guid, self.ent.psc_of(qm.site_id).name))
        self._emit("mqcn", body, f"v2:{event}", source=sender.name, dest=qm.name,
                   queue=f"PRIVATE={qm.machine_id}\\3", sender_id=sender.machine_id, auth="Sig20")

    def _unauthenticated_copy(self, msg: SimMessage) -> None:
        """An injected v1 notification that fails the 3.2.5.1 check: AuthenticationLevel None."""
        env = dict(msg.envelope, authentication_level="None", message_id=self._message_id())
        self._out.append(SimMessage("mqcn", msg.key, env, "v1:unauthenticated"))
        self.record.item("discarded_notifications", {"message_id": env["message_id"], "queue_manager": msg.key,
                                                     "reason": "AuthenticationLevel None (MQCN 3.2.5.1)"})
        self._awaiting_delivery(self._attack_record("mqcn-unauthenticated", env, 1))   # a security finding too

    # ================================================================== discovery
    SCENARIOS = (("local", 0.35), ("remote_then_local", 0.2), ("remote", 0.2), ("two_remote", 0.08),
                 ("local_then_remote", 0.07), ("none", 0.1))

    def _discovery_request(self) -> None:
        client = self.rng.choice(self.ent.queue_managers())
        scenario = self.rng.choices([s for s, _ in self.SCENARIOS], [w for _, w in self.SCENARIOS])[0]
        if self.stopped:
            # In the quiet tail, requests complete on their local reply: the last events of the run
            # need no later traffic to push an event-time timer past them.
            scenario = "local"
        request_id = self.ent.new_guid()
        packet = mqsd.new_request(self.ent.enterprise_id, request_id, client.site_id)
        site = self.ent.site_index(client.site_id)
        sent = self._emit("mqsd", encode("mqsd", packet), "request", source=client.ip, dest=f"10.{site}.255.255",
                          queue="udp:1801", sender_type="None", auth="None", hash_alg=None)
        req = _Request(request_id, client, self.now, scenario)
        self.discovery.sent(sent.envelope["message_id"], req)
        local = [s for s in self.ent.directory_servers() if s.site_id == client.site_id]
        remote = [s for s in self.ent.directory_servers() if s.site_id != client.site_id]
        plan = {"local": [("local", 40)], "remote_then_local": [("remote", 30), ("local", 80)],
                "remote": [("remote", 30)], "two_remote": [("remote", 30), ("remote", 90)],
                "local_then_remote": [("local", 40), ("remote", 90)], "none": []}[scenario]
        for where, delay in plan:
            responder = self.rng.choice(local if where == "local" else remote)
            req.replies.append(_Reply(self.now + delay + self.rng.randint(0, 9), where, responder))
            self._pending_replies.append((req, req.replies[-1]))

    def _deliver_replies(self, force: bool = False) -> None:
        waiting = []
        for req, reply in self._pending_replies:
            if reply.at_ms <= self.now or force:
                self._send_reply(req, reply)
            else:
                waiting.append((req, reply))
        self._pending_replies = waiting

    def _send_reply(self, req: _Request, reply: _Reply) -> None:
        """3.2.5.1: a responder in the requester's site sends no server list; others send theirs."""
        responder = reply.responder
        servers, responding_site = None, None
        if reply.where == "remote":
            servers = [mqsd.DirectoryServiceServerEntry(True, False, s.name)
                       for s in self.ent.directory_servers() if s.site_id == responder.site_id]
            responding_site = responder.site_id
        packet = mqsd.new_reply(req.request_id, [self.ent.site_cns[responder.site_id]], responding_site, servers)
        reply.packet = packet.server_reply
        sent = self._emit("mqsd", encode("mqsd", packet), f"reply:{reply.where}", source=responder.ip,
                          dest=req.client.ip, queue="udp:1801", sender_type="None", auth="None", hash_alg=None,
                          at_ms=reply.at_ms)
        self.discovery.sent(sent.envelope["message_id"], req, reply)

    # ================================================================== faults
    def _faulty(self, stream: Iterator[SimMessage]) -> Iterator[SimMessage]:
        f, rng = self.faults, self.fault_rng
        if not f.any():
            for msg in stream:
                self.counts[msg.protocol] += 1
                yield msg
            return
        window: list[SimMessage] = []
        last_arrival = 0
        for msg in self._inject(stream):
            window.append(msg)
            if len(window) < max(f.reorder_window, 1):
                continue
            index = rng.randrange(len(window)) if rng.random() < f.reorder else 0
            out = window.pop(index)
            last_arrival = self._restamp(out, last_arrival)
            yield out
        for out in window:
            last_arrival = self._restamp(out, last_arrival)
            yield out

    def _on_the_clock(self, stream: Iterator[SimMessage]) -> Iterator[SimMessage]:
        """With a wall clock: each message arrives when it is handed over (its publication), sent as
        long before as its simulated transit, never before the one ahead of it; the quiet tail's
        messages keep their simulated times, ahead of the clock."""
        if self.clock is None:
            yield from stream
            return
        last = 0
        for msg in stream:
            env = msg.envelope
            if self.tail_from_ms is None or env["sent_time"] <= self.tail_from_ms:
                moved_by = max(self.clock(), last) - env["arrival_time"]
                env["sent_time"] += moved_by
                env["arrival_time"] += moved_by
            last = max(last, env["arrival_time"])
            yield msg

    def _restamp(self, msg: SimMessage, last_arrival: int) -> int:
        # A message overtaken in transport arrives later: arrival times stay in delivery order.
        arrival = max(msg.envelope["arrival_time"], last_arrival)
        msg.envelope["arrival_time"] = arrival
        self.counts[msg.protocol] += 1
        return arrival

    def _inject(self, stream: Iterator[SimMessage]) -> Iterator[SimMessage]:
        f, rng = self.faults, self.fault_rng
        for msg in stream:
            # the draw comes first, so sparing a tail header changes no other fault decision of a seed
            if msg.protocol == "mqdsrp" and msg.kind == "ChangePropagation" and rng.random() < f.drop \
                    and msg.droppable:
                self.record.item("dropped", msg.envelope["message_id"])
                self.lost_changes.dropped(msg.key, decode("mqdsrp", msg.envelope["body"])
                                          .change_propagation.directory_changes)
                continue
            yield msg
            if rng.random() < f.duplicate:
                self.record.item("duplicates", msg.envelope["message_id"])
                copy = SimMessage(msg.protocol, msg.key, dict(msg.envelope), msg.kind)
                if msg.kind == "v1:unauthenticated":          # it arrives twice: two findings' worth
                    self._awaiting_delivery(self._attack_record("mqcn-unauthenticated", copy.envelope, 1))
                elif msg.protocol == "mqsd":
                    self.discovery.copied(msg.envelope["message_id"])
                yield copy
            if rng.random() < f.corrupt:
                yield self._corrupted_copy(msg)
            if msg.protocol == "mqdsrp" and rng.random() < f.nack:
                env = dict(msg.envelope, message_class=rng.choice(NACK_CLASSES), message_id=self._message_id())
                self.record.item("nacks", env["message_id"])
                yield SimMessage("mqdsrp", msg.key, env, f"nack:{msg.kind}")

    # ================================================================== attacks
    def _with_attacks(self, stream: Iterator[SimMessage]) -> Iterator[SimMessage]:
        """The delivered traffic with hostile copies after some of its messages, at their arrival time:
        the traffic itself (its messages, their times, every random draw) is what it is without them."""
        for msg in stream:
            yield msg
            if self.attacks and not msg.kind.startswith(("corrupt:", "nack:")):
                for copy in self._attack(msg):
                    self.counts[copy.protocol] += 1
                    yield copy

    def _attack(self, msg: SimMessage) -> Iterator[SimMessage]:
        """Hostile traffic after a message, as extra messages the protocols leave the directory's state
        unchanged by (copies of real messages), so the ground truth stays exact; each is listed in
        the truth's `attacks` with what the job must find."""
        rng = self.attack_rng
        if msg.protocol == "mqcn":
            self._mqcn_seen += 1
        for kind in self.attacks:
            if kind == "dsrp-unsigned" and msg.protocol == "mqdsrp" and msg.kind in UNSIGNED_TARGETS \
                    and rng.random() < UNSIGNED_RATE:
                yield self._attack_copy(kind, msg, authentication_level="None", hash_algorithm=None)
            elif kind == "dsrp-unknown-sender" and msg.protocol == "mqdsrp" and msg.kind in UNKNOWN_SENDER_TARGETS \
                    and rng.random() < UNKNOWN_SENDER_RATE:
                yield self._attack_copy(kind, msg, source_machine=rng.choice(ROGUE_SERVERS),
                                        sender_identifier=str(uuid.UUID(int=rng.getrandbits(128), version=4)))
            elif kind == "mqsd-rogue-reply" and msg.protocol == "mqsd" and msg.kind.startswith("reply:") \
                    and rng.random() < ROGUE_REPLY_RATE:
                yield self._rogue_reply(msg)
            elif kind == "mqcn-unauthenticated" and msg.protocol == "mqcn" and msg.kind.startswith("v1:") \
                    and msg.kind != "v1:unauthenticated" and rng.random() < UNAUTHENTICATED_RATE:
                copy = self._attack_copy(kind, msg, authentication_level="None")
                self.record.item("discarded_notifications", {"message_id": copy.envelope["message_id"],
                                                             "queue_manager": msg.key,
                                                             "reason": "AuthenticationLevel None (MQCN 3.2.5.1)"})
                yield copy
            elif kind == "mqcn-flood" and msg.protocol == "mqcn" and msg.kind.startswith(("v1:", "v2:")) \
                    and msg.kind != "v1:unauthenticated" and self._mqcn_seen % FLOOD_EVERY == FLOOD_FIRST:
                yield from self._flood(msg)

    def _attack_copy(self, kind: str, msg: SimMessage, **fields) -> SimMessage:
        message_id = str(uuid.UUID(int=self.attack_rng.getrandbits(128), version=4))     # not the traffic's draws
        env = dict(msg.envelope, message_id=message_id, **fields)
        self._attack_found(self._attack_record(kind, env, 1), env)
        return SimMessage(msg.protocol, msg.key, env, f"attack:{kind}")

    def _rogue_reply(self, msg: SimMessage) -> SimMessage:
        """A reply to a real request from an address no machine object has, listing (when the reply
        lists servers) a server no machine object names: what a host steering clients to a
        directory server of its own sends. The clients count it as a reply (the truth's discovery
        results include it)."""
        rng = self.attack_rng
        req, reply = self.discovery.sent_as(msg.envelope["message_id"])
        packet = reply.packet
        servers = [mqsd.DirectoryServiceServerEntry(True, False, rng.choice(ROGUE_SERVERS))] \
            if packet.directory_service_server_size else None
        rogue = mqsd.new_reply(req.request_id, list(packet.connected_network_array), packet.responding_site_id,
                               servers)
        copy = self._attack_copy("mqsd-rogue-reply", msg, body=encode("mqsd", rogue),
                                 source_machine=ROGUE_ADDRESS.format(rng.randint(1, 9)))
        self.discovery.sent(copy.envelope["message_id"], req, _Reply(reply.at_ms, "rogue", reply.responder,
                                                                     rogue.server_reply))
        return copy

    def _flood(self, msg: SimMessage) -> Iterator[SimMessage]:
        """FLOOD_COPIES copies of one notification at its arrival time (its message id: the queue
        manager discards them as duplicates, MS-MQQB 3.1.5.8.1): past any rate a directory service
        sends."""
        self._attack_found(self._attack_record("mqcn-flood", msg.envelope, FLOOD_COPIES), msg.envelope)
        for _ in range(FLOOD_COPIES):
            yield SimMessage(msg.protocol, msg.key, dict(msg.envelope), "attack:mqcn-flood")

    @staticmethod
    def _attack_record(kind: str, env: dict, copies: int) -> dict:
        target = env["destination_machine"]
        if env["protocol"].lower() == "mqcn":
            from streaming.operators.notifications import queue_manager_of
            target = queue_manager_of(env["destination_queue"]) or target
        return {"kind": kind, "source": env["source_machine"], "target": target, "message_id": env["message_id"],
                "copies": copies}

    def _attack_found(self, record: dict, env: dict) -> None:
        """An attack record into the truth, with its arrival time as delivered (after reordering)."""
        self.record.item("attacks", dict(record, arrival_ms=_ms(env["arrival_time"])))

    def _awaiting_delivery(self, record: dict) -> None:
        """An attack copy made before the reordering: its record waits for the copy's delivery (its
        arrival time as delivered). A copy and its duplicate share a message id and a record's every
        field but the arrival time, so they take the arrival times in delivery order."""
        self._unauthenticated_awaiting.setdefault(record["message_id"], []).append(record)

    def _corrupted_copy(self, msg: SimMessage) -> SimMessage:
        from streaming.wire import WireError, decode
        rng = self.fault_rng
        body = bytearray(msg.envelope["body"])
        for _ in range(64):
            candidate = self._mutate_bytes(bytearray(body), rng)
            try:
                decode(msg.protocol, bytes(candidate))
            except WireError as exc:
                env = dict(msg.envelope, body=bytes(candidate), message_id=self._message_id())
                self.record.item("dead_letters", {"message_id": env["message_id"], "protocol": msg.protocol,
                                                  "key": msg.key, "error": str(exc)})
                return SimMessage(msg.protocol, msg.key, env, f"corrupt:{msg.kind}")
        env = dict(msg.envelope, body=b"", message_id=self._message_id())   # an empty body never decodes
        self.record.item("dead_letters", {"message_id": env["message_id"], "protocol": msg.protocol,
                                          "key": msg.key, "error": "empty body"})
        return SimMessage(msg.protocol, msg.key, env, f"corrupt:{msg.kind}")

    @staticmethod
    def _mutate_bytes(body: bytearray, rng: random.Random) -> bytearray:
        choice = rng.randrange(3)
        if choice == 0 and len(body) > 1:
            return body[: rng.randrange(1, len(body))]                        # truncated
        if choice == 1:
            return body + rng.randbytes(rng.randint(1, 4))                   # trailing garbage
        if body:
            body[rng.randrange(len(body))] ^= 0xFF                           # a flipped byte
        return body

    # ================================================================== truth
    def truth(self) -> dict:
        from .truth import build_truth
        return build_truth(self)


def _replication_body(sender: ent.Server, inner) -> bytes:
    return encode("mqdsrp", mqdsrp.new_message(sender.site_id, inner))


def propagation_bodies(sender: ent.Server, changes: list[mqdsrp.DirectoryChange],
                       header: mqdsrp.SeqNumberHeader) -> list[bytes]:
    """A tick's changes for one neighbour as encoded ChangePropagationMessages: one, encoded once, when
    its body fits a Kafka record; else the parts of propagation_parts, the header with the last (a
    replica checks it after the changes before it)."""
    if len(changes) <= MAX_PROPAGATION_COUNT:
        body = _replication_body(sender, mqdsrp.ChangePropagationMessage(0, len(changes), changes, header))
        if len(body) <= RECORD_BODY_BYTES:
            return [body]
    parts = propagation_parts(changes)
    return [_replication_body(sender, mqdsrp.ChangePropagationMessage(
        0, len(part), part, header if n == len(parts) else mqdsrp.SeqNumberHeader(0)))
        for n, part in enumerate(parts, 1)]


def propagation_parts(changes: list[mqdsrp.DirectoryChange]) -> list[list[mqdsrp.DirectoryChange]]:
    """A tick's changes for one neighbour in messages whose bodies fit a Kafka record (RECORD_BODY_BYTES):
    on the wall clock a tick carries seconds of an enterprise's real changes. Each part is a whole
    ChangePropagationMessage in sequence order; the spec bounds only the Count field (u16, digest §9.3)."""
    parts, part, size = [], [], PROPAGATION_ROOM
    for change in changes:
        change_bytes = len(mqdsrp.encode_directory_change(change))
        if part and (size + change_bytes > RECORD_BODY_BYTES or len(part) == MAX_PROPAGATION_COUNT):
            parts.append(part)
            part, size = [], PROPAGATION_ROOM
        part.append(change)
        size += change_bytes
    return parts + [part]


def _ms(value) -> int:
    return value if isinstance(value, int) else int(value.timestamp() * 1000)

