"""The MQSD client rules (3.1.5.2, 3.1.6.1), sans-IO, and agreement with the simulator's ground truth."""
import json
import random
from collections import Counter

import pytest

from streaming.operators.discovery import (EARLY_REPLY_WAIT_MS, FORGET_AFTER_MS, WAIT_FOR_RESPONSE_MS, Discovery,
                                           DiscoveryState, Orphan, Outcome, Reply, Request, forget_at)

CN_LOCAL, CN_REMOTE = "e6eaba62-d1c6-11db-baac-0003ff4e2d22", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
REQ = Request(1_000, "e6eaba61-d1c6-11db-baac-0003ff4e2d22", "dcc51bf6-d4ad-4543-8739-71568e8f9128", "10.0.0.5")


def local(at):
    return Reply(at, "10.0.0.1", 0, [], [CN_LOCAL], None)


def remote(at, name="nt4pec"):
    return Reply(at, "10.1.0.1", 18, [(True, False, name)], [CN_REMOTE], "e6eaba60-d1c6-11db-baac-0003ff4e2d22")


def run(events):
    d, state, out = Discovery(), DiscoveryState(), []
    for kind, arg in events:
        if kind == "request":
            out += d.on_request(state, "r1", arg)
        elif kind == "reply":
            out += d.on_reply(state, "r1", arg)
        else:
            out += d.on_timer(state, "r1", arg)
    return out


def test_section_4_exchange_local_reply_wins_and_remote_is_ignored():
    out = run([("request", REQ), ("reply", local(1_050)), ("reply", remote(1_090))])
    (done, late) = out
    assert isinstance(done, Outcome) and done.outcome == "local-site" and done.completed_ms == 1_050
    assert done.connected_networks == [CN_LOCAL] and done.directory_servers == []
    assert isinstance(late, Orphan) and "already completed" in late.reason


def test_remote_then_local_within_the_wait_is_local_site():
    (done,) = run([("request", REQ), ("reply", remote(1_030)), ("reply", local(1_080))])
    assert done.outcome == "local-site" and done.connected_networks == [CN_LOCAL] and done.replies == 2


def test_remote_only_completes_when_the_timer_fires_15_s_after_it():
    d, state = Discovery(), DiscoveryState()
    assert d.on_request(state, "r1", REQ) == [] and d.on_reply(state, "r1", remote(1_030)) == []
    assert d.on_timer(state, "r1", 1_030 + WAIT_FOR_RESPONSE_MS - 1) == []          # case D restarted the timer
    (done,) = d.on_timer(state, "r1", 1_030 + WAIT_FOR_RESPONSE_MS)
    assert done.outcome == "remote-site" and done.directory_servers == ["nt4pec"]
    assert done.connected_networks == [CN_REMOTE] and done.completed_ms == 16_030


def test_second_remote_reply_completes_with_the_first_one_kept():
    (done,) = run([("request", REQ), ("reply", remote(1_030, "first")), ("reply", remote(1_090, "second"))])
    assert done.outcome == "remote-site" and done.directory_servers == ["first"] and done.completed_ms == 1_090


def test_no_reply_within_15_s_of_event_time():
    d, state = Discovery(), DiscoveryState()
    d.on_request(state, "r1", REQ)
    assert d.on_timer(state, "r1", REQ.arrival_ms + WAIT_FOR_RESPONSE_MS - 1) == []
    (done,) = d.on_timer(state, "r1", REQ.arrival_ms + WAIT_FOR_RESPONSE_MS)
    assert done.outcome == "no-reply" and done.directory_servers == [] and done.connected_networks == []


def test_reply_after_the_timer_is_late():
    out = run([("request", REQ), ("reply", local(REQ.arrival_ms + WAIT_FOR_RESPONSE_MS + 1))])
    assert [type(o) for o in out] == [Outcome, Orphan] and out[0].outcome == "no-reply"


def test_reply_before_its_request_is_held_then_correlated():
    (done,) = run([("reply", local(1_050)), ("request", REQ)])
    assert done.outcome == "local-site" and done.replies == 1


def test_reply_without_request_is_recorded_not_lost():
    out = run([("reply", remote(5_000)), ("timer", 5_000 + EARLY_REPLY_WAIT_MS)])
    assert len(out) == 1 and isinstance(out[0], Orphan) and "no request" in out[0].reason


