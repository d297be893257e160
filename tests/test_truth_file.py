"""The ground truth written as it is made and read back by section: the same truth as one held
whole, the earlier format still read, and a long run holding none of what it has written."""
import json

import pytest

from producers.simulator import ATTACKS, MESSAGE_ATTACKS, Faults, Simulator
from producers.truth import DiscoveryOutcomes
from producers.truth_file import LIST_SECTIONS, MAPPING_SECTIONS, TruthWriter, is_whole_object, read_truth
from streaming.apps.verify_progress import truth_reader

EVERY_FAULT = Faults(reorder=0.3, duplicate=0.1, drop=0.03, corrupt=0.02, unauthenticated=0.05, nack=0.02)


def simulator(seed: int, faults: bool = True) -> Simulator:
    return Simulator(seed=seed, faults=EVERY_FAULT if faults else None, burst_rate=0.01,
                     attacks=frozenset(MESSAGE_ATTACKS) if faults else frozenset())


def streamed(sim: Simulator, path, count: int) -> list:
    sim.write_truth_to(TruthWriter(str(path)))
    messages = [m.envelope["message_id"] for m in sim.messages(count)]
    sim.finish_truth()
    return messages


def canonical(truth: dict) -> str:
    return json.dumps(truth, sort_keys=True)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_truth_written_as_it_is_made_is_the_truth_held_whole(tmp_path, seed):
    held = simulator(seed)
    held_ids = [m.envelope["message_id"] for m in held.messages(6_000)]
    path = tmp_path / "truth.jsonl"
    assert streamed(simulator(seed), path, 6_000) == held_ids          # writing it changes no message
    truth = read_truth(str(path))
    assert canonical(truth) == canonical(held.truth())
    assert truth["discovery"] and truth["attacks"] and truth["dropped"] and truth["dead_letters"]


def test_sections_are_read_alone_and_empty_ones_are_there(tmp_path):
    path = tmp_path / "truth.jsonl"
    streamed(simulator(5, faults=False), path, 2_000)
    assert set(read_truth(str(path), ("servers", "partitions"))) == {"servers", "partitions"}
    whole = read_truth(str(path))
    assert set(LIST_SECTIONS) | set(MAPPING_SECTIONS) <= set(whole)
    assert whole["dropped"] == [] and whole["attacks"] == [] and whole["unreachable"] == {}
    # a line per partition, list items in lines of at most ITEMS_PER_LINE: no line holds the whole truth
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"dirstream_truth": 2}
    assert sum(1 for line in lines if line.startswith('["partitions","entry",')) == len(whole["partitions"])


def test_a_truth_of_the_earlier_format_is_still_read(tmp_path):
    sim = simulator(6)
    for _ in sim.messages(3_000):
        pass
    truth = sim.truth()
    old = tmp_path / "truth.json"
    old.write_text(json.dumps(truth, indent=1))
    assert is_whole_object(str(old))
    assert canonical(read_truth(str(old))) == canonical(truth)
    assert read_truth(str(old), ("discovery",)) == {"discovery": truth["discovery"]}
    read = truth_reader(str(old))           # verify reads it once, then a check's sections at a time
    assert read(("servers", "partitions"), None) == {"servers": truth["servers"], "partitions": truth["partitions"]}
    assert read(("attacks",), None) == {"attacks": truth["attacks"]}


def test_progress_is_reported_up_to_the_files_size(tmp_path):
    path = tmp_path / "truth.jsonl"
    streamed(simulator(7), path, 3_000)
    seen = []
    read_truth(str(path), ("discovery",), lambda done, size: seen.append((done, size)))
    size = path.stat().st_size
    assert len(seen) > 10 and seen[-1] == (size, size)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and all(s == size for _, s in seen)


def test_an_unknown_version_and_an_abandoned_file_are_refused(tmp_path):
    future = tmp_path / "future.jsonl"
    future.write_text('{"dirstream_truth":3}\n')
    with pytest.raises(ValueError, match="version 3"):
        read_truth(str(future))
    writer = TruthWriter(str(tmp_path / "cut.jsonl"))
    writer.item("dropped", "x")
    writer.abandon()
    assert list(tmp_path.iterdir()) == [future]          # no truth, not even a partial one


@pytest.mark.parametrize("seed", range(8))
def test_a_discovery_request_settled_early_has_the_result_it_has_at_the_end(seed, monkeypatch):
    """A request is settled once its replies are sent and every copy of it and of them is delivered
    (duplicates, reordering, rogue replies): the same results as settling all of them at the end,
    over the traffic as delivered, which is what the truth held before."""
    early = simulator(seed)
    for _ in early.messages(4_000):
        pass
    monkeypatch.setattr(DiscoveryOutcomes, "SETTLE_EVERY", 10 ** 12)      # settled only at the end
    late = simulator(seed)
    for _ in late.messages(4_000):
        pass
    assert late.discovery.open and len(early.discovery.open) < len(late.discovery.open)
    assert canonical(early.truth()["discovery"]) == canonical(late.truth()["discovery"])


def test_a_long_run_holds_only_its_last_requests_and_none_of_its_faults(tmp_path):
    sim = simulator(8)
    sim.write_truth_to(TruthWriter(str(tmp_path / "truth.jsonl")))
    open_requests, tracked = [], []
    for n, _ in enumerate(sim.messages(30_000)):
        if n % 1_000 == 999:
            open_requests.append(len(sim.discovery.open))
            tracked.append(len(sim.discovery.by_message))
    assert max(open_requests) <= 20 and max(tracked) <= 100        # a few seconds' worth, not the run's
    assert sim.record.lists == {s: [] for s in LIST_SECTIONS} and sim.record.discovery == {}
    assert sim.record.count("duplicates") > 500 and not sim._unauthenticated_awaiting
    sim.finish_truth()
    assert len(read_truth(str(tmp_path / "truth.jsonl"), ("duplicates",))["duplicates"]) == \
        sim.record.count("duplicates")


def test_every_attack_kind_the_simulator_injects_is_in_the_streamed_truth(tmp_path):
    path = tmp_path / "truth.jsonl"
    streamed(simulator(9), path, 12_000)
    kinds = {a["kind"] for a in read_truth(str(path), ("attacks",))["attacks"]}
    assert kinds == set(MESSAGE_ATTACKS) and set(ATTACKS) - kinds == {"mqqb-malformed"}
