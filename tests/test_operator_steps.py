"""A key's output handed on in steps (stateful.GuardedSteps): the replication operator
yields its rows every few messages instead of holding a whole micro-batch's, and the sink tables,
the published directory versions and the stored state are the same whatever the step, with or
without a message that makes it raise."""
import marshal
import random

import pyarrow as pa
import pytest

from job_runs import dump
from streaming.sinks import open_sink
from streaming.spark import replication_query, stateful
from streaming.spark.stateful import GuardedSteps, batch_rows
from streaming.operators.replication_rows import REGISTRY
from test_poison import driven, frames, outputs, poison


class Machine:
    def __init__(self):
        self.applied, self.out = [], []


def _apply(poisoned: set):
    def apply(machine: Machine, item: int) -> None:
        if item in poisoned:
            machine.applied.append("half-applied")          # a raising item may leave a mess behind
            raise ValueError(f"poison {item}")
        machine.applied.append(item)
        machine.out.append(item)
    return apply


def _take(machine: Machine) -> list:
    out, machine.out = machine.out, []
    return out


@pytest.mark.parametrize("seed", range(200))
def test_steps_hand_on_every_item_once_in_order_less_the_poisoned(seed):
    rnd = random.Random(seed)
    items = list(range(rnd.randrange(0, 40)))
    bad = {i for i in items if rnd.random() < 0.15}
    every = rnd.choice([1, 2, 3, 7, 40, 1000])
    instant = {i: rnd.randrange(len(items) // 2 + 1) for i in items}
    items.sort(key=instant.get)                             # items of one instant side by side
    loads = []

    def load() -> Machine:
        loads.append(1)
        return Machine()

    steps = GuardedSteps(load, items, _apply(bad), _take, every, lambda a, b: instant[a] == instant[b])
    handed_steps = list(steps)
    handed = [out for step in handed_steps for out in step]
    handed += steps.machine.out                             # the last step: the caller takes it
    assert handed == [i for i in items if i not in bad]
    ends = [i for i in range(1, len(items)) if instant[items[i - 1]] != instant[items[i]]]
    assert len(handed_steps) <= len(ends)                   # never between two items of one instant
    if every == 1:
        assert len(handed_steps) == len(ends)
    assert [item for item, _exc in steps.poisoned] == [i for i in items if i in bad]
    assert all(str(exc) == f"poison {item}" for item, exc in steps.poisoned)
    assert "half-applied" not in steps.machine.applied      # the machine was built again after each
    assert len(loads) == 1 + len(bad)


def test_a_step_that_raises_outside_an_item_fails_the_key():
    def take(machine):
        raise RuntimeError("the rows could not be made")

    with pytest.raises(RuntimeError, match="rows could not be made"):
        list(GuardedSteps(Machine, [1, 2, 3], _apply(set()), take, 1))


def _run(key, frame, step_messages: int, sink_url: str):
    """The replica's messages in two micro-batches through the operator into a SQLite sink; returns
    the published directory versions, (replication_servers rows, directory_history frame rows)
    yielded and the stored state (the object buckets as their entries: marshal's bytes may share a
    string once or write it twice)."""
    tester = driven(replication_query.ReplicationProcessor("pec0", "scope", step_messages))
    versions, servers, history_rows, registry = [], 0, 0, []
    sink = open_sink(sink_url)
    half = len(frame) // 2
    for batch_id, part in enumerate((frame.iloc[:half], frame.iloc[half:])):
        out = tester.testInPandas(key, part)
        servers += len(outputs(out).get("replication_servers", []))
        history_rows += int((out["table_name"] == "directory_history").sum())     # a chunk per step at least
        found = out[out["table_name"] == replication_query.VERSIONS]
        versions += list(zip(found["owner"], found["event_ms"], found["text"]))
        handed = out[out["table_name"] == REGISTRY]
        registry += list(zip(handed["event_ms"], handed["text"]))
        sink_rows = out[~out["table_name"].isin((replication_query.VERSIONS, REGISTRY))]
        rows = batch_rows(pa.Table.from_pandas(sink_rows[["table_name", "rows"]]))
        sink.write_batch("replication", batch_id, rows)
    sink.close()
    objects = {bucket: marshal.loads(blob) for bucket, (blob,) in tester.peekMapState("objects", key).items()}
    return versions, (servers, history_rows, _learnt(registry)), tester.peekValueState("replica", key), objects


def _learnt(registry: list) -> tuple:
    """What the server registry learns from the rows handed to it: each name at its earliest time (a
    step hands on a name it stored again), and the checks in order."""
    import json
    named: dict = {}
    checks = []
    for at, text in registry:
        kind, *rest = json.loads(text)
        if kind == "server":
            named[rest[0]] = min(named.get(rest[0], at), at)
        else:
            checks.append((at, rest))
    return sorted(named.items()), checks


@pytest.mark.parametrize("poisoned", [False, True])
def test_the_replication_operators_steps_change_no_row_version_or_state(tmp_path, monkeypatch, poisoned):
    key, frame = max(frames("mqdsrp", lambda e: e["destination_machine"]).items(), key=lambda kv: len(kv[1]))
    frame = frame.sort_values(list(stateful.ARRIVAL_ORDER)).reset_index(drop=True)
    if poisoned:
        poison(monkeypatch, frame.iloc[len(frame) // 3]["message_id"], frame.iloc[len(frame) // 3 + 5]["message_id"])
    runs = {}
    for step in (1, 7, 10**9):
        url = f"sqlite:///{tmp_path}/step{step}.db"
        versions, servers, control, objects = _run(key, frame, step, url)
        runs[step] = (dump(url), versions, servers[2], control, objects)
        assert servers[0] == 2, "the server's row: once a micro-batch, whatever the step"
        if step == 7:       # handed on in steps: each step's history rows are packed apart
            assert servers[1] >= len(frame) // 14
    whole = runs[10**9]
    assert len(whole[0]["directory_history"]) > 100 and whole[1]
    assert len(whole[0]["dead_letters"]) == (2 if poisoned else 0)
    assert whole[2][0], "the directory servers its objects name, for the server registry"
    for step in (1, 7):
        assert runs[step][0] == whole[0], f"step {step}: the sink tables differ"
        assert runs[step][1] == whole[1], f"step {step}: the published versions differ"
        assert runs[step][2] == whole[2], f"step {step}: what the server registry learns differs"
        assert runs[step][3:] == whole[3:], f"step {step}: the stored state differs"


class TimerHandle:
    """The timer calls of a StatefulProcessorHandle, counted."""

    def __init__(self, timers):
        self.timers, self.calls = set(timers), 0

    def listTimers(self):
        self.calls += 1
        return iter(sorted(self.timers))

    def deleteTimer(self, t):
        self.calls += 1
        self.timers.remove(t)

    def registerTimer(self, t):
        self.calls += 1
        self.timers.add(t)


@pytest.mark.parametrize("seed", range(100))
def test_a_key_keeps_exactly_its_next_timer_and_an_unchanged_one_costs_one_call(seed):
    rnd = random.Random(seed)
    before = set(rnd.sample(range(10), rnd.randrange(0, 3)))
    due = rnd.choice([None, *range(10)])
    fired = rnd.choice([None, *before]) if before else None
    handle = TimerHandle(before)
    stateful.replace_timers(handle, due, fired)
    assert handle.timers - {fired, due} == set()                   # nothing else (Spark removes the fired one)
    assert due is None or due in handle.timers
    if due is not None and before - {fired} == {due}:
        assert handle.calls == 1                                           # listed, left alone
