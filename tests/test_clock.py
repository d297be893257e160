"""Event time after a finite run's traffic (producers/clock.py) and the dating of the standalone
responder's answers, on the real broker: an answer arrives after the latest arrival on every raw
topic, and the copies that move the clock on are duplicates the queue managers discard."""
import json
import threading

from producers.clock import PAST_MS, STEP_MS, move_event_time
from producers.kafka import ConfluentPublisher, KafkaSettings, ensure_topics
from producers.publish import publish_envelope
from producers.responder import run_responder
from producers.simulator import Simulator
from streaming.operators.notifications import QMState, QueueManager, Settings, notification_from, queue_manager_of
from streaming.wire import decode, encode, mqdsrp
from streaming.wire.envelope import decode_envelope, make_envelope, millis
from streaming.wire.guid import GUID_NULL
from streaming.wire.seqnum import MAX_SEQ_NUMBER
from streaming.wire.topics import OUTBOUND_TOPIC, TOPICS

MINUTE = 60_000


def _publish(bootstrap: str, items) -> None:
    pub = ConfluentPublisher(KafkaSettings(bootstrap))
    for protocol, key, envelope in items:
        publish_envelope(pub, protocol, key, envelope)
    pub.close()


def _records(bootstrap: str, topic: str) -> list[dict]:
    """The topic's envelopes, in offset order per partition."""
    from conftest import consume_to_end
    return [decode_envelope(m.value()) for m in consume_to_end(bootstrap, topic)]


def _simulated(bootstrap: str, count: int = 800) -> Simulator:
    sim = Simulator(seed=5)
    ensure_topics(KafkaSettings(bootstrap), {t: 4 for t in TOPICS.values()})
    _publish(bootstrap, ((m.protocol, m.key, m.envelope) for m in sim.messages(count)))
    return sim


def test_copies_of_the_last_notification_move_event_time_on_and_change_nothing(broker):
    _simulated(broker)
    before = {t: _records(broker, t) for t in TOPICS.values()}
    latest = max(millis(e["arrival_time"]) for records in before.values() for e in records)
    times = move_event_time(KafkaSettings(broker))
    assert times == [latest + MINUTE + k * STEP_MS for k in range(4)][:len(times) - 1] + [latest + PAST_MS]
    assert times[-1] - latest >= 30 * MINUTE + 10_000        # a window, a read's wait and the watermark delay
    after = _records(broker, TOPICS["mqcn"])
    copies = [e for e in after if millis(e["arrival_time"]) > latest]
    assert sorted(millis(e["arrival_time"]) for e in copies) == times
    original = [e for e in before[TOPICS["mqcn"]] if e["message_id"] == copies[0]["message_id"]]
    assert len(original) >= 1 and {e["message_id"] for e in copies} == {original[0]["message_id"]}
    assert all(e["body"] == original[0]["body"] for e in copies)
    # the queue manager it is addressed to discards every copy ([MS-MQQB] 3.1.5.8.1), each within the
    # 30-minute history of the one before
    qm_of = queue_manager_of(original[0]["destination_queue"]) or original[0]["destination_machine"]
    qm = QueueManager(QMState(qm_of), Settings())
    for e in sorted((e for e in after if queue_manager_of(e["destination_queue"]) == qm_of),
                    key=lambda e: millis(e["arrival_time"])):
        qm.receive(_notification(e))
    mine = [o for o in qm.outcomes if o.message_id == original[0]["message_id"]]
    assert [o.outcome for o in mine if o.index < 0] == ["duplicate"] * len(copies)


def _notification(envelope: dict):
    return notification_from(decode("mqcn", envelope["body"]), message_id=envelope["message_id"],
                             arrival_ms=millis(envelope["arrival_time"]),
                             sender_identifier_type=envelope.get("sender_identifier_type"),
                             authentication_level=envelope.get("authentication_level"),
                             source=envelope["source_machine"], destination_queue=envelope["destination_queue"])


def test_the_responder_dates_an_answer_after_the_latest_arrival_on_every_raw_topic(broker, tmp_path):
    """The notification query's clock is the MQCN and MQSD traffic: a reply dated only after the
    MQDSRP traffic could carry directory versions older than reads it has already given up."""
    sim = _simulated(broker)
    truth = tmp_path / "truth.json"
    truth.write_text(json.dumps(sim.truth()))
    last = max(millis(e["arrival_time"]) for t in TOPICS.values() for e in _records(broker, t))
    ahead = dict(_records(broker, TOPICS["mqsd"])[-1], arrival_time=last + 5 * MINUTE)
    _publish(broker, [("mqsd", "clock", ahead)])
    request = make_envelope("mqdsrp", encode("mqdsrp", mqdsrp.new_message(
        GUID_NULL, mqdsrp.SyncRequestMessage(GUID_NULL, 0, MAX_SEQ_NUMBER, 0, 0, 1, "psc1"))),
        source_machine="psc1", destination_machine="pec0", destination_queue="q", sent_time=last)
    ensure_topics(KafkaSettings(broker), {OUTBOUND_TOPIC: 1})
    pub = ConfluentPublisher(KafkaSettings(broker))
    publish_envelope(pub, "mqdsrp", "pec0", request, {"mqdsrp": OUTBOUND_TOPIC})
    pub.close()
    stop = threading.Event()
    done = threading.Thread(target=run_responder, args=(KafkaSettings(broker), str(truth)),
                            kwargs=dict(outbound_topic=OUTBOUND_TOPIC, raw_topic=TOPICS["mqdsrp"], idle_exit=5,
                                        stop=stop.is_set), daemon=True)
    done.start()
    done.join(90)
    stop.set()
    answers = [e for e in _records(broker, TOPICS["mqdsrp"]) if millis(e["arrival_time"]) > last]
    assert answers and all(millis(e["arrival_time"]) > last + 5 * MINUTE for e in answers)
