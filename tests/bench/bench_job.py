"""End-to-end benchmark of the streaming job (prints figures; not a timed test).

Publishes N simulated messages to a fresh embedded broker, then measures in one run:
  1. the raw confluent-kafka consume rate of the same topics,
  2. the decode-only rate per protocol (the Python decode stage, one core),
  3. the job end to end (Kafka -> decode -> SQLite sink), steady state and overall,
and prints the ratio of (3) to (1). Targets: >= 20,000 msg/s end to end on 2 cores,
and >= 1/4 of the raw consume rate. Also samples the driver's RSS per batch (memory stays flat).

Run: make bench   (or .venv/bin/python tests/bench/bench_job.py --messages 200000)
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from infra.broker import EmbeddedBroker  # noqa: E402
from producers.kafka import ConfluentPublisher, KafkaSettings, ensure_topics  # noqa: E402
from producers.publish import publish_envelope  # noqa: E402
from producers.simulator import Faults, Simulator  # noqa: E402
from streaming.spark.decode import Decoder  # noqa: E402
from streaming.wire.envelope import encode_envelope  # noqa: E402
from streaming.wire.topics import TOPICS  # noqa: E402


# Simulated milliseconds between directory operations: sets how many changes a change propagation
# carries (--op-interval-ms; 100-500 gives about 7 per propagation, 1000-3000 one or two).
OP_INTERVAL_MS = (100, 500)


def publish(bootstrap: str, n: int, partitions: int, pool_size: int = 50_000) -> dict:
    """N messages: a pool of simulated traffic, published over and over (the simulator itself is
    slower than the job, so it would not keep up)."""
    settings = KafkaSettings(bootstrap)
    ensure_topics(settings, {t: partitions for t in TOPICS.values()})
    sim = Simulator(seed=1, faults=Faults(corrupt=0.005), op_interval_ms=OP_INTERVAL_MS)
    pool = [(m.protocol, m.key, m.envelope) for m in sim.messages(min(n, pool_size))]
    pub = ConfluentPublisher(settings)
    counts = {p: 0 for p in TOPICS}
    for i in range(n):
        protocol, key, envelope = pool[i % len(pool)]
        publish_envelope(pub, protocol, key, envelope)
        counts[protocol] += 1
    pub.close()
    return counts


def raw_consume_rate(bootstrap: str, total: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 10})
    parts = [TopicPartition(t, p, 0) for t in TOPICS.values()
             for p in c.list_topics(t, timeout=10).topics[t].partitions]
    c.assign(parts)
    got, start = 0, time.perf_counter()
    while got < total and time.perf_counter() - start < 300:
        got += sum(1 for m in c.consume(10_000, 1.0) if m.error() is None)
    elapsed = time.perf_counter() - start
    c.close()
    return got / elapsed


def decode_rates(bootstrap: str, per_protocol_sample: int = 20_000) -> dict:
    sim = Simulator(seed=2, op_interval_ms=OP_INTERVAL_MS)
    values = {p: [] for p in TOPICS}
    for m in sim.messages(60_000):
        if len(values[m.protocol]) < per_protocol_sample:
            values[m.protocol].append(encode_envelope(m.envelope))
    decoder = Decoder()
    rates = {}
    for protocol, vals in values.items():
        start = time.perf_counter()
        for i, v in enumerate(vals):
            decoder.row(TOPICS[protocol], 0, i, None, b"k", v)
        rates[protocol] = len(vals) / (time.perf_counter() - start)
    return rates


def job_rate(bootstrap: str, workdir: Path, max_records: int) -> dict:
    import resource
    from streaming.spark.pipeline import build_spark, source_options, start_query
    from streaming.sinks import open_sink
    spark = build_spark("local[2]")
    rss = []
    started = time.perf_counter()
    query = start_query(spark, sink_url=f"sqlite:///{workdir}/bench.db", checkpoint=str(workdir / "ckpt"),
                        once=True, source_opts=source_options(bootstrap, max_records=max_records),
                        echo=lambda line: rss.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
    query.awaitTermination()
    overall = time.perf_counter() - started
    sink = open_sink(f"sqlite:///{workdir}/bench.db")
    rows = sink.query("SELECT batch_id, input_rows, duration_ms FROM pipeline_progress WHERE query_name = 'dirstream' ORDER BY batch_id")
    spark.stop()
    total = sum(r["input_rows"] for r in rows)
    steady = rows[1:] if len(rows) > 2 else rows          # the first batch pays for worker start-up
    steady_rate = sum(r["input_rows"] for r in steady) / max(sum(r["duration_ms"] for r in steady) / 1000, 1e-9)
    return {"rows": total, "batches": len(rows), "overall_rate": total / overall, "steady_rate": steady_rate,
            "overall_s": overall, "driver_maxrss_mb": [round(x / 1024) for x in rss]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=600_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-records", type=int, default=200_000, help="as dirstream run's default")
    parser.add_argument("--op-interval-ms", default="100-500",
                        help="simulated ms between directory operations, MIN-MAX (see OP_INTERVAL_MS)")
    args = parser.parse_args()
    global OP_INTERVAL_MS
    low, _, high = args.op_interval_ms.partition("-")
    OP_INTERVAL_MS = (int(low), int(high or low))
    workdir = Path(tempfile.mkdtemp(prefix="dirstream-bench-"))
    broker = EmbeddedBroker(workdir / "broker", port=19399)
    broker.start()
    try:
        t = time.perf_counter()
        counts = publish(broker.bootstrap, args.messages, args.partitions)
        total = sum(counts.values())
        print(f"published {total:,} messages {counts} in {time.perf_counter() - t:.1f} s "
              f"(simulated ms between directory operations: {OP_INTERVAL_MS})")
        raw = raw_consume_rate(broker.bootstrap, total)
        print(f"raw confluent-kafka consume: {raw:,.0f} msg/s")
        rates = decode_rates(broker.bootstrap)
        for protocol, rate in rates.items():
            print(f"decode only (envelope + body), {protocol}: {rate:,.0f} msg/s on one core")
        # What the decoding alone allows for this mix on every core, with no Kafka and no Spark at all:
        # the ceiling of the job's rate and of its ratio to the raw consume rate.
        cores = os.cpu_count() or 1
        ceiling = cores * total / sum(counts[p] / rates[p] for p in counts if counts[p])
        print(f"decode-only ceiling for this mix on {cores} cores: {ceiling:,.0f} msg/s "
              f"= ratio {ceiling / raw:.2f} of the raw consume rate")
        job = job_rate(broker.bootstrap, workdir, args.max_records)
        print(f"job end to end: {job['rows']:,} rows in {job['batches']} batches, {job['overall_s']:.1f} s overall "
              f"= {job['overall_rate']:,.0f} msg/s (with start-up); steady state {job['steady_rate']:,.0f} msg/s")
        print(f"ratio steady job / raw consume: {job['steady_rate'] / raw:.2f} (target >= 0.25); "
              f"target 20,000 msg/s: {'OK' if job['steady_rate'] >= 20_000 else 'BELOW'}; "
              f"the job runs at {job['steady_rate'] / ceiling:.0%} of the decode-only ceiling")
        print(f"driver max RSS after each batch (MB): {job['driver_maxrss_mb']}")
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