def test_agrees_with_the_simulators_ground_truth():
    from producers.simulator import Simulator
    from streaming.wire import decode
    sim = Simulator(seed=31)
    messages = [m for m in sim.messages(8000) if m.protocol == "mqsd"]
    truth = sim.truth()["discovery"]
    d, states, outcomes = Discovery(), {}, {}
    for m in sorted(messages, key=lambda m: m.envelope["sent_time"]):
        packet, at = decode("mqsd", m.envelope["body"]), m.envelope["sent_time"]
        for rid, st in states.items():
            for o in d.on_timer(st, rid, at):
                if isinstance(o, Outcome):
                    outcomes[rid] = o
        if packet.client_request is not None:
            r = packet.client_request
            rid = r.request_id
            out = d.on_request(states.setdefault(rid, DiscoveryState()), rid,
                               Request(at, r.enterprise_id, r.site_id, m.envelope["source_machine"]))
        else:
            r = packet.server_reply
            rid = r.correlation_id
            servers = [(e.ip_supported, e.ipx_supported, e.name) for e in r.directory_service_server_array or []]
            out = d.on_reply(states.setdefault(rid, DiscoveryState()), rid,
                             Reply(at, m.envelope["source_machine"], r.directory_service_server_size, servers,
                                   r.connected_network_array, r.responding_site_id))
        outcomes.update({o.request_id: o for o in out if isinstance(o, Outcome)})
    for rid, st in states.items():
        outcomes.update({o.request_id: o for o in d.on_timer(st, rid, 2**62) if isinstance(o, Outcome)})
    assert set(outcomes) == set(truth)
    for rid, expected in truth.items():
        got = outcomes[rid]
        assert (got.outcome, got.directory_servers, got.connected_networks) == (
            expected["outcome"], expected["directory_servers"], expected["connected_networks"]), rid


def test_what_was_due_before_a_message_happens_first():
    """on_time: the Wait For Response timer due before a message fires first; a completed request is
    remembered FORGET_AFTER_MS past its deadline (a copy of its reply then is late), then forgotten
    (a copy after that waits for a request of its own)."""
    d, state = Discovery(), DiscoveryState()
    d.on_request(state, "r1", REQ)
    assert d.on_time(state, "r1", REQ.arrival_ms + WAIT_FOR_RESPONSE_MS) == []       # due at, not before
    (done,) = d.on_time(state, "r1", REQ.arrival_ms + WAIT_FOR_RESPONSE_MS + 1)
    assert done.outcome == "no-reply" and done.completed_ms == REQ.arrival_ms + WAIT_FOR_RESPONSE_MS
    forget = REQ.arrival_ms + WAIT_FOR_RESPONSE_MS + FORGET_AFTER_MS
    assert forget_at(state) == forget
    assert d.on_time(state, "r1", forget) == [] and state.done and state.request == REQ
    (late,) = d.on_reply(state, "r1", local(forget))
    assert "already completed" in late.reason
    assert d.on_time(state, "r1", forget + 1) == [] and state == DiscoveryState()
    assert d.on_reply(state, "r1", local(forget + 1)) == [] and state.early == [local(forget + 1)]


def test_replies_whose_request_never_came_are_forgotten_once_orphaned():
    d, state = Discovery(), DiscoveryState()
    d.on_reply(state, "r1", remote(5_000))
    (orphan,) = d.on_time(state, "r1", 5_001 + EARLY_REPLY_WAIT_MS)
    assert "no request" in orphan.reason and state == DiscoveryState()


def test_a_request_held_back_minutes_behind_its_reply_still_counts_it():
    """Its client sent the request before the reply came, and counts a reply within 15 s of the
    request's first copy as delivered (the truth's rule): found by the short soak, where a request
    came two minutes after its local-site reply, which had been orphaned after 15 s."""
    d, state, out = Discovery(), DiscoveryState(), []
    out += d.on_reply(state, "r1", local(1_050))
    late_request = Request(1_050 + 120_000, REQ.enterprise_id, REQ.site_id, REQ.client)
    out += d.on_time(state, "r1", late_request.arrival_ms) + d.on_request(state, "r1", late_request)
    (done,) = out
    assert done.outcome == "local-site" and done.connected_networks == [CN_LOCAL]


