"""Spark's Python processes import pyspark from the installed package, not from its zip (local mode).

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) first on every Python worker's
path. Python never caches bytecode for a zip, so each new worker, data-source runner and
transformWithState driver worker compiles pyspark's modules again: 0.6-0.7 s of CPU per process
start on this machine (1.2 s against 0.5 s to import what a worker needs), 7 % of the whole job's
CPU in the profile of bench_whole_job (issue 28), more in short runs such as the tests.

When the zips are those of the pyspark package the driver itself imports (a pip-installed
pyspark: SPARK_HOME is that package), the same files are installed beside it with their bytecode
cached, so a `sitecustomize` module, put first on the workers' PYTHONPATH by the driver, moves the
two zips behind them. With any other Spark (SPARK_HOME elsewhere) nothing moves. An existing
`sitecustomize` further on the path still runs.
"""
import os
from pathlib import Path

HOME_VARIABLE = "DIRSTREAM_PYSPARK_HOME"        # the pyspark package the zips must belong to
SITECUSTOMIZE = '''"""Written by msmq-dirstream (streaming/spark/worker_site.py): pyspark from the installed package."""
import os
import sys


def _installed_pyspark_first():
    home = os.environ.get("DIRSTREAM_PYSPARK_HOME")
    if not home:
        return
    lib = os.path.join(home, "python", "lib") + os.sep
    zips = [p for p in sys.path if p.startswith(lib) and p.endswith(".zip")]
    for p in zips:
        sys.path.remove(p)
    sys.path.extend(zips)


def _chain():
    """Runs the sitecustomize this one hides, if there is one."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    import importlib.machinery
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        import importlib.util
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_installed_pyspark_first()
_chain()
'''


def install(directory: Path) -> None:
    """Put the sitecustomize on the PYTHONPATH that Spark passes to its Python processes (os.environ,
    before the JVM starts), for the pyspark package this process imports."""
    import pyspark
    home = Path(pyspark.__file__).resolve().parent
    if not (home / "python" / "lib" / "pyspark.zip").exists():
        return                                  # not a pip-installed pyspark: nothing to move
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "sitecustomize.py"
    if not path.exists() or path.read_text() != SITECUSTOMIZE:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(SITECUSTOMIZE)
        tmp.replace(path)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(directory)]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(directory)] + paths)
    os.environ[HOME_VARIABLE] = str(home)
