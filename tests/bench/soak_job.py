"""The whole job over a long run at a steady rate, a broker restart, and a backlog caught up.

One run, on a fresh embedded Apache Kafka broker, producer, broker and job on the same machine:

1. **Steady** (`--minutes`, 60): `dirstream produce simulate --rate R --respond` publishes the simulator's
   traffic with every fault type on, its enterprise in real time (`--wall-clock`: event time is the
   wall clock; `--clock accelerated` runs it on simulated time, hours of it in minutes), and plays the
   object authorities (it answers the job's sync and
   change requests as the authorities hold their objects then), while the whole job runs (`dirstream
   run`, its one query, 2 s trigger, `--max-records`; on the wall clock `--flood-per-minute` scaled to the
   rate, see FLOOD_PER_MINUTE_PER_RATE). The broker is stopped and started again on
   its own log directories once (`--broker-restart-at`). With `--restarts N` the job is stopped and
   started again N times, evenly over the steady phase, each time signalled another way (SIGTERM to
   its process group, SIGINT to the driver alone, SIGTERM to the driver alone). With `--no-respond`
   the producer does not answer (the authorities answer only after the traffic, `produce respond`).
   Every event waits for the job's first committed micro-batch since it started (a slow machine runs
   the same scenario). With `--sink-outage-at`, the sink is a
   PostgreSQL server of the run's own, stopped for `--sink-outage-s` once the job has committed a
   micro-batch and started again: the job must wait for it (a console line) and go on.
2. **Catch-up** (`--stop-minutes`, 10): the job is stopped (Ctrl-C) with the traffic still running,
   started again from its checkpoint, and must be back within the lag bound within
   `--catch-up-minutes` (10), every micro-batch of every query within `--max-records`.
3. **Final**: the producer ends and `produce respond` answers what the job still asks (from the truth
   file); the job runs on until its topics have been quiet for `--quiet-s` (a replica that fell behind
   the authority's purge horizon is reset by sync0, in replies of at most 900,000 bytes, each asked
   for in turn), at most `--settle-minutes`; copies of the last notification move event time on past
   every MQCN wait (producers/clock.py: duplicates, discarded) and the job reads them too; the responder stops,
   the job reads its last answers and is stopped; then `dirstream verify`, and with `--compare` a
   fresh checkpoint's `--once` over the same Kafka content must give the same tables, row for row.

Printed as figures: the sync requests the authorities answered, how many AlreadyPurged, and the
sync0 resets completed.

Sampled every `--sample-s` seconds (60) and printed as a table: CPU (share of one core over the
interval) and resident memory of the broker, the producer and the job's driver, JVM and Python
workers, and the MB its operators sent to the state server (their state calls, counted in the
Python workers: streaming/spark/operator_counts.py); per query the records read, the records not read
yet and that lag in seconds of its topics'
traffic; the median and 99th percentile of the end-to-end latency of the markers committed since the
sample before (per minute with the default --sample-s; soak.json also has them per minute of
publication). The samples go to `soak.json` and a chart to `soak.png` in `--out`. The criteria, checked
and printed, exit 1 if one fails:

- every query's lag stays under `--max-lag-s` (30) seconds of traffic after the first
  `--warmup-minutes` (5) of the steady phase (the broker restart included);
- each process's resident memory grows by less than `--memory-growth` (10 %) from the middle to the
  end of the steady phase (the median of the peaks of the three samples nearest each point, as
  the catch-up's bound below uses peaks);
- the catch-up: within its limit, every micro-batch within `--max-records`, and the job's resident
  memory meanwhile at most `--catch-up-memory` (default `--memory-growth`) above its peak in the
  steady phase's second half;
- end-to-end latency after the warm-up: the 99th percentile of the time from a record's publication
  to the commit of the micro-batch that read it stays under `--max-latency-s` (10) seconds (sampled:
  every 3 s the latest record of each raw partition is a marker; committed when the sink shows a
  micro-batch past it, polled every 0.5 s: when a dashboard could first show its rows);
- no row dropped as late over the whole run (the operators' late_rows, restarts included);
- every MQCN record the job read is accounted for: a notifications row, a duplicate discarded or a
  dead letter (the three counts printed), but the last copy that moved the clock, which waits for a
  watermark that never passes it;
- the producer's CPU per 1,000 messages published in the steady phase's last 5 minutes within
  `--producer-cost-growth` (15 %) of minutes 5-10 (its cost does not grow with its ground truth);
- with a steady phase of 20 minutes or more, the bytes the operators send to the state server per
  minute, and the job's CPU per 1,000 records read, in the steady phase's last 5 minutes within 15 %
  of minutes 4-8 (what the operators hold does not make each micro-batch cost more);
- after the traffic, the job goes quiet (the authorities have answered every replica) within
  `--quiet-within-minutes` (10) of answers;
- after the run, `verify` is clean (and the tables equal a fresh run's with `--compare`);
- with `--sink-outage-at`: the job said it waited for the database and that it answered again.

Lag in seconds of traffic: the records in a query's topics it has not committed (Kafka's end offsets
now minus those of its last micro-batch, from `pipeline_progress`) over the rate its topics grew at in
the last minute.

Run: make soak   (or .venv/bin/python tests/bench/soak_job.py --minutes 60 --rate 2000)
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
from stat import S_ISREG
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from bench_whole_job import proportional_memory  # noqa: E402
from infra.broker import EmbeddedBroker, free_port  # noqa: E402
from job_runs import FAULTS, differences, dump, kill_tree  # noqa: E402
from producers.clock import move_event_time  # noqa: E402
from producers.kafka import KafkaSettings, ensure_topics  # noqa: E402
from streaming.operators.findings import FLOOD_PER_MINUTE  # noqa: E402
from streaming.spark.operator_counts import COUNTS_ENV  # noqa: E402
from streaming.wire.topics import TOPICS  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
DIRSTREAM = str(Path(sys.executable).parent / "dirstream")
QUERIES = ("dirstream",)                         # the job's one query (its operators' rows are not a query)
SHORT = {"dirstream": "job"}
PROCESSES = ("broker", "producer", "driver", "jvm", "python workers")
JOB_PROCESSES = ("driver", "jvm", "python workers")
# The producer is measured, not judged: it holds the run's ground truth (every message id it dropped,
# duplicated or corrupted, each discovery request's result, every queue a notification named), which
# grows with the run by design.
JUDGED = ("broker", "driver", "jvm", "python workers")
CATCH_UP_HANG_MINUTES = 15     # --timings-as-figures: the longest the catch-up is waited for
CTRL_C_MARGIN_S = 5            # the signal reaching the driver, the stop file written
# --restarts: how each stop of the steady phase is signalled, in turn (as a service manager, a user)
RESTART_SIGNALS = (("SIGTERM to its process group", lambda pid: os.killpg(pid, signal.SIGTERM)),
                   ("SIGINT to the driver alone", lambda pid: os.kill(pid, signal.SIGINT)),
                   ("SIGTERM to the driver alone", lambda pid: os.kill(pid, signal.SIGTERM)))


# ------------------------------------------------------------------------------------ processes
def proc_stats() -> dict[int, tuple[str, int, float]]:
    """pid -> (name, parent pid, CPU seconds) of every process."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(entry)] = (name, int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS)
    return out


