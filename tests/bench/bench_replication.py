"""Benchmark of the MQDSRP replication operator (prints figures; not a timed test).

Builds replicas holding --objects directory objects in Spark state (RocksDB), then measures:
  1. directory changes per second through the operator (Kafka -> decode -> transformWithStateInPandas
     -> SQLite sink) while that many objects are in state; target: >= 10,000 per second;
  2. how long a restart from the checkpoint takes to process its first new batch;
  3. the sans-IO core alone (one core), for comparison: a micro-batch's messages decoded and applied,
     then its rows taken and the buckets written back, --per-message changes a message and 25
     messages a micro-batch.
The objects are split over --servers BSC replicas (one Spark task each), fed by change
propagations of --per-message changes, as a PSC sends them.

Run: make bench-replication  (or .venv/bin/python tests/bench/bench_replication.py --objects 200000)
     --builds: the sans-IO core alone, compiled build against pure-Python sources side by side
"""
import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from builds import figures_line, print_comparison, side_by_side  # noqa: E402

from infra.broker import EmbeddedBroker  # noqa: E402
from producers.kafka import ConfluentPublisher, KafkaSettings, ensure_topics  # noqa: E402
from producers.publish import publish_envelope  # noqa: E402
from streaming.wire.envelope import make_envelope  # noqa: E402
from streaming.operators.replica_store import DictBackend, ObjectStore  # noqa: E402
from streaming.operators.replication import PEC_PARTITION_ID, Replica, ServerState  # noqa: E402
from streaming.operators.replication_rows import step_rows  # noqa: E402
from streaming.spark.worker_gc import set_worker_gc  # noqa: E402
from streaming.wire.topics import TOPICS  # noqa: E402
from streaming.wire import decode, encode, mqdsrp  # noqa: E402
from streaming.wire.properties import Property  # noqa: E402
from streaming.wire.propids import propid  # noqa: E402

SITE = "11111111-1111-4111-8111-111111111111"
EPOCH_MS = 1_767_225_600_000


def guid(server: int, n: int) -> str:
    return f"{server:08d}-0000-4000-8000-{n:012d}"


class Workload:
    """Change propagations psc1 -> bsc<k>: the site first, then creates, then updates."""

    def __init__(self, servers: int, per_message: int):
        self.servers, self.per_message = servers, per_message
        self.seq = {k: 0 for k in range(servers)}
        self.now = EPOCH_MS
        self.rng = random.Random(7)

    def _change(self, k, command, use_guid, path, gid, pid, props):
        self.seq[k] += 1
        return mqdsrp.DirectoryChange(command, use_guid, path, gid, pid, self.seq[k] - 1, self.seq[k], 0, props)

    def _envelopes(self, k: int, changes: list) -> list[tuple[str, dict]]:
        out = []
        for i in range(0, len(changes), self.per_message):
            chunk = changes[i:i + self.per_message]
            body = encode("mqdsrp", mqdsrp.new_message(SITE, mqdsrp.ChangePropagationMessage(
                0, len(chunk), chunk, mqdsrp.SeqNumberHeader(0))))
            self.now += 10
            out.append((f"bsc{k}", make_envelope("mqdsrp", body, source_machine="psc1", destination_machine=f"bsc{k}",
                                                 destination_queue="", sent_time=self.now)))
        return out

    def site(self) -> list:
        props = [Property(propid("S_SITEID"), SITE), Property(propid("S_PATHNAME"), "site1"),
                 Property(propid("S_PSC"), "psc1")]
        site_seq = {}
        out = []
        for k in range(self.servers):
            site_seq[k] = 1
            change = mqdsrp.DirectoryChange(0, 0, "site1", None, PEC_PARTITION_ID, 0, 1, 0, props)
            out += self._envelopes(k, [change])
        return out

    def creates(self, n_per_server: int) -> list:
        out = []
        for k in range(self.servers):
            changes = [self._change(k, 0, 0, f"qm{k}\\q{n}", None, SITE, [
                Property(propid("Q_INSTANCE"), guid(k, n)), Property(propid("Q_PATHNAME"), f"qm{k}\\q{n}"),
                Property(propid("Q_LABEL"), f"q{n}"), Property(propid("Q_QUOTA"), 1000),
                Property(propid("Q_JOURNAL"), 0), Property(propid("Q_TRANSACTION"), 0)])
                for n in range(n_per_server)]
            out += self._envelopes(k, changes)
        return out

    def updates(self, n_per_server: int, objects_per_server: int) -> list:
        out = []
        for k in range(self.servers):
            changes = []
            for _ in range(n_per_server):
                n = self.rng.randrange(objects_per_server)
                changes.append(self._change(k, 1, 1, None, guid(k, n), SITE, [
                    Property(propid("Q_LABEL"), f"label {self.seq[k]}"), Property(propid("Q_QUOTA"), self.seq[k])]))
            out += self._envelopes(k, changes)
        return out


