"""A message an operator raises on does not fail the micro-batch: it goes to dead_letters with the
stage, the exception and its raw bytes, and the key's state is as if it had never come (driven by
hand through pyspark's TwsTester, without a Spark session)."""
import pickle

import pandas as pd
import pytest
from pyspark.sql.streaming.tws_tester import TwsTester

from producers.simulator import Simulator
from replication_harness import arrival_ms
from streaming.operators.notifications import Settings
from streaming.operators.notifications import QueueManager
from streaming.spark import discovery_query, notification_query, replication_query
from conftest import spies_on_calls


def frames(protocol: str, key_of, count=3000, seed=4) -> dict[str, pd.DataFrame]:
    """The simulator's messages of one protocol as the operator's input rows, per key."""
    rows: dict[str, list[dict]] = {}
    for offset, m in enumerate(Simulator(seed=seed).messages(count)):
        env = m.envelope
        if env["protocol"].lower() != protocol:
            continue
        key = key_of(env)
        rows.setdefault(key, []).append({
            "state_key": key, "qm_key": key, "arrival_ms": arrival_ms(env), "event_ms": arrival_ms(env),
            "topic": f"msmq.{protocol}.raw", "partition": 0, "offset": offset, "body": env["body"],
            "kind": protocol, "source_machine": env["source_machine"], "message_class": env["message_class"],
            "destination_queue": env["destination_queue"], "destination_machine": env["destination_machine"],
            "message_id": env["message_id"], "sender_identifier_type": env["sender_identifier_type"],
            "authentication_level": env["authentication_level"]})
    return {k: pd.DataFrame(v) for k, v in rows.items()}


class PoisonForTests(RuntimeError):
    pass


def poison(monkeypatch, *ids):
    """From now on every operator raises while it handles these messages (none: no message): the
    step each operator takes per message is wrapped, in this process (TwsTester runs the operators
    here), so the job's own code holds no test hook."""
    if not hasattr(monkeypatch, "poisoned"):
        monkeypatch.poisoned = poisoned = set()

        def check(message_id) -> None:
            if message_id in poisoned:
                raise PoisonForTests(f"message {message_id} is poison")

        receive, guarded, process = replication_query._receive, discovery_query.apply_guarded, QueueManager.process

        def receive_poisoned(replica, row):
            check(row.message_id)
            return receive(replica, row)

        def process_poisoned(qm, n, now, batch):
            qm.current = n                  # what the operator blames, as QueueManager.process sets it
            check(n.message_id)
            return process(qm, n, now, batch)

        def guarded_poisoned(load, items, apply):
            return guarded(load, items, lambda work, row: (check(row.message_id), apply(work, row))[1])

        monkeypatch.setattr(replication_query, "_receive", receive_poisoned)
        monkeypatch.setattr(QueueManager, "process", process_poisoned)
        monkeypatch.setattr(discovery_query, "apply_guarded", guarded_poisoned)
    monkeypatch.poisoned.clear()
    monkeypatch.poisoned.update(ids)


def driven(processor) -> TwsTester:
    return TwsTester(processor, timeMode="EventTime", eventTimeExtractor=lambda row: int(row["arrival_ms"])
                     if "arrival_ms" in row else int(row["event_ms"]))


def outputs(frame: pd.DataFrame) -> dict[str, list[dict]]:
    """An operator's output frames as row dicts by table (each frame row is an Arrow chunk)."""
    from streaming.sinks.typed import unpack
    out: dict[str, list[dict]] = {}
    if "table_name" not in frame:
        return out
    for table, chunk in zip(frame["table_name"], frame["rows"]):
        if chunk is None:                       # a directory version (replication_query.step_frame)
            continue
        for batch in unpack(chunk):
            out.setdefault(table, []).extend(batch.to_pylist())
    return out


