"""A secured Kafka: the embedded broker with a SASL_SSL listener (TLS, SCRAM-SHA-512), and
every client of the project working through the properties file `broker start` prints."""
import json
import stat
import subprocess
import time

import pytest

from conftest import dirstream
from job_runs import once_until_verified
from infra.broker import EmbeddedBroker, answers, free_port
from producers.truth_file import read_truth


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    b = EmbeddedBroker(tmp_path_factory.mktemp("secured-kafka"), port=free_port(), security="sasl_ssl")
    status = b.start()
    assert status.answering, status.describe()
    yield b
    b.stop()


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_secured_broker_answers_only_authenticated_tls_clients(secured):
    options = secured.client_options()
    assert options["security.protocol"] == "SASL_SSL" and options["sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["sasl.username"] == "dirstream" and len(options["sasl.password"]) >= 24
    for private in (secured.client_properties, secured.state_dir / "secrets.properties",
                    secured.state_dir / "server.properties"):
        assert _mode(private) == 0o600, private
    assert answers(secured.bootstrap, timeout=5, options=options)
    assert not answers(secured.bootstrap, timeout=3)                      # a plaintext client
    assert not answers(secured.bootstrap, timeout=5, options={**options, "sasl.password": "wrong"})
    shown = dirstream("broker", "status", "--state-dir", str(secured.state_dir), "--port", str(secured.port))
    assert shown.returncode == 0 and "answering" in shown.stdout
    assert f"--kafka-config {secured.client_properties}" in shown.stdout
    assert options["sasl.password"] not in shown.stdout + shown.stderr
    # the state directory keeps its choice: a plaintext start of it is refused with the reason
    refused = dirstream("broker", "start", "--state-dir", str(secured.state_dir), "--security", "plaintext")
    assert refused.returncode != 0 and "formatted with --security sasl_ssl" in refused.stderr


def test_replay_respond_run_and_verify_work_unchanged_on_the_secured_broker(secured, tmp_path):
    """A simulated capture with lying MQQB packets in it replayed (the capture decoding and
    publishing of `produce capture`: the rejected packets to their own topic), the responder,
    `run --once` until verify is clean, its findings check included (each rejected packet an
    mqqb-malformed finding): all through the file. (A continuous run on the secured broker is
    the no-secret test's, below.)"""
    config = str(secured.client_properties)
    kafka = ("--bootstrap", secured.bootstrap, "--kafka-config", config)
    truth, capture = tmp_path / "truth.json", tmp_path / "sim.pcapng"
    written = dirstream("produce", "simulate", "--seed", "30", "--count", "1200", "--truth", str(truth),
                        "--pcap", str(capture), "--attack", "mqqb-malformed,dsrp-unsigned,mqcn-unauthenticated")
    assert written.returncode == 0, written.stderr[-2000:]
    injected = [a for a in read_truth(str(truth), ("attacks",))["attacks"] if a["kind"] == "mqqb-malformed"]
    replayed = dirstream("produce", "replay", *kafka, str(capture))
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    summary = json.loads(replayed.stdout)
    assert summary["published"] == json.loads(written.stdout)["written"]
    assert summary["rejected_packets_published"] == len(injected) > 0
    sink = f"sqlite:///{tmp_path / 'sink.db'}"
    verified, err = once_until_verified(kafka, kafka, truth, sink, tmp_path / "ckpt")
    assert verified.returncode == 0, verified.stdout[-3000:]
    assert "Traceback" not in err, err[-2000:]       # (librdkafka may log its shutdown's disconnections)
    from streaming.sinks import open_sink
    db = open_sink(sink)
    try:
        dead = db.query("SELECT COUNT(*) AS n FROM dead_letters WHERE protocol = 'mqqb'")[0]["n"]
        found = db.query("SELECT SUM(count) AS n FROM security_findings WHERE kind = 'mqqb-malformed'")[0]["n"]
        unsigned = db.query("SELECT kind, evidence FROM security_findings "
                            "WHERE kind IN ('dsrp-unsigned', 'mqcn-unauthenticated')")
    finally:
        db.close()
    assert dead == found == len(injected)
    # a message-level finding from a capture names where its message is there too (a record header)
    assert {row["kind"] for row in unsigned} == {"dsrp-unsigned", "mqcn-unauthenticated"}
    for row in unsigned:
        for where in json.loads(row["evidence"]).values():
            assert where["capture"] == str(capture) and where["position"].startswith("packet "), where
            assert " (TCP " in where["position"] and where["offset"] is not None


def _continuously(secured, sink: str, job_dir, published: int) -> subprocess.CompletedProcess:
    """A continuous run on the secured broker until it has read every record, then Ctrl-C: what it
    printed (its console), as a finished command's."""
    import job_runs
    job_dir.mkdir()
    proc = job_runs.job(secured.bootstrap, sink, job_dir / "ckpt", "--kafka-config", str(secured.client_properties),
                        "--log-file", str(job_dir / "run.log"), "--metrics-port", "0")
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and _raw_rows(sink) < published:
            assert proc.poll() is None, job_runs.output(proc)[-3000:]
            time.sleep(2)
    finally:
        job_runs.stop(proc)
    assert _raw_rows(sink) >= published, job_runs.output(proc)[-3000:]
    return subprocess.CompletedProcess(proc.args, proc.returncode, job_runs.output(proc), "")


def _raw_rows(url: str) -> int:
    from streaming.sinks import open_sink
    try:
        s = open_sink(url)
    except Exception:                     # noqa: BLE001 -- not created yet
        return 0
    try:
        rows = s.query("SELECT SUM(input_rows) AS n FROM pipeline_progress WHERE query_name = 'dirstream'")
        return rows[0]["n"] or 0
    except Exception:                     # noqa: BLE001 -- no table yet
        return 0
    finally:
        s.close()


def _exe(*command) -> list[str]:
    import shutil
    import sys
    from pathlib import Path
    return [shutil.which("dirstream", path=str(Path(sys.executable).parent)), *command]


# ---------------------------------------------------------------- bad security input: one clear line
def _properties(path, options: dict) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in options.items()))
    return str(path)


