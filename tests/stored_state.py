"""The operators' stored state as a checkpoint holds it, for tests/test_stored_state.py.

`python tests/stored_state.py OUT` (run with the revision to capture on PYTHONPATH) feeds the first
part of a simulated run through the offline job and writes what the job's state store would hold:
each replica's ServerState bytes and object-store buckets, each queue manager's pickled QMState,
the server registry's bytes, in one compressed marshal file. Only names every revision since the stored
forms were fixed provides are used, so an earlier revision can write the file this one reads.
"""
import marshal
import pickle
import sys
import zlib
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from producers.simulator import Faults, Simulator  # noqa: E402
from replication_harness import OfflineJob  # noqa: E402

try:
    from streaming.operators.replica_state import state_to_bytes
except ImportError:                     # a revision whose replica module held its own persistence
    from streaming.operators.replication import state_to_bytes

SEED, MESSAGES, BATCH = 3, 5000, 500
FAULTS = dict(reorder=0.1, duplicate=0.05, drop=0.05, nack=0.02, unauthenticated=0.05)
# Where each snapshot is taken: the replicas load the directory in the first messages (at 250 some
# have pending changes and unanswered sync requests); the queue managers' windows come later.
SPLITS = {"replicas": 250, "queue managers": 3000}


def traffic() -> tuple[list[dict], dict]:
    sim = Simulator(seed=SEED, faults=Faults(**FAULTS))
    return [m.envelope for m in sim.messages(MESSAGES)], sim.truth()


def feed(job: OfflineJob, envelopes: list[dict]) -> None:
    for i in range(0, len(envelopes), BATCH):
        job.feed(envelopes[i:i + BATCH])
        job.run_until_quiet()


def first_part(split: int) -> tuple[OfflineJob, list[dict]]:
    """The job after the first `split` messages (its last micro-batch's requests not answered yet),
    and the rest of the traffic."""
    envelopes, truth = traffic()
    job = OfflineJob(truth, pec_name="pec0")
    for i in range(0, split, BATCH):
        job.feed(envelopes[i:min(i + BATCH, split)])
        if i + BATCH < split:
            job.run_until_quiet()
    return job, envelopes[split:]


def stored(job: OfflineJob) -> dict:
    """What the job's state store holds for the offline job's replicas, queue managers and registry."""
    return {
        "replicas": {server: (state_to_bytes(state), dict(backend.data))
                     for server, (state, backend) in sorted(job.states.items())},
        "queue_managers": {key: pickle.dumps(qm, protocol=5) for key, qm in sorted(job.qms.items())},
        "registry": job.registry.to_bytes(),
    }


if __name__ == "__main__":
    snapshots = {name: stored(first_part(split)[0]) for name, split in SPLITS.items()}
    Path(sys.argv[1]).write_bytes(zlib.compress(marshal.dumps(snapshots), 9))   # kept in the repository
