"""`dirstream broker ...` and `dirstream produce ...` subcommands."""
import argparse
import json
import logging
import sys
import time

from infra.broker import (DEFAULT_BOOTSTRAP, DEFAULT_HEAP, DEFAULT_HOST, DEFAULT_PORT, KAFKA_VERSION, BrokerError,
                          EmbeddedBroker, fetch_jars)

from .kafka import (CLIENTS, OUTBOUND_TOPIC, REJECTED_TOPIC, TOPICS, KafkaSecurityError, KafkaSettings,
                    KafkaUnavailable, ensure_topics, publisher)
from .heap import FrozenSurvivors
from .publish import REJECTED, at_recorded_pace, in_time_order, publish_all, publish_rejected

__all__ = ["add_kafka_arguments", "cmd_broker", "cmd_capture", "cmd_replay", "cmd_respond", "cmd_simulate",
           "EXIT_FAILED", "EXIT_USAGE", "FAULT_HELP", "register", "run_guarded", "settings_from", "write_truth"]

EXIT_FAILED = 1
EXIT_USAGE = 2


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Kafka")
    group.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP,
                       help=f"Kafka bootstrap servers (default: the embedded broker, {DEFAULT_BOOTSTRAP})")
    group.add_argument("--kafka-config", metavar="FILE",
                       help="properties file of Kafka client settings (security.protocol, sasl.*, ssl.*, ...)")
    group.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                       help="one Kafka client setting; repeatable; overrides --kafka-config")
    group.add_argument("--client", choices=sorted(CLIENTS), default="confluent",
                       help="Kafka client library for publishing (default: confluent)")


def settings_from(args) -> KafkaSettings:
    return KafkaSettings.from_args(args.bootstrap, args.kafka_config, args.kafka_option)


def _interval(text: str) -> tuple[int, int]:
    low, sep, high = text.partition("-")
    try:
        low_ms, high_ms = int(low), int(high if sep else low)
    except ValueError:
        raise ValueError(f"--op-interval-ms takes MIN-MAX milliseconds, got {text!r}") from None
    if not 1 <= low_ms <= high_ms:
        raise ValueError(f"--op-interval-ms needs 1 <= MIN <= MAX, got {text!r}")
    return low_ms, high_ms


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a rate is between 0 and 1, got {text}")
    return value


# ---------------------------------------------------------------------------- broker
def cmd_broker(args) -> int:
    try:
        broker = EmbeddedBroker(args.state_dir, args.host, args.port, args.heap, args.security)
        if args.action == "fetch":
            print(f"Apache Kafka {KAFKA_VERSION} jars in {fetch_jars()}")
        elif args.action == "start":
            print(broker.start().describe())
        elif args.action == "stop":
            print("broker stopped" if broker.stop() else "broker was not running")
        else:
            status = broker.status()
            print(status.describe())
            return 0 if status.answering else EXIT_FAILED
    except BrokerError as exc:
        print(f"dirstream broker: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return 0


# ---------------------------------------------------------------------------- produce
def _attacks(text: str) -> list[str]:
    from .simulator import ATTACKS
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in ATTACKS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"unknown attack {unknown[0] if unknown else text!r}: one or more of "
                                         f"{', '.join(ATTACKS)}, comma-separated")
    return kinds


def cmd_simulate(args) -> int:
    with FrozenSurvivors():             # the directory and the truth only grow: full collections skip them
        return _simulate(args)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _simulate(args) -> int:
    from .simulator import Faults, Simulator
    faults = Faults(args.reorder, args.reorder_window, args.duplicate, args.drop, args.corrupt, args.unauthenticated,
                    args.nack)
    sim = Simulator(args.seed, args.sites, args.bscs, args.qms, args.queues, faults, args.burst_rate,
                    op_interval_ms=_interval(args.op_interval_ms), attacks=frozenset(args.attack),
                    clock=_wall_clock_ms if args.wall_clock else None)
    if args.pcap:
        return _simulate_to_capture(sim, args)
    from .simulator import CAPTURE_ATTACKS
    if set(args.attack) & set(CAPTURE_ATTACKS):
        print(f"dirstream produce simulate: --attack {', '.join(sorted(set(args.attack) & set(CAPTURE_ATTACKS)))} "
              f"is injected into packet captures only: add --pcap FILE, then replay the capture", file=sys.stderr)
        return EXIT_USAGE
    settings = settings_from(args)
    _created_topics(settings, {t: args.partitions for t in TOPICS.values()})
    pub = publisher(args.client, settings)
    writer = _truth_writer(sim, args.truth)
    items = ((m.protocol, m.key, m.envelope) for m in sim.messages(args.count))
    requests = None
    if args.respond:
        from .responder import OutboundRequests, answering_between, live_authorities
        requests = OutboundRequests(settings, live_authorities(sim), args.outbound_topic)
        items = answering_between(items, requests)
    try:
        stats = publish_all(pub, items, rate=args.rate, duration=args.duration, on_deadline=sim.stop,
                            total=args.count if args.duration is None else None)
    except BaseException:
        if writer is not None:
            writer.abandon()
        raise
    finally:
        if requests is not None:
            requests.close()
    pub.close()
    if writer is not None:
        sim.finish_truth()
    summary = {"published": stats.total, "per_protocol": dict(stats.per_protocol), "delivered": pub.delivered,
               "seconds": round(time.monotonic() - stats.started, 2), "rate_per_s": round(stats.rate()),
               "dead_letters_expected": sim.record.count("dead_letters"), "dropped": sim.record.count("dropped"),
               "duplicates": sim.record.count("duplicates"), "truth": args.truth, "interrupted": stats.interrupted}
    if requests is not None:
        summary["responder"] = requests.authorities.stats
    print(json.dumps(summary))
    return EXIT_FAILED if stats.interrupted else 0


