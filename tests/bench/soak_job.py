"""Memory over a long run of the raw query (prints figures; not a timed test).

Publishes simulated traffic at a steady rate to a fresh embedded broker while the job runs with
its normal trigger, and samples the resident memory of the driver, the JVM and the Python workers
once a minute. Memory "stays flat" when the second half of the run grows by no more than noise.

Run: make soak   (or .venv/bin/python tests/bench/soak_job.py --minutes 20 --rate 800)
The embedded broker keeps everything in memory, and after about 7 minutes of continuous traffic it
climbs to a full core whatever the rate (seen at 800 to 4,000 msg/s); the job then falls behind it
and fetches can stall past the read timeout. Longer soaks here measure the broker, not the job.
"""
import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from infra.broker import EmbeddedBroker  # noqa: E402
from producers.kafka import ConfluentPublisher, KafkaSettings, ensure_topics  # noqa: E402
from producers.simulator import Faults, Simulator  # noqa: E402
from streaming.envelope import encode_envelope  # noqa: E402
from streaming.topics import TOPICS  # noqa: E402


def publish_steadily(bootstrap: str, rate: int, seconds: float, sent) -> None:
    """A pool of simulated traffic, pre-encoded, published over and over at `rate` messages/s
    (in its own process, so that the driver's memory is the job's alone)."""
    sim = Simulator(seed=3, faults=Faults(corrupt=0.005), op_interval_ms=(100, 500))
    pool = [(TOPICS[m.protocol], m.key.encode(), encode_envelope(m.envelope)) for m in sim.messages(50_000)]
    # A second of linger: few, large record batches, as a busy real producer sends them.
    pub = ConfluentPublisher(KafkaSettings(bootstrap, {"linger.ms": "1000"}))
    start, i = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        due = int((time.monotonic() - start) * rate)
        while i < due:
            topic, key, value = pool[i % len(pool)]
            pub.send(topic, key, value, [])
            i += 1
        sent.value = i
        time.sleep(0.05)
    pub.close()


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def descendants(root: int) -> dict[int, str]:
    """pid -> command name of every process below root."""
    parent, name = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    stat = fh.read()
            except OSError:
                continue
            name[int(entry)] = stat[stat.index("(") + 1:stat.rindex(")")]
            parent[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        for child, ppid in parent.items():
            if ppid == pid and child not in found:
                found[child] = name[child]
                frontier.append(child)
    return found


def sample(publisher_pid: int) -> dict[str, float]:
    procs = descendants(os.getpid())
    procs.pop(publisher_pid, None)
    return {"driver": rss_mb(os.getpid()),
            "jvm": sum(rss_mb(p) for p, n in procs.items() if n == "java"),
            "python workers": sum(rss_mb(p) for p, n in procs.items() if n.startswith("python")),
            "workers": sum(1 for n in procs.values() if n.startswith("python"))}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--rate", type=int, default=800, help="messages per second published")
    args = parser.parse_args()
    from streaming.job import build_spark, source_options, start_query
    from streaming.sinks import open_sink
    workdir = Path(tempfile.mkdtemp(prefix="dirstream-soak-"))
    broker = EmbeddedBroker(workdir / "broker", port=19396)
    broker.start()
    sent = multiprocessing.Value("q", 0)
    publisher = multiprocessing.get_context("fork").Process(
        target=publish_steadily, args=(broker.bootstrap, args.rate, args.minutes * 60, sent), daemon=True)
    try:
        ensure_topics(KafkaSettings(broker.bootstrap), {t: 4 for t in TOPICS.values()})
        publisher.start()
        spark = build_spark("local[2]")
        url = f"sqlite:///{workdir}/soak.db"
        query = start_query(spark, sink_url=url, checkpoint=str(workdir / "ckpt"), trigger="2s",
                            source_opts=source_options(broker.bootstrap), echo=lambda _l: None)
        samples, started = [], time.monotonic()
        print(f"publishing {args.rate:,} msg/s for {args.minutes} min; resident memory in MB once a minute")
        while publisher.is_alive():
            publisher.join(60)
            if not query.isActive:
                print(f"the job stopped: {query.exception()}")
                return 1
            s = sample(publisher.pid)
            samples.append(s)
            sink = open_sink(url)
            rows = sink.query("SELECT COALESCE(SUM(input_rows), 0) AS n, COUNT(*) AS b, "
                                        "(SELECT total_lag FROM pipeline_progress ORDER BY batch_id DESC LIMIT 1) "
                                        "AS lag FROM pipeline_progress")[0]
            sink.close()
            print(f"  {(time.monotonic() - started) / 60:5.1f} min: published {sent.value:,}, job {int(rows['n']):,} "
                  f"in {rows['b']} batches (lag {rows['lag']:,}); driver {s['driver']:.0f}, JVM {s['jvm']:.0f}, "
                  f"{s['workers']} Python workers {s['python workers']:.0f}; "
                  f"embedded broker {rss_mb(broker.status().pid or 0):.0f}", flush=True)
        query.stop()
        spark.stop()
        half = samples[len(samples) // 2:]
        for part in ("driver", "jvm", "python workers"):
            print(f"{part}: {samples[0][part]:.0f} MB at the first minute, {half[0][part]:.0f} at half time, "
                  f"{samples[-1][part]:.0f} at the end (second half {half[-1][part] - half[0][part]:+.0f} MB)")
    finally:
        if publisher.is_alive():
            publisher.terminate()
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
