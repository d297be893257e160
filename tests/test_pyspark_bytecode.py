"""Bytecode in pyspark's zips (infra/pyspark_bytecode.py): Spark's Python processes import pyspark
from the zip without compiling it, and run exactly the code of the zip's sources."""
import marshal
import subprocess
import sys
import zipfile

import pytest

from infra.pyspark_bytecode import STAMP, add_bytecode, has_bytecode, main, pyspark_zips

COUNT_COMPILES = """
import builtins, sys
zips = sys.argv[1:]
sys.path[0:0] = zips
compiled = []
real = builtins.compile
def counting(source, name, *args, **kwargs):
    if any(str(name).startswith(z) for z in zips):
        compiled.append(str(name))
    return real(source, name, *args, **kwargs)
builtins.compile = counting
{imports}
print(len(compiled))
"""


def _compiles(zips, imports: str) -> int:
    """How many modules of the zips a fresh interpreter compiles to run imports."""
    out = subprocess.run([sys.executable, "-S", "-c", COUNT_COMPILES.format(imports=imports), *map(str, zips)],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def _zip(path, files: dict) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)


def test_a_zip_gets_a_pyc_per_module_and_imports_without_compiling(tmp_path):
    path = tmp_path / "lib.zip"
    _zip(path, {"pkg/__init__.py": "from .mod import VALUE\n", "pkg/mod.py": "VALUE = 6 * 7\n",
                "pkg/broken.py": "def (:\n", "pkg/data.txt": "not python", "pkg/tests/__init__.py": "",
                "pkg/sub/tests/test_mod.py": "import pkg\n", "pkg/testsuite.py": "X = 1\n"})
    assert _compiles([path], "import pkg") >= 2 and not has_bytecode(path)
    assert add_bytecode(path) == 3                  # the module with a syntax error stays a .py
    assert has_bytecode(path)
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        assert {"pkg/__init__.py", "pkg/__init__.pyc", "pkg/mod.py", "pkg/mod.pyc", "pkg/broken.py",
                "pkg/data.txt", "pkg/testsuite.py", "pkg/testsuite.pyc", STAMP} == names   # no tests folder
        assert z.read("pkg/data.txt") == b"not python"
    assert _compiles([path], "import pkg; assert pkg.VALUE == 42") == 0
    add_bytecode(path)                              # again: the same entries, none twice
    with zipfile.ZipFile(path) as z:
        assert sorted(z.namelist()) == sorted(names)


def test_a_changed_source_is_compiled_again_on_the_next_run(tmp_path):
    """A zip replaced by a new pyspark release has no stamp: its pycs are made again."""
    path = tmp_path / "lib.zip"
    _zip(path, {"m.py": "X = 1\n"})
    add_bytecode(path)
    _zip(path, {"m.py": "X = 2\n"})
    assert not has_bytecode(path)
    add_bytecode(path)
    out = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, {str(path)!r}); import m; "
                          "print(m.X)"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2"


@pytest.fixture(scope="module")
def installed_zips():
    zips = pyspark_zips()
    if not zips:
        pytest.skip("pyspark is not pip-installed here (no python/lib zips)")
    assert main([]) == 0                            # what make setup runs; idempotent
    return zips


def test_sparks_python_processes_import_pyspark_without_compiling(installed_zips):
    assert all(has_bytecode(z) for z in installed_zips)
    for path in installed_zips:                     # every task re-reads the zip's directory: no test suites
        with zipfile.ZipFile(path) as z:
            assert not [n for n in z.namelist() if "tests" in n.split("/")[:-1]]
    assert main(["--check"]) == 0
    imports = "import pyspark.worker, pyspark.daemon, pyspark.sql.pandas.serializers, pyspark.sql.streaming"
    assert _compiles(installed_zips, imports) == 0


def test_the_bytecode_is_the_zips_own_source_compiled(installed_zips):
    for path in installed_zips:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            for name in sorted(n for n in names if n.endswith(".py")):
                source = z.read(name)
                try:
                    expected = compile(source, f"{path}/{name}", "exec", dont_inherit=True)
                except SyntaxError:
                    assert name + "c" not in names
                    continue
                assert marshal.loads(z.read(name + "c")[16:]) == expected, name
