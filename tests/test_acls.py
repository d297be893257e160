"""Kafka's ACLs under a real authorizer: the embedded broker runs KRaft's StandardAuthorizer, each
command runs as a user of its own holding exactly the ACLs docs/configuration.md lists ("The ACLs
each command needs", read from its table), and an ACL taken away stops the command with one line
that names it.

The tests named `test_spark_...` run `dirstream run` (Spark): `pytest tests/test_acls.py -k spark`
runs them; `-k "not spark"` the rest, which start no Spark."""
import json
import re
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from conftest import dirstream
from job_runs import once_until_verified
from infra.broker import EmbeddedBroker, free_port

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION = ROOT / "docs" / "configuration.md"
SECTION = "## The ACLs each command needs"


def documented() -> dict[str, list[tuple[str, str, str]]]:
    """The section's table: for each command (the first name in its row, `dirstream produce
    simulate`), its (operation, resource type, resource name) ACLs."""
    text = CONFIGURATION.read_text()
    section = text[text.index(SECTION):].split("\n## ", 1)[0]
    table: dict[str, list[tuple[str, str, str]]] = {}
    for line in section.splitlines():
        if not line.startswith("| `dirstream "):
            continue
        command, operations, resource, names = [cell.strip() for cell in line.strip().strip("|").split("|")]
        acls = table.setdefault(re.match(r"`([^`]+)`", command).group(1), [])
        if operations != "none":
            acls += [(op.strip(), resource, name) for op in operations.split(",")
                     for name in re.findall(r"`([^`]+)`", names)]
    return table


ACLS = documented()


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    b = EmbeddedBroker(tmp_path_factory.mktemp("acl-kafka"), port=free_port(), security="sasl_ssl", acls=True)
    status = b.start()
    assert status.answering, status.describe()
    yield b
    b.stop()


def as_user(kafka, folder: Path, name: str, acls) -> tuple[str, ...]:
    """A new user holding exactly `acls`: the Kafka arguments of a command run as that user."""
    options = kafka.add_user(name, secrets.token_urlsafe(16))
    if acls:
        kafka.grant(name, [(re.sub(r"(?<=[a-z])(?=[A-Z])", "_", op).upper(), kind.upper(), resource)
                           for op, kind, resource in acls])
    config = folder / f"{name}.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in options.items()))
    return "--bootstrap", kafka.bootstrap, "--kafka-config", str(config)


@pytest.fixture(scope="module")
def made_topics(kafka, tmp_path_factory):
    """`dirstream topics` on the empty broker, then with --check: (created, checked)."""
    folder = tmp_path_factory.mktemp("topics-user")
    args = as_user(kafka, folder, "topics", ACLS["dirstream topics"])
    return dirstream("topics", *args), dirstream("topics", *args, "--check")


@pytest.fixture(scope="module")
def simulated(kafka, made_topics, tmp_path_factory):
    """`produce simulate` of 300 messages: (its result, the truth file)."""
    folder = tmp_path_factory.mktemp("simulate-user")
    truth = folder / "truth.json"
    done = dirstream("produce", "simulate", *as_user(kafka, folder, "simulate", ACLS["dirstream produce simulate"]),
                     "--seed", "40", "--count", "300", "--truth", str(truth))
    return done, truth


def test_the_table_lists_every_command_that_talks_to_kafka():
    for command in ("dirstream topics", "dirstream produce simulate", "dirstream produce replay",
                    "dirstream produce respond", "dirstream run"):
        assert ACLS.get(command), command
    assert ACLS["dirstream verify"] == []


def test_a_user_without_acls_sees_no_topic_and_the_admin_every_one(kafka, made_topics, tmp_path):
    from confluent_kafka.admin import AdminClient
    nobody = as_user(kafka, tmp_path, "nobody", [])
    options = dict(line.split("=", 1) for line in Path(nobody[-1]).read_text().splitlines())
    seen = AdminClient({"bootstrap.servers": kafka.bootstrap, **options}).list_topics(timeout=10).topics
    assert not [t for t in seen if t.startswith("msmq.")]
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap, **kafka.admin_options()})
    assert {"msmq.dsrp.raw", "msmq.dsrp.out"} <= set(admin.list_topics(timeout=10).topics)


def test_topics_creates_and_checks_every_topic_with_its_documented_acls(made_topics):
    created, checked = made_topics
    assert created.returncode == 0, created.stdout + created.stderr
    assert created.stdout.count(": created: ") == 5, created.stdout
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("(as recommended)") == 5, checked.stdout


