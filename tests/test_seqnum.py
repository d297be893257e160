"""SEQUENCE_NUMBER operations against a literal transcription of MC-MQDSRP 2.2.2's byte-wise pseudo-code."""
from hypothesis import given, strategies as st

from streaming.wire import seqnum
from streaming.wire.seqnum import MAX_SEQ_NUMBER, MIN_SEQ_NUMBER

u64 = st.integers(0, MAX_SEQ_NUMBER)


def spec_increment(sn: list[int]) -> list[int]:
    sn = list(sn)
    for i in range(7, -1, -1):          # "for i := 8 downto 1"
        sn[i] = (sn[i] + 1) % 256
        if sn[i] != 0:
            break
    return sn


def spec_decrement(sn: list[int]) -> list[int]:
    sn = list(sn)
    for i in range(7, -1, -1):
        temp = sn[i]
        sn[i] = (sn[i] - 1) % 256
        if temp != 0:
            break
    return sn


def spec_compare(a: list[int], b: list[int]) -> int:
    for i in range(8):                  # "for i := 1 to 8": the first differing element decides
        if a[i] != b[i]:
            return 1 if a[i] > b[i] else -1
    return 0


def as_elements(value: int) -> list[int]:
    return list(seqnum.seq_to_bytes(value))


@given(u64)
def test_increment_and_decrement_match_the_byte_wise_definition(v):
    assert as_elements(seqnum.increment(v)) == spec_increment(as_elements(v))
    assert as_elements(seqnum.decrement(v)) == spec_decrement(as_elements(v))


@given(u64, st.integers(0, 600))
def test_addition_and_subtraction_are_repeated_steps(v, n):
    up, down = as_elements(v), as_elements(v)
    for _ in range(n):
        up, down = spec_increment(up), spec_decrement(down)
    assert as_elements(seqnum.add(v, n)) == up
    assert as_elements(seqnum.subtract(v, n)) == down


@given(u64, u64)
def test_compare_matches_the_element_wise_definition(a, b):
    assert seqnum.compare(a, b) == spec_compare(as_elements(a), as_elements(b))


def test_wrap_around_at_the_ends():
    assert seqnum.increment(MAX_SEQ_NUMBER) == MIN_SEQ_NUMBER
    assert seqnum.decrement(MIN_SEQ_NUMBER) == MAX_SEQ_NUMBER
    assert seqnum.subtract(5, 1024) == MAX_SEQ_NUMBER - 1018


def test_wire_form_is_big_endian():
    # MQDSRP §4.4: "sequence number ... is 8 (zero bytes omitted)" = 00 00 00 00 00 00 00 08
    assert seqnum.seq_to_bytes(8) == bytes.fromhex("0000000000000008")
    assert seqnum.seq_from_bytes(bytes.fromhex("0000000000000100")) == 256
    assert seqnum.eighth_byte(256) == 0 and seqnum.eighth_byte(257) == 1


def test_hex_form():
    assert seqnum.seq_hex(255) == "00000000000000ff"
    assert seqnum.seq_from_hex("FFFFFFFFFFFFFFFF") == MAX_SEQ_NUMBER
