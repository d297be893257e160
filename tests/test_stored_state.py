"""A checkpoint written by an earlier revision gives the same tables as one written by this one.

tests/vectors/stored_state_36d3ee4.bin is what the job's state store held at two points of a
simulated run (tests/stored_state.py), written by revision 36d3ee4: the replicas' ServerState
bytes and object stores, the queue managers' pickled QMState, the server registry. Restored into
this revision and fed the rest of the run, it must give every table row for row as this revision's
own stored state does: the stored forms (PurgeState's int, the MQCN events' text, the pickled
classes' module paths) have not moved.
"""
import copy
import marshal
import pickle
import zlib
from pathlib import Path

from stored_state import SPLITS, feed, first_part, stored
from streaming.operators.replica_state import state_from_bytes
from streaming.operators.replica_store import DictBackend
from streaming.operators.server_registry import ServerRegistry

VECTOR = Path(__file__).parent / "vectors" / "stored_state_36d3ee4.bin"


def restored(template, data: dict):
    """The offline job as a restart from `data` finds it: Kafka's side (rows the clock has not passed,
    answers not fed back yet, offsets, the watermark) as the template left it, the operators' state
    read from the stored bytes."""
    job = copy.deepcopy(template)
    job.states = {}
    for server, (state, buckets) in data["replicas"].items():
        backend = DictBackend()
        backend.data = dict(buckets)
        job.states[server] = (state_from_bytes(state), backend)
    job.qms = {key: pickle.loads(qm) for key, qm in data["queue_managers"].items()}
    job.registry = ServerRegistry.from_bytes(data["registry"], configured=("pec0",))
    return job


def finish(job) -> None:
    job.fire_timers(job.max_event_ms + 3_600_000)
    job.fire_qm_timers(job.max_event_ms + 3_600_000)          # the quiet hour after the run


def earlier_and_now(snapshot: str):
    """The same job restarted from the earlier revision's stored state and from this one's, each
    fed the rest of the traffic."""
    template, rest = first_part(SPLITS[snapshot])
    earlier = restored(template, marshal.loads(zlib.decompress(VECTOR.read_bytes()))[snapshot])
    now = restored(template, stored(template))
    for job in (earlier, now):
        feed(job, rest)
        finish(job)
    return template, earlier, now


def assert_same_tables(earlier, now) -> None:
    assert earlier.tables.keys() == now.tables.keys()
    for table in now.tables:
        assert earlier.tables[table] == now.tables[table], table
    assert earlier.history == now.history


def test_replicas_midway_through_loading_the_directory_go_on_the_same():
    template, earlier, now = earlier_and_now("replicas")
    partitions = [p for state, _ in template.states.values() for p in state.partitions.values()]
    assert sum(len(p.pending) for p in partitions) > 10 and template.answers       # sync requests unanswered
    assert_same_tables(earlier, now)
    assert len(now.history) > len(template.history) + 1000 and now.tables["deleted_objects"]


def test_queue_managers_midway_through_their_windows_go_on_the_same():
    template, earlier, now = earlier_and_now("queue managers")
    qms = template.qms.values()
    assert sum(len(qm.queues) for qm in qms) > 50 and sum(len(qm.unresolved) for qm in qms) > 10
    assert {n.version for qm in qms for n in qm.pending} == {1, 2}      # v1 commands and v2 events held
    assert_same_tables(earlier, now)
    assert len(now.tables["notifications"]) > len(template.tables["notifications"]) + 1000
