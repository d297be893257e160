"""Jars from Maven Central, copied once into a cache folder by Maven (`mvn dependency:copy-dependencies`
on a generated pom.xml): the embedded broker's Kafka, and the test servers' Hadoop pieces.

A cache is complete when it holds the `.complete` marker, written only after Maven succeeded: an
interrupted fetch leaves no marker and the next call fetches again. Processes fetching the same
cache at once take turns (a lock file beside it).
"""
import fcntl
import os
import shutil
import subprocess
from pathlib import Path
from xml.sax.saxutils import escape

__all__ = ["cache_folder", "dependency", "fetch", "MavenFailed", "MavenMissing", "pom"]


class MavenMissing(RuntimeError):
    """Maven (mvn) is not installed, and the cache is not complete."""


class MavenFailed(RuntimeError):
    """Maven ran and failed; the message is the end of its output."""


def cache_folder(env_var: str, name: str) -> Path:
    """$env_var when set, else ~/.cache/msmq-dirstream/<name> (under $XDG_CACHE_HOME when set)."""
    override = os.environ.get(env_var)
    if override:
        return Path(override)
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "msmq-dirstream" / name


def dependency(coordinates: str, exclusions: tuple[str, ...] = (), kind: str = "", scope: str = "") -> str:
    """A <dependency> element for `group:artifact[:version]`; exclusions are `group:artifact` (`*` allowed).
    Without a version the managed one (a BOM's) applies."""
    group, artifact, *version = coordinates.split(":")
    parts = [f"<groupId>{group}</groupId>", f"<artifactId>{artifact}</artifactId>"]
    parts += [f"<version>{v}</version>" for v in version]
    parts += [f"<type>{kind}</type>"] * bool(kind) + [f"<scope>{scope}</scope>"] * bool(scope)
    if exclusions:
        parts.append("<exclusions>" + "".join(
            "<exclusion><groupId>{}</groupId><artifactId>{}</artifactId></exclusion>".format(*e.split(":"))
            for e in exclusions) + "</exclusions>")
    return "<dependency>" + "".join(parts) + "</dependency>"


def pom(name: str, dependencies: list[str], boms: tuple[str, ...] = ()) -> str:
    """A pom.xml whose runtime dependencies are the jars wanted; `boms` (coordinates) manage versions."""
    managed = "".join(dependency(b, kind="pom", scope="import") for b in boms)
    management = f"<dependencyManagement><dependencies>{managed}</dependencies></dependencyManagement>" * bool(boms)
    listed = "\n    ".join(dependencies)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>msmq-dirstream</groupId>
  <artifactId>{escape(name)}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  {management}
  <dependencies>
    {listed}
  </dependencies>
</project>
"""


def fetch(cache: Path, pom_text: str, stamp: str) -> Path:
    """The runtime dependencies of `pom_text`, copied into `cache` once; later calls return the cache.
    `stamp` goes into the marker (the version fetched). MavenMissing or MavenFailed when it cannot."""
    cache = Path(cache)
    if (cache / ".complete").exists():
        return cache
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.with_name(cache.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # tests on two workers may want the same jars at once
        if not (cache / ".complete").exists():
            _copy_dependencies(cache, pom_text, stamp)
    return cache


def _copy_dependencies(cache: Path, pom_text: str, stamp: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenMissing(f"Maven (mvn) is not installed to fetch the jars into {cache}")
    work = cache.with_name(cache.name + ".fetch")
    work.mkdir(parents=True, exist_ok=True)
    (work / "pom.xml").write_text(pom_text)
    done = subprocess.run([mvn, "-q", "-B", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
                           f"-DoutputDirectory={cache}", "-DincludeScope=runtime"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise MavenFailed((done.stdout + done.stderr).strip()[-2000:])
    (cache / ".complete").write_text(stamp + "\n")
    shutil.rmtree(work, ignore_errors=True)
