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


def wire_error(protocol: str, body: bytes):
    """The WireError decoding body raises (fails the test if it decodes)."""
    from streaming.wire import WireError, decode
    with pytest.raises(WireError) as info:
        decode(protocol, body)
    assert info.value.protocol == protocol.upper()
    return info.value
