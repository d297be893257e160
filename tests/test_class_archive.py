"""The driver JVM's class archive: used when it exists, written by one JVM under a name of its own
and installed only after that JVM has exited cleanly, never left half-written under its final name."""
import os
import subprocess
import sys

from streaming.spark import class_archive
from streaming.spark.class_archive import ClassArchive

# a stand-in for the driver JVM's exit: it writes its archive once its stdin reaches EOF, then exits
# with the given code (a real process, as pyspark's gateway process is)
WRITER = ("import sys; sys.stdin.read(); open(sys.argv[1], 'wb').write(b'x' * int(sys.argv[2])); "
          "sys.exit(int(sys.argv[3]))")


def _jvm(path, size: int, code: int = 0) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(size), str(code)], stdin=subprocess.PIPE)


def test_an_archive_is_mapped_when_it_exists_and_written_when_asked(tmp_path):
    final = tmp_path / "spark.jsa"
    assert ClassArchive(final, write=False).java_options() == ""
    writer = ClassArchive(final, write=True)
    options = writer.java_options()
    assert f"-XX:ArchiveClassesAtExit={writer.pending}" in options and writer.pending != final
    assert writer.install_after_exit(_jvm(writer.pending, 2 << 20))
    assert final.stat().st_size == 2 << 20 and not writer.pending.exists()
    reader = ClassArchive(final, write=True)
    assert reader.pending is None
    assert reader.java_options().startswith(f"-XX:SharedArchiveFile={final} -Xshare:auto")


def test_a_failed_or_short_archive_is_never_installed(tmp_path):
    final = tmp_path / "spark.jsa"
    for size, code in ((2 << 20, 1), (100, 0)):             # the JVM failed; the file is cut short
        writer = ClassArchive(final, write=True)
        writer.java_options()
        assert not writer.install_after_exit(_jvm(writer.pending, size, code))
        assert not final.exists() and not writer.pending.exists()


def test_partial_archives_of_writers_that_are_gone_are_removed(tmp_path):
    final = tmp_path / "spark.jsa"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    abandoned = tmp_path / f"spark.jsa.{gone.stdout.strip()}.partial"
    alive = tmp_path / f"spark.jsa.{os.getppid()}.partial"
    abandoned.write_bytes(b"half"), alive.write_bytes(b"half")
    ClassArchive(final, write=True).java_options()
    assert not abandoned.exists() and alive.exists()


def test_off_or_another_directory_by_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(class_archive.ENV, "off")
    assert ClassArchive.for_this_machine(write=True).java_options() == ""
    monkeypatch.setenv(class_archive.ENV, str(tmp_path))
    chosen = ClassArchive.for_this_machine(write=True)
    assert chosen.path.parent == tmp_path and chosen.path.name.startswith("spark-")
    assert chosen.path.name == class_archive.archive_name()           # the same JDK and jars: the same name


def test_archives_of_other_installations_are_pruned_to_the_latest(tmp_path):
    import time
    olds = [tmp_path / f"spark-4.3.0-old{i}.jsa" for i in range(4)]
    for i, old in enumerate(olds):
        old.write_bytes(b"x")
        os.utime(old, (time.time() - 100 + i, time.time() - 100 + i))
    writer = ClassArchive(tmp_path / "spark-4.3.0-new.jsa", write=True)
    writer.java_options()
    assert writer.install_after_exit(_jvm(writer.pending, 2 << 20))
    assert sorted(p.name for p in tmp_path.glob("*.jsa")) == [
        "spark-4.3.0-new.jsa", "spark-4.3.0-old2.jsa", "spark-4.3.0-old3.jsa"]
