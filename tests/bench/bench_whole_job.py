"""The whole job's speed, side by side with a plain Spark pipeline on the same data.

For each mix (the default; replication-heavy, about 7 changes per change propagation) it publishes
the simulator's own traffic (not a pool repeated: the operators do real work) to a fresh embedded
broker, then measures in one run on the same topics:
  1. raw confluent-kafka consume;
  2. the decode-only ceiling (envelope + body, every core, no Kafka, no Spark);
  3. a plain Spark pipeline: the job's Kafka source and sink, a trivial transformWithStateInPandas
     processor (a count per key, keyed as the operators are): Spark's stateful machinery alone;
  4. the raw query alone (`dirstream run --once --topics ...`);
  5. the whole job (`dirstream run --once`): overall (with start-up) and steady (first batch start to
     last batch end), each query's share of the time;
and prints 5/3, 5/2, the directory changes per second through the replication operator, the objects
in its state, and the peak resident memory of the job's process tree (PSS: a page shared by several
processes counted once). Spark's own Kafka connector
(`format("kafka")`) is tried from Maven Central; when it is not served, the benchmark says so.

Run: make bench   (or .venv/bin/python tests/bench/bench_whole_job.py --messages 300000)
Figures, not a timed test; the targets are printed beside them.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))                 # job_runs: the tables, row for row

from bench_job import raw_consume_rate  # noqa: E402

from infra.broker import EmbeddedBroker  # noqa: E402
from producers.kafka import ConfluentPublisher, KafkaSettings, ensure_topics  # noqa: E402
from producers.publish import publish_envelope  # noqa: E402
from producers.simulator import Faults, Simulator  # noqa: E402
from streaming import BUILD_ENV  # noqa: E402
from streaming.wire.topics import TOPICS  # noqa: E402
from streaming.spark.operator_counts import COUNTS_ENV, SINK_WRITER, read_counts, task_balance  # noqa: E402

# slow-clock: about 7 times the wall clock at 2,000 msg/s, so that the queue managers' batching windows
# hold minutes of traffic and fire at the end (the tail), as a live job's do
MIXES = {"default": (20, 120), "replication-heavy": (100, 500), "slow-clock": (1, 1)}
DEFAULT_MIXES = ("default", "replication-heavy")
# The whole job against the plain pipeline and the raw query, the replication operator's
# changes per second, memory
TARGETS = {"job_vs_plain": 0.5, "job_vs_raw_query": 0.25, "changes": 20_000, "raw_vs_ceiling": 0.6,
           "peak_rss_gib": 6.0}
EXE = str(Path(sys.executable).parent / "dirstream")


def publish(bootstrap: str, n: int, op_interval_ms: tuple[int, int], partitions: int = 4) -> dict:
    """N messages of one simulated history, published once each; counts per protocol and the
    directory changes the change propagations carry."""
    from streaming.wire import decode
    ensure_topics(KafkaSettings(bootstrap), {t: partitions for t in TOPICS.values()})
    pub = ConfluentPublisher(KafkaSettings(bootstrap))
    counts = {p: 0 for p in TOPICS}
    changes = 0
    values = {p: [] for p in TOPICS}
    for m in Simulator(seed=5, faults=Faults(corrupt=0.002), op_interval_ms=op_interval_ms).messages(n):
        publish_envelope(pub, m.protocol, m.key, m.envelope)
        counts[m.protocol] += 1
        if m.kind == "ChangePropagation":
            changes += len(decode("mqdsrp", m.envelope["body"]).change_propagation.directory_changes)
        if len(values[m.protocol]) < 20_000:
            values[m.protocol].append(m.envelope)
    pub.close()
    return {"counts": counts, "changes": changes, "sample": values}


def decode_ceiling(sample: dict, counts: dict) -> float:
    """Messages per second that decoding alone allows for this mix on every core."""
    from streaming.spark.decode import Decoder
    from streaming.wire.envelope import encode_envelope
    decoder, seconds = Decoder(), 0.0
    total = sum(counts.values())
    for protocol, envelopes in sample.items():
        if not envelopes:
            continue
        values = [encode_envelope(e) for e in envelopes]
        start = time.perf_counter()
        for i, v in enumerate(values):
            decoder.row(TOPICS[protocol], 0, i, None, b"k", v)
        seconds += (time.perf_counter() - start) / len(values) * counts[protocol]
    return (os.cpu_count() or 1) * total / seconds


class TreeMemory(threading.Thread):
    """Peak memory (PSS) of a process and its descendants (the JVM, the Python workers), and the
    CPU seconds each kind of process used (the last figure seen for each process, every 0.5 s)."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0, False
        self.cpu: dict[int, tuple[str, float]] = {}         # pid -> (kind, CPU seconds)
        self.peak_by_kind: dict[str, int] = {}              # the largest sum seen per kind of process

    def run(self) -> None:
        while not self.done:
            rss, cpu = _tree_stats(self.pid, {pid: kind for pid, (kind, _) in self.cpu.items()})
            self.peak = max(self.peak, sum(rss.values()))
            for kind, total in _sum_by_kind(rss, cpu).items():
                self.peak_by_kind[kind] = max(self.peak_by_kind.get(kind, 0), total)
            self.cpu.update(cpu)
            time.sleep(0.5)

    def processes_of(self, kind: str) -> int:
        """The processes of that kind seen over the run (every 0.5 s: a worker started and gone
        between two looks is missed)."""
        return sum(1 for k, _ in self.cpu.values() if k == kind)

    def cpu_by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for kind, seconds in self.cpu.values():
            out[kind] = out.get(kind, 0.0) + seconds
        return out