def test_simulate_publishes_with_its_documented_acls(simulated):
    done, truth = simulated
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["published"] == summary["delivered"] > 0
    assert truth.exists()


def test_replay_publishes_a_capture_with_its_documented_acls(kafka, made_topics, tmp_path):
    """A simulated capture with malformed MQQB packets in it: the three raw topics and the rejected one."""
    capture = tmp_path / "sim.pcapng"
    written = dirstream("produce", "simulate", "--seed", "43", "--count", "300", "--pcap", str(capture),
                        "--attack", "mqqb-malformed")
    assert written.returncode == 0, written.stderr[-2000:]
    done = dirstream("produce", "replay", *as_user(kafka, tmp_path, "replay", ACLS["dirstream produce replay"]),
                     str(capture))
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["published"] == json.loads(written.stdout)["written"]
    assert summary["rejected_packets_published"] > 0


def _sync_request(kafka, truth: Path) -> None:
    """A replica's sync request for one of the truth's partitions on msmq.dsrp.out, as the job sends
    it (published by the admin, as the job would)."""
    from producers.kafka import ConfluentPublisher, KafkaSettings, OUTBOUND_TOPIC
    from producers.publish import publish_envelope
    from producers.truth_file import read_truth
    from streaming.wire import encode, mqdsrp
    from streaming.wire.envelope import make_envelope
    from streaming.wire.guid import GUID_NULL
    from streaming.wire.seqnum import MAX_SEQ_NUMBER
    partition = next(iter(read_truth(str(truth), ("partitions",))["partitions"]))
    request = mqdsrp.SyncRequestMessage(partition, 0, MAX_SEQ_NUMBER, 0, 0, 1, "psc1")
    envelope = make_envelope("mqdsrp", encode("mqdsrp", mqdsrp.new_message(GUID_NULL, request)),
                             source_machine="psc1", destination_machine="pec0", destination_queue="q",
                             sent_time=int(time.time() * 1000))
    pub = ConfluentPublisher(KafkaSettings(kafka.bootstrap, kafka.admin_options()))
    publish_envelope(pub, "mqdsrp", "pec0", envelope, {"mqdsrp": OUTBOUND_TOPIC})
    pub.close()


def _respond(args, truth: Path, idle_s: int = 5) -> subprocess.CompletedProcess:
    return dirstream("produce", "respond", *args, "--truth", str(truth), "--idle-exit", str(idle_s), timeout=180)


def test_respond_answers_a_sync_request_with_its_documented_acls(kafka, simulated, tmp_path):
    _, truth = simulated
    _sync_request(kafka, truth)
    done = _respond(as_user(kafka, tmp_path, "respond", ACLS["dirstream produce respond"]), truth)
    assert done.returncode == 0, done.stderr[-2000:]
    stats = json.loads(done.stdout)
    assert stats["sync_requests"] == stats["sync_replies"] == 1, stats


def test_verify_takes_no_kafka_settings():
    """verify reads the sink and the truth file only (its run under the ACLs is the Spark test's)."""
    from streaming.apps.cli import build_parser
    parser = build_parser()
    verify = parser._subparsers._group_actions[0].choices["verify"]
    assert not [a for a in verify._actions if any(o.startswith(("--bootstrap", "--kafka")) for o in a.option_strings)]


# ---------------------------------------------------------------- one ACL less: one line naming it
REFUSALS = {
    "topics without Describe on a topic": ("dirstream topics", ("Describe", "topic", "msmq.cn.raw")),
    "topics without DescribeConfigs on a topic": ("dirstream topics", ("DescribeConfigs", "topic", "msmq.qb.rejected")),
    "simulate without Write on a topic": ("dirstream produce simulate", ("Write", "topic", "msmq.sd.raw")),
    "replay without Write on the rejected topic": ("dirstream produce replay", ("Write", "topic", "msmq.qb.rejected")),
    "respond without Read on its group": ("dirstream produce respond", ("Read", "group", "dirstream-responder")),
    "respond without Read on the outbound topic": ("dirstream produce respond", ("Read", "topic", "msmq.dsrp.out")),
    "respond without Write on the raw topic": ("dirstream produce respond", ("Write", "topic", "msmq.dsrp.raw")),
    "respond without Read on a clock topic": ("dirstream produce respond", ("Read", "topic", "msmq.cn.raw")),
}