def descendants(stats: dict, root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (_name, parent, _cpu) in stats.items():
        children.setdefault(parent, []).append(pid)
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        if pid in stats and pid not in found:
            found.append(pid)
            frontier.extend(children.get(pid, []))
    return found



# On the wall clock the simulated enterprise's few senders share the whole rate: its busiest sender sent
# a queue manager about 6 notifications a minute per msg/s published (3,320 at 500 msg/s, 11,808 at
# 2,000, seed 17), past the job's default --flood-per-minute, which fits the accelerated clock. The soak
# injects no flood, so its limit is twice that peak: ordinary traffic is not a finding the truth lacks.
FLOOD_PER_MINUTE_PER_RATE = 12


def flood_per_minute(args) -> int:
    return max(FLOOD_PER_MINUTE, FLOOD_PER_MINUTE_PER_RATE * args.rate)

class ProcessMeter(threading.Thread):
    """CPU (% of one core since the last reading) and memory of each kind of process: the broker, the
    producer, and the job's driver, JVM and Python workers. Memory is the proportional set size (PSS:
    each shared page divided among the processes sharing it), so forked Python workers and a JVM
    forking one are not counted twice; read now, and as the peak of readings every `every_s` seconds
    since the last reading. CPU seconds are kept per pid: a process that exits (a Python worker, a
    restarted job or broker) takes only its own seconds with it."""

    def __init__(self, roots, every_s: float = 5.0):
        super().__init__(daemon=True)
        self.roots, self.every_s = roots, every_s          # roots(): {"broker": pid, "producer": pid, "job": pid}
        self.last_cpu: dict[int, float] = {}
        self.last_at = time.monotonic()
        self.peaks = {k: 0.0 for k in PROCESSES}
        self.lock = threading.Lock()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.every_s):
            _cpu, memory = self._measure()
            with self.lock:
                self.peaks = {k: max(self.peaks[k], memory[k]) for k in PROCESSES}

    def _measure(self) -> tuple[dict[int, tuple[str, float]], dict[str, float]]:
        stats, kinds = proc_stats(), {}
        for kind, root in self.roots().items():
            if root is None:
                continue
            for pid in descendants(stats, root):
                if kind == "job":
                    kinds[pid] = "driver" if pid == root else "jvm" if stats[pid][0] == "java" else "python workers"
                else:
                    kinds[pid] = kind
        memory = {k: 0.0 for k in PROCESSES}
        for pid, kind in kinds.items():
            memory[kind] += (proportional_memory(pid) or 0) / 2**20
        return {pid: (kind, stats[pid][2]) for pid, kind in kinds.items()}, memory

    def read(self) -> dict[str, dict[str, float]]:
        """Per kind of process: CPU % of one core since the last read, memory MB now and its peak since."""
        cpu_now, memory = self._measure()
        now = time.monotonic()
        interval = max(now - self.last_at, 1e-6)
        cpu = {k: 0.0 for k in PROCESSES}
        for pid, (kind, seconds) in cpu_now.items():
            cpu[kind] += max(seconds - self.last_cpu.get(pid, 0.0), 0)     # a new process: all its seconds
        with self.lock:
            peaks, self.peaks = self.peaks, {k: 0.0 for k in PROCESSES}
        self.last_cpu, self.last_at = {pid: seconds for pid, (_k, seconds) in cpu_now.items()}, now
        return {k: {"cpu": 100 * cpu[k] / interval, "memory": memory[k], "peak": max(peaks[k], memory[k])}
                for k in PROCESSES}


