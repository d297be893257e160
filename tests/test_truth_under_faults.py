"""The ground truth says what a spec-conformant client sees given the traffic as it was
actually delivered (reordered, duplicated, with corrupt copies), for every fault and many seeds.

MQSD: the simulator's truth (producers/truth.py, the client rules written from the text) against
the discovery operator (streaming/operators/discovery.py) fed every delivered MQSD message in the
order the job reads them (arrival time, then delivery order), what was due before each message
first, the first copy's outcome kept as the sink keeps it; `verify`'s comparison is clean."""
import pytest

from producers.simulator import Faults, Simulator
from streaming.apps.verify import compare_discovery
from streaming.operators.discovery import Discovery, DiscoveryState, Outcome, Reply, Request
from streaming.wire import WireError, decode

EVERY_FAULT = dict(reorder=0.1, duplicate=0.05, drop=0.03, nack=0.01, corrupt=0.01, unauthenticated=0.05)


def _operator_results(envelopes: list[dict]) -> list[dict]:
    """discovery_requests rows as the job's operator gives them for the delivered traffic."""
    keyed: dict[str, list] = {}
    for order, env in enumerate(envelopes):
        if env["protocol"].lower() != "mqsd":
            continue
        try:
            packet = decode("mqsd", env["body"])
        except WireError:
            continue                                   # a corrupt copy: a dead letter
        keyed.setdefault(_request_id(packet), []).append((env["arrival_time"], order, env, packet))
    core, rows = Discovery(), []
    for request_id, items in keyed.items():
        state, out = DiscoveryState(), []
        for arrival, _order, env, packet in sorted(items, key=lambda i: (i[0], i[1])):
            out += core.on_time(state, request_id, arrival)       # what was due before it, as the job does
            if packet.client_request is not None:
                r = packet.client_request
                out += core.on_request(state, request_id, Request(arrival, r.enterprise_id, r.site_id,
                                                                  env["source_machine"]))
            else:
                r = packet.server_reply
                out += core.on_reply(state, request_id, Reply(
                    arrival, env["source_machine"], r.directory_service_server_size,
                    [(e.ip_supported, e.ipx_supported, e.name) for e in r.directory_service_server_array or []],
                    list(r.connected_network_array), r.responding_site_id))
        if state.deadline_ms is not None:
            out += core.on_timer(state, request_id, state.deadline_ms)
        outcomes = [o for o in out if isinstance(o, Outcome)]
        first = min(outcomes, key=lambda o: o.request.arrival_ms, default=None)    # the sink keeps it
        rows += [{"request_id": o.request_id, "outcome": o.outcome, "directory_servers": o.directory_servers,
                  "connected_networks": o.connected_networks} for o in [first] if o is not None]
    return rows


def _request_id(packet) -> str:
    """The operator's key (streaming.spark.decode.state_key): a reply's CorrelationID."""
    return packet.client_request.request_id if packet.client_request else packet.server_reply.correlation_id


@pytest.mark.parametrize("seed", range(12))
def test_the_discovery_truth_is_what_the_clients_saw_under_every_fault(seed):
    sim = Simulator(seed=300 + seed, faults=Faults(**EVERY_FAULT, reorder_window=8 + seed))
    envelopes = [m.envelope for m in sim.messages(1500)]
    truth = sim.truth()
    rows = _operator_results(envelopes)
    diffs, summary = compare_discovery(truth, rows)
    assert diffs == [] and len(rows) == len(truth["discovery"]) > 3, (summary, diffs[:5])


def test_the_faults_change_what_some_clients_saw():
    """The property above is not vacuous: a duplicated or reordered reply (a copy of a remote-site
    reply before the local one, a reply pushed past the wait) changes some outcomes against the
    same enterprise's traffic without faults (the faults draw from their own random stream)."""
    changed = 0
    for seed in range(30):
        faulty = Simulator(seed=400 + seed, faults=Faults(reorder=0.3, duplicate=0.2, reorder_window=40))
        list(faulty.messages(800))
        clean = Simulator(seed=400 + seed)
        list(clean.messages(800))
        faulty_truth, clean_truth = faulty.truth()["discovery"], clean.truth()["discovery"]
        changed += sum(faulty_truth[r]["outcome"] != clean_truth[r]["outcome"]
                       for r in faulty_truth.keys() & clean_truth.keys())
    assert changed > 0
