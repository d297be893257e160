"""A secured Kafka (issue 30): the embedded broker with a SASL_SSL listener (TLS, SCRAM-SHA-512), and
every client of the project working through the properties file `broker start` prints."""
import stat
import subprocess
import time

import pytest

from conftest import dirstream
from infra.broker import EmbeddedBroker, answers, free_port


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


def test_simulate_respond_run_once_and_verify_work_unchanged_on_the_secured_broker(secured, tmp_path):
    config = str(secured.client_properties)
    kafka = ("--bootstrap", secured.bootstrap, "--kafka-config", config)
    truth = tmp_path / "truth.json"
    published = dirstream("produce", "simulate", *kafka, "--seed", "30", "--count", "1200", "--truth", str(truth))
    assert published.returncode == 0, published.stderr[-2000:]
    responder = subprocess.Popen([*_exe("produce", "respond"), *kafka, "--truth", str(truth), "--idle-exit", "60"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sink = f"sqlite:///{tmp_path / 'sink.db'}"
    try:
        for runs in range(1, 4):
            done = dirstream("run", *kafka, "--once", "--sink", sink, "--checkpoint", str(tmp_path / "ckpt"),
                             "--master", "local[2]", "--pec-name", "pec0", "--metrics-port", "0", timeout=600)
            assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
            verified = dirstream("verify", "--truth", str(truth), "--sink", sink)
            if verified.returncode == 0:
                break
            time.sleep(8)                        # the responder answers the sync requests just sent
    finally:
        responder.terminate()
        _, err = responder.communicate(30)
    assert verified.returncode == 0, verified.stdout[-3000:]
    assert "error" not in err.lower(), err[-2000:]


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
    started = time.monotonic()
    job = dirstream("run", "--bootstrap", secured.bootstrap, "--kafka-config", config, "--sink", f"sqlite:///{sink}",
                    "--checkpoint", str(checkpoint), "--once", "--metrics-port", "0", timeout=120)
    took = time.monotonic() - started
    console = job.stdout + job.stderr
    assert job.returncode == 2 and took < 30, (took, console)
    assert expected in console, console
    assert not sink.exists() and not checkpoint.exists()
    assert "Traceback" not in console and "at org.apache" not in console and "Exception" not in console
    assert options["sasl.password"] not in console
    simulate = dirstream("produce", "simulate", "--bootstrap", secured.bootstrap, "--kafka-config", config,
                         "--count", "10", timeout=120)
    assert simulate.returncode != 0 and expected in simulate.stderr, simulate.stderr
    assert len(simulate.stderr.strip().splitlines()) == 1, simulate.stderr


@pytest.mark.parametrize("make", [lambda tmp: tmp / "missing.properties", lambda tmp: tmp])
def test_a_missing_or_unreadable_properties_file_is_named(secured, tmp_path, make):
    config = make(tmp_path)
    job = dirstream("run", "--bootstrap", secured.bootstrap, "--kafka-config", str(config), "--sink",
                    f"sqlite:///{tmp_path / 'sink.db'}", "--checkpoint", str(tmp_path / "ckpt"), "--once", timeout=120)
    assert job.returncode == 2 and f"cannot read --kafka-config {config}" in job.stdout + job.stderr
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "sink.db").exists()
    simulate = dirstream("produce", "simulate", "--bootstrap", secured.bootstrap, "--kafka-config", str(config))
    assert simulate.returncode == 2 and f"cannot read --kafka-config {config}" in simulate.stderr
