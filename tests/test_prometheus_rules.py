"""The Prometheus side of the job: the scrape configuration and alerting rules pass promtool's
checks and unit tests, `scaled_rules` shortens durations only, and a real Prometheus started by
`infra.prometheus_server` scrapes a served exposition text and raises an alert from the scaled rules."""
import re
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from infra.prometheus_server import PrometheusServer, scaled_rules

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS_DIR = ROOT / "infra" / "prometheus"
CONFIG = PROMETHEUS_DIR / "prometheus.yml"
ALERTS = PROMETHEUS_DIR / "dirstream-alerts.yml"
ALERT_TESTS = PROMETHEUS_DIR / "dirstream-alerts.test.yml"
TIME_SCALE = 0.01          # 10m -> 6s: DirstreamReplicaLagGrowing fires about 10 s after the lag starts growing

needs_prometheus = pytest.mark.skipif(
    not (shutil.which("promtool") and shutil.which("prometheus")),
    reason="Debian's prometheus package is not installed (make system-deps installs it)")


def promtool(*args: str) -> str:
    done = subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"promtool {' '.join(args)} failed:\n{output}"
    return output


def alert_names() -> list[str]:
    return re.findall(r"^\s*- alert: (\w+)", ALERTS.read_text(), re.MULTILINE)


@needs_prometheus
def test_the_scrape_configuration_is_valid():
    promtool("check", "config", str(CONFIG))


@needs_prometheus
def test_the_alerting_rules_are_valid():
    promtool("check", "rules", str(ALERTS))


@needs_prometheus
def test_the_alerting_rules_pass_their_unit_tests():
    promtool("test", "rules", str(ALERT_TESTS))


def test_every_alert_has_a_firing_and_a_silent_unit_test():
    tests = ALERT_TESTS.read_text()
    firing = set(re.findall(r"alertname: (\w+)\n\s+exp_alerts:\n", tests))
    silent = set(re.findall(r"alertname: (\w+)\n\s+exp_alerts: \[\]", tests))
    names = set(alert_names())
    assert len(names) >= 9
    assert names - firing == set(), "alerts without a firing test"
    assert names - silent == set(), "alerts without a test where they must not fire"


def test_scaled_rules_scale_durations_and_leave_thresholds_alone():
    text = ("expr: dirstream_replica_seconds_since_last_change > 3600 and changes(x[15m]) == 0\n"
            "for: 10m\nexpr: rate(y[1h]) > 0.5 and z offset 2m\nfor: 0m\nexpr: w[30s] > 60000\n")
    assert scaled_rules(text, 0.01) == (
        "expr: dirstream_replica_seconds_since_last_change > 3600 and changes(x[9s]) == 0\n"
        "for: 6s\nexpr: rate(y[36s]) > 0.5 and z offset 1s\nfor: 0s\nexpr: w[30s] > 60000\n")
    assert "for: 1s" in scaled_rules("for: 1m", 0.001)          # never below a second


@needs_prometheus
def test_the_scaled_rules_are_valid(tmp_path):
    scaled = tmp_path / "dirstream-alerts.scaled.yml"
    scaled.write_text(scaled_rules(ALERTS.read_text(), TIME_SCALE))
    assert "for: 6s" in scaled.read_text() and "[15m]" not in scaled.read_text()
    promtool("check", "rules", str(scaled))


class Exposition:
    """A tiny metrics endpoint: s1's lag is high but flat, s2's grows by 20 a second."""

    def __init__(self):
        self.started = time.monotonic()
        exposition = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = exposition.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def text(self) -> str:
        growing = 100 + int(20 * (time.monotonic() - self.started))
        return ("# TYPE dirstream_replica_lag_seq_numbers gauge\n"
                'dirstream_replica_lag_seq_numbers{server="s1",partition="p"} 120\n'
                f'dirstream_replica_lag_seq_numbers{{server="s2",partition="p"}} {growing}\n')

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """A real Prometheus scraping the exposition every second with the rules scaled by TIME_SCALE."""
    exposition = Exposition()
    server = PrometheusServer(tmp_path_factory.mktemp("prometheus"), exposition.target, rules_file=ALERTS,
                              time_scale=TIME_SCALE)
    with server:
        yield server
    exposition.close()


@needs_prometheus
def test_prometheus_loads_every_alert_scaled_with_a_severity_and_annotations(prometheus):
    (group,) = prometheus.rules()
    rules = {rule["name"]: rule for rule in group["rules"]}
    assert group["name"] == "dirstream" and sorted(rules) == sorted(alert_names())
    for rule in rules.values():
        assert rule["type"] == "alerting"
        assert rule["labels"]["severity"] in ("page", "ticket"), rule["name"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["name"]
    assert rules["DirstreamReplicaLagGrowing"]["duration"] == 6
    assert "[6s]" in rules["DirstreamReplicaLagGrowing"]["query"]


@needs_prometheus
def test_prometheus_scrapes_the_target_and_raises_the_lag_alert(prometheus):
    (target,) = prometheus.wait_for(
        lambda: [t for t in prometheus.targets() if t["health"] == "up"], timeout=300, what="the target is up")
    assert target["labels"] == {"job": "dirstream", "instance": prometheus.target}

    (sample,) = prometheus.wait_for(
        lambda: prometheus.query('dirstream_replica_lag_seq_numbers{server="s1"}'), timeout=300, what="s1's lag")
    assert sample["value"][1] == "120"
    assert sample["metric"]["instance"] == prometheus.target and sample["metric"]["partition"] == "p"

    def firing_lag_alerts():
        return [a for a in prometheus.alerts()
                if a["labels"]["alertname"] == "DirstreamReplicaLagGrowing" and a["state"] == "firing"]

    (alert,) = prometheus.wait_for(firing_lag_alerts, timeout=300, what="DirstreamReplicaLagGrowing firing")
    assert alert["labels"] == {"alertname": "DirstreamReplicaLagGrowing", "severity": "ticket", "job": "dirstream",
                               "instance": prometheus.target, "server": "s2", "partition": "p"}
    assert alert["annotations"]["summary"] == "replica of partition p on s2 falls further behind"
    # s1's lag is high but not growing: never even pending
    assert not [a for a in prometheus.alerts() if a["labels"].get("server") == "s1"]