def _mqsd_traffic(seed: int) -> tuple[list[dict], dict]:
    """The simulator's MQSD traffic under reordering and duplicates, its quiet tail included (where a
    message held back in transport arrives minutes late), as the discovery operator's input rows;
    and the truth: what each client saw."""
    from producers.simulator import Faults, Simulator
    from streaming.spark.decode import state_key
    from streaming.wire import WireError, decode
    sim = Simulator(seed=seed, faults=Faults(reorder=0.3, duplicate=0.1, corrupt=0.01, reorder_window=12))
    rows = []
    for offset, m in enumerate(m for m in sim.messages(2500) if m.protocol == "mqsd"):
        env = m.envelope
        try:
            key = state_key("mqsd", decode("mqsd", env["body"]), env)
        except WireError:
            continue                                    # a dead letter before the operator
        rows.append({"state_key": key, "arrival_ms": env["arrival_time"], "arrival_time": env["arrival_time"],
                     "topic": "msmq.sd.raw", "partition": 0, "offset": offset, "body": env["body"],
                     "source_machine": env["source_machine"], "destination_machine": env["destination_machine"],
                     "message_id": env["message_id"]})
    return sorted(rows, key=lambda r: (r["arrival_ms"], r["offset"])), sim.truth()


def _operator_output(rows: list[dict], ends: list[int], drain: bool = False) -> Counter:
    """Every row the discovery operator writes when micro-batches end after these rows: as Spark runs
    it, a batch's rows (none late: they are in order), then its timers up to the watermark (the
    greatest event time seen less the delay, 10 s). drain: event time then moves on far enough for
    every timer to fire."""
    import pandas as pd
    from pyspark.sql.streaming.tws_tester import TwsTester
    from streaming.spark.discovery_query import DiscoveryProcessor
    tester = TwsTester(DiscoveryProcessor(), timeMode="EventTime", eventTimeExtractor=lambda r: int(r["arrival_ms"]))
    written: Counter = Counter()

    def take(frame) -> None:
        written.update((table, tuple(sorted(row.items()))) for table, row in _typed(frame))

    start, watermark = 0, 0
    for end in [*ends, len(rows)]:
        batch = pd.DataFrame(rows[start:end])
        for key, frame in batch.groupby("state_key", sort=True):
            take(tester.testInPandas(key, frame.reset_index(drop=True)))
        if int(batch["arrival_ms"].max()) - 10_000 > watermark:
            watermark = int(batch["arrival_ms"].max()) - 10_000
            take(tester.setWatermark(watermark))
        start = end
    if drain:
        take(tester.setWatermark(watermark + 2 * EARLY_REPLY_WAIT_MS))
    return written


def _typed(frame) -> list[tuple[str, dict]]:
    """An operator's output frame as (table, row) pairs: each frame row is an Arrow chunk of typed rows
    (json columns as their text)."""
    from streaming.sinks.typed import unpack
    if "table_name" not in frame:
        return []
    checks = [("server_registry", {"event_ms": at, "text": text}) for table, at, text in
              zip(frame["table_name"], frame["event_ms"], frame["text"]) if table == "server_registry"] \
        if "text" in frame else []
    return [(table, row) for table, chunk in zip(frame["table_name"], frame["rows"]) if chunk is not None
            for batch in unpack(chunk) for row in batch.to_pylist()] + checks


def _requests_as_the_sink_keeps_them(written: Counter) -> list[dict]:
    kept: dict[str, dict] = {}
    for row in (dict(items) for (table, items) in written if table == "discovery_requests"):
        if row["request_id"] not in kept or row["sent_at"] <= kept[row["request_id"]]["sent_at"]:
            kept[row["request_id"]] = row                               # first_by sent_at
    return list(kept.values())


