"""msmq-dirstream's streaming side: the wire codecs, the protocol operators, the sinks, the Spark
adapters and the applications.

The codecs on the job's path can also run compiled by mypyc (`python -m infra.native_build`, run by
`make setup`): the compiled modules sit beside their sources, and Python loads them first. The
pure-Python sources stay the reference. They are used instead when DIRSTREAM_BUILD=python, when no
compiled build is there, or when a source changed after it was compiled (native-build.json, beside
this file, holds each source's SHA-256 as it was compiled).
"""
import hashlib
import importlib.abc
import importlib.util
import json
import os
import sys
from pathlib import Path

__all__ = ["BUILD_ENV", "COMPILED_MODULES", "MANIFEST", "build_choice", "build_line", "loaded_build",
           "source_digest", "source_path"]

BUILD_ENV = "DIRSTREAM_BUILD"            # "python": the pure-Python sources even where a compiled build is
MANIFEST = "native-build.json"
# The job's hot path: the codecs and the protocol operators. Left pure: errors.py (an exception
# class that other code adds attributes to), envelope.py (its work is fastavro's), and the MQQB
# capture codecs (the capture producer's, not the job's).
COMPILED_MODULES = tuple(f"streaming.wire.{name}" for name in (
    "changes", "guid", "mqcn", "mqdsrp", "mqsd", "properties", "propids", "propvariant", "reader", "records",
    "rejected", "seqnum", "topics")) + tuple(f"streaming.operators.{name}" for name in (
        "discovery", "findings", "notification_input", "notification_rows", "notifications", "replica_state",
        "replica_store", "replication", "replication_rows", "server_registry"))

_HERE = Path(__file__).resolve().parent


def source_path(module: str) -> Path:
    """A compiled module's source file."""
    return _HERE.parent.joinpath(*module.split(".")).with_suffix(".py")


def source_digest(module: str) -> str:
    """SHA-256 of a compiled module's source file."""
    return hashlib.sha256(source_path(module).read_bytes()).hexdigest()


def _compiled_build_problem() -> str | None:
    """Why the compiled build cannot be used (None: it can)."""
    if os.environ.get(BUILD_ENV, "").lower() == "python":
        return f"{BUILD_ENV}=python"
    if not _HERE.is_dir():                   # imported from a zip: a cluster's executors, from the job's archive
        return "the job's code archive ships the sources only"
    try:
        built = json.loads((_HERE / MANIFEST).read_text())["sources"]
    except (OSError, ValueError, KeyError):
        return "no compiled build (python -m infra.native_build makes one)"
    try:
        changed = [m for m in COMPILED_MODULES if built.get(m) != source_digest(m)]
    except OSError as exc:                   # a source missing: a zip import, or a broken install
        return f"the sources cannot be checked ({exc.strerror}: {exc.filename})"
    if changed:
        return (f"{changed[0].rpartition('.')[2]}.py changed since it was compiled "
                "(python -m infra.native_build compiles it again)")
    return None


class _SourcesFirst(importlib.abc.MetaPathFinder):
    """Finds the compiled modules' pure-Python sources ahead of the compiled modules beside them."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in COMPILED_MODULES:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for entry in path or ():
            source = os.path.join(entry, leaf)
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


_PROBLEM = _compiled_build_problem()
if _PROBLEM is not None:
    sys.meta_path.insert(0, _SourcesFirst())


def build_choice() -> tuple[str, str | None]:
    """("mypyc", None) when the compiled build is used, ("python", why not) otherwise."""
    return ("python", _PROBLEM) if _PROBLEM is not None else ("mypyc", None)


def loaded_build() -> str:
    """Which build this process runs, read from the modules it loaded: "mypyc" (compiled), "python",
    or "mixed" (never expected). Imports the compiled modules first."""
    import importlib
    files = [importlib.import_module(m).__file__ or "" for m in COMPILED_MODULES]
    compiled = sum(not f.endswith(".py") for f in files)
    return "mypyc" if compiled == len(files) else "python" if compiled == 0 else "mixed"


def build_line() -> str:
    """What `dirstream run` says first about the code it runs."""
    loaded = loaded_build()
    if loaded == "mypyc":
        return "the codecs run compiled (mypyc)"
    why = build_choice()[1] or "some modules compiled and some not"
    return f"the codecs run as pure Python ({why})"