# ------------------------------------------------------------------------------------ lag
class LagMeter:
    """Per query: records read (its micro-batches' input rows), records in its topics it has not
    committed yet, and that lag in seconds of its topics' traffic over the last minute."""

    def __init__(self, url: str, bootstrap: str):
        self.url, self.bootstrap = url, bootstrap
        self.history: dict[str, deque] = {q: deque() for q in QUERIES}    # (monotonic, records in its topics)
        self._offsets = None

    def read(self) -> dict[str, dict]:
        from streaming.apps import health
        from streaming.apps.sink_reader import SinkReader
        from streaming.spark.pipeline import parse_end_offsets
        try:
            reader = SinkReader(self.url)
        except Exception:                           # noqa: BLE001 -- the job has not created its sink yet
            return {}
        try:
            queries = {q["query"]: q for q in health.query_summary(reader) if q["query"] in QUERIES}
        except Exception:                           # noqa: BLE001 -- no pipeline_progress yet
            return {}
        finally:
            reader.conn.close()
        committed = {q: parse_end_offsets(queries[q]["end_offsets"]) for q in queries}
        # PostgreSQL's SUM is a numeric: counted as ints whatever the sink
        counts = {q: {"read": int(queries[q]["input_rows"] or 0), "batches": int(queries[q]["batches"] or 0)}
                  for q in queries}
        partitions = sorted({tp for ends in committed.values() for tp in ends})
        try:
            ends = self.offsets.ends(partitions)
        except Exception:                           # noqa: BLE001 -- the broker is restarting
            self.close()
            return {q: {**counts[q], "unread": None, "lag_s": None} for q in queries}
        now, out = time.monotonic(), {}
        for q, mine in committed.items():
            unread = sum(max(ends[tp] - end, 0) for tp, end in mine.items())
            out[q] = {**counts[q], "unread": unread,
                      "lag_s": self._seconds(q, now, sum(ends[tp] for tp in mine), unread)}
        return out

    def _seconds(self, query: str, now: float, in_topics: int, unread: int) -> float | None:
        """unread over the rate its topics grew at in the last minute; None until that rate was
        measured over 10 s at least."""
        history = self.history.setdefault(query, deque())
        history.append((now, in_topics))
        while len(history) > 2 and now - history[1][0] >= 60:
            history.popleft()
        if unread == 0:
            return 0.0
        (t0, n0), (t1, n1) = history[0], history[-1]
        if t1 - t0 < 10:
            return None
        rate = (n1 - n0) / (t1 - t0)
        return unread / rate if rate > 0 else float("inf")

    @property
    def offsets(self):
        if self._offsets is None:
            from streaming.spark.kafka_offsets import EndOffsets
            self._offsets = EndOffsets({"bootstrap.servers": self.bootstrap}, [], broker_wait_s=0)
        return self._offsets

    def close(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None


# ------------------------------------------------------------------------------------ latency
class LatencyMeter(threading.Thread):
    """End-to-end latency as a user sees it, sampled: every MARK_S seconds the latest record of each
    raw partition (Kafka's end offsets then) is a marker, published at that instant; it is committed
    when a micro-batch whose end offsets pass it appears in the sink (pipeline_progress, polled every
    POLL_S: when a dashboard reading the sink could first show its rows). Rows that wait by protocol
    for later event time (an MQCN outcome held until the watermark passes it, a discovery request's
    15-second wait) come on top of this, by design."""
    MARK_S, POLL_S = 3.0, 0.5

    def __init__(self, url: str, bootstrap: str):
        super().__init__(daemon=True)
        self.url, self.bootstrap = url, bootstrap
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.pending: list[tuple[float, tuple[str, int], int]] = []    # (published, partition, offset)
        self.committed: dict[tuple[str, int], int] = {}
        self.resolved: list[tuple[float, float, float]] = []         # (published, committed, latency s)
        self.last_batch, self.last_ends, self._offsets = -1, {}, None

    def run(self) -> None:
        next_mark = time.time()
        while not self.done.wait(self.POLL_S):
            self._poll_sink()
            if time.time() >= next_mark:
                self._mark()
                next_mark = time.time() + self.MARK_S

    def _mark(self) -> None:
        from streaming.spark.kafka_offsets import EndOffsets
        try:
            if self._offsets is None:
                self._offsets = EndOffsets({"bootstrap.servers": self.bootstrap}, list(TOPICS.values()), broker_wait_s=0)
            ends, now = self._offsets.ends(), time.time()
        except Exception:                           # noqa: BLE001 -- the broker is restarting: no marker now
            if self._offsets is not None:
                self._offsets.close()
            self._offsets = None
            return
        with self.lock:
            self.pending += [(now, tp, end - 1) for tp, end in ends.items() if end > self.last_ends.get(tp, 0)]
        self.last_ends = ends

    def _poll_sink(self) -> None:
        from streaming.apps.sink_reader import SinkReader
        from streaming.spark.pipeline import parse_end_offsets
        try:
            reader = SinkReader(self.url)
        except Exception:                           # noqa: BLE001 -- no sink yet, or the database is down
            return
        try:
            rows = reader.query("pipeline_progress", "SELECT batch_id, end_offsets FROM pipeline_progress WHERE "
                                f"query_name = 'dirstream' AND batch_id > {self.last_batch} ORDER BY batch_id")
        except Exception:                           # noqa: BLE001
            return
        finally:
            reader.conn.close()
        seen = time.time()
        for r in rows:
            self.last_batch = max(self.last_batch, int(r["batch_id"]))
            for tp, end in parse_end_offsets(r["end_offsets"]).items():
                self.committed[tp] = max(self.committed.get(tp, 0), end)
        with self.lock:
            still = []
            for published, tp, offset in self.pending:
                if self.committed.get(tp, 0) > offset:
                    self.resolved.append((published, seen, seen - published))
                else:
                    still.append((published, tp, offset))
            self.pending = still

    def since(self, after: float) -> dict:
        """p50, p99 and count of the markers committed after `after` (Unix time)."""
        with self.lock:
            return latency_figures([lat for _p, committed, lat in self.resolved if committed > after])

    def published_between(self, start: float, end: float) -> list[float]:
        with self.lock:
            return [lat for published, _c, lat in self.resolved if start <= published < end]

    def stop(self) -> None:
        self.done.set()
        self.join(10)


def traffic_seconds(a) -> float:
    """How long the producer publishes: the steady phase, and the stop and catch-up if the job stops."""
    return (a.minutes + (a.stop_minutes + a.catch_up_minutes if a.stop_minutes > 0 else 0)) * 60


# What a published message leaves in OUT/work (the broker's log, the sink, the job's checkpoint and
# spool): 12 GB for the 1.2 million messages of a 10-minute run at 2,000 msg/s, with a margin.
DISK_PER_MESSAGE = 12_000


def disk_short(out: Path, a) -> str | None:
    """Why the run would not fit on OUT's filesystem (None: it fits). A full disk stops the job when a
    sink write fails, minutes into the run: refused at the start instead."""
    messages = int(a.rate * traffic_seconds(a))
    need = messages * DISK_PER_MESSAGE
    out.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(out).free + _blocks_held(out / "work")          # an earlier run's: deleted first
    if free >= need:
        return None
    return (f"soak: {messages:,} messages need about {need / 1e9:,.1f} GB in {out}, which has {free / 1e9:,.1f} GB "
            "free; free some space, or give --out on another filesystem, or fewer --minutes")


def _blocks_held(folder: Path) -> int:
    """The bytes the files under folder take on disk (a Kafka index is a sparse file: its blocks, not its
    size; a link is not followed; a file deleted while counted counts nothing)."""
    held = 0
    for path in folder.rglob("*"):
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        held += st.st_blocks * 512 if S_ISREG(st.st_mode) else 0
    return held


def latency_figures(latencies: list[float]) -> dict:
    if not latencies:
        return {"p50": None, "p99": None, "n": 0}
    ordered = sorted(latencies)
    return {"p50": round(statistics.median(ordered), 2),
            "p99": round(ordered[max(math.ceil(0.99 * len(ordered)) - 1, 0)], 2), "n": len(ordered)}


def cpu_s_per_1000(samples: list[dict], window: list[dict], sample_s: float) -> float:
    """The job's processes' CPU seconds per 1,000 records it read over consecutive samples."""
    if not window:
        return 0.0
    before = samples.index(window[0]) - 1
    read = lambda sample: sample["queries"].get("dirstream", {}).get("read", 0)     # noqa: E731
    records = read(window[-1]) - (read(samples[before]) if before >= 0 else 0)
    cpu = sum(s["cpu"].get(kind, 0) for s in window for kind in JOB_PROCESSES) * sample_s / 100
    return cpu / max(records, 1) * 1000


def progress_rows(url: str, sql: str, table: str = "pipeline_progress") -> list[dict]:
    """Rows of a query over one of the sink's tables (pipeline_progress by default)."""
    from streaming.apps.sink_reader import SinkReader
    reader = SinkReader(url)
    try:
        return reader.query(table, sql)
    finally:
        reader.conn.close()


def mqcn_accounting(url: str) -> dict:
    """The MQCN records the job read (raw_messages_seen), the messages with a notifications row of
    their own, the copies discarded as duplicates and the MQCN dead letters."""
    one = lambda table, sql: int(progress_rows(url, sql, table)[0]["n"] or 0)      # noqa: E731
    return {"read": one("raw_messages_seen", "SELECT SUM(messages) AS n FROM raw_messages_seen "
                                             "WHERE protocol = 'mqcn'"),
            "notified": one("notifications", "SELECT COUNT(DISTINCT message_id) AS n FROM notifications "
                                             "WHERE outcome <> 'duplicate'"),
            "duplicates": one("notifications", "SELECT COUNT(*) AS n FROM notifications WHERE outcome = 'duplicate'"),
            "dead_letters": one("dead_letters", "SELECT COUNT(*) AS n FROM dead_letters WHERE protocol = 'mqcn'")}


# ------------------------------------------------------------------------------------ the run
class Soak:
    def __init__(self, args):
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = self.out / "work"
        self.last_published = 0                  # the producer's last progress count (published())
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir()
        self.broker = EmbeddedBroker(self.work / "broker", port=free_port())
        self.postgres = None                     # --sink-outage-at: the sink's own server
        self.url = f"sqlite:///{self.work}/soak.db"
        self.truth = self.work / "truth.json"
        self.job = self.producer = self.responder = None
        self.samples: list[dict] = []
        self.events: list[tuple[float, str]] = []
        self.summary: dict = {}                  # the run's counts (MQCN accounting, the authorities' answers)
        self.clock_copies: list[int] = []        # the notifications move_clock published (their arrival times)
        self.counts = (self.work / "operator-counts").resolve()   # the operators' state calls (operator_counts.py)
        self.counts.mkdir()
        self.counts_read = {"since": time.time()}
        self.processes = ProcessMeter(self.roots)
        self.lag: LagMeter | None = None
        self.latency: LatencyMeter | None = None
        self.started, self.wall_started, self.last_sample_at = time.monotonic(), time.time(), time.time()
        self.verdicts: list[tuple[bool, str]] = []
        self.figures: list[str] = []              # timings printed, not judged (--timings-as-figures)
        self.catch_up: dict = {}
        self.ctrl_c: list[float] = []             # Unix time of each Ctrl-C ...
        self.job_starts: list[float] = []         # ... and of each start of the job

    # --------------------------------------------------------------------------- helpers
    def minute(self) -> float:
        return (time.monotonic() - self.started) / 60

    def event(self, what: str) -> None:
        self.events.append((round(self.minute(), 2), what))
        print(f"  {self.minute():6.1f} min  -- {what}", flush=True)

    def start_job(self, *extra: str) -> subprocess.Popen:
        n = sum(1 for _ in self.work.glob("job-*.log"))
        log = open(self.work / f"job-{n}.log", "w")
        self.job_starts.append(time.time())
        return subprocess.Popen([DIRSTREAM, "run", "--bootstrap", self.broker.bootstrap, "--sink", self.url,
                                 "--checkpoint", str(self.work / "ckpt"), "--pec-name", "pec0", "--trigger", "2s",
                                 "--max-records", str(self.args.max_records), "--log-format", "plain",
                                 "--metrics-port", str(self.args.metrics_port), *self.flood_args(), *extra],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, COUNTS_ENV: str(self.counts)})

    def flood_args(self) -> tuple[str, ...]:
        return ("--flood-per-minute", str(flood_per_minute(self.args))) if self.args.clock == "wall" else ()

    def timing(self, ok: bool, text: str) -> None:
        """A criterion on how fast the job is: judged by `make soak`, a figure with --timings-as-figures."""
        if self.args.timings_as_figures:
            self.figures.append(text)
        else:
            self.verdicts.append((ok, text))

    def stop_job(self, send=None) -> None:
        """Ctrl-C (SIGINT to the job's process group) or send(pid): stops after the current micro-batch."""
        self.ctrl_c.append(time.time())
        (send or (lambda pid: os.killpg(pid, signal.SIGINT)))(self.job.pid)
        try:
            code = self.job.wait(600)
        except subprocess.TimeoutExpired:
            kill_tree(self.job.pid)
            code = self.job.wait(60)
        if code != 0:
            raise RuntimeError(f"the job exited {code} when stopped; see {self.work}/job-*.log")
        self.job = None

    def roots(self) -> dict[str, int | None]:
        return {"broker": self.broker.status().pid, "producer": (self.producer or self.responder).pid if (self.producer or self.responder) else None,
                "job": self.job.pid if self.job else None}

    def sample(self, phase: str) -> dict:
        procs = self.processes.read()
        return {"minute": round(self.minute(), 2), "phase": phase, "published": self.published(),
                "cpu": {k: round(v["cpu"], 1) for k, v in procs.items()},
                "memory": {k: round(v["memory"]) for k, v in procs.items()},
                "peak": {k: round(v["peak"]) for k, v in procs.items()}, "queries": self.lag.read(),
                "latency": self.latency_since_last_sample(), "state_mb": self.state_bytes_since_last_sample()}

    def state_bytes_since_last_sample(self) -> dict:
        """MB each operator sent to the state server in the tasks that ended since the last sample."""
        since, now = self.counts_read["since"], time.time()
        self.counts_read["since"] = now
        sent: dict[str, float] = {}
        for path in self.counts.glob("*.jsonl") if self.counts.is_dir() else ():
            for text in path.read_text().splitlines():
                line = json.loads(text)
                if since < line.get("at", 0) <= now:
                    sent[line["operator"]] = sent.get(line["operator"], 0) + line.get("bytes to the state server",
                                                                                      0) / 2**20
        return {operator: round(mb, 1) for operator, mb in sorted(sent.items())}

    def latency_since_last_sample(self) -> dict:
        since, self.last_sample_at = self.last_sample_at, time.time()
        return self.latency.since(since) if self.latency else latency_figures([])

    def wall(self, minute: float) -> float:
        """The Unix time of a minute of the run."""
        return self.wall_started + minute * 60

    def published(self) -> int:
        """The producer's last progress line: "sent N messages (...) at R msg/s"; the last count seen
        when the log's tail holds none (the client's warnings after a broker restart, or the producer's
        closing lines, can fill it)."""
        try:
            with open(self.work / "producer.log", "rb") as fh:
                fh.seek(max(fh.seek(0, 2) - 65536, 0))
                found = re.findall(rb"sent (\d+) messages", fh.read())
        except OSError:
            found = []
        if found:
            self.last_published = max(self.last_published, int(found[-1]))
        return self.last_published

    def record(self, phase: str) -> dict:
        s = self.sample(phase)
        self.samples.append(s)
        print(row(s), flush=True)
        return s

    def wait_sampling(self, until_minute: float, phase: str, step_s: float | None = None) -> None:
        """Sample every --sample-s seconds until the given minute of the run; stops early if the
        producer has ended (steady phases) or the job has died."""
        step_s = step_s or self.args.sample_s
        while self.minute() < until_minute - 1e-6:
            time.sleep(max(min(step_s, (until_minute - self.minute()) * 60), 0))
            self.check_job()
            self.record(phase)

    # --------------------------------------------------------------------------- phases
    def run(self) -> int:
        a = self.args
        self.broker.start()
        if a.sink_outage_at > 0:
            self.start_postgres()
        ensure_topics(KafkaSettings(self.broker.bootstrap), {t: 4 for t in TOPICS.values()})
        self.lag = LagMeter(self.url, self.broker.bootstrap)
        produce_s = traffic_seconds(a)
        print(f"soak: the whole job at {a.rate:,} msg/s on the {a.clock} clock (every fault type, the authorities "
              f"answering): "
              f"{a.minutes:g} min steady, broker restart at minute {a.broker_restart_at:g}, then the job stopped "
              f"for {a.stop_minutes:g} min and {a.catch_up_minutes:g} min to catch up; --max-records "
              f"{a.max_records:,}; a sample every {a.sample_s:g} s; in {self.out}", flush=True)
        print(header(), flush=True)
        self.job = self.start_job()
        self.producer = subprocess.Popen(
            [DIRSTREAM, "produce", "simulate", "--bootstrap", self.broker.bootstrap, "--seed", str(a.seed),
             "--rate", str(a.rate), "--duration", str(produce_s), "--op-interval-ms", a.op_interval_ms,
             *(["--wall-clock"] if a.clock == "wall" else []),
             *([] if a.no_respond else ["--respond"]), "--truth", str(self.truth), *FAULTS],
            stdout=open(self.work / "producer.out", "w"), stderr=open(self.work / "producer.log", "w"))
        self.started, self.wall_started, self.last_sample_at = time.monotonic(), time.time(), time.time()
        self.processes = ProcessMeter(self.roots)
        self.processes.start()
        self.latency = LatencyMeter(self.url, self.broker.bootstrap)
        self.latency.start()
        try:
            try:
                self.steady()
                self.catch_up_after_stop()
                self.drain()
            finally:
                self.kill_leftovers()
            self.final_passes()
        except RuntimeError as exc:
            self.event(f"stopped: {exc}")
            self.verdicts.append((False, f"the run went to its end: no, {exc}"))
        finally:
            self.processes.done.set()
            if self.latency is not None:
                self.latency.stop()
            self.judge()
            self.save()
            self.stop_responder()
            self.broker.stop()
            if self.postgres is not None:
                self.postgres.stop()
        failed = [text for ok, text in self.verdicts if not ok]
        print(f"soak: {'PASS' if not failed else 'FAIL'} ({len(self.verdicts) - len(failed)} of "
              f"{len(self.verdicts)} criteria met)", flush=True)
        if not failed and not a.keep:
            shutil.rmtree(self.work, ignore_errors=True)
        return 0 if not failed else 1

    def kill_leftovers(self) -> None:
        for proc in (self.producer, self.job):
            if proc is not None and proc.poll() is None:
                if proc is self.job:
                    kill_tree(proc.pid)
                else:
                    proc.kill()
                proc.wait(60)

    def steady(self) -> None:
        a = self.args
        restarts = [(a.minutes * (k + 1) / (a.restarts + 1), lambda k=k: self.restart_job(k)) for k in range(a.restarts)]
        disruptions = sorted(((at, what) for at, what in ((a.broker_restart_at, self.restart_broker),
                                                           (a.sink_outage_at, self.sink_outage), *restarts)
                              if 0 < at < a.minutes), key=lambda item: item[0])
        for at, disrupt in disruptions:
            self.wait_sampling(at, "steady")
            disrupt()
        self.wait_sampling(a.minutes, "steady")

    def wait_first_commit(self) -> None:
        """Until the running job has committed a micro-batch since it started: an event before that
        would test its start, not what it is meant to (the short soak's broker restart once came
        while a loaded machine's job was still starting)."""
        started = self.job_starts[-1]

        def committed(_now: dict) -> bool:
            return self.committed_since(started)
        if not committed({}) and not self.watch(self.minute() + CATCH_UP_HANG_MINUTES, "steady", committed):
            raise RuntimeError(f"the job committed no micro-batch in {CATCH_UP_HANG_MINUTES} min")

    def committed_since(self, unix_time: float) -> bool:
        from streaming.apps.health import epoch_s
        try:
            rows = progress_rows(self.url, "SELECT MAX(finished_at) AS last FROM pipeline_progress")
        except Exception:                           # noqa: BLE001 -- no sink yet, or the database is down
            return False
        return bool(rows and rows[0]["last"]) and epoch_s(rows[0]["last"]) >= unix_time

    def restart_job(self, k: int) -> None:
        """Stopped with the traffic running, signalled one of three ways, and started again at once."""
        self.wait_first_commit()
        how, send = RESTART_SIGNALS[k % len(RESTART_SIGNALS)]
        self.event(f"job stopped ({how})")
        self.stop_job(send)
        self.job = self.start_job()
        self.event("job started again")

    def restart_broker(self) -> None:
        self.wait_first_commit()
        self.event("broker stopped")
        self.broker.stop()
        self.lag.close()
        self.broker.start()
        self.event("broker started again on its log directories")

    def start_postgres(self) -> None:
        """The sink on a PostgreSQL server of the run's own (infra/postgres.py), to be stopped mid-run."""
        from infra.postgres import TemporaryPostgres
        self.postgres = TemporaryPostgres(self.work / "postgres", port=free_port())
        self.postgres.start()
        self.url = self.postgres.create_database("soak")

    def sink_outage(self) -> None:
        """The database stopped for --sink-outage-s once the job has committed a micro-batch (an outage
        before its first write would test nothing), then started again on its data."""
        self.wait_first_commit()
        self.event("sink database stopped")
        self.postgres.stop()
        self.wait_sampling(self.minute() + self.args.sink_outage_s / 60, "steady")
        self.postgres.resume()
        self.event("sink database started again")

    def catch_up_after_stop(self) -> None:
        a = self.args
        if a.stop_minutes <= 0:
            return
        self.wait_first_commit()
        self.event("job stopped (Ctrl-C)")
        self.stop_job()
        stopped = self.minute()
        self.wait_sampling(stopped + a.stop_minutes, "stopped")
        behind = {q: v["unread"] for q, v in self.samples[-1]["queries"].items()}
        self.event(f"job started again, {sum(v or 0 for v in behind.values()):,} records behind "
                   f"({', '.join(f'{SHORT[q]} {n:,}' for q, n in behind.items() if n)})")
        restarted, self.job = self.minute(), self.start_job()
        self.catch_up = {"restarted_at": restarted, "behind": behind, "caught_up_after_min": None}
        deadline = restarted + a.catch_up_minutes
        # with timings as figures the limit is no criterion: the wait ends when caught up, or at a
        # bound only a hang exceeds (the producer may have ended by then: nothing unread is a lag of 0 s)
        waited = restarted + max(a.catch_up_minutes, CATCH_UP_HANG_MINUTES) if a.timings_as_figures else deadline

        def caught_up(now: dict) -> bool:
            return len(now) == len(QUERIES) and all(v["lag_s"] is not None and v["lag_s"] <= a.max_lag_s
                                                    for v in now.values()) and self._read_since(restarted, now)
        if self.watch(waited, "catch-up", caught_up):
            self.catch_up["caught_up_after_min"] = round(self.minute() - restarted, 2)
            self.event(f"caught up: every query within {a.max_lag_s:g} s of traffic")
        self.record("catch-up")
        if not a.timings_as_figures:                    # the phase's length is part of what is judged
            self.wait_sampling(deadline, "catch-up")

    def _read_since(self, restarted: float, now: dict) -> bool:
        """Every query has committed a micro-batch since the restart (its lag is not a stale row's)."""
        before = next((s["queries"] for s in reversed(self.samples) if s["minute"] <= restarted), {})
        return all(now[q]["batches"] > before.get(q, {}).get("batches", 0) for q in QUERIES)

    def drain(self) -> None:
        """The producer ends (its quiet tail of event time) and `produce respond` takes over its
        authorities; the job runs on until the conversation is over (everything read, nothing new in
        its topics for --quiet-s: the replicas have nothing left to ask); event time is moved on past
        every MQCN wait and the job reads that too; the responder stops, and once the job has read
        its last answers (Kafka's content is final) the job stops."""
        out = self.producer.wait(600 + self.args.catch_up_minutes * 60)
        self.event(f"producer ended (exit {out}): {(self.work / 'producer.out').read_text().strip()}")
        self.producer = None
        self.responder = subprocess.Popen([DIRSTREAM, "produce", "respond", "--bootstrap", self.broker.bootstrap,
                                           "--truth", str(self.truth)], stdout=open(self.work / "respond.out", "w"),
                                          stderr=open(self.work / "respond.log", "w"))
        ended, quiet = self.minute(), self.wait_quiet()
        answered = self.minute() - ended
        self.timing(quiet and answered <= self.args.quiet_within_minutes,
                    f"after the traffic, quiet (every replica answered, nothing new for {self.args.quiet_s:g} s) after "
                    f"{answered:.1f} min of answers" + ("" if quiet else " (NOT quiet by then)")
                    + f" (limit {self.args.quiet_within_minutes:g} min)")
        self.move_clock()
        quiet = self.wait_quiet() and quiet
        self.stop_responder()
        quiet = self.wait_quiet() and quiet
        self.record("drained")
        self.event(f"job stopped (Ctrl-C): everything read and {'quiet' if quiet else 'NOT quiet'} after "
                   f"{self.minute() - ended:.1f} min of answers")
        self.stop_job()
        self.lag.close()

    def move_clock(self) -> None:
        """The traffic has ended: copies of its last notification, dated past the longest MQCN wait,
        move the job's event time on as a live enterprise's traffic would (producers/clock.py)."""
        times = move_event_time(KafkaSettings(self.broker.bootstrap))
        self.clock_copies = times
        self.event(f"event time moved on: {len(times)} copies of the last notification, up to "
                   f"{(times[-1] - times[0]) / 60_000 + 1:.0f} min after the traffic")

    def wait_quiet(self) -> bool:
        """Every query has read everything and its topics have not grown for --quiet-s seconds (a
        replica's sync0 comes in replies of a few hundred changes, each asked for in turn: MC-MQDSRP
        3.3.7.5). False after --settle-minutes."""
        seen = {"read": None, "since": time.monotonic()}         # the last records-read figures, and since when

        def quiet(now: dict) -> bool:
            read = {q: v["read"] for q, v in now.items()}
            if len(now) < len(QUERIES) or any(v["unread"] != 0 for v in now.values()) or read != seen["read"]:
                seen.update(read=read, since=time.monotonic())
                return False
            return time.monotonic() - seen["since"] >= self.args.quiet_s
        return self.watch(self.minute() + self.args.settle_minutes, "settling", quiet)

    def watch(self, until_minute: float, phase: str, done) -> bool:
        """The lag every 5 s until the given minute of the run, and a sample every --sample-s: True
        as soon as done(lag) holds, False at that minute; raises if the job has died."""
        next_sample = time.monotonic() + self.args.sample_s
        while self.minute() < until_minute:
            time.sleep(5)
            self.check_job()
            if done(self.lag.read()):
                return True
            if time.monotonic() >= next_sample:
                self.record(phase)
                next_sample += self.args.sample_s
        return False

    def check_job(self) -> None:
        if self.job is not None and self.job.poll() is not None:
            raise RuntimeError(f"the job stopped (exit {self.job.returncode}); see {self.work}/job-*.log")

    def final_passes(self) -> None:
        """`verify` of the job's tables (Kafka's content is final: drain), then with --compare a fresh
        checkpoint's `--once` over the same content."""
        done = self.verify(self.url)
        (self.work / "verify.txt").write_text(done.stdout)
        self.verdicts.append((done.returncode == 0, f"after the run: verify "
                              f"{'clean' if done.returncode == 0 else 'NOT clean'}: {summary_of(done.stdout)}"))
        if self.args.compare:
            fresh = self.postgres.create_database("fresh") if self.postgres else f"sqlite:///{self.work}/fresh.db"
            self.once(fresh, "ckpt-fresh", "--outbound-topic", "none")
            diff = differences(dump(self.url), dump(fresh))
            self.verdicts.append((not diff, "the tables equal a fresh checkpoint's --once over the same Kafka "
                                            f"content: {'yes' if not diff else '; '.join(diff)}"))

    def stop_responder(self) -> None:
        if self.responder is None:
            return
        self.responder.send_signal(signal.SIGINT)
        try:
            self.responder.wait(60)
        except subprocess.TimeoutExpired:
            self.responder.kill()
            self.responder.wait(60)
        self.responder = None

    def once(self, url: str, checkpoint: str, *extra: str) -> None:
        done = subprocess.run([DIRSTREAM, "run", "--once", "--bootstrap", self.broker.bootstrap, "--sink", url,
                               "--checkpoint", str(self.work / checkpoint), "--pec-name", "pec0", "--max-records",
                               str(self.args.max_records), "--log-format", "plain", "--metrics-port", "0",
                               *self.flood_args(), *extra],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"dirstream run --once failed: {done.stdout[-3000:]}{done.stderr[-3000:]}")

    def verify(self, url: str) -> subprocess.CompletedProcess:
        return subprocess.run([DIRSTREAM, "verify", "--truth", str(self.truth), "--sink", url],
                              capture_output=True, text=True)

    # --------------------------------------------------------------------------- criteria
    def judge(self) -> None:
        a = self.args
        steady = [s for s in self.samples if s["phase"] == "steady"]
        after_warmup = [s for s in steady if s["minute"] > a.warmup_minutes]
        for q in QUERIES:
            lags = [s["queries"].get(q, {}).get("lag_s") for s in after_warmup]
            known = [x for x in lags if x is not None]
            worst = max(known, default=None)
            ok = bool(known) and worst <= a.max_lag_s
            self.timing(ok, f"{SHORT[q]} lag after minute {a.warmup_minutes:g}: at most "
                            f"{fmt_s(worst)} of traffic (limit {a.max_lag_s:g} s; {len(lags) - len(known)} "
                            f"sample(s) without Kafka's offsets)")
        self.judge_latency(steady)
        self.judge_producer_cost(steady)
        self.judge_flat_cost(steady)
        if steady:
            middle, end = a.minutes / 2, steady[-1]["minute"]
            for kind in PROCESSES:
                at_middle, at_end = median_near(steady, middle, kind), median_near(steady, end, kind)
                growth = (at_end - at_middle) / at_middle if at_middle else 0.0
                now = [median_near(steady, m, kind, "memory") for m in (middle, end)]
                text = (f"{kind} resident memory, minute {middle:g} -> {round(end, 1):g}: peaks {at_middle:,.0f} -> "
                        f"{at_end:,.0f} MB ({growth:+.1%}; limit +{a.memory_growth:.0%}; at the samples "
                        f"{now[0]:,.0f} -> {now[1]:,.0f} MB)")
                if kind in JUDGED and a.timings_as_figures:
                    # a short steady phase on a slow machine measures how far the job got by its
                    # middle (the Python workers start with the first tasks): a figure; the bound on
                    # memory judged is the one while catching up and after (below)
                    self.figures.append(text)
                elif kind in JUDGED:
                    self.verdicts.append((growth < a.memory_growth, text))
                else:
                    print(f"  ----  {text}: not judged (it holds the run's ground truth)", flush=True)
        if a.stop_minutes > 0:
            self.judge_catch_up(steady)
            self.judge_ctrl_c()
        if self.postgres is not None:
            self.judge_sink_outage()
        self.judge_late_rows()
        self.judge_mqcn_accounted()
        self.report_syncs()
        self.judge_ceilings()

    def judge_late_rows(self) -> None:
        """The promise under stops: no row dropped as late, whatever the restarts, the broker restart
        and the catch-up (the operators' late_rows in pipeline_progress)."""
        try:
            rows = progress_rows(self.url, "SELECT COALESCE(SUM(late_rows), 0) AS n, COUNT(*) AS batches "
                                           "FROM pipeline_progress WHERE late_rows > 0")
        except Exception as exc:                    # noqa: BLE001 -- the sink is gone: say so
            self.verdicts.append((False, f"rows dropped as late: not known ({exc})"))
            return
        late, batches = int(rows[0]["n"] or 0), int(rows[0]["batches"] or 0)
        restarts = len(self.job_starts) - 1
        self.verdicts.append((late == 0, f"rows dropped as late over the whole run ({restarts} stop(s) and restart(s)): "
                                         f"{late:,}" + (f" in {batches} micro-batch(es)" if late else "")))

    def judge_flat_cost(self, steady: list[dict]) -> None:
        """What a minute of steady traffic costs does not grow with the windows the operators hold:
        the bytes sent to the state server per minute and the job's CPU per 1,000 records read, the
        steady phase's last 5 minutes against minutes 4-8 (from minute 20 on)."""
        a = self.args
        if not steady or steady[-1]["minute"] < 19.5:
            return
        end = steady[-1]["minute"]

        def window(lo: float, hi: float) -> list[dict]:
            return [s for s in steady if lo < s["minute"] <= hi]
        early, late = window(4, 8), window(end - 4, end)
        mb = [sum(sum(s["state_mb"].values()) for s in ss) / max(len(ss), 1) for ss in (early, late)]
        growth = (mb[1] - mb[0]) / mb[0] if mb[0] else 0.0
        self.summary["state_mb_per_minute"] = {"minutes 4-8": round(mb[0], 1), "last 5": round(mb[1], 1)}
        self.timing(abs(growth) <= 0.15, f"state server: {mb[0]:,.0f} MB sent per minute in minutes 4-8, "
                                         f"{mb[1]:,.0f} in the last 5 ({growth:+.0%}; limit 15 %)")
        per = [cpu_s_per_1000(steady, ss, a.sample_s) for ss in (early, late)]
        growth = (per[1] - per[0]) / per[0] if per[0] else 0.0
        self.summary["job_cpu_s_per_1000"] = {"minutes 4-8": round(per[0], 3), "last 5": round(per[1], 3)}
        self.timing(abs(growth) <= 0.15, f"the job's CPU per 1,000 records read: {per[0]:.2f} s in minutes 4-8, "
                                         f"{per[1]:.2f} s in the last 5 ({growth:+.0%}; limit 15 %)")

    def judge_mqcn_accounted(self) -> None:
        """Every MQCN record the job read became a notifications row, a duplicate discarded (MQQB
        3.1.5.8.1: a notifications row of outcome duplicate) or a dead letter; the three counts."""
        try:
            counts = mqcn_accounting(self.url)
        except Exception as exc:                    # noqa: BLE001 -- the sink is gone: say so
            self.verdicts.append((False, f"MQCN records accounted for: not known ({exc})"))
            return
        # the last copy move_clock published is the latest record: the watermark, 10 s behind, never
        # passes it, so it waits in its queue manager's state
        counts["waiting"] = 1 if self.clock_copies else 0
        missing = counts["read"] - sum(counts[k] for k in ("notified", "duplicates", "dead_letters", "waiting"))
        self.summary["mqcn_accounting"] = counts
        self.verdicts.append((missing == 0, f"MQCN records read {counts['read']:,}: {counts['notified']:,} with a "
                                            f"notifications row, {counts['duplicates']:,} duplicates discarded, "
                                            f"{counts['dead_letters']:,} dead letters, {counts['waiting']} waiting for "
                                            f"the watermark (the last copy that moved the clock); not accounted for: "
                                            f"{missing:,}"))

    def report_syncs(self) -> None:
        """How the authorities answered the replicas' sync requests (the producer's responder during
        the traffic, then `produce respond`): AlreadyPurged answers and the sync0 resets they started."""
        total = {}
        for name in ("producer.out", "respond.out"):
            path = self.work / name
            lines = path.read_text().strip().splitlines() if path.exists() else []
            try:
                stats = json.loads(lines[-1]) if lines else {}
            except ValueError:
                continue
            for key, n in stats.get("responder", stats).items():
                if isinstance(n, int):
                    total[key] = total.get(key, 0) + n
        self.summary["responder"] = total
        self.figures.append(f"sync requests answered: {total.get('sync_requests', 0):,}, AlreadyPurged "
                            f"{total.get('already_purged', 0):,}; sync0 resets completed "
                            f"{total.get('sync0_completed', 0):,} ({total.get('sync0_requests', 0):,} sync0 parts "
                            f"asked for)")

    def judge_producer_cost(self, steady: list[dict]) -> None:
        """The producer's CPU seconds per 1,000 messages published, minutes 5-10 against the steady
        phase's last 5 minutes (the samples' CPU over their intervals)."""
        a = self.args
        if not steady or steady[-1]["minute"] < 15:
            return
        end = steady[-1]["minute"]
        early, late = cost_per_thousand(steady, 5, 10), cost_per_thousand(steady, end - 5, end)
        if early is None or late is None:
            return
        growth = late / early - 1
        self.timing(growth <= a.producer_cost_growth,
                    f"producer CPU per 1,000 messages, minutes 5-10 -> the last 5: {early:.3f} -> {late:.3f} s "
                    f"({growth:+.1%}; limit +{a.producer_cost_growth:.0%})")

    def judge_latency(self, steady: list[dict]) -> None:
        """End-to-end latency of the markers published in the steady phase after the warm-up, pooled;
        the worst minute's 99th percentile alongside."""
        a = self.args
        if self.latency is None or not steady:
            return
        end = min(a.minutes, steady[-1]["minute"])
        pooled = latency_figures(self.latency.published_between(self.wall(a.warmup_minutes), self.wall(end)))
        minutes = self.latency_per_minute(a.warmup_minutes, end)
        worst = max((m for m in minutes if m["p99"] is not None), key=lambda m: m["p99"], default=None)
        self.timing(pooled["p99"] is not None and pooled["p99"] <= a.max_latency_s,
                    f"end-to-end latency (publication to commit in the sink) after minute {a.warmup_minutes:g}: "
                    f"p50 {fmt_s(pooled['p50'])}, p99 {fmt_s(pooled['p99'])} over {pooled['n']:,} markers (limit p99 "
                    f"{a.max_latency_s:g} s; the worst minute's p99 {fmt_s(worst and worst['p99'])} at minute "
                    f"{worst['minute'] if worst else '-'})")

    def latency_per_minute(self, first: float, last: float) -> list[dict]:
        """p50 and p99 of the markers published in each minute of the run between first and last."""
        out, m = [], math.floor(first)
        while m < last:
            out.append({"minute": m, **latency_figures(self.latency.published_between(self.wall(m), self.wall(m + 1)))})
            m += 1
        return out

    def judge_sink_outage(self) -> None:
        """The job waited for its database with a console line and wrote again once it answered
        (that nothing was lost is the --compare criterion's)."""
        said = "".join(log.read_text(errors="replace") for log in sorted(self.work.glob("job-*.log")))
        waited, back = "does not answer" in said and "waits, retrying" in said, "answers again" in said
        self.verdicts.append((waited and back, f"sink outage of {self.args.sink_outage_s:g} s: the job "
                              f"{'said it waited' if waited else 'did NOT say it waited'} and "
                              f"{'wrote again once the database answered' if back else 'did NOT write again'}"))

    def judge_catch_up(self, steady: list[dict]) -> None:
        a = self.args
        after = self.catch_up.get("caught_up_after_min")
        behind = sum(v or 0 for v in self.catch_up.get("behind", {}).values())
        self.timing(after is not None and after <= a.catch_up_minutes,
                    f"catch-up: {behind:,} records behind after {a.stop_minutes:g} min stopped; back within "
                    f"{a.max_lag_s:g} s of traffic after {fmt_min(after)} (limit {a.catch_up_minutes:g} min)")
        biggest = self.largest_batches()
        self.verdicts.append((all(n <= a.max_records for n in biggest.values()),
                              "every micro-batch within --max-records "
                              f"{a.max_records:,}: largest {', '.join(f'{SHORT[q]} {n:,}' for q, n in biggest.items())}"))
        second_half = [s for s in steady if s["minute"] >= a.minutes / 2] or steady
        catching = [s for s in self.samples if s["phase"] == "catch-up"]
        for kind in ("driver", "jvm", "python workers"):
            bound = max(s["peak"][kind] for s in second_half) * (1 + a.catch_up_memory)
            peak = max((s["peak"][kind] for s in catching), default=0)
            text = (f"{kind} resident memory while catching up: peak {peak:,.0f} MB (bound {bound:,.0f}: the steady "
                    f"second half's peak +{a.catch_up_memory:.0%})")
            if a.timings_as_figures:            # relative to what a slow machine's job reached by then
                self.figures.append(text)
            else:
                self.verdicts.append((peak <= bound, text))

    def judge_ceilings(self) -> None:
        """--memory-ceiling: each kind of process's peak over the whole run under a fixed bound, however
        fast the machine (the short soak's "memory does not grow without bound")."""
        for kind, ceiling in self.args.memory_ceiling.items():
            peak = max((s["peak"][kind] for s in self.samples), default=0)
            self.verdicts.append((peak <= ceiling, f"{kind} resident memory over the whole run: peak {peak:,.0f} MB "
                                                   f"(ceiling {ceiling:,.0f})"))

    def judge_ctrl_c(self) -> None:
        """Ctrl-C lets no micro-batch start reading after it (the batches in flight finish): a job with
        a backlog stops behind it. A margin of a few seconds covers the signal reaching the driver."""
        from streaming.apps.health import epoch_s
        rows = progress_rows(self.url, "SELECT started_at, input_rows FROM pipeline_progress")
        starts = [epoch_s(r["started_at"]) for r in rows if r["input_rows"]]
        late = [sum(1 for t in starts if at + CTRL_C_MARGIN_S < t < min((b for b in self.job_starts if b > at), default=1e12))
                for at in self.ctrl_c[:-1]]
        self.verdicts.append((not any(late), f"Ctrl-C with a backlog: micro-batches that started reading after it: "
                                              f"{', '.join(map(str, late)) or 'no stop with a backlog'}"))

    def largest_batches(self) -> dict[str, int]:
        rows = progress_rows(self.url, "SELECT COALESCE(query_name, 'dirstream') AS q, MAX(input_rows) AS n "
                                       "FROM pipeline_progress GROUP BY COALESCE(query_name, 'dirstream')")
        return {r["q"]: int(r["n"] or 0) for r in rows if r["q"] in QUERIES}     # records read, not operator rows

    # --------------------------------------------------------------------------- report
    def save(self) -> None:
        for ok, text in self.verdicts:
            print(f"  {'PASS' if ok else 'FAIL'}  {text}", flush=True)
        for text in self.figures:
            print(f"  ----  {text} (a figure: not judged here)", flush=True)
        per_minute = self.latency_per_minute(0, self.minute()) if self.latency else []
        result = {"args": vars(self.args), "events": self.events, "samples": self.samples,
                  "latency_per_minute": per_minute,
                  "catch_up": self.catch_up, "verdicts": [{"ok": ok, "text": t} for ok, t in self.verdicts],
                  "figures": self.figures, "summary": self.summary}
        (self.out / "soak.json").write_text(json.dumps(result, indent=1, default=str))
        try:
            chart(self.samples, self.events, self.args, self.out / "soak.png")
            print(f"soak: samples in {self.out / 'soak.json'}, chart in {self.out / 'soak.png'}", flush=True)
        except ImportError:
            print(f"soak: samples in {self.out / 'soak.json'} (no chart: matplotlib is not installed)", flush=True)