def _created_topics(settings: KafkaSettings, topics: dict[str, int]) -> None:
    """The topics that are missing, created, and said in one line (a single broker's factor)."""
    created = ensure_topics(settings, topics, need="Write")
    if created:
        print(f"dirstream produce: created topic(s) {', '.join(sorted(created))} with {topics[created[0]]} partitions, "
              f"replication factor 1 and the broker's retention (`dirstream topics` creates them as a production "
              f"cluster needs)", file=sys.stderr)


def _truth_writer(sim, path: str | None):
    """The truth written as the simulator makes it (producers.truth_file), or, with no --truth,
    only counted: a long run holds neither its faults nor its finished discovery results."""
    if path is None:
        sim.keep_no_truth()
        return None
    from .truth_file import TruthWriter
    writer = TruthWriter(path)
    sim.write_truth_to(writer)
    return writer


def write_truth(truth: dict, path: str) -> None:
    """A truth held whole (a capture's, renamed) in the truth file's format (producers.truth_file)."""
    from .truth_file import LIST_SECTIONS, MAPPING_SECTIONS, TruthWriter
    writer = TruthWriter(path)
    for section, value in truth.items():
        if section in LIST_SECTIONS:
            for item in value:
                writer.item(section, item)
        elif section in MAPPING_SECTIONS:
            for key, entry in value.items():
                writer.entry(section, key, entry)
        else:
            writer.value(section, value)
    writer.close()


def _simulate_to_capture(sim, args) -> int:
    """The simulated traffic as a capture of MQQB sessions and MQSD datagrams, not published; the
    truth names messages by the MSMQ message identifiers the capture carries."""
    from .capture_writer import CaptureWriter
    started = time.monotonic()
    writer = CaptureWriter(args.pcap, seed=args.seed, malformed="mqqb-malformed" in args.attack)
    counts: dict[str, int] = {}
    try:
        for m in sim.messages(args.count):
            writer.write(m.protocol, m.envelope)
            counts[m.protocol] = counts.get(m.protocol, 0) + 1
    finally:
        writer.close()
    truth = _renamed_messages(sim.truth(), writer.message_ids)
    truth["attacks"] = truth.get("attacks", []) + writer.attacks
    if args.truth:
        write_truth(truth, args.truth)
    print(json.dumps({"written": sum(counts.values()), "per_protocol": counts, "capture": args.pcap,
                      "packets": writer.packets, "tcp_sessions": len(writer.sessions),
                      "seconds": round(time.monotonic() - started, 2), "truth": args.truth}))
    return 0


def _renamed_messages(truth: dict, ids: dict[str, str]) -> dict:
    """The truth's message ids (the simulator's) as the capture's MessageIdentifiers ([MS-MQMQ] 2.2.18.1.3)."""
    def rename(value):
        if isinstance(value, dict):
            return {k: ids.get(v, v) if k == "message_id" and isinstance(v, str) else rename(v)
                    for k, v in value.items()}
        if isinstance(value, list):
            return [ids.get(v, v) if isinstance(v, str) else rename(v) for v in value]
        return value
    return {k: rename(v) if k in ("dead_letters", "discarded_notifications", "dropped", "duplicates", "nacks")
            else v for k, v in truth.items()}


