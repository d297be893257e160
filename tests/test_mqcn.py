"""[MS-MQCN] Change Notification Messages: v1 updates, v2 bodies and their quirks, malformed bodies."""
import random
import re

import pytest
from conftest import wire_error
from hypothesis import given, settings, strategies as st
from samples import P, QUEUE, mqcn_messages

from streaming.wire import WireError, mqcn
from streaming.wire.properties import object_type_of

# MQCN digest B.12 (a): a v1 queue delete, 71-byte message + the unused byte of 3.3.5.3.
V1_DELETE = bytes.fromhex(
    "01 01 02 01 44 33 22 11 66 55 88 77 99 AA BB CC DD EE FF 00 D4 C3 B2 A1 F6 E5 18 07 29 3A 4B 5C"
    "6D 7E 8F 90 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 02 7B 05 00"
    "00 7C 05 00 00 01 01 00")
V2_TEXT = ("<Notification><Event>2</Event><ObjectGuid>11223344-5566-7788-99AA-BBCCDDEEFF00</ObjectGuid>"
           "<DomainController>DC1</DomainController></Notification>")


def v2_body(text: str, tail: bytes = b"\x00") -> bytes:
    return b"\x02\x01" + text.encode("utf-16-le") + tail


def test_digest_b12a_v1_delete_decodes():
    msg = mqcn.decode(V1_DELETE)
    assert (msg.version, msg.number_of_update_notifications, len(V1_DELETE)) == (1, 1, 72)
    (u,) = msg.updates
    assert (u.command, u.use_guid, u.path_name) == (0x02, 0x01, None)
    assert u.guid_identifier == "11223344-5566-7788-99aa-bbccddeeff00"
    assert u.guid_master_id == "a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90"
    assert [(p.name, p.value) for p in u.properties] == [("PROPID_D_SCOPE", 1), ("PROPID_D_OBJTYPE", 1)]
    assert msg.unused_byte == b"\x00" and msg.flags == [] and u.flags == []


def test_digest_b12a_is_what_the_builder_sends():
    update = mqcn.new_update(0x02, [P("D_SCOPE", 1), P("D_OBJTYPE", 1)], "a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90",
                             guid_identifier="11223344-5566-7788-99aa-bbccddeeff00")
    assert mqcn.encode(mqcn.new_v1([update])) == V1_DELETE


def test_digest_b12b_v2_change_queue():
    body = v2_body(V2_TEXT)
    assert (len(V2_TEXT), len(body)) == (146, 295)       # 292-byte string, 294-byte message, odd body
    msg = mqcn.decode(body)
    assert (msg.body.event, msg.body.object_guid, msg.body.domain_controller) == (
        "2", "11223344-5566-7788-99aa-bbccddeeff00", "DC1")
    assert mqcn.encode(mqcn.new_v2(2, "11223344-5566-7788-99AA-BBCCDDEEFF00", "DC1")) == body


@pytest.mark.parametrize("name", sorted(mqcn_messages()))
def test_every_message_kind_round_trips(name):
    wire = mqcn.encode(mqcn_messages()[name])
    assert mqcn.decode(wire) == mqcn_messages()[name]
    assert mqcn.encode(mqcn.decode(wire)) == wire


def test_v1_create_carries_all_15_required_properties_of_type_queue():
    (u,) = mqcn.decode(mqcn.encode(mqcn_messages()["v1_create"])).updates
    assert u.use_guid == 0 and u.path_name == "host1\\orders" and len(u.properties) == 15
    assert object_type_of(u.properties[0].prop_id) == 1       # 3.2.5.1: type from PropertyId[0]


@pytest.mark.parametrize("text", [
    V2_TEXT.replace("</ObjectGuid>", "</ObjectGuid >"),                     # the ABNF's literal (B.11.1)
    V2_TEXT.lower(),                                                         # ABNF strings are case-insensitive
    V2_TEXT.replace("<Event>", "<EVENT>").replace("</Notification>", "</NOTIFICATION>"),
])
def test_v2_grammar_quirks_are_accepted(text):
    msg = mqcn.decode(v2_body(text))
    assert msg.body.object_guid == "11223344-5566-7788-99aa-bbccddeeff00" and msg.body.flags == []
    assert mqcn.encode(msg) == v2_body(text)


def test_v2_with_null_terminator_and_unused_byte():
    msg = mqcn.decode(v2_body(V2_TEXT, b"\x00\x00\x7f"))
    assert msg.body.null_terminated and msg.unused_byte == b"\x7f" and msg.flags == []
    assert mqcn.encode(msg) == v2_body(V2_TEXT, b"\x00\x00\x7f")


@pytest.mark.parametrize("tail", [b"", b"\x00\x00"])
def test_missing_unused_byte_is_flagged(tail):
    msg = mqcn.decode(v2_body(V2_TEXT, tail))
    assert msg.flags == ["unused_byte_missing"] and mqcn.encode(msg) == v2_body(V2_TEXT, tail)


def test_unknown_event_is_kept_and_flagged():
    # Note <10>: Event not 1-4 means the message is ignored, not that the body is malformed.
    msg = mqcn.decode(v2_body(V2_TEXT.replace("<Event>2<", "<Event>7<")))
    assert msg.body.event == "7" and msg.body.flags == ["unknown_event:7"]


def test_unknown_version_is_rejected():
    # Note <4>: such messages are ignored; nothing after Version can be interpreted.
    e = _err(b"\x03\x01abc")
    assert (e.field, e.offset) == ("Version", 0) and "note <4>" in e.reason


def test_nonzero_reserved_bytes_are_flagged():
    body = bytearray(V1_DELETE)
    body[40] = 9
    assert mqcn.decode(bytes(body)).updates[0].flags == ["reserved_nonzero"]


