"""`dirstream decode` as a user runs it: the installed console script, JSON out, exit codes."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import streaming
from conftest import ROOT, vector

DIRSTREAM = shutil.which("dirstream", path=str(Path(sys.executable).parent)) or "dirstream"


def run(*args, stdin: bytes | None = None):
    return subprocess.run([DIRSTREAM, *args], input=stdin, capture_output=True, timeout=600)


def test_decode_hex_prints_json():
    text = (ROOT / "tests" / "vectors" / "mqsd_4_reply_remote.hex").read_text()
    done = run("decode", "--protocol", "mqsd", "--hex", text)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["server_reply"]["directory_service_server_array"] == [
        {"ip_supported": True, "ipx_supported": False, "name": "nt4pec"}]
    assert out["server_reply"]["correlation_id"] == "f291a103-e33c-ab4f-a930-be3a33e432dd"


def test_decode_file_shows_sequence_numbers_as_hex(tmp_path):
    body = tmp_path / "ack.bin"
    body.write_bytes(bytes.fromhex("003C2D1E0F5A4B786987 96A5B4C3D2E1F0 06 3C2D1E0F5A4B78698796A5B4C3D2E1F0"
                                   "00000000000000000000000000000000 0000000000000100 500053004300310000 00"
                                   .replace(" ", "")))
    done = run("decode", "--protocol", "mqdsrp", "--file", str(body))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["psc_ack"]["acked_seq_number"] == "0000000000000100"


def test_decode_stdin():
    done = run("decode", "--protocol", "mqsd", "--file", "-", stdin=vector("mqsd_4_request"))
    assert done.returncode == 0 and json.loads(done.stdout)["packet_type"] == "TopologyClientRequest"


def test_bad_body_exits_2_with_field_and_offset():
    done = run("decode", "--protocol", "mqsd", "--hex", "00 01 00 00 61 BA")
    assert done.returncode == 2 and done.stdout == b""
    assert b"MQSD TopologyClientRequest.EnterpriseID at byte 4: truncated" in done.stderr


def test_bad_hex_and_missing_file_exit_2():
    assert run("decode", "--protocol", "mqcn", "--hex", "zz").returncode == 2
    assert run("decode", "--protocol", "mqcn", "--file", "/nonexistent/body").returncode == 2


def test_run_refuses_a_checkpoint_of_the_four_query_job_with_one_line_and_writes_nothing(tmp_path):
    """An earlier version's checkpoint (one folder per query) cannot become the one query's state:
    `dirstream run` stops before Spark, Kafka or the sink, saying what changed and how to rebuild."""
    checkpoint = tmp_path / "checkpoint"
    for folder in ("raw", "discovery", "replication", "notifications"):
        (checkpoint / folder / "offsets").mkdir(parents=True)
    before = sorted(p.relative_to(checkpoint) for p in checkpoint.rglob("*"))
    done = subprocess.run([str(Path(sys.executable).parent / "dirstream"), "run", "--bootstrap", "127.0.0.1:1",
                           "--checkpoint", str(checkpoint), "--sink", f"sqlite:///{tmp_path}/sink.db",
                           "--metrics-port", "0", "--log-format", "plain"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    said = [line for line in (done.stdout + done.stderr).splitlines() if "earlier version" in line]
    assert len(said) == 1 and "new --checkpoint" in said[0] and "pure function of what is in Kafka" in said[0]
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "sink.db").exists()
    assert sorted(p.relative_to(checkpoint) for p in checkpoint.rglob("*")) == before


def test_run_with_a_sink_that_does_not_answer_says_so_in_one_line_and_exits_1(tmp_path):
    """A sink not answering is the machine's (a service manager starts the job again later: exit 1);
    found before Kafka's waits and Spark."""
    done = subprocess.run([str(Path(sys.executable).parent / "dirstream"), "run", "--bootstrap", "127.0.0.1:1",
                           "--checkpoint", str(tmp_path / "ckpt"), "--sink", "postgresql://nobody@127.0.0.1:1/none",
                           "--metrics-port", "0", "--log-format", "plain"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    said = [line for line in (done.stdout + done.stderr).splitlines() if "cannot open PostgreSQL sink" in line]
    assert len(said) == 1 and "Connection refused" in said[0] and "accepting TCP/IP connections" in said[0]
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 3 and lines[0].startswith("dirstream run: Spark's and the job's log in ")    # then why
    assert lines[1] == f"dirstream run: {streaming.build_line()}"          # the build this environment loads
    assert not (tmp_path / "ckpt").exists()


def test_run_says_first_that_it_runs_the_pure_python_sources_when_told_to(tmp_path):
    import os
    done = subprocess.run([str(Path(sys.executable).parent / "dirstream"), "run", "--bootstrap", "127.0.0.1:1",
                           "--checkpoint", str(tmp_path / "ckpt"), "--sink", "postgresql://nobody@127.0.0.1:1/none",
                           "--metrics-port", "0", "--log-format", "plain"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "DIRSTREAM_BUILD": "python"})
    assert done.returncode == 1
    assert (done.stdout + done.stderr).splitlines()[1] == \
        "dirstream run: the codecs run as pure Python (DIRSTREAM_BUILD=python)"


def test_run_without_java_says_so_in_one_line_and_writes_nothing(tmp_path):
    """Spark runs on Java: without one, `dirstream run` says what to install (not PySpark's
    traceback about its gateway) and exits 1 (the machine's, not a setting) before Kafka or the sink."""
    import os
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)          # the venv's commands, no java
    done = subprocess.run([str(Path(sys.executable).parent / "dirstream"), "run", "--bootstrap", "127.0.0.1:1",
                           "--checkpoint", str(tmp_path / "checkpoint"), "--sink", f"sqlite:///{tmp_path}/sink.db",
                           "--metrics-port", "0", "--log-format", "plain"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 1
    said = [line for line in (done.stdout + done.stderr).splitlines() if "Java" in line]
    assert said == ["dirstream run: Java (17 or later) is needed for Spark and was not found: install it "
                    "(apt-get install default-jre-headless) or set JAVA_HOME"]
    assert "Traceback" not in done.stdout + done.stderr and not (tmp_path / "sink.db").exists()


def _run_job(tmp_path, *flags: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "dirstream"), "run", "--bootstrap", "127.0.0.1:1",
                           "--checkpoint", str(tmp_path / "checkpoint"), "--sink", f"sqlite:///{tmp_path}/sink.db",
                           "--metrics-port", "0", "--log-format", "plain", *flags], capture_output=True, text=True,
                          timeout=120, env=env)


def test_run_with_a_java_older_than_17_says_so_in_one_line(tmp_path):
    """A `java` that reports version 11 first on the PATH: one line naming it and its version, exit 1."""
    import os
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "java").write_text('#!/bin/sh\necho \'openjdk version "11.0.22" 2024-01-16\' >&2\n')
    (fake / "java").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = f"{fake}:{Path(sys.executable).parent}"
    done = _run_job(tmp_path, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    said = [line for line in (done.stdout + done.stderr).splitlines() if "Java" in line]
    assert said == [f"dirstream run: Java (17 or later) is needed for Spark; {fake / 'java'} is Java 11: install a "
                    "later one (apt-get install default-jre-headless) or set JAVA_HOME to it"]
    assert "Traceback" not in done.stdout + done.stderr and not (tmp_path / "sink.db").exists()


@pytest.mark.parametrize("flags, line", [
    (("--spark-conf", "spark.ui.enabled"), "dirstream run: --spark-conf 'spark.ui.enabled': expected key=value, "
                                            "like spark.executor.memory=4g"),
    (("--cn-window", "15 minutes"), "dirstream run: --cn-window: a duration is like 500ms, 30s, 1m or 1h, "
                                    "got '15 minutes'"),
    (("--trigger", "often"), "dirstream run: --trigger takes a duration like 500ms, 2s or 1m, got 'often'"),
])
def test_run_with_a_bad_flag_says_which_on_the_console_and_exits_2_at_once(tmp_path, flags, line):
    """Checked before Java, Kafka (nothing answers on 127.0.0.1:1: no wait) or the sink."""
    done = _run_job(tmp_path, *flags)
    assert done.returncode == 2, done.stdout + done.stderr
    assert line in done.stdout.splitlines() + done.stderr.splitlines(), done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr and "does not answer" not in done.stdout + done.stderr
    assert not (tmp_path / "sink.db").exists()


def test_verify_names_a_truth_file_it_cannot_read_in_one_line(tmp_path):
    done = subprocess.run([str(Path(sys.executable).parent / "dirstream"), "verify", "--truth",
                           str(tmp_path / "missing.json"), "--sink", f"sqlite:///{tmp_path}/sink.db"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"dirstream verify: cannot read the truth file {tmp_path / 'missing.json'}: " \
                                  "No such file or directory"