def _other_ca(tmp_path) -> str:
    from infra.broker import java_binary
    from infra.broker_security import ensure_tls
    ensure_tls(tmp_path / "other-tls", "127.0.0.1", java_binary(), "another-store-password")
    return str(tmp_path / "other-tls" / "ca.pem")


BAD_SETTINGS = {
    "wrong password": (lambda o, tmp: {**o, "sasl.password": "not-the-password"}, "refused the credentials of user 'dirstream'"),
    "unknown user": (lambda o, tmp: {**o, "sasl.username": "nobody"}, "refused the credentials of user 'nobody'"),
    "a CA that does not match": (lambda o, tmp: {**o, "ssl.ca.location": _other_ca(tmp)},
                                 "does not sign; check ssl.ca.location"),
    "a plaintext client on the TLS port": (lambda o, tmp: {}, "the listener expects TLS, not 'PLAINTEXT'"),
}


@pytest.mark.parametrize("case", sorted(BAD_SETTINGS))
def test_bad_security_settings_stop_the_job_and_the_producers_with_one_clear_line(secured, tmp_path, case):
    make, expected = BAD_SETTINGS[case]
    options = secured.client_options()
    config = _properties(tmp_path / "bad.properties", make(options, tmp_path))
    sink, checkpoint = tmp_path / "sink.db", tmp_path / "ckpt"
    job = dirstream("run", "--bootstrap", secured.bootstrap, "--kafka-config", config, "--sink", f"sqlite:///{sink}",
                    "--checkpoint", str(checkpoint), "--once", "--metrics-port", "0", timeout=600)
    console = job.stdout + job.stderr
    assert job.returncode == 2, console
    assert "did not answer" not in console and " within " not in console, console   # refused, not waited out
    assert expected in console, console
    assert not sink.exists() and not checkpoint.exists()
    assert "Traceback" not in console and "at org.apache" not in console and "Exception" not in console
    assert options["sasl.password"] not in console
    simulate = dirstream("produce", "simulate", "--bootstrap", secured.bootstrap, "--kafka-config", config,
                         "--count", "10", timeout=600)
    assert simulate.returncode != 0 and expected in simulate.stderr, simulate.stderr
    assert len(simulate.stderr.strip().splitlines()) == 1, simulate.stderr


