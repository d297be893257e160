"""The authority responder's answers (MC-MQDSRP 3.2.7.3, 3.2.7.6), sans-IO."""
import pytest

import producers.responder as responder
from producers.responder import SYNC_REPLY_BYTES, Authorities, sync0_part
from producers.simulator import Simulator
from streaming.wire.envelope import encode_envelope, make_envelope
from streaming.wire import decode, encode, mqdsrp
from streaming.wire.guid import GUID_NULL
from streaming.wire.seqnum import MAX_SEQ_NUMBER, seq_from_hex

_TRUTH = None


def truth():
    global _TRUTH
    if _TRUTH is None:
        sim = Simulator(seed=21)
        for _ in sim.messages(12_000):
            pass
        _TRUTH = sim.truth()
    return _TRUTH


def ask(inner, site=GUID_NULL, source="psc1"):
    env = make_envelope("mqdsrp", encode("mqdsrp", mqdsrp.new_message(site, inner)), source_machine=source,
                        destination_machine="pec0", destination_queue="q", sent_time=1000)
    answers = Authorities(truth()).answer(env)
    return [(a.key, decode("mqdsrp", a.envelope["body"])) for a in answers]


def a_site_partition():
    return next((pid, p) for pid, p in truth()["partitions"].items()
                if pid != GUID_NULL and seq_from_hex(p["purged_seq_number"]) > 0)


def test_full_sync_returns_every_object_in_ascending_chained_order():
    purged = seq_from_hex(truth()["partitions"][GUID_NULL]["purged_seq_number"])
    assert purged > 0
    # A replica that knows the purge horizon is not AlreadyPurged (3.2.7.3 needs both tests).
    answers = ask(mqdsrp.SyncRequestMessage(GUID_NULL, 0, MAX_SEQ_NUMBER, purged, 0, 1, "psc1"))
    assert answers and all(key == "psc1" for key, _ in answers)
    changes = [c for _, m in answers for c in m.sync_reply.directory_changes]
    seqs = [c.seq_number for c in changes]
    assert seqs == sorted(seqs)
    assert changes[0].previous_seq_number == 0
    assert all(b.previous_seq_number == a.seq_number for a, b in zip(changes, changes[1:]))
    part = truth()["partitions"][GUID_NULL]
    synced = {c.guid_identifier for c in changes if c.command == mqdsrp.CMD_SYNC}
    deleted = {c.guid_identifier for c in changes if c.command == mqdsrp.CMD_DELETE}
    assert synced == set(part["objects"]) and deleted == {d["identifier"] for d in part["deleted_objects"]}
    assert answers[-1][1].sync_reply.sync_reply_header.to_seq_number == seq_from_hex(part["last_seq_number"])
    assert all(m.header.site_id == truth()["servers"]["pec0"]["site_id"] for _, m in answers)


def test_a_normal_sync_request_gets_one_reply_with_every_change():
    """3.2.7.3: one SyncReplyMessage per request (only sync0 is served in parts)."""
    pid, part = max(truth()["partitions"].items(), key=lambda kv: len(kv[1]["objects"]) + len(kv[1]["deleted_objects"]))
    purged = seq_from_hex(part["purged_seq_number"])
    answers = ask(mqdsrp.SyncRequestMessage(pid, purged, MAX_SEQ_NUMBER, purged, 0, 1, "bsc1-1"), site=pid)
    assert len(answers) == 1
    header = answers[0][1].sync_reply.sync_reply_header
    in_range = [o for o in part["objects"].values() if seq_from_hex(o["seq_number"]) >= purged]
    assert header.count == len(answers[0][1].sync_reply.directory_changes) >= len(in_range) > 0
    assert (header.from_seq_number, header.to_seq_number) == (purged, seq_from_hex(part["last_seq_number"]))


def test_range_request_returns_only_changes_in_range():
    pid, part = a_site_partition()
    last = seq_from_hex(part["last_seq_number"])
    answers = ask(mqdsrp.SyncRequestMessage(pid, last - 50, last, seq_from_hex(part["purged_seq_number"]), 0, 1,
                                            "psc2"), site=pid)
    changes = [c for _, m in answers for c in m.sync_reply.directory_changes]
    assert changes and all(last - 50 <= c.seq_number <= last for c in changes)


def test_request_behind_the_purge_horizon_gets_already_purged():
    pid, part = a_site_partition()
    purged = seq_from_hex(part["purged_seq_number"])
    ((key, msg),) = ask(mqdsrp.SyncRequestMessage(pid, 0, MAX_SEQ_NUMBER, 0, 0, 1, "psc2"), site=pid)
    assert key == "psc2" and msg.already_purged.purged_seq_number == purged and msg.already_purged.partition_id == pid


