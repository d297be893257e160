"""The PROPID -> VT table agrees with the spec's property-type table (propid_types.md) row for row."""
import re

from streaming.wire.propids import PROPIDS, propid
from streaming.wire.propvariant import VT_BY_NAME


def test_table_matches_propid_types_md(spec_dir):
    expected = {}
    for line in (spec_dir / "propid_types.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("| PROPID_"):
            # "VT_CLSID \\| VT_VECTOR" holds an escaped pipe: split on unescaped ones only.
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)]
            expected[int(cells[2])] = (cells[1], VT_BY_NAME[cells[3].replace("\\", "").replace(" ", "")])
    assert len(expected) == 94
    assert PROPIDS == expected
    assert sorted(k for k, (_, vt) in PROPIDS.items() if vt == VT_BY_NAME["VT_CLSID|VT_VECTOR"]) == [
        207, 208, 209, 303, 705]


def test_names_resolve_with_or_without_prefix():
    assert propid("Q_PATHNAME") == propid("PROPID_Q_PATHNAME") == 103
    assert propid("D_OBJTYPE") == 1404
