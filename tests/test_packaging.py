"""What a user installs: the wheel and sdist carry the schemas and the license, a wheel installed
in a fresh virtual environment outside the source tree runs, and the package list is complete."""
import json
import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
from conftest import vector

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = {"envelope.avsc", "mqcn.avsc", "mqdsrp.avsc", "mqqb_rejected.avsc", "mqsd.avsc"}


def deps_only_python(where: Path) -> Path:
    """A fresh virtual environment that sees the third-party dependencies (this environment's
    site-packages, through a .pth line: an editable install's own .pth there is not processed) but
    not the project."""
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = venv / "lib" / version / "site-packages"
    (site / "third_party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (where / "started").mkdir()
    (site / "sitecustomize.py").write_text(       # every process of this interpreter leaves a mark
        f"import os\nopen(os.path.join({str(where / 'started')!r}, str(os.getpid())), 'w').close()\n")
    python = venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import pyspark, fastavro, confluent_kafka\nimport streaming"],
                           cwd=where, capture_output=True, text=True, env=clean_env())
    assert "No module named 'streaming'" in probe.stderr, probe.stderr
    return python


def clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                                                           "VIRTUAL_ENV")}
    return env


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Package would be ignored" not in done.stdout + done.stderr      # every package listed
    return out


def test_every_package_of_the_source_tree_is_in_the_package_list():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {str(p.parent.relative_to(ROOT)).replace("/", ".") for top in ("streaming", "producers", "infra")
             for p in (ROOT / top).rglob("__init__.py")}
    assert listed == found | {"streaming.schemas"}


def test_the_wheel_and_the_sdist_carry_the_schemas_and_the_license(dist):
    (wheel,) = dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.rsplit("/", 1)[-1] for n in names if n.startswith("streaming/schemas/")} == SCHEMAS
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert {n.rsplit("/", 1)[-1] for n in names if n.startswith("infra/prometheus/")} >= {
        "prometheus.yml", "dirstream-alerts.yml", "dirstream-alerts.test.yml"}
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata and "Requires-Python: >=3.11" in metadata
    (sdist,) = dist.glob("*.tar.gz")
    import tarfile
    members = tarfile.open(sdist).getnames()
    assert {m.rsplit("/", 1)[-1] for m in members if "/schemas/" in m} >= SCHEMAS
    assert any(m.endswith("/LICENSE") for m in members)


def test_the_installed_wheel_decodes_and_runs_the_job_outside_the_source_tree(dist, broker, tmp_path):
    python = deps_only_python(tmp_path)
    (wheel,) = dist.glob("*.whl")
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    exe = python.parent / "dirstream"

    def run(*args, timeout=600):
        return subprocess.run([str(exe), *args], cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
                              env=clean_env())

    where = subprocess.run([str(python), "-c", "import streaming; print(streaming.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, env=clean_env()).stdout
    assert str(tmp_path / "venv") in where
    assert run("--version").stdout.strip() == "dirstream 0.1.0"
    decoded = run("decode", "--protocol", "mqsd", "--hex", vector("mqsd_4_request").hex())
    assert decoded.returncode == 0 and json.loads(decoded.stdout)
    simulated = run("produce", "simulate", "--bootstrap", broker, "--seed", "3", "--count", "500")
    assert simulated.returncode == 0, simulated.stderr[-2000:]
    published = json.loads(simulated.stdout)["published"]
    job = run("run", "--bootstrap", broker, "--sink", f"sqlite:///{tmp_path}/out.db", "--checkpoint",
              str(tmp_path / "ckpt"), "--once", "--master", "local[2]")
    assert job.returncode == 0, job.stderr[-3000:]
    import sqlite3
    with sqlite3.connect(tmp_path / "out.db") as db:
        assert db.execute("SELECT SUM(input_rows) FROM pipeline_progress WHERE query_name = 'dirstream'").fetchone()[0] == published
        assert db.execute("SELECT COUNT(*) FROM notification_batches").fetchone()[0] > 0     # operators ran
