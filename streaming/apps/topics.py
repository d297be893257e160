"""`dirstream topics`: create, or check, every topic the job and the producers use, as a production
cluster wants them: the partitions, the replication factor, and retention that keeps the raw
topics from their first record (a new checkpoint re-reads them from there: docs/upgrading.md)."""
import argparse
import sys

from ..wire.topics import OUTBOUND_TOPIC, REJECTED_TOPIC, TOPICS

__all__ = ["cmd_topics", "EXIT_DIFFERS", "EXIT_UNREACHABLE", "KEPT_FOREVER", "RAW_PARTITIONS", "recommended",
           "register", "TIMEOUT_S"]

RAW_PARTITIONS = 4
KEPT_FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}
EXIT_DIFFERS, EXIT_UNREACHABLE = 1, 2
TIMEOUT_S = 15.0


def recommended(partitions: int) -> dict[str, tuple[int, dict[str, str]]]:
    """Each topic's partitions and the settings it should have."""
    wanted = {t: (partitions, KEPT_FOREVER) for t in (*TOPICS.values(), REJECTED_TOPIC)}
    wanted[OUTBOUND_TOPIC] = (1, {})            # the replicas' requests: read once by the responders
    return wanted


def register(sub, add_kafka_arguments) -> None:
    topics = sub.add_parser("topics", help="create or check the topics the job and the producers use",
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            description=__doc__.split("\n\n")[0] + "\n\nRaw topics and msmq.qb.rejected: "
                                        "--partitions, retention.ms and retention.bytes -1 (kept forever); "
                                        f"{OUTBOUND_TOPIC}: 1 partition, the broker's retention.",
                            epilog="example:\n"
                                   "  dirstream topics --bootstrap kafka1.example.com:9092 --replication-factor 3\n"
                                   "  dirstream topics --check      # only say what is missing or differs")
    add_kafka_arguments(topics)
    topics.add_argument("--partitions", type=int, default=RAW_PARTITIONS,
                        help=f"partitions of each raw topic (default {RAW_PARTITIONS})")
    topics.add_argument("--replication-factor", type=int, default=1,
                        help="replicas of each partition (default 1: a single broker; 3 on a production cluster)")
    topics.add_argument("--check", action="store_true",
                        help="create nothing: print what is missing or differs, exit 1 if anything does")
    topics.set_defaults(func=cmd_topics)


def cmd_topics(args) -> int:
    from confluent_kafka import KafkaException
    from producers.kafka import KafkaAclError, KafkaSettings
    settings = KafkaSettings.from_args(args.bootstrap, args.kafka_config, args.kafka_option)
    try:
        return _topics(settings, recommended(args.partitions), args.replication_factor, args.check)
    except KafkaAclError as exc:
        print(f"dirstream topics: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KafkaException as exc:
        print(f"dirstream topics: Kafka at {args.bootstrap} did not answer: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE


def _topics(settings, wanted: dict, factor: int, check: bool) -> int:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient(settings.confluent())
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    missing = [t for t in wanted if t not in metadata.topics]
    differs = 0
    if missing and not check:
        futures = admin.create_topics([NewTopic(t, wanted[t][0], factor, config=dict(wanted[t][1])) for t in missing])
        for topic, future in futures.items():
            _allowed(settings, future, "Create", topic)
            print(f"{topic}: created: {_described(wanted[topic][0], factor, wanted[topic][1])}")
    else:
        for topic in missing:
            print(f"{topic}: missing (would be created: {_described(wanted[topic][0], factor, wanted[topic][1])})")
            differs += 1
    present = [t for t in wanted if t in metadata.topics]
    for topic, settings_now in _settings(settings, admin, present).items():
        parts = metadata.topics[topic].partitions
        now = (len(parts), len(parts[0].replicas) if parts else 0, settings_now)
        want = (wanted[topic][0], factor, wanted[topic][1])
        gaps = _differences(now, want)
        print(f"{topic}: exists: {_described(*now)}" + (f"; differs: {'; '.join(gaps)}" if gaps else
                                                          " (as recommended)"))
        differs += bool(gaps)
    return EXIT_DIFFERS if differs else 0


def _settings(settings, admin, topics: list[str]) -> dict[str, dict[str, str]]:
    from confluent_kafka.admin import ConfigResource, ResourceType
    if not topics:
        return {}
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics])
    return {resource.name: {k: entry.value for k, entry in _allowed(settings, future, "DescribeConfigs",
                                                                     resource.name).items()}
            for resource, future in futures.items()}


def _allowed(settings, future, operation: str, topic: str):
    """The admin request's result; the authorizer's refusal as the ACL to grant. A topic that exists
    but was not listed is hidden from this user: Describe is what is missing."""
    from confluent_kafka import KafkaError, KafkaException
    from producers.kafka import refused
    try:
        return future.result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        code = exc.args[0].code() if exc.args else None
        if code == KafkaError.TOPIC_ALREADY_EXISTS:
            raise refused(settings, "Describe", "topic", topic) from None
        if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            note = " (or Describe on it, if it exists already)" if operation == "Create" else ""
            raise refused(settings, operation, "topic", topic, note) from None
        raise


def _differences(now: tuple, want: tuple) -> list[str]:
    (partitions, factor, settings), (want_partitions, want_factor, want_settings) = now, want
    gaps = []
    if partitions != want_partitions:
        gaps.append(f"{partitions} partitions, recommended {want_partitions} (partitions can be added, not removed; "
                    f"the job reads an added one from its beginning)")
    if factor != want_factor:
        gaps.append(f"replication factor {factor}, asked for {want_factor}")
    for key, value in want_settings.items():
        if settings.get(key) != value:
            gaps.append(f"{key} {settings.get(key)}, recommended {value}")
    return gaps


def _described(partitions: int, factor: int, settings: dict) -> str:
    shown = {k: settings.get(k) for k in ("retention.ms", "retention.bytes") if settings.get(k) is not None}
    return (f"{partitions} partition{'s' if partitions != 1 else ''}, replication factor {factor}"
            + "".join(f", {k} {v}" for k, v in shown.items()))