def test_a_replication_message_that_raises_is_a_dead_letter_and_the_replica_skips_it(monkeypatch):
    key, frame = max(frames("mqdsrp", lambda e: e["destination_machine"]).items(), key=lambda kv: len(kv[1]))
    victim = frame.iloc[len(frame) // 2]
    poison(monkeypatch, victim["message_id"])
    hit = driven(replication_query.ReplicationProcessor("pec0"))
    out = outputs(hit.testInPandas(key, frame))
    (dead,) = [d for d in out["dead_letters"]]
    assert dead["stage"] == "operator:replication" and dead["raw_value"] == victim["body"]
    assert "PoisonForTests" in dead["error"]
    poison(monkeypatch)
    without = driven(replication_query.ReplicationProcessor("pec0"))
    without.testInPandas(key, frame[frame["message_id"] != victim["message_id"]])
    assert hit.peekValueState("replica", key) == without.peekValueState("replica", key)
    assert hit.peekMapState("objects", key) == without.peekMapState("objects", key)


def test_a_discovery_packet_that_raises_is_a_dead_letter(monkeypatch):
    by_key = frames("mqsd", lambda e: None, count=3000)
    rows = next(iter(by_key.values()))
    from streaming.wire import decode
    rows["state_key"] = [discovery_query_state_key(b) for b in rows["body"]]
    key, frame = next((k, g) for k, g in rows.groupby("state_key") if len(g) > 1)
    victim = frame.iloc[-1]
    poison(monkeypatch, victim["message_id"])
    hit = driven(discovery_query.DiscoveryProcessor())
    out = outputs(hit.testInPandas(key, frame))
    (dead,) = out["dead_letters"]
    assert dead["stage"] == "operator:discovery" and dead["raw_value"] == victim["body"]
    poison(monkeypatch)
    without = driven(discovery_query.DiscoveryProcessor())
    without.testInPandas(key, frame.iloc[:-1])
    assert hit.peekValueState("discovery", key) == without.peekValueState("discovery", key)
    assert decode


def discovery_query_state_key(body: bytes) -> str:
    from streaming.spark.decode import state_key
    from streaming.wire import decode
    return state_key("mqsd", decode("mqsd", bytes(body)), {})


@spies_on_calls
@pytest.mark.parametrize("mode", ["immediate", "batched"])
def test_a_notification_that_raises_is_a_dead_letter_and_the_queue_manager_skips_it(monkeypatch, mode):
    from streaming.operators.notifications import queue_manager_of
    settings = Settings(mode=mode)
    for key, frame in sorted(frames("mqcn", lambda e: queue_manager_of(e["destination_queue"])).items()):
        end = int(frame["event_ms"].max()) + 3_600_000
        clean = driven(notification_query.NotificationProcessor(settings))
        produced = outputs(clean.testInPandas(key, frame)).get("notifications", []) + outputs(
            clean.setWatermark(end)).get("notifications", [])
        applied = [p["message_id"] for p in produced if p["outcome"] == "applied"]
        if applied:
            break
    victim = frame[frame["message_id"] == applied[len(applied) // 2]].iloc[0]     # one that gets processed
    poison(monkeypatch, victim["message_id"])
    hit = driven(notification_query.NotificationProcessor(settings))
    out = outputs(hit.testInPandas(key, frame))
    out_timers = hit.setWatermark(end)
    dead = out.get("dead_letters", []) + outputs(out_timers).get("dead_letters", [])
    assert len(dead) == 1 and dead[0]["stage"] == "operator:notifications" and dead[0]["raw_value"] == victim["body"]
    poison(monkeypatch)
    without = driven(notification_query.NotificationProcessor(settings))
    without.testInPandas(key, frame[frame["message_id"] != victim["message_id"]])
    without.setWatermark(end)
    a = stored_queue_manager(hit, key)
    b = stored_queue_manager(without, key)
    assert (a.queues, a.quota, a.batches) == (b.queues, b.quota, b.batches)



def stored_queue_manager(tester: TwsTester, key: str):
    """The QMState of the processor's core part (streaming.spark.qm_store: stored with where its other parts are)."""
    core, _layout = pickle.loads(tester.peekValueState("qm_core", key)[0])
    return pickle.loads(core)


@spies_on_calls
def test_a_replication_timer_that_raises_is_a_dead_letter_and_the_replica_stays_as_it_was(monkeypatch):
    from streaming.operators.replication import Replica
    # a BSC: its BSC Ack Timer (12 hours, MC-MQDSRP 3.3.6.2) is always due some time after its traffic
    key, frame = max(((k, f) for k, f in frames("mqdsrp", lambda e: e["destination_machine"]).items()
                      if k.startswith("bsc")), key=lambda kv: len(kv[1]))
    tester = driven(replication_query.ReplicationProcessor("pec0"))
    tester.testInPandas(key, frame)
    before = tester.peekValueState("replica", key)

    def broken(self, now_ms):
        raise RuntimeError("timer broke")
    monkeypatch.setattr(Replica, "on_timer", broken)
    out = outputs(tester.setWatermark(int(frame["arrival_ms"].max()) + 13 * 3_600_000))
    (dead,) = out["dead_letters"]
    assert dead["stage"] == "operator:replication" and "timer broke" in dead["error"]
    assert dead["topic"] == f"(timer of {key})"
    assert tester.peekValueState("replica", key) == before
