"""A class-data archive for the driver JVM: faster starts of every later job on this machine.

Most of a cold driver JVM's start is loading and verifying Spark's classes. The JDK's dynamic
class-data sharing (JEP 350, JDK 13+) dumps the classes one run loaded into an archive that
later JVMs map instead, so a Spark session starts in about two thirds of the time (the figures are
in docs/benchmarks.md).

The first `dirstream run` on a machine (for this JDK and these Spark jars) writes the archive
when its JVM exits; the file is installed under its final name only once that JVM has exited
cleanly, so a reader never maps a half-written archive. An archive the JVM cannot use (another
JDK, another class path) is ignored by the JVM itself (-Xshare:auto), quietly.
$DIRSTREAM_CLASS_ARCHIVE: `off` to do without, or the directory to keep it in (default
$XDG_CACHE_HOME/msmq-dirstream/jvm, else ~/.cache/msmq-dirstream/jvm).
"""
import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["archive_name", "ClassArchive", "directory", "ENV", "EXIT_WAIT_S", "KEPT", "log", "QUIET"]

log = logging.getLogger("dirstream.job")
ENV = "DIRSTREAM_CLASS_ARCHIVE"
QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"
KEPT = 3                     # archives kept (about 170 MB each)
EXIT_WAIT_S = 180            # the JVM's exit, archive written: seconds, a few more on a loaded machine


def directory() -> Path | None:
    setting = os.environ.get(ENV, "")
    if setting.lower() == "off":
        return None
    if setting:
        return Path(setting)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "msmq-dirstream" / "jvm"


def _java() -> Path | None:
    home, on_path = os.environ.get("JAVA_HOME"), shutil.which("java")
    found = Path(home) / "bin" / "java" if home else Path(on_path) if on_path else None
    return found.resolve() if found and found.exists() else None


def archive_name() -> str | None:
    """One archive per JDK and set of Spark jars: a change to either names another file."""
    import pyspark
    java = _java()
    if java is None:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    digest = hashlib.sha256()
    for path in [java, *sorted(jars.glob("*.jar"))]:
        stat = path.stat()
        digest.update(f"{path.name} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    digest.update(pyspark.__version__.encode())
    return f"spark-{pyspark.__version__}-{digest.hexdigest()[:16]}.jsa"


class ClassArchive:
    """The driver JVM's options for the archive: use it when it exists, else (when asked to) write it."""

    def __init__(self, path: Path | None, write: bool):
        self.path = path
        self.pending: Path | None = None
        if path is not None and not path.exists() and write:
            self.pending = path.with_name(f"{path.name}.{os.getpid()}.partial")

    @classmethod
    def for_this_machine(cls, write: bool) -> "ClassArchive":
        where, name = directory(), None
        try:
            name = archive_name() if where is not None else None
        except OSError:
            name = None
        return cls(where / name if name else None, write)

    def java_options(self) -> str:
        if self.path is None:
            return ""
        if self.path.exists():
            try:
                os.utime(self.path)             # in use: the last ones kept when others are pruned
            except OSError:
                pass
            return f"-XX:SharedArchiveFile={self.path} {QUIET}"
        if self.pending is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                _remove_abandoned(self.path)
            except OSError:
                self.pending = None
                return ""
            return f"-XX:ArchiveClassesAtExit={self.pending} {QUIET}"
        return ""

    def install_after_exit(self, jvm: subprocess.Popen | None) -> bool:
        """After Spark has stopped: ends the JVM (EOF on its stdin, as at the driver's exit), waits for
        it to write the archive and installs it. False (and nothing installed) if anything is amiss."""
        if self.pending is None or jvm is None:
            return False
        try:
            if jvm.stdin:
                jvm.stdin.close()
            code = jvm.wait(EXIT_WAIT_S)
            if code == 0 and self.pending.exists() and self.pending.stat().st_size > 1 << 20:
                os.replace(self.pending, self.path)
                log.info("saved the driver JVM's class archive for faster starts: %s", self.path)
                _prune(self.path)
                return True
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.info("the driver JVM's class archive was not saved: %s", exc)
        _unlink(self.pending)
        return False


def _prune(kept: Path) -> None:
    """Archives of other JDKs or Spark installations (each virtual environment's jars are another
    class path): all but the KEPT most recently used go."""
    others = sorted((p for p in kept.parent.glob("spark-*.jsa") if p != kept),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[KEPT - 1:]:
        _unlink(old)


def _remove_abandoned(path: Path) -> None:
    """Partial archives whose writer is gone (killed before it could install one)."""
    for partial in path.parent.glob(f"{path.name}.*.partial"):
        pid = partial.name[len(path.name) + 1:-len(".partial")]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _unlink(partial)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
