"""Decoded messages per second per protocol on one core (prints figures; not a timed test).

Run: make bench   (or .venv/bin/python tests/bench/bench_codecs.py [--seconds 1.0] [--builds])
Target: at least 50,000 typical messages per second per protocol. --builds: the compiled build
against the pure-Python sources, side by side (tests/bench/builds.py).
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from samples import P, QUEUE, SITE_A, directory_change, mqcn_messages, mqdsrp_messages, mqsd_messages  # noqa: E402

from builds import figures_line, print_comparison, side_by_side  # noqa: E402
from streaming.wire import decode, encode, mqcn, mqdsrp  # noqa: E402

TARGET = 50_000


def typical_bodies() -> dict[str, list[bytes]]:
    """What each protocol mostly carries: small notifications, one-change propagations, discovery packets."""
    cn = mqcn_messages()
    queue_update = mqcn.new_v1([mqcn.new_update(0x01, [P("Q_QMID", QUEUE), P("Q_QUOTA", 10)], SITE_A,
                                                guid_identifier=QUEUE)])
    rp = mqdsrp_messages()
    one_change = mqdsrp.new_message(SITE_A, mqdsrp.ChangePropagationMessage(
        0, 1, [directory_change(42)], mqdsrp.SeqNumberHeader(0)))
    sd = mqsd_messages()
    return {
        "mqcn": [encode("mqcn", m) for m in (cn["v2_change_queue"], cn["v2_change_machine"], queue_update)],
        "mqdsrp": [encode("mqdsrp", m) for m in (one_change, rp["sync_request"], rp["psc_ack"], rp["change_reply"])],
        "mqsd": [encode("mqsd", m) for m in (sd["request_ip"], sd["reply_local"], sd["reply_remote"])],
    }


def heavy_bodies() -> dict[str, bytes]:
    return {
        "mqcn v1 create (15 properties)": ("mqcn", encode("mqcn", mqcn_messages()["v1_create"])),
        "mqdsrp propagation (3 changes, 15+ properties)": ("mqdsrp", encode("mqdsrp",
                                                                            mqdsrp_messages()["change_propagation"])),
    }


def rate(protocol: str, bodies: list[bytes], seconds: float) -> float:
    n, start = 0, time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(200):
            for body in bodies:
                decode(protocol, body)
        n += 200 * len(bodies)
    return n / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--builds", action="store_true", help="the compiled build against the pure-Python sources")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.builds:
        print(f"decode throughput, one core, best of 3 rounds of {args.seconds:.1f} s per case and build")
        print_comparison(side_by_side(__file__, ["--seconds", str(args.seconds)]), "msg/s")
        return 0
    if args.json:
        figures = {f"{p} typical mix": rate(p, bodies, args.seconds) for p, bodies in typical_bodies().items()}
        figures.update({label: rate(p, [body], args.seconds) for label, (p, body) in heavy_bodies().items()})
        print(figures_line(figures))
        return 0
    print(f"decode throughput, one core, {args.seconds:.1f} s per case (target {TARGET:,}/s typical)")
    ok = True
    for protocol, bodies in typical_bodies().items():
        r = rate(protocol, bodies, args.seconds)
        ok &= r >= TARGET
        mean = sum(map(len, bodies)) / len(bodies)
        print(f"  {protocol:7s} typical mix ({len(bodies)} kinds, mean {mean:.0f} B): {r:>10,.0f} msg/s "
              f"{'OK' if r >= TARGET else 'BELOW TARGET'}")
    for label, (protocol, body) in heavy_bodies().items():
        print(f"  {label} ({len(body)} B): {rate(protocol, [body], args.seconds):,.0f} msg/s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
