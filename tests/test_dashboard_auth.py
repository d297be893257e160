"""The dashboard's access control: beyond loopback only with credentials; with an
--auth-file every page, asset and callback answers 401 without them and works with them (over HTTP
and in the headless browser); no page or callback can write to the sink."""
import base64
import json
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import dirstream, free_port
from streaming.sinks import open_sink

USER, PASSWORD = "operator", "correct horse battery staple"


@pytest.fixture
def sink(tmp_path) -> str:
    """A small sink written as the job writes it (one micro-batch)."""
    url = f"sqlite:///{tmp_path / 'sink.db'}"
    s = open_sink(url)
    try:
        s.write_batch("q", 0, {"pipeline_progress": [{
            "query_id": "q", "batch_id": 0, "input_rows": 7, "good_rows": 6, "dead_letters": 1, "duration_ms": 5,
            "rows_per_second": 1.0, "total_lag": 0, "lag": {}, "query_name": "dirstream", "late_rows": 0,
            "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:00:01+00:00"}],
            "dead_letters": [{"topic": "msmq.cn.raw", "kafka_partition": 0, "kafka_offset": 3, "error": "bad",
                              "error_reason": "truncated", "raw_value": b"\x01", "recorded_at": "2026-01-01T00:00:01"}],
            "directory_objects": [{"server": "s1", "object_guid": "g1", "partition_id": "p", "object_type": "queue",
                                   "path_name": "qm\\q1", "seq_number": "01", "deleted": False, "properties": {},
                                   "updated_at": "2026-01-01T00:00:01"}]})
    finally:
        s.close()
    return url


@pytest.fixture
def auth_file(tmp_path) -> Path:
    path = tmp_path / "users"
    added = dirstream("dashboard", "--add-user", USER, "--auth-file", str(path), input=PASSWORD + "\n")
    assert added.returncode == 0, added.stderr
    return path


def test_beyond_loopback_the_dashboard_refuses_to_start_without_credentials(sink):
    refused = dirstream("dashboard", "--sink", sink, "--host", "0.0.0.0", "--port", str(free_port()), timeout=600)
    assert refused.returncode == 2 and "refusing to serve on 0.0.0.0 without credentials" in refused.stderr


def test_the_auth_file_holds_an_argon2_hash_only_its_owner_reads(auth_file):
    text = auth_file.read_text()
    assert text.startswith(f"{USER}:$argon2id$") and PASSWORD not in text
    assert stat.S_IMODE(auth_file.stat().st_mode) == 0o600
    bad = auth_file.with_name("bad")
    bad.write_text("operator:plaintext\n")
    refused = dirstream("dashboard", "--auth-file", str(bad), "--port", str(free_port()), timeout=600)
    assert refused.returncode == 2 and "expected user:argon2-hash" in refused.stderr


def _serve(sink: str, auth_file: Path, tmp_path: Path) -> tuple[subprocess.Popen, str]:
    exe = shutil.which("dirstream", path=str(Path(sys.executable).parent))
    port = free_port()
    log = open(tmp_path / "dashboard.log", "w")
    proc = subprocess.Popen([exe, "dashboard", "--sink", sink, "--host", "0.0.0.0", "--port", str(port),
                             "--auth-file", str(auth_file)], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if _status(base + "/pipeline") == 401:
            return proc, base
        assert proc.poll() is None, (tmp_path / "dashboard.log").read_text()
        time.sleep(0.3)
    raise AssertionError("the dashboard did not answer within 60 s")


def _status(url: str, credentials: tuple[str, str] | None = None, body: dict | None = None) -> int:
    return _request(url, credentials, body)[0]


def _request(url: str, credentials=None, body: dict | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"}
    if credentials:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(credentials).encode()).decode()
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=120) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def _search_callback(value: str) -> dict:
    return {"output": "dir-body.children", "outputs": {"id": "dir-body", "property": "children"},
            "inputs": [{"id": "dir-server", "property": "value", "value": "s1"},
                       {"id": "dir-type", "property": "value", "value": "queue"},
                       {"id": "dir-search", "property": "value", "value": value},
                       {"id": "dir-as-of", "property": "value", "value": None}],
            "changedPropIds": ["dir-search.value"]}


def test_every_page_asset_and_callback_needs_credentials_and_none_writes(sink, auth_file, tmp_path):
    proc, base = _serve(sink, auth_file, tmp_path)
    try:
        for path in ("/pipeline", "/replication", "/_dash-layout", "/_dash-dependencies", "/assets/none.css"):
            assert _status(base + path) == 401, path
            assert _status(base + path, (USER, "wrong password")) == 401, path
            assert _status(base + path, ("nobody", PASSWORD)) == 401, path
        assert _status(base + "/pipeline", (USER, PASSWORD)) == 200
        assert _status(base + "/_dash-layout", (USER, PASSWORD)) == 200
        callback = _search_callback("q1")
        assert _status(base + "/_dash-update-component", body=callback) == 401
        code, answer = _request(base + "/_dash-update-component", (USER, PASSWORD), callback)
        assert code == 200 and "qm\\\\q1" in answer, answer[:500]
        # SQL in a callback's input is a parameter, and the reader's connection is read-only
        hostile = _search_callback("x'); DELETE FROM dead_letters; DROP TABLE directory_objects; --")
        assert _request(base + "/_dash-update-component", (USER, PASSWORD), hostile)[0] == 200
    finally:
        proc.terminate()
        proc.wait(30)
    s = open_sink(sink)
    try:
        assert len(s.query("SELECT * FROM dead_letters")) == 1 and len(s.query("SELECT * FROM directory_objects")) == 1
    finally:
        s.close()
    from streaming.apps.sink_reader import SinkReader
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        SinkReader(sink).conn.execute("DELETE FROM dead_letters")


def test_the_headless_browser_sees_401_without_credentials_and_the_pages_with_them(sink, auth_file, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from test_dashboard import CHROMEDRIVER, CHROMIUM, text_of
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    proc, base = _serve(sink, auth_file, tmp_path)
    try:
        driver.get(base + "/pipeline")                 # a 401 with a Basic challenge: nothing of the app
        time.sleep(1)
        assert "msmq-dirstream" not in driver.page_source and "_dash" not in driver.page_source
        header = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": header}})
        driver.get(base + "/pipeline")
        assert text_of(driver, "pipeline-input-rows") == "7"
        driver.save_screenshot(str(tmp_path / "pipeline-signed-in.png"))
    finally:
        driver.quit()
        proc.terminate()
        proc.wait(30)