def proportional_memory(pid: int) -> int | None:
    """The process's proportional set size (PSS): its resident pages, each shared page divided among
    the processes sharing it. Summed over the tree it counts every page once; resident sizes do not:
    forked Python workers share their daemon's pages, and a JVM forking a worker shows, for a moment,
    a child as big as itself (13.8 GB of "resident" memory in a run whose tree used 9 GB)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _sum_by_kind(rss: dict[int, int], kinds: dict[int, tuple[str, float]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for pid, resident in rss.items():
        kind = kinds[pid][0]
        out[kind] = out.get(kind, 0) + resident
    return out


def _kind(pid: int, root: int) -> str:
    if pid == root:
        return "driver (Python)"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "java" in cmd.split(" ", 1)[0]:
        return "JVM"
    if "spark-submit" in cmd or "spark-class" in cmd:
        return "other"                  # the launcher script, about to exec the JVM
    return "Python workers" if "python" in cmd else "other"


def _tree_stats(root: int, kinds: dict[int, str]) -> tuple[dict[int, int], dict[int, tuple[str, float]]]:
    """Resident memory of each process of the tree, and (kind, CPU seconds) per process; a process keeps the kind
    it was given when its command line can no longer tell (a process that exits between the two reads
    would otherwise turn into "other" with all its CPU)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
            cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            continue
    resident, todo, seen = {}, [root], {}
    while todo:
        pid = todo.pop()
        resident[pid] = proportional_memory(pid) or rss.get(pid, 0)
        kind = _kind(pid, root)
        # a process keeps its kind once known, but the launcher script the JVM execs from (its path names
        # pyspark's python folder) is not known yet: read again until it is the JVM
        seen[pid] = (kinds.get(pid) if kind == "other" and kinds.get(pid) else kind, cpu.get(pid, 0.0))
        todo += children.get(pid, [])
    return resident, seen