def _without(command: str, removed: tuple[str, str, str]) -> list[tuple[str, str, str]]:
    acls = list(ACLS[command])
    acls.remove(removed)                 # (it must be one the docs list)
    return acls


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_missing_acl_stops_the_command_with_one_line_that_names_it(kafka, simulated, tmp_path, case):
    command, removed = REFUSALS[case]
    user = "less-" + re.sub(r"\W+", "-", case)
    args = as_user(kafka, tmp_path, user, _without(command, removed))
    _, truth = simulated
    if command == "dirstream topics":
        done = dirstream("topics", *args)        # (--check would only find the hidden topic missing)
    elif command == "dirstream produce simulate":
        done = dirstream("produce", "simulate", *args, "--seed", "41", "--count", "300")
    elif command == "dirstream produce replay":
        capture = tmp_path / "sim.pcapng"
        assert dirstream("produce", "simulate", "--count", "300", "--pcap", str(capture),
                         "--attack", "mqqb-malformed").returncode == 0
        done = dirstream("produce", "replay", *args, str(capture))
    else:
        _sync_request(kafka, truth)         # something to answer
        done = _respond(args, truth, idle_s=20)
    operation, resource, name = removed
    # (replay says first which packets it rejects: what the capture holds, as without ACLs)
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("rejected ")]
    assert done.returncode != 0 and len(lines) == 1, done.stdout + done.stderr
    assert f"Kafka refused {operation} on {resource} {name} to user {user!r}" in lines[0], lines[0]
    assert "grant it (see docs/configuration.md" in lines[0], lines[0]


def test_a_publisher_closed_after_its_refusal_names_the_acl_again(kafka, made_topics, tmp_path):
    """A command's `finally` closes its publisher after the refusal stopped it: close() raises the
    same refusal, not a count of the records the refused producer left unconfirmed (which hid the
    ACL when the producer id was refused between produce() and the next poll)."""
    from producers.kafka import KafkaAclError, KafkaSettings, publisher
    command, removed = REFUSALS["respond without Write on the raw topic"]
    config = Path(as_user(kafka, tmp_path, "closes-refused", _without(command, removed))[-1])
    pub = publisher("confluent", KafkaSettings.from_args(kafka.bootstrap, str(config)))
    with pytest.raises(KafkaAclError) as first:
        for _ in range(600):                 # the producer id's refusal comes back within seconds
            pub.send("msmq.dsrp.raw", b"k", b"v", [])
            time.sleep(0.05)
    with pytest.raises(KafkaAclError) as again:
        pub.close()
    assert str(again.value) == str(first.value)
    assert "Kafka refused Write on topic msmq.dsrp.raw to user 'closes-refused'" in str(again.value)


def test_a_topic_the_user_may_see_but_not_write_to_is_named_once_its_records_come_back(kafka, made_topics,
                                                                                       tmp_path):
    """Describe without Write: the topic is listed, and its records come back refused (librdkafka
    logs what it sees of that too; the command's last line names the ACL)."""
    removed = ("Write", "topic", "msmq.sd.raw")
    args = as_user(kafka, tmp_path, "describes-sd", _without("dirstream produce simulate", removed)
                   + [("Describe", "topic", "msmq.sd.raw")])
    done = dirstream("produce", "simulate", *args, "--seed", "44", "--count", "300")
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert "Kafka refused Write on topic msmq.sd.raw to user 'describes-sd': grant it" in last, done.stderr


def _job_clients_read(kafka, folder: Path, user: str, acls) -> int:
    """What `run`'s Kafka clients do, without Spark: the end offsets of every topic it reads, the
    arrival time of a record (the driver's), every record of a partition (a reading task's), and a
    record on msmq.dsrp.out (the replication query's). Returns the records read."""
    from streaming.spark.event_clock import ArrivalIndex
    from streaming.spark.kafka_offsets import EndOffsets
    from streaming.spark.kafka_source import KafkaInputPartition, KafkaStreamReader, source_options
    from streaming.spark.replication_query import OutboundPublisher
    from streaming.wire.topics import OUTBOUND_TOPIC, REJECTED_TOPIC, TOPICS
    config = Path(as_user(kafka, folder, user, acls)[-1])
    options = dict(line.split("=", 1) for line in config.read_text().split())
    conf = {"bootstrap.servers": kafka.bootstrap, **options}
    offsets = EndOffsets(conf, list(TOPICS.values()), optional=(REJECTED_TOPIC,))
    index = ArrivalIndex(conf)
    try:
        bounds = offsets.bounds()
        assert {tp[0] for tp in bounds} == {*TOPICS.values(), REJECTED_TOPIC}
        tp, (low, high) = next((tp, b) for tp, b in sorted(bounds.items()) if b[1] > b[0])
        assert index.arrival_at(tp, low) is not None
    finally:
        offsets.close()
        index.close()
    # (the task's client stays in its worker's pool after the module's broker stops: no log of that)
    reader = KafkaStreamReader(source_options(kafka.bootstrap, {**options, "log_level": "0"}))
    read = sum(batch.num_rows for batch in reader.read(KafkaInputPartition(tp[0], tp[1], low, high)))
    OutboundPublisher(conf).publish(OUTBOUND_TOPIC, [(b"not a request: the responders skip it", b"acl-test")])
    return read