def cost_per_thousand(samples: list[dict], first: float, last: float) -> float | None:
    """The producer's CPU seconds per 1,000 messages it published between two minutes of the run
    (each sample's CPU is its share of a core since the sample before)."""
    inside = [(before, s) for before, s in zip(samples, samples[1:]) if first < s["minute"] <= last + 0.01]
    cpu_s = sum(s["cpu"]["producer"] / 100 * (s["minute"] - before["minute"]) * 60 for before, s in inside)
    published = sum(s["published"] - before["published"] for before, s in inside)
    return 1000 * cpu_s / published if published > 0 else None


def median_near(samples: list[dict], minute: float, kind: str, key: str = "peak") -> float:
    """The median over the three samples nearest `minute` of each one's peak (readings every 5 s
    since the sample before; `key="memory"`: the reading at the sample). A micro-batch's memory
    rises and falls within seconds, so a reading depends on the batch's phase at that instant (the
    driver's alternated between about 250 and 310 MB over the hour); a peak does not."""
    nearest = sorted(samples, key=lambda s: abs(s["minute"] - minute))[:3]
    return statistics.median(s[key][kind] for s in nearest)


def fmt_s(x) -> str:
    return "-" if x is None else "inf" if x == float("inf") else f"{x:.1f} s"


def fmt_min(x) -> str:
    return "never" if x is None else f"{x:.1f} min"