def _err(body: bytes):
    return wire_error("mqcn", body)


def test_r8_guid_grammar_is_rejected():
    e = _err(v2_body(V2_TEXT.replace("11223344-5566-7788-99AA-BBCCDDEEFF00", "11223344-5566-7788-99AABBCCDDEEFF00")))
    assert e.field == "ObjectGuid" and "8-4-4-4-12" in e.reason and e.offset == 2 + 2 * V2_TEXT.index("11223344")


def test_v2_missing_closing_tag():
    assert "</Notification>" in _err(v2_body(V2_TEXT.replace("</Notification>", ""))).reason


def test_v2_misspelled_tag_reports_its_byte_offset():
    e = _err(v2_body(V2_TEXT.replace("<DomainController>", "<DomainControler>")))
    assert e.offset == 2 + 2 * V2_TEXT.index("<DomainController>") and "expected" in e.reason


def test_v2_count_must_be_one():
    e = _err(b"\x02\x02" + V2_TEXT.encode("utf-16-le") + b"\x00")
    assert (e.field, e.offset) == ("NumberOfUpdateNotifications", 1)


def test_v2_domain_controller_limits():
    assert "1 to 256" in _err(v2_body(V2_TEXT.replace(">DC1<", ">" + "d" * 257 + "<"))).reason
    assert "empty" in _err(v2_body(V2_TEXT.replace(">DC1<", "><"))).reason
    assert mqcn.decode(v2_body(V2_TEXT.replace(">DC1<", ">dc é<"))).body.flags == ["domain_controller_not_vchar"]


def test_v2_domain_controller_vchar_flag_over_random_names():
    """B.11.4: the flag is set exactly when a character falls outside VCHAR (%x21-7E), the space, DEL,
    control characters and non-ASCII included, whatever the name's length."""
    rng = random.Random(11)
    alphabet = [chr(c) for c in range(0x00, 0x82) if chr(c) != "<"] + ["é", "\u0100", "\u3000"]
    for _ in range(2000):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        body = mqcn.decode(v2_body(V2_TEXT.replace(">DC1<", ">" + name + "<"))).body
        outside = any(not 0x21 <= ord(c) <= 0x7E for c in name)
        assert ("domain_controller_not_vchar" in body.flags) == outside, repr(name)
        assert body.domain_controller == name


def test_v2_trailing_garbage():
    assert "trailing garbage" in _err(v2_body(V2_TEXT, b"\x01\x02")).reason


def test_v1_trailing_garbage():
    e = _err(V1_DELETE + b"\x00")
    assert "trailing garbage" in e.reason and e.offset == 71


def test_v1_count_larger_than_body():
    e = _err(b"\x01\x05" + V1_DELETE[2:])
    assert e.field == "NumberOfUpdateNotifications" and "count 5" in e.reason


def test_v1_unknown_propid_names_its_offset():
    body = bytearray(V1_DELETE)
    body[61:65] = (999).to_bytes(4, "little")          # NumberOfProperties is at 60, PropertyId[0] at 61
    e = _err(bytes(body))
    assert (e.structure, e.field, e.offset) == ("NotificationUpdate[0]", "PropertyId[0]", 61)
    assert "unknown PROPID 999" in e.reason


@pytest.mark.parametrize("index,value,field_name", [(2, 3, "Command"), (3, 2, "UseGuid")])
def test_v1_command_and_useguid_ranges(index, value, field_name):
    body = bytearray(V1_DELETE)
    body[index] = value
    e = _err(bytes(body))
    assert (e.field, e.offset) == (field_name, index)


def test_v1_truncated_property_value():
    e = _err(V1_DELETE[:-2])
    assert e.field == "PropertyValue[1]" and "truncated" in e.reason


def test_v1_unterminated_path_name():
    e = _err(b"\x01\x01\x00\x00" + ("abc" * 20).encode("utf-16-le"))
    assert e.field == "PathName" and "unterminated" in e.reason


def test_decoded_queue_is_the_queue():
    assert mqcn.decode(mqcn.encode(mqcn_messages()["v1_batch"])).updates[3].guid_identifier == QUEUE


def _outcome(body: bytes):
    try:
        return ("ok", mqcn.decode(body))
    except WireError as exc:
        return ("error", exc.structure, exc.field, exc.offset, exc.reason)


_EDITS = st.lists(st.tuples(st.integers(0, len(V2_TEXT)), st.integers(0, 3),
                            st.sampled_from(["", "<", ">", " ", "x", "K", "\u212a", "I", "\u0130", "/", "0", "é"])),
                  max_size=4)


@settings(max_examples=400, deadline=None)
@given(edits=_EDITS, flip_case=st.booleans())
def test_the_one_match_fast_path_agrees_with_the_token_walk(edits, flip_case):
    """2.2.5 bodies: the regular expression takes only what the token walk takes, with the same result;
    everything else goes to the walk, which names the field and offset."""
    text = V2_TEXT.swapcase() if flip_case else V2_TEXT
    for at, cut, insert in edits:
        text = text[:at] + insert + text[at + cut:]
    body = v2_body(text)
    fast = _outcome(body)
    never = re.compile(r"(?!)")
    saved, mqcn._BODY = mqcn._BODY, never
    try:
        slow = _outcome(body)
    finally:
        mqcn._BODY = saved
    assert fast == slow


def test_a_decoded_notification_copies_and_pickles_equal():
    """On both builds: its updates (a written-out __init__ when compiled) copy and pickle through it."""
    import copy
    import pickle
    msg = mqcn.decode(mqcn.encode(mqcn_messages()["v1_create"]))
    assert copy.deepcopy(msg) == msg and pickle.loads(pickle.dumps(msg)) == msg
