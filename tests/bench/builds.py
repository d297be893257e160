"""Side by side in one run: a benchmark's figures on the compiled build (mypyc) and on the pure-Python
sources, same commit. The benchmark runs itself once per build per round, alternating, so that a
machine that slows down or speeds up weighs on both; the best round of each build is kept.

A benchmark taking part prints, as its last line with --json, {"build": ..., "figures": {name: rate}}.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import streaming  # noqa: E402

BUILDS = ("python", "mypyc")


def figures_line(figures: dict[str, float]) -> str:
    return json.dumps({"build": streaming.loaded_build(), "figures": figures})


def side_by_side(script: str, args: list[str], rounds: int = 3) -> dict[str, dict[str, float]]:
    """{build: {figure: best rate}} of `script args --json`, run alternately on each build."""
    if streaming.build_choice()[1] and os.environ.get(streaming.BUILD_ENV, "").lower() != "python":
        raise SystemExit(f"no compiled build to compare with: {streaming.build_choice()[1]}")
    best: dict[str, dict[str, float]] = {b: {} for b in BUILDS}
    for _ in range(rounds):
        for build in BUILDS:
            done = subprocess.run([sys.executable, script, *args, "--json"], capture_output=True, text=True,
                                  env={**os.environ, streaming.BUILD_ENV: build}, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            if result["build"] != build:
                raise SystemExit(f"asked for the {build} build, the benchmark ran {result['build']}")
            for name, rate in result["figures"].items():
                best[build][name] = max(best[build].get(name, 0.0), rate)
    return best


def print_comparison(best: dict[str, dict[str, float]], unit: str) -> None:
    width = max(map(len, best["python"]))
    print(f"  {'':{width}s}  {'pure Python':>14s}  {'mypyc':>14s}  ratio   ({unit})")
    for name, slow in best["python"].items():
        fast = best["mypyc"][name]
        print(f"  {name:{width}s}  {slow:>14,.0f}  {fast:>14,.0f}  {fast / slow:4.2f}x")