def publish(bootstrap: str, items: list) -> None:
    pub = ConfluentPublisher(KafkaSettings(bootstrap))
    for key, env in items:
        publish_envelope(pub, "mqdsrp", key, env)
    pub.close()


def run_once(spark, bootstrap: str, sink: str, checkpoint: str) -> float:
    from streaming.operators.notifications import Settings
    from streaming.spark.job_query import start_job_query
    from streaming.spark.pipeline import source_options
    opts = source_options(bootstrap, max_records=1_000_000)     # the job's one query; only MQDSRP is published
    start = time.perf_counter()
    q = start_job_query(spark, sink_url=sink, checkpoint=checkpoint, source_opts=opts, once=True,
                        echo=lambda line: None, pec_name="pec0", settings=Settings(), outbound_topic=None)
    q.awaitTermination()
    if q.exception():
        raise RuntimeError(q.exception())
    return time.perf_counter() - start


def core_rate(objects: int, updates: int, per_message: int, batch_messages: int = 25) -> float:
    """Changes per second through the sans-IO core as the operator runs it: the messages of a micro-batch
    decoded and applied, then the step's rows taken (which empties the step's versions) and the
    buckets written back; the garbage collector set as in the operator's Python worker."""
    set_worker_gc()
    w = Workload(1, per_message)
    r = Replica(ServerState("bsc0"), ObjectStore(DictBackend()), "pec0")

    def feed(items: list) -> None:
        for at in range(0, len(items), batch_messages):
            for _key, e in items[at:at + batch_messages]:
                r.receive(decode("mqdsrp", e["body"]), arrival_ms=e["arrival_time"], source="psc1")
            step_rows(r, e["arrival_time"])
            r.store.flush()
    feed(w.site() + w.creates(objects))
    ups = w.updates(updates, objects)
    start = time.perf_counter()
    feed(ups)
    return updates / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=200_000)
    ap.add_argument("--updates", type=int, default=200_000)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--per-message", type=int, default=200)
    ap.add_argument("--builds", action="store_true", help="the core on the compiled build and on the sources")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    per_server = args.objects // args.servers
    core = lambda: core_rate(per_server, min(args.updates // args.servers, 50_000), args.per_message)  # noqa: E731
    if args.json:
        print(figures_line({f"core, {per_server:,} objects": core()}))
        return
    if args.builds:
        print("the replication operator's sans-IO core, one core, best of 3 rounds per build")
        print_comparison(side_by_side(__file__, sys.argv[1:]), "changes/s")
        return
    print(f"core (sans-IO, one core, {per_server:,} objects): "
          f"{core_rate(per_server, min(args.updates // args.servers, 50_000), args.per_message):,.0f} changes/s")

    work = Path(tempfile.mkdtemp(prefix="bench-replication-"))
    broker = EmbeddedBroker(work / "broker", port=19393)
    broker.start()
    from streaming.spark.pipeline import build_spark
    spark = build_spark("local[2]", conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "4g"})
    try:
        ensure_topics(KafkaSettings(broker.bootstrap), {**{t: 1 for t in TOPICS.values()}, TOPICS["mqdsrp"]: 2})
        w = Workload(args.servers, args.per_message)
        sink, ckpt = f"sqlite:///{work}/sink.db", str(work / "checkpoint")
        publish(broker.bootstrap, w.site() + w.creates(per_server))
        t = run_once(spark, broker.bootstrap, sink, ckpt)
        print(f"state build: {args.objects:,} creates in {t:.1f} s ({args.objects / t:,.0f} changes/s)")
        publish(broker.bootstrap, w.updates(args.updates // args.servers, per_server))
        t = run_once(spark, broker.bootstrap, sink, ckpt)
        print(f"with {args.objects:,} objects in state: {args.updates:,} updates in {t:.1f} s "
              f"({args.updates / t:,.0f} changes/s; target 10,000)")
        spark.stop()
        spark = build_spark("local[2]", conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "4g"})
        publish(broker.bootstrap, w.updates(500, per_server))
        t = run_once(spark, broker.bootstrap, sink, ckpt)
        print(f"restart from the checkpoint (new session, {args.servers * 500} new changes): {t:.1f} s to done")
    finally:
        spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
