"""The authority responder: plays the object authorities for replicas that ask (MC-MQDSRP 3.2.7).

Sans-IO core `Authorities` answers one replication message with the messages the authority
would send; `run_responder` is the Kafka loop around it (outbound topic in, raw topic out).
The authorities' state is the simulator's ground truth (its `partitions`).
"""
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from streaming.wire.envelope import decode_envelope, make_envelope, millis
from streaming.wire import WireError, decode, encode, mqdsrp
from streaming.wire.properties import OBJECT_TYPES_BY_NAME, Property
from streaming.wire.propids import PROPIDS, propid
from streaming.wire.propvariant import (VT_BLOB, VT_CLSID, VT_CLSID_VECTOR, VT_LPWSTR, VT_LPWSTR_VECTOR,
                                        VT_UI4_VECTOR)
from streaming.wire.guid import GUID_NULL
from streaming.wire.topics import RECORD_BODY_BYTES, RESPONDER_GROUP, TOPICS
from streaming.wire.seqnum import MAX_SEQ_NUMBER, seq_from_hex

from .kafka import AUTHORIZATION_FAILED, ensure_topics, refused
from .truth import properties_from_json

__all__ = ["Answer", "ANSWERED_IDS", "answering_between", "arrives_at", "Authorities", "CLOSE_TIMEOUT_S",
           "date_answers", "empty_value", "HeldPartition", "latest_arrival_ms", "latest_arrival_on",
           "live_authorities", "LivePartition", "LivePartitions", "log", "MQ_OK", "OutboundRequests",
           "run_responder", "SYNC_ORDER", "SYNC_PROPERTIES", "SYNC_REPLY_BYTES", "sync0_part", "TruthPartition",
           "TruthPartitions"]

log = logging.getLogger("dirstream.responder")
ANSWERED_IDS = 100_000          # a replayed micro-batch republishes ids it sent moments before
CLOSE_TIMEOUT_S = 30.0          # the longest a responder waits for its consumer to close
# A sync0 part's body at most (the spec sets no limit: 3.2.7.3 builds one reply).
SYNC_REPLY_BYTES = RECORD_BODY_BYTES
MQ_OK = 0

# 3.2.7.8 refTable, DirectoryChangePropID column (digest §10.8): what a sync change carries, in order.
SYNC_PROPERTIES = {
    3: ["S_GATES", "S_INTERVAL1", "S_INTERVAL2", "S_PATHNAME", "S_PSC", "S_PSC_SIGNPK", "S_SECURITY"],
    5: ["CN_NAME", "CN_PROTOCOLID", "CN_SECURITY"],
    6: ["E_NAME", "E_NAMESTYLE", "E_CSP_NAME", "E_PECNAME", "E_LONG_LIVE", "E_VERSION", "E_SECURITY",
        "E_S_INTERVAL1", "E_S_INTERVAL2", "E_CRL", "E_CSP_TYPE", "E_ENCRYPT_ALG", "E_SIGN_ALG", "E_HASH_ALG",
        "E_CIPHER_MODE"],
    7: ["U_SID", "U_DIGEST", "U_SIGN_CERT"],
    8: ["L_COST", "L_NEIGHBOR1", "L_NEIGHBOR2"],
    2: ["QM_FOREIGN", "QM_QUOTA", "QM_JOURNAL_QUOTA", "QM_CNS", "QM_MACHINE_TYPE", "QM_OS", "QM_ADDRESS",
        "QM_CREATE_TIME", "QM_ENCRYPT_PK", "QM_INFRS", "QM_MODIFY_TIME", "QM_OUTFRS", "QM_PATHNAME", "QM_SERVICE",
        "QM_SIGN_PK", "QM_SITE_ID", "QM_SECURITY", "QM_HASHKEY"],
    1: ["Q_SCOPE", "Q_QMID", "Q_TYPE", "Q_BASEPRIORITY", "Q_JOURNAL", "Q_QUOTA", "Q_JOURNAL_QUOTA", "Q_CREATE_TIME",
        "Q_MODIFY_TIME", "Q_PATHNAME", "Q_LABEL", "Q_AUTHENTICATE", "Q_PRIV_LEVEL", "Q_TRANSACTION", "Q_SECURITY",
        "Q_HASHKEY", "Q_LABEL_HASHKEY"],
}


