"""Property-based: random and mutated bodies only ever raise WireError, and whatever decodes re-encodes exactly."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from samples import encoded_samples

from streaming.wire import PROTOCOLS, WireError, decode, encode

SAMPLES = encoded_samples()
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decode_or_wire_error(protocol: str, body: bytes) -> None:
    try:
        record = decode(protocol, body)
    except WireError as exc:
        assert exc.protocol == protocol.upper() and 0 <= exc.offset <= len(body) and exc.reason
        return
    assert encode(protocol, record) == body


@pytest.mark.parametrize("protocol", PROTOCOLS)
@FUZZ
@given(body=st.binary(max_size=400))
def test_random_bytes(protocol, body):
    decode_or_wire_error(protocol, body)


@st.composite
def mutated(draw):
    protocol, _name, body = draw(st.sampled_from(SAMPLES))
    data = bytearray(body)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and data:
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF]))
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 8))]
    return protocol, bytes(data)


@FUZZ
@given(mutated())
def test_mutated_valid_bodies(case):
    decode_or_wire_error(*case)


@pytest.mark.parametrize("protocol,name,body", SAMPLES, ids=[f"{p}-{n}" for p, n, _ in SAMPLES])
def test_every_truncation_of_every_sample_is_a_wire_error(protocol, name, body):
    # A prefix is either a clean error or (where a shorter form is legal) re-encodes to itself.
    for cut in range(len(body)):
        decode_or_wire_error(protocol, body[:cut])
