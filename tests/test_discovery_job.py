"""MQSD discovery through the real pipeline: broker -> source -> the job's one query -> sink.
(A simulated enterprise's discovery verified against the truth: tests/test_determinism.py.)"""
import json

from conftest import vector

from producers.kafka import ConfluentPublisher, KafkaSettings, ensure_topics
from producers.publish import publish_envelope
from streaming.wire.envelope import make_envelope
from streaming.operators.notifications import Settings
from streaming.spark.job_query import start_job_query
from streaming.spark.pipeline import source_options
from streaming.sinks import open_sink
from streaming.wire.topics import TOPICS

T0 = 1_767_225_600_000          # 2026-01-01T00:00:00Z


def publish(bootstrap, packets):
    """packets: (body, arrival ms, source, destination)"""
    ensure_topics(KafkaSettings(bootstrap), {t: 2 for t in TOPICS.values()})
    pub = ConfluentPublisher(KafkaSettings(bootstrap))
    for body, at, source, dest in packets:
        publish_envelope(pub, "mqsd", dest, make_envelope("mqsd", body, source_machine=source,
                                                          destination_machine=dest, destination_queue="udp:1801",
                                                          sent_time=at, arrival_time=at))
    pub.close()


def run_discovery(spark, bootstrap, url, checkpoint):
    q = start_job_query(spark, sink_url=url, checkpoint=str(checkpoint), once=True, echo=lambda _l: None,
                        source_opts=source_options(bootstrap), settings=Settings())
    try:
        q.awaitTermination(600)
    except Exception:
        pass
    assert q.exception() is None, q.exception()


def requests(url):
    s = open_sink(url)
    try:
        rows = s.query("SELECT * FROM discovery_requests ORDER BY request_id")
        topo = s.query("SELECT * FROM site_topology ORDER BY site_id, directory_server")
        unmatched = s.query("SELECT * FROM discovery_unmatched_replies")
    finally:
        s.close()
    for r in rows + topo + unmatched:
        for k in ("directory_servers", "connected_networks"):
            if isinstance(r.get(k), str):
                r[k] = json.loads(r[k])
    return rows, topo, unmatched


def _request_body(request_id_hex: str) -> bytes:
    body = bytearray(vector("mqsd_4_request"))
    body[20:36] = bytes.fromhex(request_id_hex)
    return bytes(body)


def test_section_4_exchange_and_the_timer_cases(spark, broker, tmp_path):
    request, local, remote = vector("mqsd_4_request"), vector("mqsd_4_reply_local"), vector("mqsd_4_reply_remote")
    other = "11" * 16                      # a second request that only a remote server answers
    lonely = "22" * 16                     # a third that nobody answers
    remote_other = remote[:4] + bytes.fromhex(other) + remote[20:]
    packets = [
        (request, T0, "10.0.0.5", "10.0.255.255"), (local, T0 + 50, "10.0.0.1", "10.0.0.5"),
        (remote, T0 + 90, "10.1.0.1", "10.0.0.5"),                                  # §4: ignored
        (_request_body(other), T0 + 1_000, "10.0.0.6", "10.0.255.255"),
        (remote_other, T0 + 1_030, "10.1.0.1", "10.0.0.6"),
        (_request_body(lonely), T0 + 2_000, "10.0.0.7", "10.0.255.255"),
        (request[:4] + bytes(16) + request[20:], T0 + 60_000, "10.0.0.8", "10.0.255.255"),   # moves event time
        (local[:4] + bytes(16) + local[20:], T0 + 60_050, "10.0.0.1", "10.0.0.8"),
    ]
    publish(broker, packets)
    url = f"sqlite:///{tmp_path}/sink.db"
    run_discovery(spark, broker, url, tmp_path / "ckpt")
    rows, topo, unmatched = requests(url)
    by_id = {r["request_id"]: r for r in rows}
    section4 = by_id["f291a103-e33c-ab4f-a930-be3a33e432dd"]
    assert section4["outcome"] == "local-site" and section4["connected_networks"] == [
        "e6eaba62-d1c6-11db-baac-0003ff4e2d22"] and section4["directory_servers"] == []
    assert section4["client_site"] == "dcc51bf6-d4ad-4543-8739-71568e8f9128" and section4["client"] == "10.0.0.5"
    remote_only = by_id["11111111-1111-1111-1111-111111111111"]
    assert remote_only["outcome"] == "remote-site" and remote_only["directory_servers"] == ["nt4pec"]
    assert by_id["22222222-2222-2222-2222-222222222222"]["outcome"] == "no-reply"
    assert [u["reason"] for u in unmatched] == ["late: the request had already completed"]
    assert {(t["site_id"], t["directory_server"]) for t in topo} >= {
        ("e6eaba60-d1c6-11db-baac-0003ff4e2d22", "nt4pec"), ("dcc51bf6-d4ad-4543-8739-71568e8f9128", "10.0.0.1")}
    # Re-running changes nothing: the batches were already written.
    run_discovery(spark, broker, url, tmp_path / "ckpt")
    assert requests(url)[0] == rows


