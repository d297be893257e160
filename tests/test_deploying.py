"""docs/deploying.md's systemd unit is infra/systemd/dirstream.service, and systemd accepts it."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UNIT = ROOT / "infra" / "systemd" / "dirstream.service"


def test_the_unit_in_the_docs_is_the_shipped_one():
    blocks = re.findall(r"```ini\n(.*?)```", (ROOT / "docs" / "deploying.md").read_text(), re.DOTALL)
    assert blocks == [UNIT.read_text()]


def test_the_unit_stops_on_a_settings_error_and_creates_its_state_directory():
    service = UNIT.read_text().replace("\\\n", " ").split("[Service]")[1].split("[Install]")[0]
    settings = dict(line.split("=", 1) for line in service.splitlines() if "=" in line and not line.startswith("#"))
    assert settings["RestartPreventExitStatus"] == "2" and settings["Restart"] == "on-failure"
    assert settings["StateDirectory"] == "dirstream" and settings["WorkingDirectory"] == "/var/lib/dirstream"
    assert settings["EnvironmentFile"].startswith("/etc/dirstream/") and "--metrics-host" in settings["ExecStart"]
    assert settings["KillMode"] == "mixed"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not on this machine")
def test_systemd_analyze_verifies_the_unit(tmp_path):
    """Its ExecStart pointed at this checkout's dirstream (systemd checks that the program exists)."""
    dirstream = Path(sys.executable).parent / "dirstream"
    text = UNIT.read_text().replace("/opt/msmq-dirstream/.venv/bin/dirstream", str(dirstream))
    assert str(dirstream) in text
    unit = tmp_path / "dirstream.service"
    unit.write_text(text)
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stdout + done.stderr
    broken = tmp_path / "broken" / "dirstream.service"                # the check can fail
    broken.parent.mkdir()
    broken.write_text(text.replace("RestartPreventExitStatus=2", "RestartPreventExitStatus=two"))
    done = subprocess.run(["systemd-analyze", "verify", str(broken)], capture_output=True, text=True, timeout=120)
    assert "RestartPreventExitStatus" in done.stderr or "parse" in done.stderr, done.stderr


def test_the_documented_spark_submit_names_both_pythons_and_the_entry_point():
    """The command test_distributed runs as written (there with the test's hosts and paths)."""
    from test_distributed import documented_spark_submit
    command = documented_spark_submit()
    assert command.startswith("PYTHONPATH=msmq_dirstream-0.1.0-py3-none-any.whl spark-submit --master ")
    assert "--conf spark.pyspark.python=" in command and "--conf spark.pyspark.driver.python=" in command
    assert '"$(dirstream spark-main)" --bootstrap ' in command and command.endswith("--pec-name PEC01")