def test_sync0_request_gets_one_reply_and_complete_flag():
    pid, part = a_site_partition()
    purged = seq_from_hex(part["purged_seq_number"])
    answers = ask(mqdsrp.SyncRequestMessage(pid, 0, MAX_SEQ_NUMBER, purged, 1, 1, "psc2"), site=pid)
    assert len(answers) == 1
    header = answers[0][1].sync_reply.sync_reply_header
    whole = ask(mqdsrp.SyncRequestMessage(pid, 0, MAX_SEQ_NUMBER, purged, 0, 1, "psc2"), site=pid)
    fits = len(encode("mqdsrp", whole[0][1])) <= SYNC_REPLY_BYTES
    assert header.complete_sync0 == (2 if fits else 1)


def sync0_conversation(pid: str, purged: int) -> list[bytes]:
    """The bodies of a sync0 asked for part after part, each from the last part's To (3.3.7.5)."""
    bodies, first = [], 0
    while True:
        ((_, msg),) = ask(mqdsrp.SyncRequestMessage(pid, first, MAX_SEQ_NUMBER, purged, 1, 1, "psc2"), site=pid)
        bodies.append(encode("mqdsrp", msg))
        header = msg.sync_reply.sync_reply_header
        assert header.from_seq_number == first and len(bodies) < 10_000
        if header.complete_sync0 != 1:
            return bodies
        first = header.to_seq_number


@pytest.mark.parametrize("budget", [300, 1_000, 6_000, 40_000])     # 300: changes of up to 346 bytes
def test_a_sync0_in_parts_carries_the_whole_partition_each_part_within_its_byte_budget(budget, monkeypatch):
    pid, part = a_site_partition()
    purged = seq_from_hex(part["purged_seq_number"])
    ((_, whole),) = ask(mqdsrp.SyncRequestMessage(pid, 0, MAX_SEQ_NUMBER, purged, 0, 1, "psc2"), site=pid)
    monkeypatch.setattr(responder, "SYNC_REPLY_BYTES", budget)
    bodies = sync0_conversation(pid, purged)
    replies = [decode("mqdsrp", b).sync_reply for b in bodies]
    assert len(replies) > 1
    # [From, To] includes From (the lookup's PRGE, 3.2.7.8): a part after the first starts again with
    # the change its From names, which the requester already holds and skips
    news = [r.directory_changes[1:] if i and r.directory_changes[0].seq_number == r.sync_reply_header.from_seq_number
            else r.directory_changes for i, r in enumerate(replies)]
    # within the budget, or one change past From however large (the conversation moves on)
    assert all(len(b) <= budget or len(new) == 1 for b, new in zip(bodies, news))
    assert all(new for new in news)
    # a part is as full as the budget allows: the next part's first new change would not have fitted
    for body, nxt in zip(bodies, news[1:]):
        assert len(body) + len(mqdsrp.encode_directory_change(nxt[0])) > budget
    carried = [c for changes in news for c in changes]
    assert [(c.seq_number, c.guid_identifier, c.properties) for c in carried] == \
        [(c.seq_number, c.guid_identifier, c.properties) for c in whole.sync_reply.directory_changes]
    for r in replies:             # each part chains from its own From (3.2.7.3)
        previous = r.sync_reply_header.from_seq_number
        for c in r.directory_changes:
            assert c.previous_seq_number == previous
            previous = c.seq_number
        assert r.sync_reply_header.count == len(r.directory_changes)
    assert [r.sync_reply_header.complete_sync0 for r in replies] == [1] * (len(replies) - 1) + [2]
    assert replies[-1].sync_reply_header.to_seq_number == seq_from_hex(part["last_seq_number"])


def test_the_fullest_sync0_part_fits_a_kafka_record_of_the_clients_default_limit():
    pid, part = a_site_partition()
    purged = seq_from_hex(part["purged_seq_number"])
    ((_, whole),) = ask(mqdsrp.SyncRequestMessage(pid, 0, MAX_SEQ_NUMBER, purged, 0, 1, "psc2"), site=pid)
    changes = whole.sync_reply.directory_changes
    many = (changes[i % len(changes)] for i in range(10**6))
    chunk, more = sync0_part(many, 0)
    assert more
    header = mqdsrp.SyncReplyHeader(pid, 0, chunk[-1].seq_number, purged, len(chunk), 1)
    body = encode("mqdsrp", mqdsrp.new_message(pid, mqdsrp.SyncReplyMessage(header, chunk)))
    assert SYNC_REPLY_BYTES - 2_000 < len(body) <= SYNC_REPLY_BYTES
    env = make_envelope("mqdsrp", body, source_machine="psc-with-a-long-machine-name-" + "x" * 200,
                        destination_machine="bsc-" + "y" * 200, destination_queue="DIRECT=OS:" + "z" * 250,
                        sent_time=1000, sender_identifier_type="QueueManagerIdentifier", sender_identifier=GUID_NULL,
                        authentication_level="Sig10", hash_algorithm="MD5")
    assert len(encode_envelope(env)) < 1_000_000       # librdkafka's message.max.bytes default