def test_the_jobs_kafka_clients_work_with_runs_documented_acls_which_name_no_group(kafka, simulated, tmp_path):
    """librdkafka looks up the coordinator of an assigned consumer's group too, and reports the
    refusal as an error record, after which the reader goes on: the job needs no group ACL."""
    assert not [acl for acl in ACLS["dirstream run"] if acl[1] == "group"]
    assert _job_clients_read(kafka, tmp_path, "run-clients", ACLS["dirstream run"]) > 0


# ---------------------------------------------------------------- the job (Spark: the serial Spark group)
@pytest.mark.starts_spark
def test_spark_run_and_verify_with_their_documented_acls(kafka, tmp_path):
    """SPARK: on topics made anew (the other tests' answers to made-up requests are not the
    enterprise's), traffic published by `simulate`, then `run --once` as a user holding exactly
    run's ACLs with the responder as its own, until verify (which needs no ACL: it never connects
    to Kafka) finds the sink matches the truth."""
    _recreate_topics(kafka, tmp_path)
    truth = tmp_path / "truth.json"
    simulated = dirstream("produce", "simulate", *as_user(kafka, tmp_path, "simulate-job",
                                                          ACLS["dirstream produce simulate"]),
                          "--seed", "42", "--count", "600", "--truth", str(truth))
    assert simulated.returncode == 0, simulated.stderr[-2000:]
    verified, err = once_until_verified(as_user(kafka, tmp_path, "run", ACLS["dirstream run"]),
                                        as_user(kafka, tmp_path, "respond-job", ACLS["dirstream produce respond"]),
                                        truth, f"sqlite:///{tmp_path / 'sink.db'}", tmp_path / "ckpt")
    assert verified.returncode == 0, verified.stdout[-3000:]
    assert "Traceback" not in err and "Kafka refused" not in err, err[-2000:]


def _recreate_topics(kafka, folder: Path) -> None:
    """The admin deletes the project's topics and the responders' group; `dirstream topics` (as its
    user) makes the topics again."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap, **kafka.admin_options()})
    for future in admin.delete_consumer_groups(["dirstream-responder"], request_timeout=30).values():
        try:
            future.result(timeout=30)
        except Exception:                # noqa: BLE001 -- no such group (no responder ran)
            pass
    mine = [t for t in admin.list_topics(timeout=10).topics if t.startswith("msmq.")]
    for future in (admin.delete_topics(mine, operation_timeout=30) if mine else {}).values():
        future.result(timeout=30)
    deadline = time.monotonic() + 60
    while [t for t in admin.list_topics(timeout=10).topics if t.startswith("msmq.")]:
        assert time.monotonic() < deadline, "the topics were not deleted within 60 s"
        time.sleep(0.2)
    made = dirstream("topics", *as_user(kafka, folder, "topics-again", ACLS["dirstream topics"]))
    assert made.returncode == 0, made.stdout + made.stderr


SPARK_REFUSALS = {
    "without Read on a raw topic": ("Read", "topic", "msmq.sd.raw"),
    "without Write on the outbound topic": ("Write", "topic", "msmq.dsrp.out"),
}


@pytest.mark.starts_spark
@pytest.mark.parametrize("case", sorted(SPARK_REFUSALS))
def test_spark_run_stops_with_one_line_that_names_a_missing_acl(kafka, simulated, tmp_path, case):
    """SPARK: `run --once` one ACL short fails with the ACL named once, no traceback."""
    removed = SPARK_REFUSALS[case]
    user = "run-less-" + re.sub(r"\W+", "-", case)
    job = as_user(kafka, tmp_path, user, _without("dirstream run", removed))
    done = dirstream("run", *job, "--once", "--sink", f"sqlite:///{tmp_path / 'sink.db'}", "--checkpoint",
                     str(tmp_path / "ckpt"), "--master", "local[2]", "--pec-name", "pec0", "--metrics-port", "0",
                     timeout=600)
    console = done.stdout + done.stderr
    operation, resource, name = removed
    expected = f"Kafka refused {operation} on {resource} {name} to user {user!r}"
    assert done.returncode != 0 and console.count(expected) == 1, console[-3000:]
    assert "Traceback" not in console and "at org.apache" not in console, console[-3000:]
