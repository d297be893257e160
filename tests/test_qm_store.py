"""The queue managers' state in parts (streaming.spark.qm_store), driven by hand through pyspark's
TwsTester without a Spark session: the same tables however a queue manager's input is cut into
micro-batches, each call writing what its batch changed (not the windows the queue manager holds),
and a state stored whole by earlier versions taken on where it stood."""
import pickle
import random

import pandas as pd
import pytest
from pyspark.sql.streaming.tws_tester import TwsTester

from producers.simulator import Faults, Simulator
from replication_harness import OfflineJob, arrival_ms
from streaming.operators.notification_input import DIRECTORY
from streaming.operators.notifications import MessageIdHistory, QMState, Settings, queue_manager_of
from streaming.spark.notification_query import NotificationProcessor
from streaming.spark.qm_store import Layout, load_part
from test_poison import outputs

DELAY_MS = 10_000                   # the job's watermark delay
FAULTS = Faults(reorder=0.1, duplicate=0.1, unauthenticated=0.05)


def notifications(seed: int, count: int = 6000) -> dict[str, pd.DataFrame]:
    """The simulator's MQCN messages (duplicates among them) as the second operator's input, per queue manager."""
    rows: dict[str, list[dict]] = {}
    for offset, m in enumerate(Simulator(seed=seed, faults=FAULTS, burst_rate=0.01).messages(count)):
        env = m.envelope
        if env["protocol"].lower() != "mqcn" or m.kind.startswith("corrupt:"):
            continue
        rows.setdefault(queue_manager_of(env["destination_queue"]) or env["destination_machine"], []).append({
            "event_ms": arrival_ms(env), "kind": "mqcn", "topic": "msmq.cn.raw", "partition": 0, "offset": offset,
            "body": env["body"], "message_id": env["message_id"],
            "sender_identifier_type": env["sender_identifier_type"],
            "authentication_level": env["authentication_level"], "source_machine": env["source_machine"],
            "destination_machine": env["destination_machine"], "destination_queue": env["destination_queue"],
            "capture": None})
    return {k: pd.DataFrame(v) for k, v in rows.items()}


class Run:
    """A NotificationProcessor driven through micro-batches, counting the bytes each call writes."""

    def __init__(self, settings: Settings):
        self.tester = TwsTester(NotificationProcessor(settings), timeMode="EventTime",
                                eventTimeExtractor=lambda row: int(row["event_ms"]))
        self.tables: dict[str, list[dict]] = {}
        self.written: list[int] = []            # bytes written to the parts, per call
        store = self.tester.processor.store
        update = store.parts.updateValue

        def counted(key, value):
            self.written[-1] += len(value[0])
            update(key, value)
        store.parts.updateValue = counted

    def batch(self, key: str, frame: pd.DataFrame, watermark_ms: int) -> None:
        self.written.append(0)
        self._take(self.tester.testInPandas(key, frame.reset_index(drop=True)))
        self.written.append(0)
        if watermark_ms > self.tester._currentWatermarkMs:
            self._take(self.tester.setWatermark(watermark_ms))

    def _take(self, frame) -> None:
        for table, rows in outputs(frame).items():
            self.tables.setdefault(table, []).extend(rows)

    def final(self) -> dict:
        """Each table's rows, the last of each key for the tables written again as they change."""
        out = {"notifications": sorted(map(repr, (sorted(r.items()) for r in self.tables.get("notifications", []))))}
        for table, key in (("queue_managers", ("machine_id",)), ("qm_queues", ("queue_manager", "queue_guid")),
                           ("notification_batches", ("queue_manager", "batch"))):
            last = {tuple(r[k] for k in key): r for r in self.tables.get(table, [])}
            out[table] = {k: {c: v for c, v in r.items() if c != "processed_at"} for k, r in last.items()}
        return out


def drive(run: Run, key: str, frame: pd.DataFrame, cuts: list[int]) -> None:
    """The frame in micro-batches ending at the cuts, the watermark 10 s behind what was read."""
    for a, b in zip(cuts, cuts[1:]):
        part = frame.iloc[a:b]
        run.batch(key, part, int(frame["event_ms"].iloc[:b].max()) - DELAY_MS)


def finish(run: Run, key: str, frame: pd.DataFrame) -> None:
    run.written.append(0)
    run._take(run.tester.setWatermark(int(frame["event_ms"].max()) + 3_600_000))


def busiest(seed: int) -> tuple[str, pd.DataFrame]:
    return max(notifications(seed).items(), key=lambda kv: len(kv[1]))


