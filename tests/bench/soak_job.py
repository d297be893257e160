"""The whole job over a long run (prints figures; not a timed test).

Starts a fresh embedded Apache Kafka broker, publishes the simulator's traffic at a steady rate with
`dirstream produce simulate --rate R --duration S` (a process of its own), and runs the whole job,
`dirstream run` with all four queries and its normal 2 s trigger, as a user does. Once a minute it
samples CPU (share of one core over the minute) and resident memory of the broker and of the job
(driver, JVM and Python workers together, and each part), and what was published, read and lagged.
Memory "stays flat" when the second half of the run grows by no more than noise.

Run: make soak   (or .venv/bin/python tests/bench/soak_job.py --minutes 60 --rate 2000)
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from infra.broker import EmbeddedBroker  # noqa: E402
from producers.kafka import KafkaSettings, ensure_topics  # noqa: E402
from streaming.wire.topics import TOPICS  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
DIRSTREAM = str(Path(sys.executable).parent / "dirstream")


def proc_stat(pid: int) -> tuple[str, int, float, float] | None:
    """(name, parent pid, CPU seconds, resident MB) of a process, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
        with open(f"/proc/{pid}/statm") as fh:
            resident_pages = int(fh.read().split()[1])
    except OSError:
        return None
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICKS
    return name, int(fields[1]), cpu, resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def tree(root: int) -> dict[int, tuple[str, float, float]]:
    """pid -> (name, CPU seconds, resident MB) of root and every process below it."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            s = proc_stat(int(entry))
            if s is not None:
                stats[int(entry)] = s
    found, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        if pid in stats and pid not in found:
            name, _ppid, cpu, rss = stats[pid]
            found[pid] = (name, cpu, rss)
            frontier.extend(child for child, s in stats.items() if s[1] == pid)
    return found


def job_parts(root: int) -> dict[str, tuple[float, float]]:
    """CPU seconds and resident MB of the job's driver, its JVM and its Python workers."""
    parts = {"driver": [0.0, 0.0], "jvm": [0.0, 0.0], "python workers": [0.0, 0.0]}
    for pid, (name, cpu, rss) in tree(root).items():
        part = "driver" if pid == root else "jvm" if name == "java" else "python workers"
        parts[part][0] += cpu
        parts[part][1] += rss
    return {k: (v[0], v[1]) for k, v in parts.items()}


def sink_figures(url: str) -> dict:
    from streaming.sinks import open_sink
    try:
        sink = open_sink(url)
    except Exception:
        return {"rows": 0, "lag": None}
    try:
        row = sink.query("SELECT COALESCE(SUM(input_rows), 0) AS n, "
                         "(SELECT total_lag FROM pipeline_progress WHERE query_name = 'dirstream' ORDER BY finished_at DESC LIMIT 1) AS lag "
                         "FROM pipeline_progress WHERE query_name = 'dirstream'")[0]
        return {"rows": int(row["n"]), "lag": row["lag"]}
    except Exception:
        return {"rows": 0, "lag": None}
    finally:
        sink.close()