def test_change_request_gets_a_change_reply_to_the_requester():
    change = mqdsrp.DirectoryChange(1, 0, "x", None, GUID_NULL, 0, 0, 0, [])
    header = mqdsrp.ChangeRequestHeader(GUID_NULL, 42, 0, "psc2")
    ((key, msg),) = ask(mqdsrp.ChangeRequestMessage(header, change))
    assert key == "psc2" and (msg.change_reply.request_identifier, msg.change_reply.result) == (42, 0)


def test_acks_need_no_answer():
    assert ask(mqdsrp.PSCAckMessage(GUID_NULL, GUID_NULL, 256, "psc1")) == []


def test_live_authorities_answer_as_the_truth_file_does_once_the_simulation_is_over():
    """`produce simulate --respond` answers from the authorities' objects as they are then; at the end
    of the run those are the truth file's (what `produce respond --truth` answers from)."""
    from producers.responder import live_authorities
    sim = Simulator(seed=21)
    for _ in sim.messages(12_000):
        pass
    live, final = live_authorities(sim), Authorities(sim.truth())
    pid, part = a_site_partition()
    for request in (mqdsrp.SyncRequestMessage(pid, 0, MAX_SEQ_NUMBER, 0, 0, 1, "bsc1-1"),
                    mqdsrp.SyncRequestMessage(GUID_NULL, 5, 40, 0, 0, 1, "psc2"),
                    mqdsrp.SyncRequestMessage(pid, 0, MAX_SEQ_NUMBER, 0, 1, 0, "psc1")):
        env = make_envelope("mqdsrp", encode("mqdsrp", mqdsrp.new_message(GUID_NULL, request)),
                            source_machine=request.requester_name, destination_machine=part["authority"],
                            destination_queue="q", sent_time=1000)
        got, want = live.answer(env), final.answer(env)
        assert got and [(a.key, a.envelope["body"]) for a in got] == [(a.key, a.envelope["body"]) for a in want]


class _AnswersEveryTime:
    """The Kafka side of OutboundRequests replaced by one sync request answered at every look."""

    def __init__(self, authorities, envelope):
        self.authorities, self.envelope = authorities, envelope

    def answers(self, _timeout_s, now_ms):
        from producers.responder import date_answers
        answers = self.authorities.answer(dict(self.envelope))
        date_answers(answers, now_ms())
        return 1, answers


def test_answers_between_the_traffic_keep_every_mqdsrp_partition_in_arrival_order():
    """An answer is dated after the MQDSRP messages already published, and a message published after
    it arrives no earlier (the soak found replies 1 ms ahead of the messages after them in one
    partition: the replication operator then depended on the micro-batching)."""
    from producers.responder import answering_between, live_authorities
    from producers.simulator import Faults
    from streaming.wire.envelope import millis
    sim = Simulator(seed=7, faults=Faults(reorder=0.2, duplicate=0.1))
    pid = next(p for p in sim.ent.partitions if p != GUID_NULL)
    request = make_envelope("mqdsrp", encode("mqdsrp", mqdsrp.new_message(
        GUID_NULL, mqdsrp.SyncRequestMessage(GUID_NULL, 0, MAX_SEQ_NUMBER, 0, 0, 1, "psc1"))),
        source_machine="psc1", destination_machine="pec0", destination_queue="q", sent_time=1000)
    items = ((m.protocol, m.key, m.envelope) for m in sim.messages(3_000))
    out = list(answering_between(items, _AnswersEveryTime(live_authorities(sim), request), every_s=0))
    answers = [env for _p, key, env in out if env.get("message_id") is None]
    assert len(answers) > 100 and pid
    arrivals = [millis(env["arrival_time"]) for protocol, _key, env in out if protocol == "mqdsrp"]
    assert arrivals == sorted(arrivals)
    # no answer shares its instant with another message: the replica folds two versions of one
    # object at one instant only within a step, so a shared instant would depend on the micro-batching
    answered = [millis(env["arrival_time"]) for env in answers]
    others = [millis(env["arrival_time"]) for protocol, _key, env in out
              if protocol == "mqdsrp" and env.get("message_id") is not None]
    assert len(set(answered)) == len(answered) and not set(answered) & set(others)
    assert len(out) - len(answers) == sum(sim.counts.values()) >= 3_000


