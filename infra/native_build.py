"""Compiles the job's hot-path modules (streaming.COMPILED_MODULES) with mypyc, in place: each
compiled module lands beside its source, and their shared library is streaming/native__mypyc.
native-build.json records each source's SHA-256, so that a source changed since is run as source.

Run: python -m infra.native_build          (make setup runs it; gcc and the dev extra's mypy)
     python -m infra.native_build --clean  (removes the compiled build: the sources run)
"""
import argparse
import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path

import streaming

__all__ = ["build", "clean", "GROUP", "main"]

ROOT = Path(__file__).resolve().parents[1]
GROUP = "streaming.native"                  # the shared library every compiled module's stub loads


def _suffix() -> str:
    return sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def _compiled_files() -> list[Path]:
    suffix = _suffix()
    sources = map(streaming.source_path, streaming.COMPILED_MODULES)
    shared = ROOT.joinpath(*f"{GROUP}__mypyc".split(".")).with_suffix(suffix)
    return [*(s.with_name(s.stem + suffix) for s in sources), shared]


def clean() -> None:
    """Remove the compiled modules and the manifest: the sources run."""
    (ROOT / "streaming" / streaming.MANIFEST).unlink(missing_ok=True)
    for path in _compiled_files():
        path.unlink(missing_ok=True)


def build(opt_level: str = "3") -> None:
    """Compile in place and write the manifest last (a build stopped half-way leaves none)."""
    from mypyc.build import mypycify
    from setuptools import setup
    clean()
    temp = ROOT / "build" / "native"
    temp.mkdir(parents=True, exist_ok=True)
    cwd = os.getcwd()
    os.chdir(temp)                          # away from pyproject.toml, which setuptools would apply
    try:
        extensions = mypycify([str(streaming.source_path(m)) for m in streaming.COMPILED_MODULES]
                              + ["--ignore-missing-imports", "--follow-imports=silent"],
                              opt_level=opt_level, group_name=GROUP, target_dir="c")
        setup(name="dirstream-native", ext_modules=extensions, script_args=[
            "--quiet", "build_ext", "--build-lib", "lib", "--build-temp", "obj"])
    finally:
        os.chdir(cwd)
    for built in (temp / "lib").rglob("*" + _suffix()):
        shutil.copy2(built, ROOT / built.relative_to(temp / "lib"))
    missing = [str(p.relative_to(ROOT)) for p in _compiled_files() if not p.is_file()]
    if missing:
        raise SystemExit(f"native build: mypyc left out {', '.join(missing)}")
    sources_digest = {m: streaming.source_digest(m) for m in streaming.COMPILED_MODULES}
    (ROOT / "streaming" / streaming.MANIFEST).write_text(json.dumps({"compiler": "mypyc", "sources": sources_digest},
                                                                   indent=1) + "\n")
    shutil.rmtree(temp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.native_build", description=__doc__.splitlines()[0])
    parser.add_argument("--clean", action="store_true", help="remove the compiled build")
    args = parser.parse_args(argv)
    if args.clean:
        clean()
        print("native build removed: the pure-Python sources run")
        return 0
    build()
    print(f"native build: {len(streaming.COMPILED_MODULES)} modules compiled with mypyc")
    return 0


if __name__ == "__main__":
    sys.exit(main())