def cmd_replay(args) -> int:
    from .replay import read_paths
    try:
        replay = read_paths(args.files, args.protocol, int(time.time() * 1000))
    except ValueError as exc:
        print(f"dirstream produce replay: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for problem in replay.problems:
        print(f"skipped {problem}", file=sys.stderr)
    for record in replay.rejected:
        print(_rejected_line(record), file=sys.stderr)
    settings = settings_from(args)
    published = rejected = 0
    if replay.items or replay.rejected:
        topics = {TOPICS[p]: args.partitions for p in {i[0] for i in replay.items}}
        if replay.rejected:
            topics[REJECTED_TOPIC] = args.partitions
        _created_topics(settings, topics)
        pub = publisher(args.client, settings)
        items = in_time_order(replay.items, replay.rejected)
        stats = publish_all(pub, at_recorded_pace(items) if args.wall_clock else items, rate=args.rate,
                            total=len(replay.items) + len(replay.rejected))
        rejected = stats.per_protocol[REJECTED]
        published = stats.total - rejected
        pub.close()
    print(json.dumps(_summary(published, replay, rejected)))
    return EXIT_FAILED if replay.problems else 0


def _rejected_line(record: dict) -> str:
    return (f"rejected {record['capture']}:{record['position']}: MQQB {record['structure']}.{record['field']} at "
            f"byte {record['byte_offset']}: {record['reason']} (published to {REJECTED_TOPIC})")


def _summary(published: int, replay, rejected: int) -> dict:
    return {"published": published, "skipped": len(replay.problems), "rejected_packets_published": rejected,
            "ignored_capture_packets": replay.ignored,
            "msmq_not_published": dict(sorted(replay.skipped.items()))}


def cmd_capture(args) -> int:
    """Live: MSMQ traffic on an interface, published as each message completes, until Ctrl-C."""
    from .capture import live_capture
    from .publish import publish_envelope
    settings = settings_from(args)
    _created_topics(settings, {t: args.partitions for t in (*TOPICS.values(), REJECTED_TOPIC)})
    pub = publisher(args.client, settings)
    reported = [0]
    rejected = [0]

    def publish(items) -> None:
        for protocol, key, envelope in items:
            publish_envelope(pub, protocol, key, envelope)

    def publish_one_rejected(record: dict) -> None:
        publish_rejected(pub, record)
        rejected[0] += 1
        print(_rejected_line(record), file=sys.stderr, flush=True)

    def report_problems(replay) -> None:
        for problem in replay.problems[reported[0]:]:
            print(f"skipped {problem}", file=sys.stderr, flush=True)
        reported[0] = len(replay.problems)

    try:
        replay = live_capture(args.interface, args.bpf, publish, on_progress=report_problems,
                              publish_rejected=publish_one_rejected,
                              on_start=lambda: print(f"capturing on {args.interface}"
                                                     + (f" ({args.bpf})" if args.bpf else "")
                                                     + "; Ctrl-C stops", file=sys.stderr, flush=True))
    except OSError as exc:
        pub.close()
        hint = ": capturing needs root or the CAP_NET_RAW capability (docs/running.md)" \
            if isinstance(exc, PermissionError) else ""
        print(f"dirstream produce capture: cannot capture on {args.interface}: {exc}{hint}", file=sys.stderr)
        return EXIT_FAILED
    pub.close()
    report_problems(replay)
    print(json.dumps(_summary(replay.published, replay, rejected[0])))
    return 0


def cmd_respond(args) -> int:
    from .responder import run_responder
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with FrozenSurvivors():             # the truth it loads stays to the end: full collections skip it
        stats = run_responder(settings_from(args), args.truth, outbound_topic=args.outbound_topic,
                              raw_topic=TOPICS["mqdsrp"], client=args.client, idle_exit=args.idle_exit)
    print(json.dumps(stats))
    return 0


FAULT_HELP = {"reorder": "messages delivered out of order (within --reorder-window)",
              "duplicate": "messages delivered twice",
              "drop": "MQDSRP change propagations lost (the one flow the protocol heals)",
              "corrupt": "corrupt copies injected (they become dead letters)",
              "unauthenticated": "v1 notifications with AuthenticationLevel None injected",
              "nack": "Nack-class copies injected"}


def register(sub) -> None:
    broker = sub.add_parser("broker", help="start, stop or check the embedded Apache Kafka broker (KRaft)",
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            description=f"Start, stop or check the embedded Apache Kafka {KAFKA_VERSION} broker "
                                        f"(KRaft).",
                            epilog="example:\n"
                                   "  dirstream broker start\n"
                                   "  dirstream broker status --state-dir var/broker\n"
                                   "  dirstream broker start --security sasl_ssl --state-dir var/secure-broker "
                                   "--port 19093")
    broker.add_argument("action", choices=["start", "stop", "status", "fetch"],
                        help="fetch: only download the Kafka jars into their cache (start does it when needed)")
    broker.add_argument("--host", default=DEFAULT_HOST, help=f"the client listener's address (default {DEFAULT_HOST})")
    broker.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"the client listener's port (default {DEFAULT_PORT})")
    broker.add_argument("--state-dir", help="where the pid, log and Kafka log directories live "
                                             "(default: var/broker, or $DIRSTREAM_STATE/broker)")
    broker.add_argument("--heap", default=DEFAULT_HEAP, help=f"the broker JVM's heap (default {DEFAULT_HEAP})")
    broker.add_argument("--security", choices=["plaintext", "sasl_ssl"],
                        help="the client listener: plaintext (a new state directory's default) or sasl_ssl (TLS + SCRAM-SHA-512; a CA, the "
                             "broker's key pair and a user are created at the first start, and `start` prints the "
                             "--kafka-config file for clients); fixed when the state directory is first formatted")
    broker.set_defaults(func=cmd_broker)

    produce = sub.add_parser("produce", help="publish traffic: simulate an enterprise, replay captures, respond",
                             formatter_class=argparse.RawDescriptionHelpFormatter,
                             description="Publish MSMQ traffic to Kafka: simulate, replay, capture, or answer the job.",
                             epilog="example:\n"
                                    "  dirstream produce simulate --seed 1 --count 20000 --truth var/truth.json\n"
                                    "  dirstream produce respond --truth var/truth.json")
    psub = produce.add_subparsers(dest="produce_command", required=True)

    sim = psub.add_parser("simulate", help="simulate an MSMQ enterprise and publish its traffic with ground truth",
                          formatter_class=argparse.RawDescriptionHelpFormatter,
                          description="Simulate an MSMQ enterprise, publish its traffic and write its ground truth.",
                          epilog="example:\n"
                                 "  dirstream produce simulate --seed 1 --count 20000 --truth var/truth.json\n"
                                 "  dirstream produce simulate --duration 600 --rate 400 --respond --reorder 0.01 "
                                 "--duplicate 0.01 --drop 0.005 --truth var/truth.json\n"
                                 "  dirstream produce simulate --wall-clock --rate 200 --duration 3600 --respond "
                                 "--truth var/truth.json\n"
                                 "  dirstream produce simulate --count 5000 --pcap var/sim.pcapng "
                                 "--truth var/sim-truth.json")
    add_kafka_arguments(sim)
    sim.add_argument("--seed", type=int, default=1, help="the enterprise and its traffic are a function of it "
                                                        "(default 1)")
    sim.add_argument("--sites", type=int, default=3, help="sites, each with a PSC (site 0's is the PEC)")
    sim.add_argument("--bscs", type=int, default=1, help="BSCs per site")
    sim.add_argument("--qms", type=int, default=3, help="queue managers per site")
    sim.add_argument("--queues", type=int, default=4, help="initial queues per queue manager")
    sim.add_argument("--count", type=int, help="stop generating after this many messages")
    sim.add_argument("--duration", type=float, help="stop generating after this many seconds")
    sim.add_argument("--rate", type=float, help="messages per second at most")
    sim.add_argument("--partitions", type=int, default=4, help="partitions of topics created here")
    sim.add_argument("--truth", metavar="FILE", help="write the ground truth JSON here")
    sim.add_argument("--pcap", metavar="FILE", help="write the traffic as a packet capture (MQQB sessions on TCP "
                                                    "1801, MQSD on UDP 1801; .pcapng for pcapng) instead of "
                                                    "publishing it; replay it with `produce replay FILE`")
    sim.add_argument("--burst-rate", type=float, default=0.002, help="chance per operation of a 100+ burst")
    sim.add_argument("--respond", action="store_true",
                     help="also play the object authorities while publishing: answer the job's sync and change "
                          "requests on --outbound-topic from the authorities' objects as they are now (a live "
                          "`produce respond`; run that with the truth file once this command has ended)")
    sim.add_argument("--outbound-topic", default=OUTBOUND_TOPIC, help=f"with --respond (default {OUTBOUND_TOPIC})")
    sim.add_argument("--op-interval-ms", default="20-120",
                     help="simulated milliseconds between directory operations, MIN-MAX (default 20-120: a busy "
                          "directory; larger values give smaller change propagations)")
    sim.add_argument("--wall-clock", action="store_true",
                     help="run the enterprise in real time: each message is sent and arrives when it is "
                          "published, and the operations are spaced so that --rate holds (default: simulated "
                          "time from 2026-01-01, --op-interval-ms between operations, hours of it in seconds); "
                          "the quiet tail after --count or --duration (21 minutes, so that every window "
                          "closes) is still simulated and dated ahead")
    faults = sim.add_argument_group("faults (rates between 0 and 1)")
    for name in ("reorder", "duplicate", "drop", "corrupt", "unauthenticated", "nack"):
        faults.add_argument(f"--{name}", type=_rate, default=0.0, help=FAULT_HELP[name])
    faults.add_argument("--reorder-window", type=int, default=8,
                        help="messages a reordered one can be moved among (default 8)")
    from .simulator import ATTACKS
    sim.add_argument("--attack", type=_attacks, default=[], metavar="KIND[,KIND...]",
                     help=f"inject hostile traffic the job reports in security_findings: {', '.join(ATTACKS)} "
                          f"(listed in the truth file's `attacks`; mqqb-malformed with --pcap only)")
    sim.set_defaults(func=cmd_simulate)

    replay = psub.add_parser("replay", help="publish recorded messages: JSON lines, hex lines, raw files, pcap or "
                                            "pcapng captures (MQQB on TCP 1801, MQSD on UDP 1801)",
                             formatter_class=argparse.RawDescriptionHelpFormatter,
                             description="Publish recorded messages: JSON or hex lines, raw bodies, pcap/pcapng "
                                         "captures.",
                             epilog="example:\n"
                                    "  dirstream produce replay var/sim.pcapng\n"
                                    "  dirstream produce replay --protocol mqsd var/mqsd-bodies.hex")
    add_kafka_arguments(replay)
    replay.add_argument("files", nargs="+", help="the recordings: files or directories (a directory: one raw body "
                                                 "per file, in name order)")
    replay.add_argument("--protocol", choices=["mqcn", "mqdsrp", "mqsd"], help="for hex lines and raw files")
    replay.add_argument("--rate", type=float, help="messages per second at most")
    replay.add_argument("--wall-clock", action="store_true",
                        help="publish at the recording's own pace, re-dated to now (each message's sent and "
                             "arrival times moved by the same amount): the job sees the traffic as it came")
    replay.add_argument("--partitions", type=int, default=4, help="partitions of topics created here")
    replay.set_defaults(func=cmd_replay)

    capture = psub.add_parser("capture", help="publish the MSMQ traffic seen live on a network interface "
                                              "(needs root or CAP_NET_RAW), until Ctrl-C",
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              description="Publish the MSMQ traffic seen live on a network interface, until Ctrl-C.",
                              epilog="example:\n"
                                     "  dirstream produce capture --interface eth0 "
                                     "--bpf 'tcp port 1801 or udp port 1801'")
    add_kafka_arguments(capture)
    capture.add_argument("--interface", required=True, help="the interface to capture on, e.g. eth0 or lo")
    capture.add_argument("--bpf", metavar="FILTER", help="a capture filter in BPF syntax, e.g. 'tcp port 1801 or "
                                                         "udp port 1801' (compiled with tcpdump)")
    capture.add_argument("--partitions", type=int, default=4, help="partitions of topics created here")
    capture.set_defaults(func=cmd_capture)

    respond = psub.add_parser("respond", help="answer the job's sync requests as the object authorities",
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              description="Answer the job's sync and change requests as the object authorities.",
                              epilog="example:\n"
                                     "  dirstream produce respond --truth var/truth.json\n"
                                     "  dirstream produce respond --truth var/truth.json --idle-exit 60")
    add_kafka_arguments(respond)
    respond.add_argument("--truth", required=True, help="ground truth from `produce simulate --truth`")
    respond.add_argument("--outbound-topic", default=OUTBOUND_TOPIC,
                         help=f"the topic the job's requests come on (default {OUTBOUND_TOPIC})")
    respond.add_argument("--idle-exit", type=float, help="exit after this many seconds without requests")
    respond.set_defaults(func=cmd_respond)


def run_guarded(func, args) -> int:
    try:
        return func(args)
    except (KafkaUnavailable, BrokerError) as exc:
        hint = " (start the embedded one with: dirstream broker start)" if args.bootstrap == DEFAULT_BOOTSTRAP and \
            not isinstance(exc, KafkaSecurityError) else ""
        print(f"dirstream: {exc}{hint}", file=sys.stderr)
        return EXIT_FAILED
    except ValueError as exc:
        print(f"dirstream: {exc}", file=sys.stderr)
        return EXIT_USAGE