@pytest.mark.parametrize("seed", [3, 8, 21, 34, 55])
def test_the_operator_writes_the_same_rows_however_micro_batches_end_and_agrees_with_the_clients(seed):
    """A reply that arrives after its request was forgotten, a request minutes after its early replies,
    a copy of a request after its first copy completed: taken the same way in one micro-batch as across
    several (the CI's short soak once found a site_topology row that only a fresh --once wrote), and
    the requests as the sink keeps them are what their clients saw (verify's comparison)."""
    from streaming.apps.verify import compare_discovery
    rows, truth = _mqsd_traffic(seed)
    whole = _operator_output(rows, [], drain=True)
    diffs, summary = compare_discovery(truth, _requests_as_the_sink_keeps_them(whole))
    assert diffs == [] and len(truth["discovery"]) > 20, (summary, diffs[:4])
    rng = random.Random(seed)
    for _ in range(5):
        ends = sorted(rng.sample(range(1, len(rows)), rng.randint(2, len(rows) // 3)))
        assert _operator_output(rows, ends, drain=True) == whole


def _row(body: bytes, at: int, offset: int, request_id: str) -> dict:
    return {"state_key": request_id, "arrival_ms": at, "arrival_time": at, "topic": "msmq.sd.raw", "partition": 0,
            "offset": offset, "body": body, "source_machine": "10.2.0.100", "destination_machine": "10.1.0.5",
            "message_id": f"m{offset}"}


@pytest.mark.parametrize("ends", [[], [1], [1, 2]])
def test_a_copy_of_a_request_after_it_was_forgotten_leaves_the_clients_outcome(tmp_path, ends):
    """A request without a reply in 15 s completes as no-reply (3.1.6.1); 15 s later it is forgotten. A
    copy of it held back two minutes, and the local-site reply that came with it, start it again and
    complete it as local-site: the sink keeps the row of the first copy, the one its client decided
    on (found by the short soak: verify expected no-reply), whichever row it writes first."""
    import pyarrow as pa
    from streaming.sinks import open_sink
    from streaming.sinks.typed import TypedRows, arrow_schema
    from streaming.wire import encode, mqsd
    rid = "a9560bda-95ae-4de1-a110-4455ebbf9b0a"
    request = encode("mqsd", mqsd.new_request(REQ.enterprise_id, rid, REQ.site_id))
    reply = encode("mqsd", mqsd.new_reply(rid, [CN_LOCAL]))
    at = 1_767_228_440_429
    rows = [_row(request, at, 0, rid), _row(request, at + 120_000, 1, rid), _row(reply, at + 120_000, 2, rid)]
    written = _operator_output(rows, ends)
    requests = [dict(items) for (table, items), n in written.items() if table == "discovery_requests"]
    assert sorted(r["outcome"] for r in requests) == ["local-site", "no-reply"]
    for order in (requests, requests[::-1]):
        sink = open_sink(f"sqlite:///{tmp_path}/sink.db")
        try:
            typed = TypedRows("discovery_requests", [pa.RecordBatch.from_pylist(order, arrow_schema("discovery_requests"))])
            sink.write_batch("q", len(sink.query("SELECT * FROM sink_batches")), {"discovery_requests": typed})
            (kept,) = sink.query("SELECT * FROM discovery_requests")
        finally:
            sink.close()
        assert kept["outcome"] == "no-reply" and kept["connected_networks"] == "[]"


def test_a_request_behind_its_remote_reply_past_the_watermark_completes_without_a_timer_in_the_past():
    """A remote-site reply restarts the wait from its own arrival (case D). Delivered minutes before
    its request, the wait it starts has ended by the time the request comes, maybe behind the
    watermark already: the operator completes it then (as the timer would have), and forgets it,
    instead of registering a timer Spark has passed (TwsTester refuses one)."""
    import pandas as pd
    from pyspark.sql.streaming.tws_tester import TwsTester
    from streaming.spark.discovery_query import DiscoveryProcessor
    from streaming.wire import encode, mqsd
    rid, at = "6bd48ea0-f9b2-4c4a-ae18-bb3c762286a8", 1_767_228_440_429
    reply = encode("mqsd", mqsd.new_reply(rid, [CN_REMOTE], "e6eaba60-d1c6-11db-baac-0003ff4e2d22",
                                          [mqsd.DirectoryServiceServerEntry(True, False, "nt4pec")]))
    request = encode("mqsd", mqsd.new_request(REQ.enterprise_id, rid, REQ.site_id))
    tester = TwsTester(DiscoveryProcessor(), timeMode="EventTime", eventTimeExtractor=lambda r: int(r["arrival_ms"]))
    first = tester.testInPandas(rid, pd.DataFrame([_row(reply, at, 0, rid)]))
    # it names its site's servers, and hands the reply's check on to the server registry
    assert list(first["table_name"]) == ["site_topology", "server_registry"]
    (check,) = [json.loads(row["text"]) for t, row in _typed(first) if t == "server_registry"]
    assert check == ["check", "mqsd-rogue-reply", at, "10.2.0.100", "10.1.0.5", ["10.2.0.100", "nt4pec"],
                     {"topic": "msmq.sd.raw", "partition": 0, "offset": 0, "message_id": "m0"}]
    tester.setWatermark(at + 50_000)                        # the other requests' traffic moved it on
    out = tester.testInPandas(rid, pd.DataFrame([_row(request, at + 60_000, 1, rid)]))
    (done,) = [row for t, row in _typed(out) if t == "discovery_requests"]
    assert done["outcome"] == "remote-site" and json.loads(done["directory_servers"]) == ["nt4pec"]
    assert tester.peekValueState("discovery", rid) is None          # completed and forgotten at once
