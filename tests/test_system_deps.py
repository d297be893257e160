"""infra/system_deps.sh decides what a fresh Debian 12 or 13 lacks: run with stand-ins for the
machine's programs first on the PATH (a `java` of a given version, a `python3` without ensurepip)
and an `apt-get` that records what it was asked to install instead of installing it."""
import glob
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "infra" / "system_deps.sh"
TOOLS = ("chromium", "chromedriver", "initdb", "tcpdump", "promtool", "mvn")


def _program(folder: Path, name: str, body: str) -> None:
    (folder / name).write_text("#!/bin/sh\n" + body + "\n")
    (folder / name).chmod(0o755)


def asked_to_install(tmp_path: Path, *args: str, java: str | None, venv: bool, tools=TOOLS) -> list[str]:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "apt.log"
    for tool in tools:
        _program(bin_, tool, "exit 0")
    if java is not None:
        _program(bin_, "java", f"echo '{java}' >&2")
    _program(bin_, "python3", "exit 0" if venv else "exit 1")        # python3 -c 'import ensurepip'
    _program(bin_, "apt-get", f'echo "$@" >> {log}')
    _program(bin_, "sudo", 'shift; exec "$@"')
    # the machine's own java and python3 must not answer: only the stand-ins (or none), and the few
    # programs the script itself uses
    for name in ("sed", "head", "ls", "id"):
        (bin_ / name).symlink_to(shutil.which(name))
    env = {"PATH": str(bin_), "HOME": str(tmp_path)}
    done = subprocess.run(["/bin/bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = log.read_text().splitlines() if log.exists() else []
    installs = [line.split() for line in lines if line.split()[:1] == ["install"]]
    return sorted({p for line in installs for p in line if not p.startswith("-") and p != "install"})


@pytest.mark.parametrize("java, wanted", [
    ('openjdk version "11.0.22" 2024-01-16', ["default-jre-headless"]),
    ('java version "1.8.0_402"', ["default-jre-headless"]),
    ('openjdk version "17.0.13" 2024-10-15', []),
    ('openjdk version "21.0.5" 2024-10-15', []),
])
def test_a_java_older_than_17_is_replaced_by_debians_default(tmp_path, java, wanted):
    assert asked_to_install(tmp_path, "--run", java=java, venv=True) == wanted


def test_python3_venv_and_java_are_installed_when_missing(tmp_path):
    assert asked_to_install(tmp_path, "--run", java=None, venv=False, tools=("mvn",)) == \
        ["default-jre-headless", "python3-venv"]


def test_the_test_suites_tools_only_without_run(tmp_path):
    # PostgreSQL's server programs are also looked for where Debian puts them, outside the PATH
    postgresql = [] if glob.glob("/usr/lib/postgresql/*/bin/initdb") else ["postgresql"]
    assert asked_to_install(tmp_path, java='openjdk version "17.0.13"', venv=True, tools=()) == \
        sorted(["chromium", "chromium-driver", "maven", "prometheus", "tcpdump", *postgresql])
