"""The `dirstream` command: decode, broker, produce, run, verify, history, dashboard."""
import argparse
import json
import sys

from ..wire import PROTOCOLS, WireError, decode, record_to_dict

__all__ = ["build_parser", "cmd_decode", "cmd_spark_main", "EXIT_BAD_INPUT", "main", "version"]

EXIT_BAD_INPUT = 2


def version() -> str:
    from importlib.metadata import PackageNotFoundError, version as installed
    try:
        return installed("msmq-dirstream")
    except PackageNotFoundError:
        return "(not installed)"


def _read_body(args) -> bytes:
    if args.hex is not None:
        text = "".join(args.hex.split())
        if text[:2].lower() == "0x":
            text = text[2:]
        try:
            return bytes.fromhex(text)
        except ValueError as exc:
            raise SystemExit(_fail(f"--hex is not hexadecimal: {exc}"))
    if args.file == "-":
        return sys.stdin.buffer.read()
    try:
        with open(args.file, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise SystemExit(_fail(f"cannot read {args.file}: {exc.strerror}"))


def _fail(message: str) -> int:
    print(f"dirstream: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def cmd_decode(args) -> int:
    body = _read_body(args)
    try:
        record = decode(args.protocol, body)
    except WireError as exc:
        return _fail(f"cannot decode {len(body)}-byte body: {exc}")
    json.dump(record_to_dict(record), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dirstream", description="MSMQ directory-service traffic to live directory state.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example (the embedded broker, a simulated enterprise, the job):\n"
               "  dirstream broker start\n"
               "  dirstream produce simulate --seed 1 --count 20000 --truth var/truth.json\n"
               "  dirstream run --bootstrap 127.0.0.1:19092 --sink sqlite:///var/dirstream.db\n"
               "\n'dirstream COMMAND --help' describes each command; docs/running.md all of them.")
    parser.add_argument("--version", action="version", version=f"dirstream {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    dec = sub.add_parser("decode", help="decode one raw MQCN, MQDSRP or MQSD body and print it as JSON",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         description="Decode one raw MQCN, MQDSRP or MQSD message body and print it as JSON.\n\n"
                                     "Exit 0 with JSON on stdout; exit 2 with the error (structure, field, byte\n"
                                     "offset, reason) on bad input.",
                         epilog="example:\n"
                                "  dirstream decode --protocol mqsd "
                                "--hex \"$(cat tests/vectors/mqsd_4_reply_remote.hex)\"")
    dec.add_argument("--protocol", required=True, choices=PROTOCOLS, help="the protocol whose body it is")
    source = dec.add_mutually_exclusive_group(required=True)
    source.add_argument("--hex", help="the body as hex digits (whitespace allowed)")
    source.add_argument("--file", help="a file holding the raw body bytes ('-' for stdin)")
    dec.set_defaults(func=cmd_decode)
    from producers.cli import add_kafka_arguments, register
    register(sub)
    from .run import register as register_run
    register_run(sub, add_kafka_arguments)
    from .topics import register as register_topics
    register_topics(sub, add_kafka_arguments)
    from .verify import register as register_verify
    register_verify(sub)
    from .history import register as register_history
    register_history(sub)
    from .dashboard import register as register_dashboard
    register_dashboard(sub)
    main_file = sub.add_parser("spark-main", help="print the path of the job's spark-submit entry point",
                               formatter_class=argparse.RawDescriptionHelpFormatter,
                               description="Print the path of the file spark-submit runs as the job (its "
                                           "arguments are dirstream run's; the master is spark-submit's).",
                               epilog="example:\n  dirstream spark-main\n  spark-submit --master "
                                      "spark://spark-master:7077 \"$(dirstream spark-main)\" --bootstrap kafka1:9092 ...")
    main_file.set_defaults(func=cmd_spark_main)
    return parser


def cmd_spark_main(args) -> int:
    from pathlib import Path
    print(Path(__file__).with_name("spark_main.py"))      # not imported: it imports this module
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if hasattr(args, "bootstrap"):
        from producers.cli import run_guarded
        return run_guarded(args.func, args)
    from ..sinks import SinkError
    try:
        return args.func(args)
    except SinkError as exc:            # verify, history, dashboard: the database is not there
        print(f"dirstream {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
