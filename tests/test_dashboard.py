"""`dirstream dashboard` in a real browser (Debian's headless Chromium through chromedriver) over a
sink filled by a real simulated run: every page, the figures it shows against the sink's rows,
screenshots in the test's folder."""
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import dirstream, free_port, simulate
from streaming.sinks import open_sink
from job_runs import job, output, stop

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.fail("the dashboard test needs Debian's chromium and chromium-driver (`make test` installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1100"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def serve(sink: str, tmp_path: Path) -> tuple[subprocess.Popen, str]:
    exe = shutil.which("dirstream", path=str(Path(sys.executable).parent))
    port = free_port()
    log = open(tmp_path / f"dashboard-{port}.log", "w")
    proc = subprocess.Popen([exe, "dashboard", "--sink", sink, "--port", str(port), "--refresh", "2"], stdout=log,
                            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(base + "/pipeline", timeout=2)
            return proc, base
        except OSError:
            assert proc.poll() is None, (tmp_path / f"dashboard-{port}.log").read_text()
            time.sleep(0.3)
    raise AssertionError("the dashboard did not answer within 300 s")


# One script finds the element and reads its text: the page re-renders at every refresh, and an
# element found by one call can be replaced before a second call reads it.
READ_TEXT = "const e = document.getElementById(arguments[0]); return e === null ? null : [e.innerText.trim()];"


def text_of(driver, ident: str, timeout: float = 120) -> str:
    """The element's text, read in one step once the element exists (the bound only a hang exceeds)."""
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, timeout).until(lambda d: d.execute_script(READ_TEXT, ident))[0]


def visit(driver, base: str, page: str, tmp_path: Path, ready: str) -> None:
    driver.get(f"{base}/{page}")
    text_of(driver, ready)
    time.sleep(1.0)                                   # let the graphs draw before the screenshot
    driver.save_screenshot(str(tmp_path / f"{page}.png"))


def _as_of(browser, sink, server: str) -> None:
    """The Directory page's "as of" picker: the replica as directory_history says it was then."""
    from streaming.apps.history import parse_time
    from streaming.sinks import iso
    starts = sorted(str(r["valid_from"]) for r in sink.query(
        "SELECT valid_from FROM directory_history WHERE server = ?", (server,)))
    moment = iso(parse_time(starts[len(starts) // 2]))
    expected = one(sink, "SELECT COUNT(*) AS n FROM directory_history WHERE server = ? AND kind <> 'deleted' AND "
                         "valid_from <= ? AND (valid_to IS NULL OR valid_to > ?)", (server, moment, moment))
    now = one(sink, "SELECT COUNT(*) AS n FROM directory_objects WHERE server = ? AND deleted = 0", (server,))
    assert expected > 0 and now > 0
    assert _submitted(browser, "dir-as-of", moment, "dir-count",
                      lambda text: text == f"{expected} objects as of {moment}")
    assert _submitted(browser, "dir-as-of", "yesterday", "dir-as-of-error", lambda text: "not a time" in text)


def _submitted(browser, box: str, value: str, shows: str, wanted, timeout: float = 300) -> bool:
    """Type a value into an input and press Enter until the page shows what is wanted: the page
    re-renders at every refresh, which can replace the input while it is typed into (its value is
    then kept: persistence), leave it not interactable for a moment, or replace the element while
    it is read."""
    from selenium.common.exceptions import (ElementNotInteractableException, NoSuchElementException,
                                            StaleElementReferenceException)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            field = browser.find_element(By.ID, box)
            field.clear()
            field.send_keys(value + Keys.ENTER)
            for _ in range(10):
                time.sleep(0.5)
                shown = browser.execute_script(READ_TEXT, shows)
                if shown is not None and wanted(shown[0]):
                    return True
        except (StaleElementReferenceException, NoSuchElementException, ElementNotInteractableException):
            time.sleep(0.2)
            continue
    return False


def _readme_blocks_run_over(folder: Path, truth_file: Path, sink_file: Path) -> None:
    """The README's runnable blocks, in a folder laid out as `make run` leaves the project's."""
    import sqlite3
    from test_docs import run_readme_blocks
    (folder / "var").mkdir(parents=True)
    (folder / ".venv").mkdir()
    (folder / ".venv" / "bin").symlink_to(Path(sys.executable).parent)
    shutil.copy(truth_file, folder / "var" / "truth.json")
    with sqlite3.connect(sink_file) as source, sqlite3.connect(folder / "var" / "dirstream.db") as copy:
        source.backup(copy)
    printed = run_readme_blocks(folder)
    assert printed and all(printed), printed


def one(sink, sql: str, params=()):
    return sink.query(sql, params)[0]["n"]


def test_every_page_shows_the_sink(broker, tmp_path, browser):
    from selenium.webdriver.common.by import By
    _, truth = simulate(broker, tmp_path, "--seed", "6", "--count", "3000", "--corrupt", "0.01",
                        "--unauthenticated", "0.05", "--attack", "dsrp-unknown-sender,mqsd-rogue-reply")
    truth_file = next(tmp_path.glob("truth-*.json"))
    url = f"sqlite:///{tmp_path}/sink.db"
    proc = job(broker, url, tmp_path / "ckpt")
    deadline = time.monotonic() + 600
    while True:                                       # until the operators have caught up with the truth
        assert proc.poll() is None, output(proc)[-5000:]
        done = dirstream("verify", "--truth", str(truth_file), "--sink", url) \
            if "batch 0:" in output(proc) else None
        if done is not None and done.returncode == 0:
            break
        assert time.monotonic() < deadline, done.stdout[-3000:] if done else output(proc)[-3000:]
        time.sleep(3)
    stop(proc)
    _readme_blocks_run_over(tmp_path / "project", truth_file, tmp_path / "sink.db")

    sink = open_sink(url)
    server, base = serve(url, tmp_path)
    try:
        visit(browser, base, "pipeline", tmp_path, "pipeline-batches")
        assert int(text_of(browser, "pipeline-batches")) == one(sink, "SELECT COUNT(*) AS n FROM pipeline_progress WHERE query_name = 'dirstream'")
        assert int(text_of(browser, "pipeline-dead-letters")) == one(sink, "SELECT COUNT(*) AS n FROM dead_letters") > 0
        assert int(text_of(browser, "pipeline-input-rows")) == one(
            sink, "SELECT SUM(input_rows) AS n FROM pipeline_progress WHERE query_name = 'dirstream'")
        raw = sink.query("SELECT raw_value FROM dead_letters ORDER BY recorded_at DESC, kafka_offset DESC LIMIT 1")
        assert bytes(raw[0]["raw_value"])[:8].hex(" ") in text_of(browser, "dead-letters-table")

        visit(browser, base, "replication", tmp_path, "replication-grid")
        parts = sink.query("SELECT * FROM replication_partitions")
        assert int(text_of(browser, "replication-replicas")) == len(parts)
        # one script reads the whole grid: the page refreshes every 2 s and replaces its elements
        healths = browser.execute_script(
            "return Array.from(document.getElementsByClassName('replica-cell'), "
            "c => c.getElementsByClassName('health')[0].innerText);")
        assert len(healths) == len(parts)
        assert healths.count("own partition") == sum(1 for p in parts if p["owned"])
        assert set(healths) <= {"in sync", "own partition", "pending changes", "initial sync outstanding"}
        first = sorted(parts, key=lambda p: (p["server"], p["partition_id"]))[0]
        assert text_of(browser, "drill-outbound-count").endswith(str(one(
            sink, "SELECT COUNT(*) AS n FROM outbound_messages WHERE server = ? AND operation IN "
                  "('SyncRequest', 'PSCAck', 'BSCAck')", (first["server"],))))

        visit(browser, base, "directory", tmp_path, "dir-count")
        servers = sorted(r["server"] for r in sink.query("SELECT DISTINCT server FROM directory_objects"))
        assert text_of(browser, "dir-count") == f"{one(sink, 'SELECT COUNT(*) AS n FROM directory_objects WHERE server = ? AND deleted = 0', (servers[0],))} objects"
        _as_of(browser, sink, servers[0])
        pid = sorted(r["partition_id"] for r in sink.query("SELECT DISTINCT partition_id FROM directory_objects"))[0]
        sides = [{r["object_guid"]: (r["seq_number"], r["properties"]) for r in sink.query(
            "SELECT * FROM directory_objects WHERE server = ? AND partition_id = ? AND deleted = 0", (s, pid))}
            for s in (servers[0], servers[-1])]
        differing = [g for g in set(sides[0]) | set(sides[1]) if sides[0].get(g) != sides[1].get(g)]
        assert text_of(browser, "diff-count") == f"{len(differing)} differences"

        visit(browser, base, "notifications", tmp_path, "qm-batches")
        assert int(text_of(browser, "notifications-applied")) == one(
            sink, "SELECT COUNT(*) AS n FROM notifications WHERE outcome = 'applied'")
        assert int(text_of(browser, "notifications-discarded")) == one(
            sink, "SELECT COUNT(*) AS n FROM notifications WHERE outcome = 'discarded'") > 0
        managers = sink.query("SELECT * FROM queue_managers")
        managers.sort(key=lambda m: (m["machine_name"] is None, m["machine_name"] or "", m["machine_id"]))
        assert int(text_of(browser, "qm-batches")) == one(
            sink, "SELECT COUNT(*) AS n FROM notification_batches WHERE queue_manager = ?", (managers[0]["machine_id"],))

        visit(browser, base, "discovery", tmp_path, "discovery-requests")
        assert int(text_of(browser, "discovery-requests")) == one(sink, "SELECT COUNT(*) AS n FROM discovery_requests")
        assert browser.find_elements(By.ID, "site-topology")

        visit(browser, base, "security", tmp_path, "findings-table")
        for kind in ("mqcn-unauthenticated", "dsrp-unknown-sender", "mqsd-rogue-reply"):
            assert int(text_of(browser, f"findings-{kind}")) == one(
                sink, "SELECT SUM(count) AS n FROM security_findings WHERE kind = ?", (kind,)) > 0, kind
        first = sink.query("SELECT evidence FROM security_findings ORDER BY last_seen DESC LIMIT 1")[0]["evidence"]
        assert json.loads(first)["last"]["message_id"] in text_of(browser, "findings-table")
        assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(
            f"{p}.png" for p in ("pipeline", "replication", "directory", "notifications", "discovery", "security"))
    finally:
        server.terminate()
        server.wait(10)
        sink.close()


def test_empty_tables_explain_how_to_fill_them(tmp_path, browser):
    url = f"sqlite:///{tmp_path}/empty.db"
    open_sink(url).close()                           # the job's tables, all empty
    server, base = serve(url, tmp_path)
    try:
        for page, ident in (("pipeline", "empty-pipeline_progress"), ("replication", "empty-replication_partitions"),
                            ("directory", "empty-directory_objects"), ("notifications", "empty-notifications"),
                            ("discovery", "empty-discovery_requests")):
            browser.get(f"{base}/{page}")
            assert "run" in text_of(browser, ident).lower() or "fills" in text_of(browser, ident)
            browser.save_screenshot(str(tmp_path / f"empty-{page}.png"))
    finally:
        server.terminate()
        server.wait(10)


def test_a_sink_that_cannot_be_opened_is_reported(tmp_path):
    done = dirstream("dashboard", "--sink", f"sqlite:///{tmp_path}/missing/nothing.db", timeout=600)
    assert done.returncode == 2 and "cannot open the SQLite sink" in done.stderr
    done = dirstream("dashboard", "--sink", "postgresql://nobody@127.0.0.1:1/none", timeout=600)
    assert done.returncode == 2 and "cannot open the PostgreSQL sink" in done.stderr