def summary_of(verify_output: str) -> str:
    """verify's summary line per check ("replication: 20 replicas, ..., 0 differences")."""
    lines = [line.strip() for line in verify_output.splitlines() if line.rstrip().endswith(" differences")
             and not line.startswith(("replication:   ", "notifications:   "))]
    return "; ".join(lines) or verify_output.strip()[-300:]


def header() -> str:
    q = " ".join(f"{SHORT[q][:5]:>16}" for q in QUERIES)
    cpu = " ".join(f"{k[:6]:>6}" for k in PROCESSES)
    return (f"{'min':>6} {'phase':8} {'published':>10} {q} {'latency s':>12}   CPU % of a core: {cpu}   "
            f"PSS MB: {cpu}   state MB\n{'':>6} {'':8} {'':>10} {'(read / lag s)':>16} {'(p50 / p99)':>12}")


def row(s: dict) -> str:
    def query(q):
        v = s["queries"].get(q)
        return f"{'-':>16}" if not v else f"{v['read']:>9,}/{fmt_s(v['lag_s']).replace(' s', ''):>6}"
    cpu = " ".join(f"{s['cpu'][k]:>6.0f}" for k in PROCESSES)
    memory = " ".join(f"{s['memory'][k]:>6,.0f}" for k in PROCESSES)
    latency = s.get("latency") or {}
    late = f"{fmt_s(latency.get('p50')).replace(' s', '')}/{fmt_s(latency.get('p99')).replace(' s', '')}"
    return (f"{s['minute']:>6.1f} {s['phase']:8} {s['published']:>10,} {' '.join(query(q) for q in QUERIES)} "
            f"{late:>12}   {'':17}{cpu}   {'':7} {memory}   {sum((s.get('state_mb') or {}).values()):>8,.0f}")