def _scanned(pid: str, part: dict, first: int, last: int, purged: int, scope: int) -> list:
    """The reference: every object and deletion of the partition looked at, kept if its sequence
    number is within [first, last], sorted (what an answer carries, found the slow way)."""
    from producers.responder import SYNC_PROPERTIES, empty_value
    from streaming.wire.properties import OBJECT_TYPES_BY_NAME
    from producers.truth import properties_from_json
    from streaming.wire.properties import Property
    from streaming.wire.propids import propid
    changes = []
    for guid, obj in part["objects"].items():
        seq, object_type = seq_from_hex(obj["seq_number"]), OBJECT_TYPES_BY_NAME[obj["object_type"]]
        props = properties_from_json(obj["properties"])
        if not first <= seq <= last or (object_type == 1 and scope == 1 and props.get(propid("Q_SCOPE")) != 1):
            continue
        changes.append(mqdsrp.DirectoryChange(mqdsrp.CMD_SYNC, 1, None, guid, pid, 0, seq, purged, [
            Property(propid(n), props.get(propid(n), empty_value(propid(n)))) for n in SYNC_PROPERTIES[object_type]]))
    for d in part["deleted_objects"]:
        seq = seq_from_hex(d["seq_number"])
        if first <= seq <= last:
            changes.append(mqdsrp.DirectoryChange(mqdsrp.CMD_DELETE, 1, None, d["identifier"], pid, 0, seq, purged, [
                Property(propid("D_SCOPE"), d["scope"]), Property(propid("D_OBJTYPE"), OBJECT_TYPES_BY_NAME[d["object_type"]])]))
    return sorted(changes, key=lambda c: c.seq_number)


@pytest.mark.parametrize("seed", range(4))
def test_an_answer_walks_its_range_only_and_carries_what_a_whole_scan_finds(seed):
    """The authorities index each partition by sequence number (a live simulator's as it changes, a
    truth file's once): over random ranges, scopes and moments of a run, the changes an answer
    carries are the ones a scan of every object finds, live and from the truth file alike."""
    import random
    from producers.responder import TruthPartition, live_authorities
    rng, sim = random.Random(seed), Simulator(seed=seed)
    live = live_authorities(sim)
    stream = sim.messages()
    for _ in range(4):
        for _ in range(rng.randrange(1000, 4000)):
            next(stream)
        truth = sim.truth()
        for pid, part in truth["partitions"].items():
            last, purged = seq_from_hex(part["last_seq_number"]), seq_from_hex(part["purged_seq_number"])
            held = TruthPartition(part)
            for _ in range(5):
                first = rng.randrange(0, last + 2)
                upto, scope = rng.randrange(first, last + 3), rng.randrange(2)
                want = _scanned(pid, part, first, upto, purged, scope)
                assert list(Authorities(truth)._changes_between(pid, held, first, upto, purged, scope)) == want
                live_part = live.partitions.get(pid)
                assert list(live._changes_between(pid, live_part, first, upto, purged, scope)) == want


def test_the_sequence_log_holds_the_live_entries_in_order_and_stays_bounded():
    import random
    from producers.enterprise import SeqLog
    rng, log, model, seq = random.Random(7), SeqLog(), {}, 0
    for _ in range(20_000):
        guid = f"g{rng.randrange(300)}"
        if rng.random() < 0.1:
            log.forget(guid)
            model.pop(guid, None)
        else:
            seq += rng.randrange(1, 3)
            log.record(seq, guid)
            model[guid] = seq
        if rng.random() < 0.01:
            first = rng.randrange(seq + 1)
            upto = rng.randrange(first, seq + 2)
            assert list(log.between(first, upto)) == sorted((s, g) for g, s in model.items() if first <= s <= upto)
    assert len(log.seqs) <= 2 * len(model) + 64


def test_a_consumer_that_does_not_close_does_not_hold_the_responder():
    """A consumer whose group coordinator never answers again blocks in close(): the responder
    waits a bounded time and goes on (its command exits)."""
    import threading
    import time
    from producers.responder import OutboundRequests
    released = threading.Event()

    class _Stuck:
        def close(self):
            released.wait(600)

    requests = OutboundRequests.__new__(OutboundRequests)
    requests.consumer = _Stuck()
    started = time.monotonic()
    assert requests.close(timeout_s=0.5) is False
    assert time.monotonic() - started < 300       # not the 600 s the close would take
    released.set()
