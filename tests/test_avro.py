"""Avro: every decoded record validates against its schema; envelope framing round trips and fails clearly."""
import json
import struct

import fastavro
import pytest
from samples import encoded_samples

from streaming.wire import envelope as env
from streaming.wire import decode

SAMPLES = encoded_samples()


@pytest.mark.parametrize("protocol,name,body", SAMPLES, ids=[f"{p}-{n}" for p, n, _ in SAMPLES])
def test_decoded_record_validates_and_survives_avro(protocol, name, body):
    record = decode(protocol, body)
    assert env.validate_record(protocol, record)
    framed = env.frame(protocol, env.record_to_avro(record))
    assert framed[0] == 0 and struct.unpack(">I", framed[1:5])[0] == env.SCHEMA_IDS[protocol]
    assert env.unframe(framed, protocol)[1] == env.record_to_avro(record)


def test_flagged_records_validate_too():
    text = "<Notification><Event>9</Event><ObjectGuid>11223344-5566-7788-99aa-bbccddeeff00</ObjectGuid>" \
           "<DomainController>DC1</DomainController></Notification>"
    for protocol, body, flags_of in [
        ("mqcn", b"\x02\x01" + text.encode("utf-16-le"), lambda d: d["flags"] + d["body"]["flags"]),
        ("mqsd", b"\x05\x01\x00\x00" + bytes(48) + b"\x01", lambda d: d["client_request"]["flags"]),
    ]:
        record = decode(protocol, body)
        assert env.validate_record(protocol, record) and flags_of(env.record_to_avro(record))


def test_ui8_values_validate_as_decimal_strings():
    from streaming.wire.properties import Property
    datum = {"node": {"vt": "VT_UI8", "value": (1 << 64) - 1}}
    env._stringify_ui8(datum)
    assert datum["node"]["value"] == str((1 << 64) - 1)
    assert Property(101, "x").to_dict()["vt"] == "VT_CLSID"


def _envelope(body=b"\x00\x01"):
    return env.make_envelope("mqsd", body, source_machine="10.0.0.5", destination_machine="pec0",
                             destination_queue="DIRECT=OS:pec0", sent_time=1_700_000_000_123,
                             message_class="NackBadSignature", sender_identifier_type="QueueManagerIdentifier",
                             authentication_level="Sig20", hash_algorithm="SHA1")


def test_envelope_round_trip():
    framed = env.encode_envelope(_envelope())
    assert framed[:5] == b"\x00\x00\x00\x00\x01"
    back = env.decode_envelope(framed)
    assert back["body"] == b"\x00\x01" and back["message_class"] == "NackBadSignature"
    assert back["protocol"] == "MQSD" and back["arrival_time"].timestamp() == 1_700_000_000.123


def test_schemas_are_the_files_in_schemas_dir():
    for name in env.SCHEMA_IDS:
        raw = json.loads((env.schemas_dir() / f"{name}.avsc").read_text())
        assert fastavro.parse_schema(raw)["name"].endswith(raw["name"])


@pytest.mark.parametrize("value,field,reason", [
    (b"", "(frame)", "shorter than"),
    (b"\x01\x00\x00\x00\x01xx", "(magic)", "magic byte"),
    (b"\x00\x00\x00\x00\x63xx", "(schema id)", "schema id 99"),
    (b"\x00\x00\x00\x00\x02", "(schema id)", "schema id 2"),
    (b"\x00\x00\x00\x00\x01\x09", "(avro)", "not valid Avro"),
])
def test_bad_envelopes_say_what_is_wrong(value, field, reason):
    with pytest.raises(env.EnvelopeError) as info:
        env.decode_envelope(value)
    assert info.value.field == field and reason in info.value.reason


def test_trailing_bytes_after_the_envelope():
    with pytest.raises(env.EnvelopeError) as info:
        env.decode_envelope(env.encode_envelope(_envelope()) + b"\x00")
    assert "left after" in info.value.reason