def chart(samples: list[dict], events: list, args, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (lag, latency, memory, cpu) = plt.subplots(4, 1, figsize=(11, 13), sharex=True)
    minutes = [s["minute"] for s in samples]
    for q in QUERIES:
        values = [s["queries"].get(q, {}).get("lag_s") for s in samples]
        lag.plot(minutes, [min(v, 3600) if v is not None else float("nan") for v in values], label=SHORT[q])
    lag.axhline(args.max_lag_s, color="red", linestyle="--", linewidth=1, label=f"{args.max_lag_s:g} s limit")
    lag.set_yscale("symlog", linthresh=1)
    lag.set_ylim(bottom=0)
    lag.set_ylabel("lag (s of traffic)")
    for key, style in (("p50", "-"), ("p99", "--")):
        values = [(s.get("latency") or {}).get(key) for s in samples]
        latency.plot(minutes, [v if v is not None else float("nan") for v in values], linestyle=style,
                     label=f"{key} of the markers committed since the sample before")
    latency.axhline(args.max_latency_s, color="red", linestyle="--", linewidth=1, label=f"{args.max_latency_s:g} s target")
    latency.set_yscale("symlog", linthresh=1)
    latency.set_ylim(bottom=0)
    latency.set_ylabel("publication to commit (s)")
    for kind in PROCESSES:
        line, = memory.plot(minutes, [s["memory"][kind] for s in samples], label=kind)
        memory.plot(minutes, [s["peak"][kind] for s in samples], color=line.get_color(), linestyle=":", linewidth=1)
        cpu.plot(minutes, [s["cpu"][kind] for s in samples], label=kind)
    memory.set_ylabel("memory, PSS (MB; dotted: peak)")
    cpu.set_ylabel("CPU (% of one core)")
    cpu.set_xlabel("minute")
    for axis in (lag, latency, memory, cpu):
        for minute, what in events:
            axis.axvline(minute, color="grey", linestyle=":", linewidth=1)
        axis.legend(loc="upper left", fontsize=8)
        axis.grid(alpha=0.3)
    for minute, what in events:
        lag.annotate(what.split(",")[0].split(":")[0], (minute, lag.get_ylim()[1]), rotation=90, fontsize=7,
                     va="top", ha="right", color="grey")
    fig.suptitle(f"dirstream soak: {args.rate:,} msg/s, every fault type, --max-records {args.max_records:,}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=60, help="the steady phase (default 60)")
    p.add_argument("--rate", type=int, default=2000, help="messages per second published (default 2000)")
    p.add_argument("--broker-restart-at", type=float, default=20,
                   help="minute of the steady phase at which the broker is restarted (default 20; 0: never)")
    p.add_argument("--sink-outage-at", type=float, default=0,
                   help="minute of the steady phase after which the sink database is stopped (the sink is then "
                        "a PostgreSQL server of the run's own; default 0: SQLite, no outage)")
    p.add_argument("--sink-outage-s", type=float, default=30, help="how long the sink database is down (default 30)")
    p.add_argument("--restarts", type=int, default=0,
                   help="stop and start the job again this many times in the steady phase, evenly spaced, with "
                        "SIGTERM to its process group, SIGINT and SIGTERM to the driver in turn (default 0)")
    p.add_argument("--no-respond", action="store_true",
                   help="the producer does not answer the replicas (`produce respond` does, after the traffic)")
    p.add_argument("--stop-minutes", type=float, default=10, help="the job stopped for this long (default 10; 0: "
                                                                  "no catch-up phase)")
    p.add_argument("--catch-up-minutes", type=float, default=10, help="the catch-up limit (default 10)")
    p.add_argument("--max-records", type=int, default=20_000,
                   help="the job's --max-records (default 20,000: a catch-up in batches no bigger than memory allows)")
    p.add_argument("--max-lag-s", type=float, default=30, help="lag bound in seconds of traffic (default 30)")
    p.add_argument("--max-latency-s", type=float, default=10,
                   help="bound on the steady phase's 99th percentile of end-to-end latency (default 10)")
    p.add_argument("--warmup-minutes", type=float, default=5, help="lag and latency are not judged before (default 5)")
    p.add_argument("--memory-growth", type=float, default=0.10, help="resident memory growth allowed (default 0.10)")
    p.add_argument("--catch-up-memory", type=float, help="memory while catching up allowed above the steady second "
                                                            "half's peak (default: --memory-growth)")
    p.add_argument("--sample-s", type=float, default=60, help="seconds between samples (default 60)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--clock", choices=("wall", "accelerated"), default="wall",
                   help="the simulator's clock: wall (default: its enterprise in real time, `produce simulate "
                        "--wall-clock`) or accelerated (simulated time, --op-interval-ms between operations: "
                        "hours of event time in minutes)")
    p.add_argument("--op-interval-ms", default="100-500",
                   help="the simulator's, with --clock accelerated and in its quiet tail (default 100-500)")
    p.add_argument("--quiet-s", type=float, default=60,
                   help="after the traffic: the job is done when its topics have not grown for this long (default 60)")
    p.add_argument("--settle-minutes", type=float, default=20,
                   help="after the traffic: the longest the job runs on, answered, before it is stopped (default 20)")
    p.add_argument("--quiet-within-minutes", type=float, default=10,
                   help="after the traffic: the job must be quiet within this many minutes of answers (default 10)")
    p.add_argument("--producer-cost-growth", type=float, default=0.15,
                   help="the producer's CPU per 1,000 messages, the last 5 steady minutes against minutes 5-10, "
                        "may grow by at most this fraction (default 0.15)")
    p.add_argument("--compare", action="store_true",
                   help="also run a fresh checkpoint's --once over the final Kafka content and compare every table")
    p.add_argument("--metrics-port", type=int, default=0, help="the job's Prometheus port (default 0: off)")
    p.add_argument("--memory-ceiling", action="append", default=[], metavar="KIND=MB",
                   help=f"a fixed bound on a kind of process's resident memory over the whole run ({', '.join(JUDGED)}); "
                        "repeatable")
    p.add_argument("--timings-as-figures", action="store_true",
                   help="print the lag and catch-up times as figures instead of judging them (the test suite's "
                        "short soak: a loaded machine is slower, not wrong); the catch-up phase ends once caught up")
    p.add_argument("--out", default="var/soak", help="where soak.json, soak.png and the run's files go")
    p.add_argument("--keep", action="store_true", help="keep the run's broker, sink and logs (OUT/work)")
    args = p.parse_args(argv)
    if args.catch_up_memory is None:
        args.catch_up_memory = args.memory_growth
    ceilings = dict(item.split("=", 1) for item in args.memory_ceiling)
    unknown = set(ceilings) - set(JUDGED)
    if unknown:
        p.error(f"--memory-ceiling: unknown kind(s) {', '.join(sorted(unknown))}; one of {', '.join(JUDGED)}")
    args.memory_ceiling = {kind: float(mb) for kind, mb in ceilings.items()}
    return args


def main() -> int:
    args = parse_args()
    short = disk_short(Path(args.out), args)
    if short:
        print(short, file=sys.stderr)
        return 2
    return Soak(args).run()


if __name__ == "__main__":
    sys.exit(main())
