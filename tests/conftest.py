import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT.parent / "shared" / "spec"
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def spec_dir() -> Path:
    if not SPEC.is_dir():
        pytest.skip(f"spec texts not found at {SPEC}")
    return SPEC


def vector(name: str) -> bytes:
    return bytes.fromhex((ROOT / "tests" / "vectors" / f"{name}.hex").read_text())
