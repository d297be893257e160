"""Bytecode inside pyspark's zips, so that Spark's Python processes stop compiling pyspark at every start.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) first on the path of every Python
process it starts (workers, data-source runners, transformWithState's driver-side runners). Python
caches no bytecode for modules imported from a zip, so each of those processes compiled pyspark's
modules again: 0.6-0.7 s of CPU per start, about 7 % of the whole job's CPU in bench_whole_job's
profile and more in short runs such as the tests.

zipimport takes a module's `.pyc` from the zip when there is one (it looks for it before the
`.py`). This step rewrites the zips of the pyspark package installed in this virtual environment
with, beside every `.py`, its bytecode compiled by this interpreter as an unchecked hash-based pyc
(PEP 552: no timestamp to compare, so the zip's 2-second file times do not matter). The `.py`
files stay (tracebacks show their lines) and are byte for byte the same, so the processes run the
same code: only the compilation goes. Another interpreter version finds a pyc of the wrong magic
number and falls back to the `.py`. Run by `make setup`; idempotent.

pyspark's own test suites (every `tests` folder: 1,960 of the zip's 2,772 entries once compiled)
are left out of the rewritten zip: no pyspark module imports them, and every task a Python worker
runs re-reads the zip's whole directory (`setup_spark_files` calls `importlib.invalidate_caches()`,
and zipimport then reads the central directory again: 9.7 ms per task with them, a seventh of the
discovery query's Python CPU in one profile).

    python -m infra.pyspark_bytecode [--check]
"""
import argparse
import importlib.util
import os
import sys
import warnings
import zipfile
from pathlib import Path

__all__ = ["add_bytecode", "has_bytecode", "is_test_suite", "main", "pyc_bytes", "pyspark_zips", "STAMP"]

STAMP = "msmq-dirstream-bytecode.txt"      # names the interpreter the pycs were compiled for


def pyspark_zips() -> list[Path]:
    """The zips Spark puts on its Python processes' path, for the pyspark this interpreter imports
    (a pip-installed pyspark is its own SPARK_HOME); none when they are not there."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return []
    lib = Path(spec.origin).parent / "python" / "lib"
    return sorted(lib.glob("*.zip")) if lib.is_dir() else []


def _tag() -> str:
    return f"{sys.implementation.cache_tag} {importlib.util.MAGIC_NUMBER.hex()} without-tests"


def is_test_suite(name: str) -> bool:
    """An entry of pyspark's own test suites (a `tests` folder anywhere in its path)."""
    return "tests" in name.split("/")[:-1]


def has_bytecode(path: Path) -> bool:
    with zipfile.ZipFile(path) as z:
        try:
            return z.read(STAMP).decode() == _tag()
        except KeyError:
            return False


def pyc_bytes(source: bytes, name: str) -> bytes:
    """An unchecked hash-based pyc of source (what py_compile writes with UNCHECKED_HASH)."""
    from importlib._bootstrap_external import _code_to_hash_pyc
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # pyspark's own tests have a SyntaxWarning or two
        code = compile(source, name, "exec", dont_inherit=True)
    return bytes(_code_to_hash_pyc(code, importlib.util.source_hash(source), checked=False))


def add_bytecode(path: Path) -> int:
    """Rewrites the zip with a pyc beside every .py (atomically); returns how many were compiled.
    Entries are copied as they are, but for the test suites; pycs of an earlier run are replaced."""
    tmp = path.with_name(path.name + ".tmp")
    compiled = 0
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            if info.filename.endswith(".pyc") or info.filename == STAMP or is_test_suite(info.filename):
                continue
            data = src.read(info)
            dst.writestr(info, data)
            if info.filename.endswith(".py"):
                try:
                    pyc = pyc_bytes(data, f"{path}/{info.filename}")
                except SyntaxError:
                    continue                # left to the .py, which Python compiles itself
                dst.writestr(zipfile.ZipInfo(info.filename + "c", info.date_time), pyc)
                compiled += 1
        dst.writestr(STAMP, _tag())
    os.replace(tmp, path)
    return compiled


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="only say whether the zips have bytecode (exit 1: no)")
    args = ap.parse_args(argv)
    zips = pyspark_zips()
    if not zips:
        print("pyspark bytecode: no pyspark zips here (not a pip-installed pyspark): nothing to do")
        return 0
    missing = [z for z in zips if not has_bytecode(z)]
    if args.check:
        for z in zips:
            print(f"{z}: {'bytecode' if z not in missing else 'no bytecode'}")
        return 1 if missing else 0
    for z in missing:
        try:
            print(f"pyspark bytecode: {z.name}: {add_bytecode(z)} modules compiled")
        except OSError as exc:              # a read-only installation: Python compiles the .py itself
            print(f"pyspark bytecode: cannot rewrite {z}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