def empty_value(prop_id: int):
    """An 'undefined' value that still encodes with the PROPID's type (digest §10.8)."""
    vt = PROPIDS[prop_id][1]
    return {VT_BLOB: b"", VT_CLSID: GUID_NULL, VT_LPWSTR: "", VT_CLSID_VECTOR: [], VT_LPWSTR_VECTOR: [],
            VT_UI4_VECTOR: []}.get(vt, 0)


# SYNC_PROPERTIES as (PROPID, its 'undefined' value), looked up once rather than per change carried
SYNC_ORDER = {t: [(propid(n), empty_value(propid(n))) for n in names] for t, names in SYNC_PROPERTIES.items()}


@dataclass
class Answer:
    key: str                   # destination machine
    envelope: dict


class HeldPartition:
    """A partition as its authority holds it: what an answer reads (authority, last and purged
    sequence numbers, the objects and deletions of a sequence-number range in ascending order)."""
    authority: str
    last: int
    purged: int

    def changes(self, first: int, last: int):
        """(seq, guid, object type, properties or None, the deletion's scope or None), ascending."""
        raise NotImplementedError


class LivePartition(HeldPartition):
    """A running simulator's partition, read in place (its objects' properties as they are now)."""

    def __init__(self, partition):
        self.partition = partition

    authority = property(lambda self: self.partition.authority)
    last = property(lambda self: self.partition.last_seq_number)
    purged = property(lambda self: self.partition.purged_seq_number)

    def changes(self, first: int, last: int):
        p = self.partition
        for seq, guid in p.log.between(first, last):
            obj = p.objects.get(guid)
            if obj is not None:
                yield seq, guid, obj.object_type, obj.properties, None
            else:
                d = p.deleted[guid]
                yield seq, guid, d.object_type, None, d.scope


class TruthPartition(HeldPartition):
    """A partition of a ground-truth file: indexed by sequence number once, each object's
    properties decoded from their JSON form only when an answer carries it."""

    def __init__(self, data: dict):
        from .enterprise import SeqLog
        self.data, self.log = data, SeqLog()
        self.authority = data["authority"]
        self.last, self.purged = seq_from_hex(data["last_seq_number"]), seq_from_hex(data["purged_seq_number"])
        self.deleted = {d["identifier"]: d for d in data["deleted_objects"]}
        entries = [(seq_from_hex(o["seq_number"]), g) for g, o in data["objects"].items()]
        entries += [(seq_from_hex(d["seq_number"]), g) for g, d in self.deleted.items()]
        for seq, guid in sorted(entries):
            self.log.record(seq, guid)

    def changes(self, first: int, last: int):
        for seq, guid in self.log.between(first, last):
            obj = self.data["objects"].get(guid)
            if obj is not None:
                yield seq, guid, OBJECT_TYPES_BY_NAME[obj["object_type"]], properties_from_json(obj["properties"]), None
            else:
                d = self.deleted[guid]
                yield seq, guid, OBJECT_TYPES_BY_NAME[d["object_type"]], None, d["scope"]


class TruthPartitions(dict):
    """The truth file's partitions, each indexed the first time a request names it."""

    def __init__(self, partitions: dict):
        super().__init__()
        self.raw = partitions

    def get(self, partition_id: str, default=None):
        if partition_id not in self and partition_id in self.raw:
            self[partition_id] = TruthPartition(self.raw[partition_id])
        return super().get(partition_id, default)


def sync0_part(changes, from_seq: int) -> tuple[list, bool]:
    """The first of a sync0 answer's changes whose SyncReplyMessage fits SYNC_REPLY_BYTES, and
    whether more follow: fewer, larger parts take fewer round trips through the requester. A part
    always carries a change past from_seq, whatever its size: [From, To] includes From (3.2.7.8's
    PRGE), and a part of only that change would have the requester ask for it again forever."""
    part, size, moves_on = [], mqdsrp.SYNC_REPLY_HEADER_SIZE, False
    for change in changes:
        size += len(mqdsrp.encode_directory_change(change))
        if moves_on and size > SYNC_REPLY_BYTES:
            return part, True
        part.append(change)
        moves_on = moves_on or change.seq_number > from_seq
    return part, False