def published_so_far(log: Path) -> str:
    """The producer's last progress line ("sent N messages (...) at R msg/s")."""
    try:
        text = log.read_text().replace("\r", "\n").strip().splitlines()
        return text[-1].removeprefix("sent ") if text else "0"
    except OSError:
        return "0"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--rate", type=int, default=2000, help="messages per second published")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="dirstream-soak-"))
    broker = EmbeddedBroker(workdir / "broker", port=19396)
    broker.start()
    url = f"sqlite:///{workdir}/soak.db"
    producer_log, job_log = workdir / "producer.log", workdir / "job.log"
    producer = job = None
    try:
        ensure_topics(KafkaSettings(broker.bootstrap), {t: 4 for t in TOPICS.values()})
        job = subprocess.Popen([DIRSTREAM, "run", "--bootstrap", broker.bootstrap, "--sink", url, "--checkpoint",
                                str(workdir / "ckpt"), "--pec-name", "pec0", "--trigger", "2s"],
                               stdout=open(job_log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
        producer = subprocess.Popen([DIRSTREAM, "produce", "simulate", "--bootstrap", broker.bootstrap, "--seed", "7",
                                     "--rate", str(args.rate), "--duration", str(args.minutes * 60),
                                     "--op-interval-ms", "100-500"],
                                    stdout=subprocess.PIPE, stderr=open(producer_log, "w"), text=True)
        print(f"whole job, {args.rate:,} msg/s for {args.minutes:g} min on Apache Kafka; once a minute: CPU "
              f"(% of one core over the minute) and resident memory (MB)", flush=True)
        samples, started = [], time.monotonic()
        last_cpu = {"broker": proc_stat(broker.status().pid)[2], "job": cpu_of_tree(job.pid),
                    "producer": cpu_of_tree(producer.pid), "at": time.monotonic()}
        while producer.poll() is None:
            try:
                producer.wait(60)
                break                                   # the run is over: no partial minute
            except subprocess.TimeoutExpired:
                pass
            if job.poll() is not None:
                print(f"the job stopped (exit {job.returncode}); see {job_log}")
                args.keep = True
                return 1
            samples.append(take_sample(broker, job.pid, producer.pid, url, producer_log, last_cpu, started))
            print(describe(samples[-1]), flush=True)
        out, _ = producer.communicate()
        print(f"producer: {out.strip()}")
        summarize(samples)
    finally:
        for proc in (producer, job):
            if proc is not None and proc.poll() is None:
                if proc is job:
                    os.killpg(proc.pid, signal.SIGTERM)
                else:
                    proc.terminate()
                try:
                    proc.wait(120)
                except subprocess.TimeoutExpired:
                    proc.kill()
        broker.stop()
        if args.keep:
            print(f"working directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


def cpu_of_tree(root: int) -> float:
    return sum(cpu for _name, cpu, _rss in tree(root).values())


def take_sample(broker, job_pid: int, producer_pid: int, url: str, producer_log: Path, last_cpu: dict,
                started: float) -> dict:
    """CPU over the interval since the last sample (live processes; a worker that exited takes its
    CPU seconds with it), resident memory now."""
    now = time.monotonic()
    interval = now - last_cpu["at"]
    _name, _ppid, broker_cpu, broker_rss = proc_stat(broker.status().pid)
    parts = job_parts(job_pid)
    job_cpu, producer_cpu = sum(cpu for cpu, _rss in parts.values()), cpu_of_tree(producer_pid)
    sample = {"minute": (now - started) / 60, "published": published_so_far(producer_log), **sink_figures(url),
              "broker_cpu": 100 * (broker_cpu - last_cpu["broker"]) / interval, "broker_rss": broker_rss,
              "job_cpu": 100 * max(job_cpu - last_cpu["job"], 0) / interval,
              "producer_cpu": 100 * max(producer_cpu - last_cpu["producer"], 0) / interval,
              "job_rss": sum(rss for _cpu, rss in parts.values()),
              **{f"{k}_rss": rss for k, (_cpu, rss) in parts.items()}}
    last_cpu.update(broker=broker_cpu, job=job_cpu, producer=producer_cpu, at=now)
    return sample


def describe(s: dict) -> str:
    return (f"  {s['minute']:5.1f} min: published {s['published']}; job read {s['rows']:,} (lag {s['lag']}); "
            f"CPU broker {s['broker_cpu']:3.0f}% job {s['job_cpu']:3.0f}% producer {s['producer_cpu']:3.0f}%; "
            f"RSS broker {s['broker_rss']:4.0f} job {s['job_rss']:4.0f} (driver {s['driver_rss']:.0f}, "
            f"JVM {s['jvm_rss']:.0f}, Python workers {s['python workers_rss']:.0f})")


def summarize(samples: list[dict]) -> None:
    if len(samples) < 4:
        print("too short a run to judge the second half")
        return
    half = samples[len(samples) // 2:]
    for key, label in (("broker_rss", "broker"), ("job_rss", "job"), ("driver_rss", "driver"), ("jvm_rss", "JVM"),
                       ("python workers_rss", "Python workers")):
        print(f"{label} resident MB: {samples[0][key]:.0f} at the first minute, {half[0][key]:.0f} at half time, "
              f"{samples[-1][key]:.0f} at the end (second half {half[-1][key] - half[0][key]:+.0f} MB, "
              f"range {min(s[key] for s in half):.0f}..{max(s[key] for s in half):.0f})")
    for key, label in (("broker_cpu", "broker"), ("job_cpu", "job"), ("producer_cpu", "producer")):
        values = [s[key] for s in half]
        print(f"{label} CPU in the second half: {min(values):.0f}..{max(values):.0f} % of one core "
              f"(mean {sum(values) / len(values):.0f} %)")
    print(json.dumps({"lag_second_half": [s["lag"] for s in half]}))


if __name__ == "__main__":
    sys.exit(main())
