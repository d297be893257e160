"""Makes the README's picture of the dashboard again: docs/dashboard.png.

A fresh simulated enterprise on a throw-away embedded broker, the authority responder answering,
one `dirstream run --once` into a throw-away SQLite sink, then `dirstream dashboard` over it and
the Replication page in headless Chromium (Debian's chromium and chromium-driver, as the dashboard
tests use). Nothing of the run is kept but the picture.

Run: .venv/bin/python infra/dashboard_screenshot.py [--out docs/dashboard.png] [--page replication]
"""
import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

__all__ = ["DIRSTREAM", "dirstream", "fill_sink", "free_port", "main", "PAGES", "ROOT", "screenshot"]

ROOT = Path(__file__).resolve().parents[1]
DIRSTREAM = str(Path(sys.executable).parent / "dirstream")
PAGES = ("pipeline", "replication", "directory", "notifications", "discovery", "security")


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dirstream(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([DIRSTREAM, *args], check=True, **kwargs)


def fill_sink(work: Path, bootstrap: str, seed: int, count: int) -> str:
    """A simulated enterprise's traffic through the whole job, its authorities answering."""
    sink = f"sqlite:///{work / 'sink.db'}"
    truth = work / "truth.json"
    dirstream("produce", "simulate", "--bootstrap", bootstrap, "--seed", str(seed), "--count", str(count),
              "--truth", str(truth), stdout=subprocess.DEVNULL)
    responder = subprocess.Popen([DIRSTREAM, "produce", "respond", "--bootstrap", bootstrap, "--truth", str(truth)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(2):                      # the second pass reads the authorities' answers
            dirstream("run", "--once", "--bootstrap", bootstrap, "--sink", sink, "--checkpoint",
                      str(work / "ckpt"), "--pec-name", "pec0", "--log-format", "plain", "--metrics-port", "0",
                      stdout=subprocess.DEVNULL)
            time.sleep(5)
    finally:
        responder.terminate()
        responder.wait(60)
    return sink


def screenshot(sink: str, page: str, out: Path, work: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait
    port = free_port()
    server = subprocess.Popen([DIRSTREAM, "dashboard", "--sink", sink, "--port", str(port)],
                              stdout=open(work / "dashboard.log", "w"), stderr=subprocess.STDOUT)
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(f"{base}/{page}", timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit(f"the dashboard did not answer; see {work / 'dashboard.log'}")
                time.sleep(0.5)
        driver.get(f"{base}/{page}")
        WebDriverWait(driver, 120).until(
            lambda d: d.execute_script("return document.getElementsByClassName('replica-cell').length > 0 "
                                       "|| document.getElementsByTagName('table').length > 0"))
        time.sleep(2)                           # the graphs draw
        out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(out))
    finally:
        driver.quit()
        server.terminate()
        server.wait(30)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "docs" / "dashboard.png"))
    p.add_argument("--page", choices=PAGES, default="replication")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--count", type=int, default=3000)
    args = p.parse_args(argv)
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        raise SystemExit("needs Debian's chromium and chromium-driver (`make system-deps` installs them)")
    with tempfile.TemporaryDirectory(prefix="dirstream-screenshot-") as tmp:
        work = Path(tmp)
        port = free_port()
        dirstream("broker", "start", "--port", str(port), "--state-dir", str(work / "broker"),
                  stdout=subprocess.DEVNULL)
        try:
            sink = fill_sink(work, f"127.0.0.1:{port}", args.seed, args.count)
            screenshot(sink, args.page, Path(args.out), work)
        finally:
            dirstream("broker", "stop", "--state-dir", str(work / "broker"), stdout=subprocess.DEVNULL)
    print(f"dashboard_screenshot: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
