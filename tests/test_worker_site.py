"""Spark's Python processes in local mode import pyspark from the installed package (cached
bytecode), not from pyspark.zip (streaming/spark/worker_site.py)."""
import os
import subprocess
import sys
from pathlib import Path

import pyspark

from streaming.spark import worker_site

LIB = Path(pyspark.__file__).resolve().parent / "python" / "lib"


def _origin_under(tmp_path, env_extra: dict) -> str:
    zips = os.pathsep.join(str(p) for p in sorted(LIB.glob("*.zip")))
    env = {**os.environ, **env_extra}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env_extra.get("PYTHONPATH"), zips]))
    done = subprocess.run([sys.executable, "-c", "import pyspark, py4j; print(pyspark.__file__, py4j.__file__)"],
                          env=env, capture_output=True, text=True, cwd=tmp_path, check=True)
    return done.stdout.strip()


def test_the_sitecustomize_moves_the_pyspark_zips_behind_the_installed_package(tmp_path, monkeypatch):
    assert "pyspark.zip" in _origin_under(tmp_path, {})          # what Spark's own path gives
    monkeypatch.setenv("PYTHONPATH", "")
    worker_site.install(tmp_path / "site")
    moved = _origin_under(tmp_path, {"PYTHONPATH": os.environ["PYTHONPATH"],
                                     worker_site.HOME_VARIABLE: os.environ[worker_site.HOME_VARIABLE]})
    assert ".zip" not in moved and str(LIB.parent.parent) in moved


def test_zips_of_another_spark_stay_first_and_a_hidden_sitecustomize_still_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "")
    worker_site.install(tmp_path / "site")
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['HIDDEN_RAN'] = '1'\n")
    code = "import os, pyspark; print(pyspark.__file__, os.environ.get('HIDDEN_RAN'))"
    env = {**os.environ, worker_site.HOME_VARIABLE: str(tmp_path / "elsewhere"),
           "PYTHONPATH": os.pathsep.join([os.environ["PYTHONPATH"], str(other)]
                                         + [str(p) for p in sorted(LIB.glob("*.zip"))])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout
    assert "pyspark.zip" in out and out.strip().endswith("1")


def test_a_spark_python_worker_imports_the_installed_pyspark(spark):
    def origin(_rows):
        import pandas as pd
        import pyspark as worker_pyspark
        yield pd.DataFrame({"origin": [worker_pyspark.__file__]})
    rows = spark.range(1).mapInPandas(origin, "origin string").collect()
    assert rows and all(".zip" not in r.origin and r.origin.endswith("__init__.py") for r in rows)
