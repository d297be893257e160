"""`dirstream topics` on the real broker: it creates every topic the job and the producers use with
the recommended partitions, replication factor and retention, and says what differs on a topic
that exists (exit 1), creating nothing with --check."""
from conftest import dirstream
from producers.kafka import KafkaSettings, ensure_topics
from streaming.wire.topics import OUTBOUND_TOPIC, REJECTED_TOPIC, TOPICS


def _lines(done) -> dict[str, str]:
    return {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in done.stdout.splitlines() if ": " in line}


def test_topics_creates_what_is_missing_and_says_what_differs(broker):
    ensure_topics(KafkaSettings(broker), {TOPICS["mqsd"]: 2})          # made before, by hand
    checked = dirstream("topics", "--bootstrap", broker, "--check")
    said = _lines(checked)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert said[TOPICS["mqcn"]].startswith("missing (would be created: 4 partitions, replication factor 1, "
                                           "retention.ms -1, retention.bytes -1)")
    assert "differs: 2 partitions, recommended 4" in said[TOPICS["mqsd"]]
    assert "retention.ms 604800000, recommended -1" in said[TOPICS["mqsd"]]

    made = dirstream("topics", "--bootstrap", broker)
    said = _lines(made)
    assert made.returncode == 1, made.stdout + made.stderr          # msmq.sd.raw still differs
    for topic in (TOPICS["mqcn"], TOPICS["mqdsrp"], REJECTED_TOPIC):
        assert said[topic] == "created: 4 partitions, replication factor 1, retention.ms -1, retention.bytes -1"
    assert said[OUTBOUND_TOPIC] == "created: 1 partition, replication factor 1"

    again = dirstream("topics", "--bootstrap", broker, "--check")
    said = _lines(again)
    assert said[TOPICS["mqcn"]].endswith("retention.ms -1, retention.bytes -1 (as recommended)")
    assert said[OUTBOUND_TOPIC].endswith("(as recommended)") and "differs" in said[TOPICS["mqsd"]]


def test_topics_says_when_kafka_does_not_answer():
    done = dirstream("topics", "--bootstrap", "127.0.0.1:9", "--kafka-option", "socket.timeout.ms=2000")
    assert done.returncode == 2 and "did not answer" in done.stderr, done.stdout + done.stderr