class Authorities:
    def __init__(self, truth: dict):
        self.servers = truth["servers"]
        partitions = truth["partitions"]
        self.partitions = partitions if isinstance(partitions, LivePartitions) else TruthPartitions(partitions)
        self.stats = {"sync_requests": 0, "sync_replies": 0, "already_purged": 0, "sync0_requests": 0,
                      "sync0_completed": 0, "change_replies": 0, "ignored": 0}

    @classmethod
    def from_file(cls, path: str) -> "Authorities":
        """From a truth file, reading only the two sections the authorities hold."""
        from .truth_file import read_truth
        return cls(read_truth(path, ("servers", "partitions")))

    def answer(self, envelope: dict) -> list[Answer]:
        try:
            msg = decode("mqdsrp", envelope["body"])
        except WireError as exc:
            log.warning("undecodable outbound message from %s: %s", envelope.get("source_machine"), exc)
            self.stats["ignored"] += 1
            return []
        if msg.sync_request is not None:
            return self._sync(msg.sync_request, envelope)
        if msg.change_request is not None:
            return self._change_reply(msg.change_request, envelope)
        self.stats["ignored"] += 1          # PSC and BSC acks need no answer
        return []

    # 3.2.7.3 Receive Sync Request
    def _sync(self, req: mqdsrp.SyncRequestMessage, envelope: dict) -> list[Answer]:
        self.stats["sync_requests"] += 1
        self.stats["sync0_requests"] += 1 if req.is_sync0 else 0
        part = self.partitions.get(req.partition_id)
        if part is None:
            self.stats["ignored"] += 1
            return []
        authority, last, purged = part.authority, part.last, part.purged
        if req.from_seq_number < purged and req.known_purged_seq_number < purged:
            self.stats["already_purged"] += 1
            return [self._send(authority, req.requester_name, mqdsrp.AlreadyPurgedMessage(req.partition_id, purged),
                               envelope)]
        to = last if req.to_seq_number == MAX_SEQ_NUMBER else req.to_seq_number
        changes = self._changes_between(req.partition_id, part, req.from_seq_number, to, purged, req.scope)
        changes, more = sync0_part(changes, req.from_seq_number) if req.is_sync0 else (list(changes), False)
        return [self._sync_reply(authority, req, changes, more, to, last, purged, envelope)]

    def _changes_between(self, pid: str, part: HeldPartition, first: int, last: int, purged: int, scope: int):
        """The DirectoryChanges of [first, last] in ascending order (the digest's reading of the
        "descending" defect), walking only that range of the partition."""
        for seq, guid, object_type, props, deleted_scope in part.changes(first, last):
            if props is None:           # digest §10.3: only this partition's deletions, within the range
                plist = [Property(propid("D_SCOPE"), deleted_scope), Property(propid("D_OBJTYPE"), object_type)]
                yield mqdsrp.DirectoryChange(mqdsrp.CMD_DELETE, 1, None, guid, pid, 0, seq, purged, plist)
                continue
            if object_type == 1 and scope == 1 and props.get(propid("Q_SCOPE")) != 1:
                continue        # 3.2.7.8: a PSC's request (Scope 0x01) gets enterprise-scope queues only
            plist = [Property(prop_id, props.get(prop_id, empty)) for prop_id, empty in SYNC_ORDER[object_type]]
            yield mqdsrp.DirectoryChange(mqdsrp.CMD_SYNC, 1, None, guid, pid, 0, seq, purged, plist)

    def _sync_reply(self, authority, req, changes, more, to, last, purged, envelope) -> Answer:
        # 3.2.7.3 answers a request with one SyncReplyMessage holding every change in [From, To]. Only
        # sync0 is served in parts: CompleteSync0 = 1 makes the requester ask for the rest (3.3.7.5).
        # (Splitting a normal reply would let the requester apply its pending changes between the
        # parts, on top of objects the later parts would have replaced.)
        previous = req.from_seq_number
        for change in changes:              # PreviousSeqNumber chains from FromSeqNumber (3.2.7.3)
            change.previous_seq_number, previous = previous, change.seq_number
        part_to = changes[-1].seq_number if more else to
        complete = 0 if not req.is_sync0 else (1 if more or part_to != last else 2)
        header = mqdsrp.SyncReplyHeader(req.partition_id, req.from_seq_number, part_to, purged, len(changes), complete)
        self.stats["sync_replies"] += 1
        self.stats["sync0_completed"] += 1 if complete == 2 else 0      # a replica's reset by sync0 done
        return self._send(authority, req.requester_name, mqdsrp.SyncReplyMessage(header, changes), envelope)

    # 3.2.7.6 Send Change Reply: the authority applied the change (its result is in the truth).
    def _change_reply(self, req: mqdsrp.ChangeRequestMessage, envelope: dict) -> list[Answer]:
        part = self.partitions.get(req.change_request_header.partition_id)
        if part is None:
            self.stats["ignored"] += 1
            return []
        self.stats["change_replies"] += 1
        hdr = req.change_request_header
        reply = mqdsrp.ChangeReplyMessage(hdr.request_identifier, MQ_OK, hdr.requester_name)
        return [self._send(part.authority, self._reply_destination(part.authority, hdr), reply, envelope)]

    def _reply_destination(self, authority: str, hdr: mqdsrp.ChangeRequestHeader) -> str:
        """3.2.7.6: the requester if it is a directory neighbour of the authority (a PSC, or a BSC of the
        authority's site), else the requester's PSC, named in PSCName."""
        requester = self.servers.get(hdr.requester_name, {})
        neighbour = requester.get("role") in ("PEC", "PSC") or \
            requester.get("site_id") == self.servers[authority]["site_id"]
        return hdr.requester_name if neighbour or not hdr.psc_name else hdr.psc_name

    def _send(self, authority: str, dest: str, inner, request_envelope: dict) -> Answer:
        server = self.servers[authority]
        body = encode("mqdsrp", mqdsrp.new_message(server["site_id"], inner))
        sent_ms = millis(request_envelope["arrival_time"])
        env = make_envelope("mqdsrp", body, source_machine=authority, destination_machine=dest,
                            destination_queue=f"DIRECT=OS:{dest}\\private$\\mqis_queue$", sent_time=sent_ms + 1,
                            sender_identifier_type="QueueManagerIdentifier", sender_identifier=server["machine_id"],
                            authentication_level="Sig10", hash_algorithm="MD5")
        return Answer(dest, env)


