"""The fixed price of a micro-batch: where one batch of the job's query spends its time.

Publishes a simulated enterprise (seed 21, every fault type) to a fresh embedded broker, then runs
the job's one query `--once` in small micro-batches (`--max-records`) twice in one Spark session:
the first run pays the JVM's and the Python workers' warm-up, the second shows what every batch of
a running job costs. Prints, from Spark's progress of the second run, the median of each phase of
a batch (`durationMs`) and of each stateful operator's commit and update time, and the records per
batch.

    .venv/bin/python tests/bench/bench_batches.py [--messages 1500] [--max-records 300]
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from infra.broker import EmbeddedBroker, free_port  # noqa: E402
from job_runs import FAULTS  # noqa: E402

PHASES = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


def publish(bootstrap: str, work: Path, messages: int) -> None:
    exe = str(Path(sys.executable).parent / "dirstream")
    done = subprocess.run([exe, "produce", "simulate", "--bootstrap", bootstrap, "--truth", str(work / "truth.json"),
                           "--seed", "21", "--count", str(messages), *FAULTS], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr)


def run_once(spark, bootstrap: str, work: Path, name: str, max_records: int):
    from streaming.operators.notifications import Settings
    from streaming.spark.job_query import start_job_query
    from streaming.spark.pipeline import source_options
    started = time.monotonic()
    query = start_job_query(spark, sink_url=f"sqlite:///{work}/{name}.db", checkpoint=str(work / f"ckpt-{name}"),
                            source_opts=source_options(bootstrap, max_records=max_records), once=True,
                            echo=lambda line: None, pec_name="pec0", settings=Settings(), outbound_topic=None)
    query.awaitTermination()
    if query.exception():
        raise RuntimeError(query.exception())
    return time.monotonic() - started, list(query.recentProgress)


def median_ms(values) -> str:
    values = list(values)
    return f"{statistics.median(values):,.0f}" if values else "-"


def report(elapsed: float, progress: list) -> None:
    batches = [p for p in progress if p.numInputRows > 0][1:]       # the first batch plans the query
    print(f"warm run: {elapsed:.1f} s, {len(progress)} micro-batches "
          f"(records per batch: median {median_ms(p.numInputRows for p in batches)}, "
          f"max {max((p.numInputRows for p in batches), default=0):,})")
    print("median of the batches with records but the first, ms:")
    for phase in PHASES:
        print(f"  {phase:<18} {median_ms((p.durationMs or {}).get(phase, 0) for p in batches)}")
    for i, name in enumerate(("first operator (replicas, requests)", "second operator (queue managers)")):
        ops = [p.stateOperators[i] for p in batches if len(p.stateOperators) > i]
        print(f"  {name}: commit {median_ms(o.commitTimeMs for o in ops)}, "
              f"updates {median_ms(o.allUpdatesTimeMs for o in ops)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1500, help="simulated messages (default 1,500)")
    parser.add_argument("--max-records", type=int, default=300, help="the micro-batches' cap (default 300)")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    from streaming.spark.pipeline import build_spark
    with tempfile.TemporaryDirectory(prefix="bench-batches-") as tmp:
        work = Path(tmp)
        broker = EmbeddedBroker(work / "kafka", port=free_port())
        broker.start()
        try:
            publish(broker.bootstrap, work, args.messages)
            spark = build_spark("local[2]", conf=dict(kv.split("=", 1) for kv in args.spark_conf))
            run_once(spark, broker.bootstrap, work, "warm-up", args.max_records)
            report(*run_once(spark, broker.bootstrap, work, "measured", args.max_records))
            spark.stop()
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
