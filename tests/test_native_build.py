"""The compiled build (mypyc, infra/native_build.py) and the pure-Python sources it is made from:
which one a process loads, and the codec and operator tests run against the other one too."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import streaming
from conftest import WITHOUT_SERVICES_ENV

ROOT = Path(__file__).resolve().parents[1]
# the sans-IO tests: the codecs (vectors, properties, fuzzing), the operators' cores (the MQDSRP
# differential, the MQCN random-stream model) and their processors driven by hand (TwsTester)
SANS_IO_TESTS = ("test_mqcn.py", "test_mqdsrp.py", "test_mqsd.py", "test_propvariant.py", "test_propids.py",
                 "test_seqnum.py", "test_fuzz.py", "test_typed_rows.py", "test_rejected_packets.py",
                 "test_replication.py", "test_notifications.py", "test_discovery.py", "test_operator_rows.py",
                 "test_operator_steps.py", "test_findings.py", "test_replication_offline.py", "test_stored_state.py",
                 "test_qm_store.py", "test_poison.py", "test_verify_reads.py")
OTHER_BUILD = {"mypyc": "python", "python": "mypyc"}


def _build_in(python_path: Path, env: dict | None = None) -> tuple[str, str]:
    """(build_choice, loaded_build) of a new interpreter importing streaming from python_path."""
    done = subprocess.run([sys.executable, "-c", "import streaming; c = streaming.build_choice(); "
                           "print(c[0], streaming.loaded_build(), c[1], sep='|')"],
                          env={**os.environ, **(env or {}), "PYTHONPATH": str(python_path)},
                          capture_output=True, text=True, timeout=120, cwd=python_path)
    assert done.returncode == 0, done.stderr
    choice, loaded, why = done.stdout.strip().split("|")
    return choice, loaded, why


def test_this_session_runs_the_compiled_build_unless_told_otherwise():
    """`make test` builds it (make setup); DIRSTREAM_BUILD=python runs the sources instead."""
    choice, why = streaming.build_choice()
    if os.environ.get(streaming.BUILD_ENV, "").lower() == "python":
        assert choice == "python"
    else:
        assert (choice, why) == ("mypyc", None), f"the compiled build is not used: {why}"
    assert streaming.loaded_build() == choice


def test_a_process_loads_the_build_it_reports():
    assert _build_in(ROOT, {streaming.BUILD_ENV: "python"})[:2] == ("python", "python")
    assert _build_in(ROOT, {streaming.BUILD_ENV: "mypyc"})[:2] == ("mypyc", "mypyc")


@pytest.fixture
def copied_tree(tmp_path):
    """A copy of the streaming package with its compiled build."""
    shutil.copytree(ROOT / "streaming", tmp_path / "streaming", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_a_source_changed_after_compiling_runs_as_source(copied_tree):
    assert _build_in(copied_tree)[:2] == ("mypyc", "mypyc")
    source = copied_tree / "streaming" / "wire" / "seqnum.py"
    source.write_text(source.read_text() + "\n# changed\n")
    choice, loaded, why = _build_in(copied_tree)
    assert (choice, loaded) == ("python", "python")
    assert why == "seqnum.py changed since it was compiled (python -m infra.native_build compiles it again)"


def test_without_its_manifest_the_compiled_modules_are_not_loaded(copied_tree):
    (copied_tree / "streaming" / streaming.MANIFEST).unlink()
    choice, loaded, why = _build_in(copied_tree)
    assert (choice, loaded) == ("python", "python")
    assert why.startswith("no compiled build")


def test_the_sans_io_tests_pass_on_the_other_build():
    """This session runs them on its own build; here they run on the other one (those of no serial
    group: no second Spark job beside the session's)."""
    other = OTHER_BUILD[streaming.build_choice()[0]]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                           *(f"tests/{name}" for name in SANS_IO_TESTS),
                           "tests/test_native_build.py::test_this_session_runs_the_compiled_build_unless_told_otherwise"],
                          env={**os.environ, streaming.BUILD_ENV: other, WITHOUT_SERVICES_ENV: "1"}, cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout.splitlines()[-1]


def test_the_spark_workers_load_the_build_the_driver_reports(spark):
    """The operators run in Spark's Python workers: in local mode they load the driver's build."""
    from streaming.spark.pipeline import workers_build_line
    assert workers_build_line(spark) == streaming.build_line()



def _qm_values(state) -> dict:
    """A QMState's fields, its FindingLog (no __eq__) as the list it stores."""
    return {**vars(state), "findings": state.findings.to_list() if state.findings else None}


def _stored_values(raw: bytes) -> dict:
    """tests/stored_state.py's file with every stored value read back (marshal and pickle bytes of
    equal values may differ: they record which objects were shared)."""
    import marshal
    import pickle
    import zlib
    snapshots = marshal.loads(zlib.decompress(raw))
    return {name: {"replicas": {server: (marshal.loads(state), {b: marshal.loads(v) for b, v in buckets.items()})
                                for server, (state, buckets) in snap["replicas"].items()},
                   "queue_managers": {key: _qm_values(pickle.loads(qm)) for key, qm in snap["queue_managers"].items()},
                   "registry": snap["registry"]}
            for name, snap in snapshots.items()}


def test_both_builds_store_the_same_state(tmp_path):
    """A replica's state and object buckets, a queue manager's pickled state and the server registry
    (tests/stored_state.py, written by each build in a process of its own) read back equal: each
    build goes on from the other's checkpoint."""
    assert _build_in(ROOT, {streaming.BUILD_ENV: "mypyc"})[:2] == ("mypyc", "mypyc")     # one to compare with
    written = {}
    for build in OTHER_BUILD:
        out = tmp_path / f"{build}.bin"
        done = subprocess.run([sys.executable, str(ROOT / "tests" / "stored_state.py"), str(out)],
                              env={**os.environ, streaming.BUILD_ENV: build, "PYTHONHASHSEED": "0"},
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        written[build] = _stored_values(out.read_bytes())
    assert written["mypyc"]["queue managers"]["queue_managers"]
    assert written["mypyc"] == written["python"]
