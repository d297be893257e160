"""A throw-away Prometheus server for tests: Debian's /usr/bin/prometheus on a free loopback port,
scraping one target as job `dirstream`, its configuration and TSDB in a work directory.

With `time_scale` the alerting rules are loaded as a scaled copy (`scaled_rules`): every duration
written `Nm`/`Nh` in a `for:`, a range selector (`[10m]`, `[10m:1m]`) or an `offset` is multiplied by
the scale and written in seconds, so that a rule with `for: 10m` fires within seconds. Thresholds
are left as they are. The HTTP helpers (`query`, `alerts`, `targets`) use the standard library only.
"""
import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

from infra.broker import free_port

__all__ = ["duration_seconds", "HOST", "prometheus_binary", "PrometheusError", "PrometheusServer", "READY_TIMEOUT",
           "scale_duration", "scaled_rules"]

HOST = "127.0.0.1"
READY_TIMEOUT = 60.0

_DURATION = r"(?:\d+[hm])+(?![a-z0-9])"       # 10m, 1h, 1h30m (anything with s or ms is left alone)
_FOR = re.compile(rf"(\bfor:\s*)({_DURATION})")
_OFFSET = re.compile(rf"(\boffset\s+)({_DURATION})")
_RANGE = re.compile(r"\[([^\[\]]+)\]")
_DURATION_IN_RANGE = re.compile(rf"(?<![\w.])({_DURATION})")


class PrometheusError(RuntimeError):
    pass


def prometheus_binary() -> str:
    found = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not Path(found).exists():
        raise PrometheusError("prometheus is not installed: apt-get install prometheus (make system-deps does it)")
    return found


def duration_seconds(text: str) -> int:
    """Seconds in a duration of hours and minutes: '1h30m' -> 5400."""
    units = {"h": 3600, "m": 60}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([hm])", text))


def scale_duration(text: str, scale: float) -> str:
    """'10m' with 0.01 -> '6s'; never below 1s (a zero duration stays 0s)."""
    seconds = duration_seconds(text)
    return f"{max(1, round(seconds * scale)) if seconds else 0}s"


def scaled_rules(text: str, scale: float) -> str:
    """The rules text with its `for:`, range-selector and offset durations scaled (see the module doc)."""
    if scale <= 0:
        raise ValueError(f"time scale must be positive, not {scale}")
    scale_match = lambda m: m.group(1) + scale_duration(m.group(2), scale)   # noqa: E731
    text = _FOR.sub(scale_match, text)
    text = _OFFSET.sub(scale_match, text)
    return _RANGE.sub(lambda m: "[" + _DURATION_IN_RANGE.sub(
        lambda d: scale_duration(d.group(1), scale), m.group(1)) + "]", text)


class PrometheusServer:
    def __init__(self, workdir: Path, target: str, rules_file: Path | None = None, scrape_interval: str = "1s",
                 evaluation_interval: str = "1s", time_scale: float | None = None):
        self.workdir, self.target = Path(workdir), target
        self.rules_file = Path(rules_file).resolve() if rules_file else None
        self.scrape_interval, self.evaluation_interval = scrape_interval, evaluation_interval
        self.time_scale = time_scale
        self.port: int | None = None
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.workdir / "prometheus.yml"

    @property
    def log_path(self) -> Path:
        return self.workdir / "prometheus.log"

    def loaded_rules_path(self) -> Path | None:
        """The rules file Prometheus loads: the scaled copy with a time scale, else the file itself."""
        if self.rules_file is None or self.time_scale is None:
            return self.rules_file
        scaled = self.workdir / f"{self.rules_file.stem}.scaled{self.rules_file.suffix}"
        scaled.write_text(scaled_rules(self.rules_file.read_text(), self.time_scale))
        return scaled

    def write_config(self) -> Path:
        """The configuration (JSON strings are YAML strings, so no YAML library is needed)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        rules = self.loaded_rules_path()
        lines = ["global:",
                 f"  scrape_interval: {json.dumps(self.scrape_interval)}",
                 f"  evaluation_interval: {json.dumps(self.evaluation_interval)}"]
        if rules:
            lines += ["rule_files:", f"  - {json.dumps(str(rules))}"]
        lines += ["scrape_configs:",
                  "  - job_name: dirstream",
                  "    static_configs:",
                  f"      - targets: [{json.dumps(self.target)}]"]
        self.config_path.write_text("\n".join(lines) + "\n")
        return self.config_path

    def start(self) -> "PrometheusServer":
        self.write_config()
        self.port = free_port(HOST)
        command = [prometheus_binary(), f"--config.file={self.config_path}",
                   f"--storage.tsdb.path={self.workdir / 'tsdb'}", f"--web.listen-address={HOST}:{self.port}"]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self._wait_ready(READY_TIMEOUT)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PrometheusError(f"prometheus exited with code {self.process.returncode}:\n{self.log_tail()}")
            if self._ready():
                return
            time.sleep(0.2)
        raise PrometheusError(f"prometheus did not answer {self.url}/-/ready within {timeout:.0f} s:\n{self.log_tail()}")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def __enter__(self) -> "PrometheusServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def api(self, path: str, **params: str) -> Any:
        """The `data` of a /api/v1 answer; a PrometheusError for an error answer."""
        url = f"{self.url}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                body = json.loads(text)
            except ValueError:
                raise PrometheusError(f"{path} {params}: HTTP {e.code}: {text[:500]}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list:
        """The instant vector of `expr` now: [{'metric': {...}, 'value': [time, 'text']}, ...]."""
        return self.api("query", query=expr)["result"]

    def alerts(self) -> list:
        """Pending and firing alerts: [{'labels': {...}, 'annotations': {...}, 'state': ..., ...}, ...]."""
        return self.api("alerts")["alerts"]

    def targets(self) -> list:
        """The active scrape targets, with their `health` and `lastError`."""
        return self.api("targets")["activeTargets"]

    def rules(self) -> list:
        """The loaded rule groups, as Prometheus parsed them."""
        return self.api("rules")["groups"]

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.5,
                 what: str | None = None) -> Any:
        """The first truthy value of `predicate()`, polled every `interval` seconds up to `timeout`."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                last = predicate()
            except (PrometheusError, OSError) as e:      # an error answer, or no answer yet
                last = e
            else:
                if last:
                    return last
            if time.monotonic() >= deadline:
                break
            time.sleep(interval)
        name = what or getattr(predicate, "__name__", "condition")
        raise PrometheusError(f"{name} not met within {timeout:g} s (last value: {last!r}); prometheus log:\n"
                              f"{self.log_tail(10)}")