@pytest.mark.parametrize("make", [lambda tmp: tmp / "missing.properties", lambda tmp: tmp])
def test_a_missing_or_unreadable_properties_file_is_named(secured, tmp_path, make):
    config = make(tmp_path)
    job = dirstream("run", "--bootstrap", secured.bootstrap, "--kafka-config", str(config), "--sink",
                    f"sqlite:///{tmp_path / 'sink.db'}", "--checkpoint", str(tmp_path / "ckpt"), "--once", timeout=600)
    assert job.returncode == 2 and f"cannot read --kafka-config {config}" in job.stdout + job.stderr
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "sink.db").exists()
    simulate = dirstream("produce", "simulate", "--bootstrap", secured.bootstrap, "--kafka-config", str(config))
    assert simulate.returncode == 2 and f"cannot read --kafka-config {config}" in simulate.stderr


# ---------------------------------------------------------------- no secret in any output
def test_no_secret_reaches_the_console_the_log_the_checkpoint_the_sink_or_the_dashboard(secured, tmp_path, pg_url):
    import secrets as random_secrets
    import urllib.request
    from streaming.sinks import open_sink
    pg_secret = "pg-" + random_secrets.token_urlsafe(16)
    sink = pg_url.replace("://postgres@", f"://postgres:{pg_secret}@", 1)        # trust authentication: accepted
    assert pg_secret in sink
    known = {secured.client_options()["sasl.password"], pg_secret,
             *(line.split("=", 1)[1] for line in (secured.state_dir / "secrets.properties").read_text().splitlines())}
    kafka = ("--bootstrap", secured.bootstrap, "--kafka-config", str(secured.client_properties))
    printed = [dirstream("produce", "simulate", *kafka, "--seed", "31", "--count", "600", "--corrupt", "0.05")]
    assert printed[0].returncode == 0, printed[0].stderr[-2000:]
    published = json.loads(printed[0].stdout)["published"]
    job_dir = tmp_path / "job"
    printed.append(_continuously(secured, sink, job_dir, published))
    # a database that does not exist: the error names the sink with its password masked
    printed.append(dirstream("run", *kafka, "--once", "--sink", sink + "_missing", "--checkpoint",
                             str(tmp_path / "other"), "--metrics-port", "0", timeout=300))
    assert printed[2].returncode != 0 and "postgres:***@" in printed[2].stdout + printed[2].stderr
    dashboard = subprocess.Popen([*_exe("dashboard"), "--sink", sink, "--port", str(port := free_port())],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        pages = [_get(f"http://127.0.0.1:{port}{path}") for path in ("/pipeline", "/_dash-layout", "/replication")]
    finally:
        dashboard.terminate()
        dashboard_out, _ = dashboard.communicate(30)
    rows = open_sink(sink)
    try:
        tables = [str(rows.query(f"SELECT * FROM {t}")) for t in ("pipeline_progress", "dead_letters",
                                                                   "outbound_messages", "sink_batches")]
    finally:
        rows.close()
    assert tables[1] != "[]"                                     # the corrupt records are there
    written = [p.read_bytes().decode("utf-8", "replace") for p in job_dir.rglob("*") if p.is_file()]
    everything = {"console": "".join(p.stdout + p.stderr for p in printed), "job's files": "".join(written),
                  "sink tables": "".join(tables), "dashboard": dashboard_out + "".join(pages)}
    assert "postgres:***@" in everything["dashboard"] + everything["job's files"]
    for where, text in everything.items():
        for secret in known:
            assert secret not in text, f"a secret in the {where}"


def _get(url: str, tries: int = 60) -> str:
    import urllib.error
    import urllib.request
    for _ in range(tries):
        try:
            with urllib.request.urlopen(url, timeout=120) as answer:
                return answer.read().decode()
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.5)
    raise AssertionError(f"no answer from {url}")