def run_job(bootstrap: str, workdir: Path, name: str, *extra, profile: Path | None = None,
            code: Path | None = None, build: str | None = None) -> dict:
    """`dirstream run --once` into a fresh sink; wall time, peak memory, the machine's CPU seconds
    while it ran, per-query figures. profile: where py-spy's samples of the driver and every Python
    worker go (raw format), then summarised. code: run the project's code from that folder (another
    revision's checkout) instead of this one. build: DIRSTREAM_BUILD for the job (python: the sources
    even where the compiled build is)."""
    sink = f"sqlite:///{workdir}/{name}.db"
    counts = workdir / f"counts-{name}"     # what the operators did (streaming/spark/operator_counts.py)
    shutil.rmtree(counts, ignore_errors=True)
    counts.mkdir()
    env = {**os.environ, COUNTS_ENV: str(counts), **({"PYTHONPATH": str(code)} if code else {}),
           **({BUILD_ENV: build} if build else {})}
    events = workdir / f"events-{name}"     # Spark's event log: the stage timeline (stage_timeline)
    shutil.rmtree(events, ignore_errors=True)
    events.mkdir()
    extra = (*extra, *(a for conf in (f"spark.eventLog.dir=file://{events}", "spark.eventLog.enabled=true",
                                      "spark.eventLog.compress=false") for a in ("--spark-conf", conf)))
    started, cpu_before = time.perf_counter(), _busy_cpu_s()
    spy = ([shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"), "record", "--subprocesses",
            "--nonblocking", "--rate", "50", "--format", "raw", "--output", str(profile), "--"] if profile else [])
    proc = subprocess.Popen([*spy, EXE, "run", "--once", "--bootstrap", bootstrap, "--sink", sink, "--checkpoint",
                             str(workdir / f"ckpt-{name}"), "--master", "local[2]", "--pec-name", "pec0",
                             "--log-format", "plain", "--log-file", str(workdir / f"{name}.log"), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            # Spark's Python workers run `python -m pyspark.daemon` in the job's working
                            # directory, which comes first on their path: the revision's own checkout
                            cwd=str(code or ROOT))
    memory = TreeMemory(proc.pid)
    memory.start()
    out, _ = proc.communicate()
    memory.done = True
    wall, cpu = time.perf_counter() - started, _busy_cpu_s() - cpu_before
    if proc.returncode != 0:
        raise RuntimeError(f"dirstream run {name} failed:\n{out[-3000:]}")
    from streaming.sinks import open_sink
    s = open_sink(sink)
    try:
        per_query = s.query("SELECT query_name, COUNT(*) AS batches, SUM(input_rows) AS rows_in, "
                            "SUM(duration_ms) AS busy_ms, MIN(started_at) AS first, MAX(finished_at) AS last "
                            "FROM pipeline_progress GROUP BY query_name")
        objects = s.query("SELECT COUNT(*) AS n FROM directory_objects")[0]["n"] if name == "job" else 0
        windows = s.query("SELECT COUNT(*) AS n, MAX(count) AS largest, SUM(count) AS notifications "
                          "FROM notification_batches")[0] if name == "job" else {}
        tables = {t["name"]: s.query(f'SELECT COUNT(*) AS n FROM "{t["name"]}"')[0]["n"] for t in
                  s.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")}
    finally:
        s.close()
    first = min(_seconds(q["first"]) for q in per_query)
    last = max(_seconds(q["last"]) for q in per_query)
    if profile:
        print_profile(profile)
    return {"wall_s": wall, "steady_s": last - first, "queries": per_query, "peak_rss": memory.peak,
            "peak_by_kind": memory.peak_by_kind, "objects": objects, "cpu_s": cpu, "cpu_by_kind": memory.cpu_by_kind(),
            "workers": memory.processes_of("Python workers"), "sink_rows": tables, "windows": windows,
            "operators": read_counts(str(counts)), "shuffle_partitions": _shuffle_partitions(extra),
            "timeline": stage_timeline(events)}


STAGES = ("offsets", "planning", "reading", "first operator", "second operator", "driver after", "commit")


def stage_timeline(events: Path) -> list[dict]:
    """Each micro-batch's wall time by step, in seconds, from Spark's event log: the source's offsets
    and the planning (the driver), the reading tasks, the first and the second operator's tasks
    (each stage from its first task's start to its last task's end, the stages one after the other),
    what the driver did after the last stage within the batch (collecting; the sink write, or with the
    write behind the spool), and the commit of the offsets (walCommit and commitOffsets)."""
    stages, jobs, progress = {}, {}, {}
    for log in sorted(events.rglob("*")):
        if not log.is_file() or log.name.startswith((".", "appstatus")):
            continue
        for text in log.open():
            e = json.loads(text)
            kind = e["Event"]
            if kind == "SparkListenerJobStart" and e.get("Properties", {}).get("streaming.sql.batchId") is not None:
                batch = int(e["Properties"]["streaming.sql.batchId"])
                jobs.setdefault(batch, []).extend((s["Stage ID"], s["Parent IDs"]) for s in e["Stage Infos"])
            elif kind == "SparkListenerStageCompleted":
                info = e["Stage Info"]
                if info.get("Submission Time") and info.get("Completion Time"):
                    stages[info["Stage ID"]] = (info["Submission Time"], info["Completion Time"])
            elif kind.endswith("QueryProgressEvent"):
                progress[int(e["progress"]["batchId"])] = e["progress"]["durationMs"]
    timeline = []
    for batch, durations in sorted(progress.items()):
        depth = {}
        for sid, parents in sorted(jobs.get(batch, [])):    # after its parents: reading 0, the operators 1 and 2
            depth[sid] = 1 + max((depth.get(p, -1) for p in parents), default=-1)
        depth = {sid: d for sid, d in depth.items() if sid in stages}      # a stage with nothing to do: skipped
        step = {"reading": 0.0, "first operator": 0.0, "second operator": 0.0}
        for sid, d in depth.items():
            name = ("reading", "first operator", "second operator")[min(d, 2)]
            step[name] += (stages[sid][1] - stages[sid][0]) / 1000
        span = (max(stages[s][1] for s in depth) - min(stages[s][0] for s in depth)) / 1000 if depth else 0.0
        timeline.append({"batch": batch, "total": durations.get("triggerExecution", 0) / 1000,
                         "offsets": durations.get("latestOffset", 0) / 1000,
                         "planning": durations.get("queryPlanning", 0) / 1000, **step,
                         "driver after": max(durations.get("addBatch", 0) / 1000 - span, 0.0),
                         "commit": (durations.get("walCommit", 0) + durations.get("commitOffsets", 0)) / 1000})
    return timeline


def print_timeline(label: str, timeline: list[dict]) -> None:
    """The stage timeline: each batch's (the first, the job's start-up, apart), or with many batches
    their mean and the longest; and the driver's share of the wall time (its steps alone)."""
    if not timeline:
        return
    steady = timeline[1:] or timeline

    def line(t: dict) -> str:
        return ", ".join(f"{s} {t[s]:.2f}" for s in STAGES) + f"; in all {t['total']:.2f}"
    print(f"{label}, the stage timeline (s): batch 0 (start-up): {line(timeline[0])}")
    shown = steady if len(steady) <= 8 else [max(steady, key=lambda t: t["total"])]
    if len(steady) > 8:
        mean = {s: sum(t[s] for t in steady) / len(steady) for s in (*STAGES, "total")}
        print(f"{label}, the stage timeline (s), mean of batches 1-{steady[-1]['batch']}: {line(mean)}")
    for t in shown:
        print(f"{label}, the stage timeline (s): batch {t['batch']}{' (the longest)' if len(steady) > 8 else ''}: "
              f"{line(t)}")
    driver = sum(t[s] for t in steady for s in ("offsets", "planning", "driver after", "commit"))
    print(f"{label}, the driver alone (offsets, planning, after the stages, commit): "
          f"{100 * driver / max(sum(t['total'] for t in steady), 1e-9):.0f} % of the batches' wall time after batch 0")


def _shuffle_partitions(job_args) -> int:
    """The stateful operators' tasks per micro-batch: a --spark-conf's, else the job's default on local[2]."""
    from streaming.spark.pipeline import default_shuffle_partitions
    for arg in job_args:
        if str(arg).startswith("spark.sql.shuffle.partitions="):
            return int(str(arg).split("=", 1)[1])
    return default_shuffle_partitions("local[2]")


def where_it_goes(job: dict, total: int, label: str = "whole job") -> None:
    """Per 100,000 messages: the CPU seconds of each kind of process, the Python worker processes
    seen over the run, and the rows the sink took, per table."""
    per = 100_000 / total
    print(f"{label}, per 100,000 messages: {sum(job['cpu_by_kind'].values()) * per:.0f} CPU s in the job's "
          "processes (" + ", ".join(f"{k} {v * per:.1f}" for k, v in sorted(job["cpu_by_kind"].items()))
          + f"; the whole machine {job['cpu_s'] * per:.0f}), {job['workers']} Python worker processes in the run; "
          "sink rows: "
          + ", ".join(f"{t} {n * per:,.0f}" for t, n in sorted(job["sink_rows"].items()) if n))
    if not job["operators"]:
        print(f"{label}: no operator counts (a revision without streaming/spark/operator_counts.py)")
    writes = job["operators"].get(SINK_WRITER)
    if writes:
        print(f"{label}, the sink's rows written per row kept (a row's valid_to set by a later batch counts "
              "again): " + ", ".join(
            f"{t} {writes.get(f'upserts {t}', 0):,}/{n:,} = {writes.get(f'upserts {t}', 0) / n:.2f}"
            for t, n in sorted(job["sink_rows"].items()) if n and writes.get(f"upserts {t}")))
    if writes and "sink write ms" in writes:
        waited = writes.get("driver after collect ms", 0) / 1000
        print(f"{label}, the driver: sink writes {writes['sink write ms'] / 1000:.1f} s; the query waited "
              f"{waited:.1f} s after collecting its micro-batches (inline, the writes; behind, the spool and the "
              f"write in flight): {100 * waited / job['steady_s']:.0f} % of the steady time")
    print_timeline(label, job["timeline"])
    for operator, c in sorted(job["operators"].items()):
        if operator == SINK_WRITER:
            continue
        calls = c["calls"]
        print(f"{label}, {operator}, per 100,000 messages: {sum(calls.values()) * per:,.0f} state-server round "
              f"trips (" + ", ".join(f"{k} {n * per:,.0f}" for k, n in calls.most_common())
              + f"; {c.get('bytes to the state server', 0) * per / 2**20:,.1f} MiB sent, "
              f"{c.get('bytes to the state server', 0) / max(c.get('keys', 0) + c.get('timers fired', 0), 1):,.0f} "
              "bytes per call of a key or timer); "
              + ", ".join(f"{figure} {c.get(figure, 0) * per:,.0f}" for figure in
                          ("keys", "timers fired", "rows in", "rows out", "frames out")) + f"; {c['tasks']} tasks")
        balance = task_balance(c["task_rows"], job["shuffle_partitions"])
        if balance is not None:
            print(f"{label}, {operator}, rows per task: the largest task of a micro-batch has "
                  f"{balance['largest_to_mean']:.2f} times its tasks' mean (weighted by rows; the worst, batch "
                  f"{balance['worst_batch']}: {balance['worst_ratio']:.2f}, rows "
                  + " / ".join(f"{n:,}" for n in balance["worst_rows"]) + ")")


def print_windows(job: dict) -> None:
    """The queue managers' batching windows that fired (MQCN note <3>): a window's notifications are
    processed when it fires, in the micro-batch whose watermark passes its end."""
    w = job.get("windows") or {}
    if w.get("n"):
        print(f"whole job, the batching windows: {w['n']} fired with {w['notifications']:,} notifications, "
              f"the largest {w['largest']:,}")


def peaks_text(job: dict) -> str:
    return ", ".join(f"{kind} {rss / 2**20:,.0f}" for kind, rss in sorted(job["peak_by_kind"].items()))


def _busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy (all but idle and iowait), from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def delete_job_topics(bootstrap: str) -> None:
    """The topics a run of the job writes (outbound messages; and an earlier revision's directory
    versions and progress, for --baseline), gone."""
    from confluent_kafka.admin import AdminClient
    from streaming.wire.topics import OUTBOUND_TOPIC
    admin = AdminClient({"bootstrap.servers": bootstrap})
    doomed = [t for t in ("msmq.dsrp.objects", "msmq.dsrp.progress", OUTBOUND_TOPIC)
              if t in admin.list_topics(timeout=10).topics]
    for future in (admin.delete_topics(doomed) if doomed else {}).values():
        future.result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and set(doomed) & set(admin.list_topics(timeout=10).topics):
        time.sleep(0.2)


def compare_runs(bootstrap: str, workdir: Path, total: int, baseline: Path, runs: int, *extra) -> None:
    """The whole job alternately on a baseline checkout and on this code, on the same published data:
    steady rate, wall and CPU seconds per run, and the ratio of the medians."""
    alternate(bootstrap, workdir, total, runs, [("baseline", baseline, None), ("current", None, None)], *extra)


def compare_builds(bootstrap: str, workdir: Path, total: int, runs: int, *extra) -> None:
    """The whole job alternately on the pure-Python sources and on the compiled build, on the same
    published data: as compare_runs, the Python workers' CPU seconds apart, and every table row for
    row (the last run of each)."""
    results = alternate(bootstrap, workdir, total, runs, [("python", None, "python"), ("mypyc", None, "mypyc")],
                        *extra)
    cpu = {b: sorted(j["cpu_by_kind"].get("Python workers", 0.0) for j in jobs) for b, jobs in results.items()}
    median = {b: v[len(v) // 2] for b, v in cpu.items()}
    print(f"Python workers' CPU seconds per {total:,} messages, medians of {runs}: pure Python {median['python']:.0f}, "
          f"mypyc {median['mypyc']:.0f}: {median['mypyc'] / median['python']:.2f} of the pure-Python build's")
    from job_runs import differences, dump
    tables = {b: dump(f"sqlite:///{workdir}/job-{b}-{runs - 1}.db") for b in results}
    wrong = differences(tables["python"], tables["mypyc"])
    print("tables row for row, mypyc against pure Python: "
          + ("the same (" + ", ".join(f"{t} {len(r):,}" for t, r in tables["mypyc"].items() if r) + " rows)"
             if not wrong else "DIFFERENT: " + "; ".join(wrong)))


def alternate(bootstrap: str, workdir: Path, total: int, runs: int, variants: list, *extra) -> dict[str, list[dict]]:
    """The whole job `runs` times per variant (label, code checkout, build), alternating; prints each
    run and the ratio of the medians, last variant against the first."""
    import statistics
    results: dict[str, list[dict]] = {label: [] for label, _code, _build in variants}
    for i in range(runs):
        for label, code, build in variants:
            delete_job_topics(bootstrap)    # or a four-query baseline reads the last run's versions too
            job = run_job(bootstrap, workdir, f"job-{label}-{i}", *extra, code=code, build=build)
            results[label].append(job)
            print(f"   run {i + 1} {label:<8} {total / job['steady_s']:>7,.0f} msg/s steady ({job['steady_s']:.1f} s), "
                  f"wall {job['wall_s']:.1f} s, {job['cpu_s']:.0f} CPU s ("
                  + ", ".join(f"{k} {v:.0f}" for k, v in sorted(job["cpu_by_kind"].items()))
                  + f"), peak {job['peak_rss'] / 2**20:,.0f} MiB ({peaks_text(job)})",
                  flush=True)
    med = {k: (statistics.median(j["steady_s"] for j in v), statistics.median(j["cpu_s"] for j in v))
           for k, v in results.items()}
    for label, jobs in results.items():
        where_it_goes(jobs[-1], total, f"{label} (last run)")
    first, last = variants[0][0], variants[-1][0]
    print(f"{last} / {first}, medians of {runs}: steady rate {med[first][0] / med[last][0]:.2f}x"
          f", CPU seconds {med[last][1] / med[first][1]:.2f} of the {first}'s")
    return results


def print_profile(raw: Path, top: int = 12) -> None:
    """Self time (the innermost Python frame) of the driver and of the Python workers, from py-spy's raw
    samples ("process ...;frame;frame count" lines)."""
    if not raw.exists():
        print(f"profile: {raw} was not written (is py-spy installed? pip install py-spy)")
        return
    roles: dict[str, dict[str, int]] = {}
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not count.isdigit() or len(frames) < 2:
            continue
        process = [f for f in frames if f.startswith("process ")][-1]     # the innermost process
        role = ("python workers (source reads, operators)" if "pyspark.daemon" in process else
                "driver" if "dirstream run" in process else "other Spark Python processes")
        leaf = frames[-1]
        roles.setdefault(role, {}).setdefault(leaf, 0)
        roles[role][leaf] += int(count)
    for role, leaves in sorted(roles.items()):
        total = sum(leaves.values())
        print(f"profile, {role} ({total:,} samples at 50 Hz), self time:")
        for leaf, n in sorted(leaves.items(), key=lambda kv: -kv[1])[:top]:
            print(f"  {100 * n / total:5.1f} %  {leaf}")


def _seconds(value) -> float:
    from datetime import datetime
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.timestamp()


def plain_pipeline(bootstrap: str, workdir: Path) -> dict:
    """The job's source, keying and sink around a processor that only counts rows per key."""
    code = f"""
import json, sys, time
sys.path.insert(0, {str(ROOT)!r})
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor
from streaming.spark.kafka_source import decoded_stream
from streaming.spark.pipeline import build_spark, source_options
from streaming.sinks import open_sink

class CountProcessor(StatefulProcessor):
    def init(self, handle):
        self.count = handle.getValueState("count", "n long")
    def handleInputRows(self, key, rows, timerValues):
        n = (self.count.get() or (0,))[0]
        for pdf in rows:
            n += len(pdf)
        self.count.update((n,))
        import pandas as pd
        yield pd.DataFrame({{"key": [key[0]], "n": [n]}})

def collect(df, batch_id):
    df.toArrow()                                  # to the driver, as the job's writer takes its rows

spark = build_spark("local[2]")
url = "sqlite:///{workdir}/plain.db"
open_sink(url).close()
frame = (decoded_stream(spark, source_options({bootstrap!r}, max_records=200_000), "envelope").filter("ok")
         .withWatermark("arrival_time", "10 seconds").select("state_key", "arrival_time")
         .groupBy("state_key").transformWithStateInPandas(CountProcessor(), "key string, n bigint", "Append", "EventTime"))
started = time.perf_counter()
query = (frame.writeStream.queryName("plain").option("checkpointLocation", "{workdir}/ckpt-plain")
         .foreachBatch(collect).trigger(availableNow=True).start())
query.awaitTermination()
print(json.dumps({{"seconds": time.perf_counter() - started,
                   "rows": sum(p["numInputRows"] for p in query.recentProgress)}}))
spark.stop()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    if done.returncode != 0:
        raise RuntimeError(f"plain pipeline failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def spark_kafka_connector() -> str:
    """Whether Maven Central serves Spark's own Kafka connector for the installed Spark."""
    import pyspark
    artifact = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
    try:
        done = subprocess.run(["mvn", "-q", "dependency:get", f"-Dartifact={artifact}"], capture_output=True,
                              text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{artifact}: could not ask Maven ({exc}); the format('kafka') pipeline is not run"
    if done.returncode != 0:
        return f"{artifact} is not served by Maven Central here: the format('kafka') pipeline is not run"
    return f"{artifact} resolves; the format('kafka') pipeline is not written yet"


def bench_mix(name: str, op_interval: tuple[int, int], messages: int, profile: Path | None = None,
              only_job: bool = False, baseline: Path | None = None, runs: int = 3, job_args: tuple = (),
              builds: bool = False) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix=f"dirstream-bench-{name}-"))
    broker = EmbeddedBroker(workdir / "broker", port=19398)
    broker.start()
    try:
        t = time.perf_counter()
        pub = publish(broker.bootstrap, messages, op_interval)
        total = sum(pub["counts"].values())
        print(f"\n== mix {name} (ms between directory operations {op_interval}): {total:,} messages "
              f"{pub['counts']}, {pub['changes']:,} directory changes, published in {time.perf_counter() - t:.0f} s")
        if baseline:                    # before/after: the whole job alone, alternating
            compare_runs(broker.bootstrap, workdir, total, baseline, runs, *job_args)
            return {"mix": name}
        if builds:                      # the compiled build against the sources, alternating
            compare_builds(broker.bootstrap, workdir, total, runs, *job_args)
            return {"mix": name}
        if only_job:                    # for profiling: the whole job alone
            job = run_job(broker.bootstrap, workdir, "job", *job_args, profile=profile and profile / f"job-{name}.txt")
            print(f"whole job: {total / job['steady_s']:,.0f} msg/s steady ({job['steady_s']:.1f} s), "
                  f"peak resident memory (PSS) {job['peak_rss'] / 2**20:,.0f} MiB ({peaks_text(job)}); CPU seconds: "
                  + ", ".join(f"{k} {v:.0f}" for k, v in sorted(job["cpu_by_kind"].items())))
            where_it_goes(job, total)
            print_windows(job)
            for q in job["queries"]:
                print(f"   {q['query_name']:<24} {q['batches']:>4} batches {q['rows_in'] or 0:>10,} rows "
                      f"{(q['busy_ms'] or 0) / 1000:>7.1f} s busy")
            return {"mix": name, "job_steady": total / job["steady_s"]}
        raw = raw_consume_rate(broker.bootstrap, total)
        ceiling = decode_ceiling(pub["sample"], pub["counts"])
        plain = plain_pipeline(broker.bootstrap, workdir)
        raw_query = run_job(broker.bootstrap, workdir, "raw", "--topics", ",".join(TOPICS.values()))
        job = run_job(broker.bootstrap, workdir, "job", profile=profile and profile / f"job-{name}.txt")
        return report(name, total, pub["changes"], raw, ceiling, plain, raw_query, job, pub["counts"])
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def report(name, total, changes, raw, ceiling, plain, raw_query, job, counts: dict) -> dict:
    plain_rate = plain["rows"] / plain["seconds"]
    raw_steady = total / raw_query["steady_s"]
    job_steady, job_overall = total / job["steady_s"], total / job["wall_s"]
    print(f"1. raw confluent-kafka consume:      {raw:>10,.0f} msg/s")
    print(f"2. decode-only ceiling ({os.cpu_count()} cores):     {ceiling:>10,.0f} msg/s")
    print(f"3. plain Spark pipeline (count/key):  {plain_rate:>10,.0f} msg/s ({plain['rows']:,} rows, "
          f"{plain['seconds']:.1f} s after start-up)")
    print(f"4. raw query alone:                   {raw_steady:>10,.0f} msg/s steady, "
          f"{total / raw_query['wall_s']:,.0f} overall; {raw_steady / ceiling:.2f} of the ceiling "
          f"(target >= {TARGETS['raw_vs_ceiling']})")
    print(f"5. whole job:                         {job_steady:>10,.0f} msg/s steady ({job['steady_s']:.1f} s), "
          f"{job_overall:,.0f} overall ({job['wall_s']:.1f} s with start-up); CPU seconds "
          + ", ".join(f"{k} {v:.0f}" for k, v in sorted(job["cpu_by_kind"].items())))
    for q in sorted(job["queries"], key=lambda q: -(q["busy_ms"] or 0)):
        print(f"   {q['query_name']:<14} {q['batches']:>4} batches {q['rows_in'] or 0:>10,} rows "
              f"{(q['busy_ms'] or 0) / 1000:>7.1f} s busy = {(q['busy_ms'] or 0) / 10 / job['steady_s']:.0f} % "
              f"of the steady time")
    where_it_goes(job, total)
    # one query: the operators share its micro-batches, so the whole steady time bounds the
    # replication operator's busy time from above (its rate from below)
    change_rate = changes / job["steady_s"]
    print(f"ratios: 5/3 = {job_steady / plain_rate:.2f} (target >= {TARGETS['job_vs_plain']}), "
          f"5/4 = {job_steady / raw_steady:.2f} (target >= {TARGETS['job_vs_raw_query']}), "
          f"5/2 = {job_steady / ceiling:.2f}")
    print(f"replication operator: {changes:,} changes in the job's {job['steady_s']:.1f} s steady = at least "
          f"{change_rate:,.0f} changes/s of its busy time (target {TARGETS['changes']:,}), {job['objects']:,} "
          f"objects (rows of directory_objects) in its state")
    print(f"peak resident memory (PSS) of the job's processes: {job['peak_rss'] / 2**20:,.0f} MiB "
          f"(peak of each kind, MiB: {peaks_text(job)}; target <= {TARGETS['peak_rss_gib']} GiB at 300,000 messages; raw query alone: "
          f"{raw_query['peak_rss'] / 2**20:,.0f} MiB)")
    return {"mix": name, "job_steady": job_steady, "plain": plain_rate, "ceiling": ceiling}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=300_000, help="per mix (default 300,000)")
    parser.add_argument("--mix", choices=sorted(MIXES), action="append",
                        help="default: default and replication-heavy")
    parser.add_argument("--profile", type=Path, help="folder: run the whole job under py-spy (driver and "
                                                     "Python workers) and print the top lines")
    parser.add_argument("--only-job", action="store_true", help="measure the whole job alone (profiling)")
    parser.add_argument("--baseline", type=Path, help="a checkout of another revision (git worktree add DIR REV): "
                                                      "the whole job alternately on it and on this code")
    parser.add_argument("--builds", action="store_true", help="the whole job alternately on the pure-Python "
                                                              "sources and on the compiled build")
    parser.add_argument("--runs", type=int, default=3, help="with --baseline or --builds: runs of each (default 3)")
    parser.add_argument("--max-records", type=int, help="with --only-job, --baseline or --builds: the job's --max-records "
                                                        "(smaller micro-batches, as a live job makes them)")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="with --only-job, --baseline or --builds: passed to the job's --spark-conf (repeatable)")
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    if not (args.only_job or args.baseline or args.builds):
        print(spark_kafka_connector())
    for name in args.mix or DEFAULT_MIXES:
        job_args = (("--max-records", str(args.max_records)) if args.max_records else ()) + tuple(
            a for conf in args.spark_conf for a in ("--spark-conf", conf))
        bench_mix(name, MIXES[name], args.messages, args.profile, args.only_job, args.baseline, args.runs, job_args,
                  args.builds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
