"""PROPVALUE encodings of MQCN 2.2.3 for every VT type: round trips, exact bytes, malformed values."""
import pytest
from hypothesis import given, strategies as st

from streaming.wire import WireError
from streaming.wire.propvariant import (VT_BLOB, VT_BOOL, VT_CLSID, VT_CLSID_VECTOR, VT_I1, VT_I2, VT_I4, VT_I8,
                                        VT_LPWSTR, VT_LPWSTR_VECTOR, VT_NAMES, VT_UI1, VT_UI2, VT_UI4, VT_UI4_VECTOR,
                                        VT_UI8, decode_value, encode_value)
from streaming.wire.reader import Reader

GUID = "e6eaba61-d1c6-11db-baac-0003ff4e2d22"
GUID_LE = bytes.fromhex("61BAEAE6C6D1DB11BAAC0003FF4E2D22")

EXACT = [
    (VT_I1, -2, b"\xfe"), (VT_UI1, 200, b"\xc8"), (VT_I2, -2, b"\xfe\xff"), (VT_UI2, 0x1234, b"\x34\x12"),
    (VT_I4, -1, b"\xff\xff\xff\xff"), (VT_UI4, 0x01020304, b"\x04\x03\x02\x01"),
    (VT_I8, -(1 << 63), b"\x00" * 7 + b"\x80"), (VT_UI8, (1 << 64) - 1, b"\xff" * 8),
    (VT_BOOL, True, b"\xff\xff"), (VT_BOOL, False, b"\x00\x00"),
    (VT_LPWSTR, "Ab", b"A\x00b\x00\x00\x00"), (VT_LPWSTR, "", b"\x00\x00"),
    (VT_BLOB, b"\x01\x02\x03", b"\x03\x00\x00\x00\x01\x02\x03"), (VT_BLOB, b"", b"\x00\x00\x00\x00"),
    (VT_CLSID, GUID, GUID_LE),
    (VT_UI4_VECTOR, [1, 2], b"\x02\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00"),
    (VT_CLSID_VECTOR, [GUID], b"\x01\x00\x00\x00" + GUID_LE),
    (VT_LPWSTR_VECTOR, ["a", ""], b"\x02\x00\x00\x00a\x00\x00\x00\x00\x00"),
]


@pytest.mark.parametrize("vt,value,wire", EXACT, ids=[f"{VT_NAMES[v]}-{i}" for i, (v, _, _) in enumerate(EXACT)])
def test_every_vt_encodes_exactly_and_round_trips(vt, value, wire):
    assert encode_value(vt, value) == wire
    r = Reader(wire + b"tail", "TEST")
    assert decode_value(r, vt, "v") == value
    assert r.pos == len(wire)


def test_every_vt_of_mqcn_2_2_3_is_covered():
    assert {vt for vt, _, _ in EXACT} == set(VT_NAMES)


text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)))
guids = st.uuids().map(str)
VALUES = {
    VT_I1: st.integers(-128, 127), VT_UI1: st.integers(0, 255), VT_I2: st.integers(-(1 << 15), (1 << 15) - 1),
    VT_UI2: st.integers(0, 0xFFFF), VT_I4: st.integers(-(1 << 31), (1 << 31) - 1), VT_UI4: st.integers(0, 0xFFFFFFFF),
    VT_I8: st.integers(-(1 << 63), (1 << 63) - 1), VT_UI8: st.integers(0, (1 << 64) - 1), VT_BOOL: st.booleans(),
    VT_LPWSTR: text, VT_BLOB: st.binary(max_size=64), VT_CLSID: guids,
    VT_UI4_VECTOR: st.lists(st.integers(0, 0xFFFFFFFF), max_size=8), VT_CLSID_VECTOR: st.lists(guids, max_size=4),
    VT_LPWSTR_VECTOR: st.lists(text, max_size=4),
}


@given(st.data())
def test_random_values_round_trip(data):
    vt = data.draw(st.sampled_from(sorted(VALUES)))
    value = data.draw(VALUES[vt])
    wire = encode_value(vt, value)
    r = Reader(wire, "TEST")
    assert decode_value(r, vt, "v") == value and r.pos == len(wire)


def _decode_error(vt, wire) -> WireError:
    with pytest.raises(WireError) as info:
        decode_value(Reader(wire, "TEST"), vt, "v")
    return info.value


def test_variant_bool_must_be_ffff_or_0000():
    assert "VT_BOOL" in _decode_error(VT_BOOL, b"\x01\x00").reason


def test_unterminated_string():
    assert "unterminated" in _decode_error(VT_LPWSTR, b"a\x00b\x00").reason


def test_string_terminator_must_be_code_unit_aligned():
    # 'a' then U+0100 ('\x00\x01') then the terminator: the bytes 00 00 at offset 1 are not a code unit.
    r = Reader("a\u0100".encode("utf-16-le") + b"\x00\x00", "TEST")
    assert decode_value(r, VT_LPWSTR, "v") == "a\u0100"


def test_blob_size_beyond_the_body():
    e = _decode_error(VT_BLOB, b"\x10\x00\x00\x00abc")
    assert e.field == "v.Data" and "needs 16 bytes" in e.reason


@pytest.mark.parametrize("vt", [VT_UI4_VECTOR, VT_CLSID_VECTOR, VT_LPWSTR_VECTOR])
def test_vector_count_beyond_the_body_is_rejected_before_allocating(vt):
    e = _decode_error(vt, b"\xff\xff\xff\xff" + bytes(8))
    assert e.field == "v.Size" and "count 4294967295" in e.reason


@pytest.mark.parametrize("vt,value", [(VT_UI1, 256), (VT_I2, 1 << 15), (VT_UI4, -1), (VT_BOOL, 1), (VT_I4, "1"),
                                      (VT_LPWSTR, "a\x00b"), (VT_CLSID, "not-a-guid")])
def test_encoding_a_value_that_does_not_fit_its_vt_is_refused(vt, value):
    with pytest.raises(ValueError):
        encode_value(vt, value)