@pytest.mark.parametrize("seed", range(3))
def test_the_tables_are_the_same_however_the_input_is_cut(seed):
    key, frame = busiest(seed)
    rng = random.Random(seed)
    settings = Settings(window_ms=60_000, first_wait_ms=10_000, quiet_ms=50_000)    # many batches fire
    whole = Run(settings)
    drive(whole, key, frame, [0, len(frame)])
    finish(whole, key, frame)
    cut = Run(settings)
    cuts = sorted({0, len(frame), *rng.sample(range(1, len(frame)), 40)})
    drive(cut, key, frame, cuts)
    finish(cut, key, frame)
    assert len(whole.tables["notifications"]) > 300
    assert any(r["outcome"] == "duplicate" for r in whole.tables["notifications"])
    assert cut.final() == whole.final()


def test_a_call_writes_its_batch_not_the_windows():
    """Under a 15-minute batching window and a 30-minute message id history, the calls write about
    what their input holds (a minute's message ids once more when the watermark passes it), while
    the queue manager holds many times more."""
    key, frame = busiest(1)
    run = Run(Settings())
    step = max(1, len(frame) // 60)
    drive(run, key, frame, list(range(0, len(frame), step)) + [len(frame)])
    store = run.tester.processor.store
    run.tester.handle.setGroupingKey(key)
    held = sum(len(value[0]) for _part, value in store.parts.iterator())
    calls = list(zip(run.written[0::2], [frame.iloc[a:a + step]["body"].map(len).sum()
                                         for a in range(0, len(frame), step)]))[len(frame) // step // 2:]
    written, bodies = sum(w for w, _ in calls), sum(b for _, b in calls)
    _core, layout = pickle.loads(run.tester.peekValueState("qm_core", key)[0])
    past = [minute for minute, _part in layout["ids"] if minute + 60_000 <= run.tester._currentWatermarkMs]
    assert len(past) >= 3 and len(past) == len(set(past))        # a part per minute passed: read in few calls
    assert held > 20 * written / len(calls), (held, written / len(calls))
    assert written <= 3 * bodies + 5_000 * len(calls), (written, bodies)


def test_a_window_bound_to_be_refreshed_stores_what_its_refresh_records():
    """Past the 100 notifications that bind a window to a refresh, the parts hold what the refresh
    records of each (not the message with its body): a fraction of the bodies' bytes, and the fire
    gives a row per notification all the same."""
    key, frame = max(notifications(3, 25_000).items(), key=lambda kv: len(kv[1]))
    frame = frame.sort_values("event_ms", kind="stable").reset_index(drop=True)
    run = Run(Settings(first_wait_ms=10**11, window_ms=10**11, quiet_ms=10**11))     # one window
    drive(run, key, frame, list(range(0, len(frame), 500)) + [len(frame)])
    core, layout = pickle.loads(run.tester.peekValueState("qm_core", key)[0])
    parts = {k[0]: v[0] for k, v in run.tester.peekMapState("qm_parts", key).items()}
    stored = sum(len(parts[part]) for part in layout["pending"])
    bodies = frame["body"].map(len).sum()
    assert layout["pending_count"] > 2000 and stored * 2 < bodies, (stored, bodies)
    run.written.append(0)
    run._take(run.tester.setWatermark(int(frame["event_ms"].max()) + 2 * 10**11))        # the timer fires
    fired = [r for r in run.tables["notifications"] if r["batch"] == 1]
    # those pending, and those the last watermark still held back
    assert len(fired) == len({r["message_id"] for r in fired}) >= layout["pending_count"]
    assert {r["outcome"] for r in fired} == {"superseded-by-refresh"}


def stored_whole(run: Run, key: str, applied: pd.DataFrame) -> bytes:
    """The key's state as an earlier version stored it whole: (pickled QMState, waiting rows), its
    message id table that of the applied rows."""
    ids_of_messages = MessageIdHistory({})
    for _i, r in applied.sort_values(["event_ms", "offset"]).iterrows():
        ids_of_messages.renew(r["message_id"], int(r["event_ms"]))
    ids_of_messages = ids_of_messages.ids
    tester = run.tester
    core, layout = pickle.loads(tester.peekValueState("qm_core", key)[0])
    layout = Layout(**layout)
    ids = {part for _minute, part in layout.ids}
    parts = {k[0]: load_part(v[0]) for k, v in tester.peekMapState("qm_parts", key).items() if k[0] not in ids}
    st: QMState = pickle.loads(core)
    st.pending = [n for part in layout.pending for n in parts[part]]
    st.message_ids = ids_of_messages                # the history as an earlier version kept it
    held = [r for part, _earliest in layout.held for r in parts[part]]
    return pickle.dumps((pickle.dumps(st, protocol=5), held), protocol=5)


def test_a_state_stored_whole_by_an_earlier_version_goes_on_the_same():
    key, frame = busiest(2)
    half = len(frame) // 2
    cuts = list(range(0, len(frame), max(1, len(frame) // 30))) + [len(frame)]
    first = [c for c in cuts if c <= half] + [half]
    rest = [half] + [c for c in cuts if c > half]
    going_on = Run(Settings())
    drive(going_on, key, frame, first)
    assert going_on.tester.peekMapState("qm_parts", key)
    applied = frame.iloc[:half]
    whole = stored_whole(going_on, key, applied[applied["event_ms"] <= going_on.tester._currentWatermarkMs])
    pending, held = pickle.loads(pickle.loads(whole)[0]).pending, pickle.loads(whole)[1]
    assert pending and held                        # a batching window open, rows waiting for the clock
    restarted = Run(Settings())
    restarted.tester.updateValueState("queue_manager", key, (whole,))
    restarted.tester.setWatermark(going_on.tester._currentWatermarkMs)      # nothing due: no timer yet
    going_on.tables.clear()
    for run in (going_on, restarted):
        drive(run, key, frame, rest)
        finish(run, key, frame)
    assert restarted.tester.peekValueState("queue_manager", key) is None     # now stored in parts
    assert restarted.final() == going_on.final() and len(going_on.tables["notifications"]) > 100



@pytest.mark.parametrize("seed", range(5))
def test_the_stored_message_id_table_answers_as_the_in_memory_one(seed):
    """Over 100 minutes of arrivals revisiting recent and old ids, with a part written whenever a
    micro-batch ends: the copies seen before each arrival, as [MS-MQQB]'s table in memory counts them
    (entries forgotten 30 minutes after they were last seen)."""
    from streaming.spark.qm_store import IdPart, StoredHistory, encode_ids
    rng = random.Random(seed)
    ids = [f"{{{rng.randrange(16 ** 8):08x}-0000-0000-0000-000000000000}}\\{i}" for i in range(600)]
    reference, parts, stored = MessageIdHistory({}), [], StoredHistory([])
    now, copies = 0, []
    for step in range(3000):
        now += rng.randrange(0, 4000)
        message_id = rng.choice(ids[:50 + step // 6])
        copies.append(stored.renew(message_id, now))
        assert copies[-1] == reference.renew(message_id, now)
        if rng.random() < 0.05:
            parts.append(IdPart(encode_ids(stored.seen)))
            stored = StoredHistory(list(parts))
    assert sum(c > 0 for c in copies) > 300 and sum(c == 0 for c in copies) > 300


class _RecordingJob(OfflineJob):
    """The offline job, keeping every row each queue manager was given: notifications and the directory
    versions the replicas derived, as the job's second operator gets them."""

    def __init__(self):
        super().__init__()
        self.inputs: dict[str, list] = {}
        self._kept: set[int] = set()

    def fire_qm_timers(self, watermark_ms: int) -> None:
        for key, rows in self.held.items():
            for row in rows:
                if id(row) not in self._kept:
                    self._kept.add(id(row))
                    self.inputs.setdefault(key, []).append(row)
        super().fire_qm_timers(watermark_ms)


def with_directory(seed: int, count: int = 12_000) -> tuple[str, pd.DataFrame]:
    """The busiest queue manager's input, directory versions included, in event-time order."""
    envelopes = [m.envelope for m in Simulator(seed=seed, faults=FAULTS, burst_rate=0.01).messages(count)]
    job = _RecordingJob()
    for a in range(0, len(envelopes), 500):
        job.feed(envelopes[a:a + 500])
    key, rows = max(job.inputs.items(), key=lambda kv: len(kv[1]))
    frame = pd.DataFrame([r._asdict() for r in rows]).sort_values("event_ms", kind="stable")
    return key, frame.reset_index(drop=True)


def _count_writes(run: Run) -> dict[str, list[int]]:
    """Bytes each call writes to the core and to the directory."""
    store, written = run.tester.processor.store, {"core": [], "directory": []}
    core_update, directory_update = store.core.update, store.directory.updateValue

    def core(value):
        written["core"].append(len(value[0]))
        core_update(value)

    def directory(key, value):
        written["directory"][-1] += len(value[0])
        directory_update(key, value)
    store.core.update, store.directory.updateValue = core, directory
    return written


@pytest.mark.parametrize("seed", range(2))
def test_the_directory_is_read_and_written_an_object_at_a_time(seed):
    """The directory a queue manager reads (every object of its own, as the replicas show them) grows
    with the enterprise: a call writes the objects its rows changed, the core stays small, and the
    tables are the same however the input is cut (a refresh reads every object)."""
    key, frame = with_directory(seed)
    assert (frame["kind"] == DIRECTORY).sum() > 300 and (frame["kind"] == "mqcn").sum() > 300
    settings = Settings(window_ms=60_000, first_wait_ms=10_000, quiet_ms=50_000)
    whole = Run(settings)
    drive(whole, key, frame, [0, len(frame)])
    finish(whole, key, frame)
    cut = Run(settings)
    written = _count_writes(cut)
    step = max(1, len(frame) // 80)
    cuts = list(range(0, len(frame), step)) + [len(frame)]
    for a, b in zip(cuts, cuts[1:]):
        written["directory"].append(0)
        drive(cut, key, frame, [a, b])
    finish(cut, key, frame)
    assert cut.final() == whole.final()
    assert any(r["outcome"] == "superseded-by-refresh" for r in whole.tables["notifications"])
    assert any(r["outcome"] == "applied" for r in whole.tables["notifications"])
    cut.tester.handle.setGroupingKey(key)
    held = sum(len(value[0]) for _guid, value in cut.tester.processor.store.directory.iterator())
    late = len(cuts) // 2                           # once the directory holds many objects
    per_call = sum(written["directory"][late:]) / len(written["directory"][late:])
    assert max(written["core"][late:]) < held, (max(written["core"][late:]), held)     # not in the core
    assert per_call < held / 10, (per_call, held)


def halfway() -> tuple[str, pd.DataFrame, Run, list[int]]:
    """A queue manager's input with its directory, driven halfway in micro-batches: (key, input, the
    run, the cuts of the rest)."""
    key, frame = with_directory(3)
    half = len(frame) // 2
    cuts = list(range(0, len(frame), max(1, len(frame) // 30))) + [len(frame)]
    first, rest = [c for c in cuts if c <= half] + [half], [half] + [c for c in cuts if c > half]
    going_on = Run(Settings())
    drive(going_on, key, frame, first)
    return key, frame, going_on, rest


def go_on_both(key: str, frame: pd.DataFrame, going_on: Run, restarted: Run, rest: list[int]) -> None:
    """The rest of the input through the run that went on and the one restarted from a stored state,
    the restarted one at the watermark the other stood at: the same tables."""
    restarted.tester.setWatermark(going_on.tester._currentWatermarkMs)
    going_on.tables.clear()
    for run in (going_on, restarted):
        drive(run, key, frame, rest)
        finish(run, key, frame)
    assert restarted.final() == going_on.final() and len(going_on.tables["notifications"]) > 100


def test_a_core_holding_its_directory_goes_on_the_same():
    """A state stored in parts by an earlier version, its directory in the core: read from there,
    then written an object at a time."""
    key, frame, going_on, rest = halfway()
    tester = going_on.tester
    core, layout = pickle.loads(tester.peekValueState("qm_core", key)[0])
    st = pickle.loads(core)
    st.directory = {k[0]: pickle.loads(v[0]) for k, v in tester.peekMapState("qm_directory", key).items()}
    assert len(st.directory) > 20
    del st.several_versions                         # not kept then
    earlier = pickle.dumps((pickle.dumps(st, protocol=5), layout), protocol=5)
    restarted = Run(Settings())
    restarted.tester.updateMapState("qm_parts", key, tester.peekMapState("qm_parts", key))
    restarted.tester.updateValueState("qm_core", key, (earlier,))
    go_on_both(key, frame, going_on, restarted, rest)
    again = pickle.loads(pickle.loads(restarted.tester.peekValueState("qm_core", key)[0])[0])
    assert again.directory == {} and restarted.tester.peekMapState("qm_directory", key)


def test_parts_stored_uncompressed_by_an_earlier_version_go_on_the_same():
    """Waiting rows and pending notifications pickled alone (as earlier versions stored them) are read
    as they are; what a call writes is compressed, a fraction of its pickled size."""
    key, frame, going_on, rest = halfway()
    tester = going_on.tester
    _core, layout = pickle.loads(tester.peekValueState("qm_core", key)[0])
    rows_and_pending = {part for part, _earliest in layout["held"]} | set(layout["pending"])
    parts = tester.peekMapState("qm_parts", key)
    assert rows_and_pending and all(parts[(part,)][0][:1] == b"\x78" for part in rows_and_pending)    # zlib
    plain = {k: (pickle.dumps(load_part(v[0]), protocol=5),) if k[0] in rows_and_pending else v
             for k, v in parts.items()}
    packed, unpacked = (sum(len(parts[k][0]) for k in plain if k[0] in rows_and_pending),
                        sum(len(plain[k][0]) for k in plain if k[0] in rows_and_pending))
    assert packed * 4 < unpacked, (packed, unpacked)
    restarted = Run(Settings())
    restarted.tester.updateMapState("qm_parts", key, plain)
    restarted.tester.updateMapState("qm_directory", key, tester.peekMapState("qm_directory", key))
    restarted.tester.updateValueState("qm_core", key, tester.peekValueState("qm_core", key))
    go_on_both(key, frame, going_on, restarted, rest)