def latest_arrival_ms(settings, topic: str, timeout_s: float = 5.0) -> int | None:
    """The latest arrival time on the topic (its partitions' last records): "now" in event time. Read
    with the responders' group, which they need anyway: the reader is assigned, it joins nothing."""
    from confluent_kafka import Consumer, TopicPartition
    # what fails is raised below; no librdkafka chatter (a close during a connection's handshake logs one)
    consumer = Consumer(settings.confluent(**{"group.id": RESPONDER_GROUP, "enable.auto.commit": False,
                                              "fetch.wait.max.ms": 10, "log_level": 0}))
    latest = None
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        if meta.error is not None and meta.error.code() in AUTHORIZATION_FAILED:
            raise refused(settings, "Read", "topic", topic)
        for p in meta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, high - 1)])
            ms = _arrival_of_next(settings, consumer, timeout_s)
            if ms is not None:
                latest = ms if latest is None else max(latest, ms)
    finally:
        consumer.close()
    return latest


def _arrival_of_next(settings, consumer, timeout_s: float) -> int | None:
    """The arrival time of the next record the consumer reads (None: none, or undecodable); an
    authorizer's refusal raises, other errors are waited past."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(max(deadline - time.monotonic(), 0.01))
        if msg is None:
            return None
        error = msg.error()
        if error is None:
            try:
                return millis(decode_envelope(msg.value())["arrival_time"])
            except ValueError:
                return None
        _raise_if_refused(settings, error, msg.topic())
    return None


def _raise_if_refused(settings, error, topic: str | None) -> None:
    """Refused on the group: the subscription needs Read on it (which includes the Describe of the
    coordinator's lookup, where a group without any ACL is refused first)."""
    resource = AUTHORIZATION_FAILED.get(error.code())
    if resource == "group":
        raise refused(settings, "Read", "group", RESPONDER_GROUP)
    if resource == "topic":
        raise refused(settings, "Read", "topic", topic or "(the topic)")


def latest_arrival_on(settings, topics) -> int | None:
    """The latest arrival time on any of the topics."""
    return max((ms for topic in topics if (ms := latest_arrival_ms(settings, topic)) is not None), default=None)


def arrives_at(envelope: dict, now_ms: int | None) -> int:
    """An answer arrives after everything already on the raw topic when it is published (a reply
    cannot arrive before its request was answered): the replication query, whose clock has moved on
    since it sent the request, takes it in event-time order instead of dropping it as late. Returns
    its arrival time (ms)."""
    if now_ms is not None and millis(envelope["arrival_time"]) <= now_ms:
        envelope["arrival_time"] = now_ms + 1
    return millis(envelope["arrival_time"])


def date_answers(answers: list, now_ms: int | None) -> None:
    """Each answer after the one before it, not at the same instant: two replies touching one object
    with one SeqNumber at one instant are one version if a micro-batch takes both and two if a
    boundary falls between them (the replica folds only within a step), so the tables would depend
    on the micro-batching."""
    for ans in answers:
        now_ms = arrives_at(ans.envelope, now_ms)


class LivePartitions(dict):
    """A running simulator's partitions as its authorities hold them now, read in place (no copy):
    what `Authorities` reads to answer while the traffic is still being generated."""

    def __init__(self, enterprise):
        super().__init__()
        self.enterprise = enterprise

    def get(self, partition_id: str, default=None):
        p = self.enterprise.partitions.get(partition_id)
        return default if p is None else LivePartition(p)


def live_authorities(sim) -> Authorities:
    """Authorities answering from a running simulator's enterprise (`produce simulate --respond`)."""
    from .truth import servers_json
    return Authorities({"servers": servers_json(sim.ent), "partitions": LivePartitions(sim.ent)})


class OutboundRequests:
    """The job's messages on the outbound topic, answered by the authorities. The consumer group is
    shared by every responder, so one that takes over (`produce respond` after `produce simulate
    --respond`) goes on from the last one's committed position."""

    def __init__(self, settings, authorities: Authorities, outbound_topic: str, from_beginning: bool = True):
        from confluent_kafka import Consumer
        self.authorities, self.settings = authorities, settings
        ensure_topics(settings, {outbound_topic: 1}, need="Read")
        self.consumer = Consumer(settings.confluent(**{
            "group.id": RESPONDER_GROUP, "enable.auto.commit": True, "session.timeout.ms": 6000,
            "auto.offset.reset": "earliest" if from_beginning else "latest", "fetch.wait.max.ms": 50}))
        self.assigned = []
        self.consumer.subscribe([outbound_topic], on_assign=lambda _c, parts: self.assigned.extend(parts))
        self.answered: OrderedDict[str, None] = OrderedDict()      # the last ANSWERED_IDS message ids

    def answers(self, timeout_s: float, now_ms) -> tuple[int, list[Answer]]:
        """(records read, answers) of what arrived within timeout_s. now_ms() is called once, when
        there is something to answer: the latest arrival on the raw topic ("now" in event time)."""
        from confluent_kafka import KafkaError
        batch = self.consumer.consume(500, timeout_s)
        out, now = [], None
        for record in batch:
            if record.error():
                _raise_if_refused(self.settings, record.error(), record.topic())
                if record.error().code() != KafkaError._PARTITION_EOF:
                    log.warning("consumer error: %s", record.error())
                continue
            try:
                envelope = decode_envelope(record.value())
            except ValueError as exc:
                log.warning("skipping outbound record %s[%d]@%d: %s", record.topic(), record.partition(),
                            record.offset(), exc)
                continue
            if envelope.get("message_id") in self.answered:
                continue            # a replayed batch republishes with the same ids (at least once)
            self.answered[envelope.get("message_id")] = None
            if len(self.answered) > ANSWERED_IDS:
                self.answered.popitem(last=False)
            answers = self.authorities.answer(envelope)
            if answers and now is None:
                now = now_ms()
            date_answers(answers, now)
            if answers and now is not None:
                now = millis(answers[-1].envelope["arrival_time"])
            out.extend(answers)
        return len(batch), out

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
        """Close the consumer (its last offsets committed, the group left), waiting at most timeout_s:
        a consumer that saw the broker restart under it can keep its group coordinator's connection
        down and wait for it forever (seen in the short soak: `produce simulate --respond` never
        exited after its traffic). Returns whether it closed; if not, the next responder starts from
        the group's offsets as committed meanwhile (every 5 s) and may answer the last few seconds'
        requests again, as after a responder that crashed."""
        closing = threading.Thread(target=self.consumer.close, name="responder-consumer-close", daemon=True)
        closing.start()
        closing.join(timeout_s)
        if closing.is_alive():
            log.warning("the responder's Kafka consumer did not close within %.0f s (its group coordinator does not "
                        "answer); leaving it", timeout_s)
            return False
        return True


def run_responder(settings, truth_path: str, *, outbound_topic: str, raw_topic: str, client: str = "confluent",
                  idle_exit: float | None = None, from_beginning: bool = True, stop=lambda: False,
                  clock_topics: tuple[str, ...] = tuple(TOPICS.values())) -> dict:
    """Answer every message on the outbound topic until stopped (or idle for idle_exit seconds).

    An answer is published after everything already on the raw topics, so it arrives after the
    latest arrival on any of them (raw_topic and clock_topics), not only on the MQDSRP topic: the
    notification query's clock is the MQCN and MQSD traffic, and a directory version dated before
    it would come too late for the reads it has already given up (docs/design.md, "Determinism")."""
    from .kafka import publisher
    from .publish import CountedHandOver, publish_envelope

    authorities = Authorities.from_file(truth_path)
    requests = OutboundRequests(settings, authorities, outbound_topic, from_beginning)
    pub = publisher(client, settings)
    last_activity = None                  # the idle clock starts once the group has assigned partitions
    try:
        with CountedHandOver() as hand_over:
            while not stop():
                read, answers = requests.answers(0.2, lambda: latest_arrival_on(settings, {raw_topic, *clock_topics}))
                for ans in answers:
                    hand_over.busy = True
                    publish_envelope(pub, "mqdsrp", ans.key, ans.envelope, {"mqdsrp": raw_topic})
                    hand_over.done()
                if read or (requests.assigned and last_activity is None):
                    last_activity = time.monotonic()
                    pub.flush(30)
                elif idle_exit is not None and last_activity and time.monotonic() - last_activity > idle_exit:
                    break
    except KeyboardInterrupt:
        pass
    finally:
        requests.close()
        pub.close()
    return authorities.stats


def answering_between(items, requests: OutboundRequests, every_s: float = 0.2):
    """The (protocol, key, envelope) items of a producer with the authorities' answers to the job's
    requests between them, looked for every every_s seconds. An answer arrives after every MQDSRP
    message already published (the latest arrival among them is "now"), and an MQDSRP message
    published after an answer arrives later than it (overtaken in transport, it arrives later):
    each partition of the raw topic stays in arrival order, which the replication operator's
    determinism relies on (docs/design.md, "Determinism")."""
    latest_ms, answered_ms, next_look = None, None, time.monotonic() + every_s
    for protocol, key, envelope in items:
        if protocol == "mqdsrp":
            arrival = millis(envelope["arrival_time"])
            if latest_ms is not None and arrival < latest_ms:
                arrival = latest_ms
            if answered_ms is not None and arrival <= answered_ms:
                arrival = answered_ms + 1             # never at an answer's instant (date_answers)
            envelope["arrival_time"] = arrival
            latest_ms = arrival if latest_ms is None else max(latest_ms, arrival)
        yield protocol, key, envelope
        if time.monotonic() >= next_look:
            next_look = time.monotonic() + every_s
            _read, answers = requests.answers(0, lambda: latest_ms)
            for ans in answers:
                latest_ms = answered_ms = max(latest_ms or 0, millis(ans.envelope["arrival_time"]))
                yield "mqdsrp", ans.key, ans.envelope
