"""[MC-MQDSRP] replication messages: the digest's constructed examples, all eight messages, malformed bodies."""
import struct

import pytest
from conftest import wire_error
from samples import NULL, SITE_A, directory_change, mqdsrp_messages

from streaming.wire import mqdsrp
from streaming.wire.seqnum import MAX_SEQ_NUMBER

PSC_SITE = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
# MQDSRP digest §3.9 (a): the SyncRequest PSC1 sends at start-up for the enterprise partition.
SYNC_REQUEST = bytes.fromhex(
    "00 3C 2D 1E 0F 5A 4B 78 69 87 96 A5 B4 C3 D2 E1 F0 02 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 FF FF FF FF FF FF FF FF 00 00 00 00 00 00 00 00 00 01 50 00 53 00"
    "43 00 31 00 00 00")
# §3.9 (b): the PSCAck at LastSeqNumber 0x100 (8th byte 0x00 triggers it).
PSC_ACK = bytes.fromhex(
    "00 3C 2D 1E 0F 5A 4B 78 69 87 96 A5 B4 C3 D2 E1 F0 06 3C 2D 1E 0F 5A 4B 78 69 87 96 A5 B4 C3 D2"
    "E1 F0 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01 00 50 00 53 00 43 00"
    "31 00 00 00")


def test_digest_sync_request_example():
    msg = mqdsrp.decode(SYNC_REQUEST)
    assert (msg.header.version, msg.header.site_id, msg.operation_name) == (0, PSC_SITE, "SyncRequest")
    s = msg.sync_request
    assert (s.partition_id, s.from_seq_number, s.to_seq_number, s.known_purged_seq_number) == (
        NULL, 0, MAX_SEQ_NUMBER, 0)
    assert (s.is_sync0, s.scope, s.requester_name) == (0, 1, "PSC1")
    built = mqdsrp.new_message(PSC_SITE, mqdsrp.SyncRequestMessage(NULL, 0, MAX_SEQ_NUMBER, 0, 0, 1, "PSC1"))
    assert mqdsrp.encode(built) == SYNC_REQUEST and len(SYNC_REQUEST) == 70


def test_digest_psc_ack_example():
    a = mqdsrp.decode(PSC_ACK).psc_ack
    assert (a.psc_site_id, a.acked_partition_id, a.acked_seq_number, a.psc_name) == (PSC_SITE, NULL, 0x100, "PSC1")
    assert mqdsrp.encode(mqdsrp.new_message(PSC_SITE, a)) == PSC_ACK and len(PSC_ACK) == 68


@pytest.mark.parametrize("name", sorted(mqdsrp_messages()))
def test_every_message_round_trips(name):
    msg = mqdsrp_messages()[name]
    wire = mqdsrp.encode(msg)
    assert mqdsrp.decode(wire) == msg
    assert mqdsrp.encode(mqdsrp.decode(wire)) == wire


def test_all_eight_operations_are_covered():
    assert {m.header.operation for m in mqdsrp_messages().values()} == set(range(8))


def test_fixed_sizes_from_the_spec():
    msgs = mqdsrp_messages()
    assert len(mqdsrp.encode(msgs["already_purged"])) == 42                 # 18 + 16 + 8
    reply = mqdsrp.encode(mqdsrp.new_message(SITE_A, mqdsrp.SyncReplyMessage(
        mqdsrp.SyncReplyHeader(SITE_A, 0, 0, 0, 0, 0), [])))
    assert len(reply) == 66                                                  # SyncReplyHeader is 66 bytes


def test_empty_seq_number_header_is_two_zero_bytes():
    wire = mqdsrp.encode(mqdsrp_messages()["change_propagation_empty"])
    assert wire[18:] == b"\x01\x00\x00" + b"\x00\x00"                       # Flush, Count=0, SeqNumberHeader


def test_change_request_from_a_bsc_carries_the_psc_name():
    wire = mqdsrp.encode(mqdsrp_messages()["change_request_bsc"])
    hdr = mqdsrp.decode(wire).change_request.change_request_header
    assert (hdr.requester_name, hdr.psc_name_offset, hdr.psc_name) == ("BSC1", 5, "PSC1")
    assert struct.unpack_from("<I", wire, 38)[0] == 5                       # len("BSC1") + 1 WCHARs
    assert wire[42:52] == "BSC1\x00".encode("utf-16-le")


def test_sequence_numbers_are_big_endian_on_the_wire():
    wire = mqdsrp.encode(mqdsrp.new_message(SITE_A, mqdsrp.AlreadyPurgedMessage(SITE_A, 0x0102)))
    assert wire[34:42] == bytes.fromhex("0000000000000102")


def test_unknown_operation_and_version_are_rejected():
    e = _err(SYNC_REQUEST[:17] + b"\x09" + b"xyz")
    assert (e.field, e.offset) == ("Operation", 17) and "3.1.5.1" in e.reason
    e = _err(b"\x01" + SYNC_REQUEST[1:])
    assert (e.field, e.offset) == ("Version", 0)


def _err(body: bytes):
    return wire_error("mqdsrp", body)


def test_empty_body():
    assert "empty body" in _err(b"").reason


def test_truncated_header():
    e = _err(SYNC_REQUEST[:10])
    assert (e.structure, e.field, e.offset) == ("BaseReplicationHeader", "SiteID", 1)


def test_trailing_garbage():
    e = _err(PSC_ACK + b"\x00")
    assert "trailing garbage" in e.reason and e.offset == len(PSC_ACK)


def test_sync_reply_count_beyond_the_body():
    body = mqdsrp.encode(mqdsrp_messages()["sync_reply"])
    body = body[:58] + struct.pack("<I", 0xFFFFFFFF) + body[62:]
    e = _err(body)
    assert (e.structure, e.field, e.offset) == ("SyncReplyHeader", "Count", 58) and "4294967295" in e.reason


def test_sync_reply_count_smaller_than_the_changes_leaves_garbage():
    body = mqdsrp.encode(mqdsrp_messages()["sync_reply"])
    assert "trailing garbage" in _err(body[:58] + struct.pack("<I", 2) + body[62:]).reason


def test_complete_sync0_range():
    body = mqdsrp.encode(mqdsrp_messages()["sync_reply"])
    e = _err(body[:62] + struct.pack("<I", 3) + body[66:])
    assert (e.field, e.offset) == ("CompleteSync0", 62)


def test_change_propagation_count_beyond_the_body():
    body = mqdsrp.encode(mqdsrp_messages()["change_propagation_empty"])
    e = _err(body[:19] + b"\x10\x00" + body[21:])
    assert (e.field, e.offset) == ("Count", 21) and "count 16" in e.reason


def test_flush_must_be_0_or_1():
    body = mqdsrp.encode(mqdsrp_messages()["change_propagation_empty"])
    assert _err(body[:18] + b"\x02" + body[19:]).field == "Flush"


def test_seq_number_header_count_beyond_the_body():
    body = mqdsrp.encode(mqdsrp_messages()["change_propagation"])
    hdr_at = len(body) - (2 + 10 + 2 * 32)
    assert struct.unpack_from("<H", body, hdr_at)[0] == 2
    e = _err(body[:hdr_at] + b"\x03\x00" + body[hdr_at + 2:])
    assert (e.structure, e.field) == ("SeqNumberHeader", "PartitionSeqNumbers") and "count 3" in e.reason


def test_psc_name_offset_must_point_past_requester_name():
    body = bytearray(mqdsrp.encode(mqdsrp_messages()["change_request_bsc"]))
    body[38:42] = struct.pack("<I", 2)
    e = _err(bytes(body))
    assert (e.structure, e.field, e.offset) == ("ChangeRequestHeader", "PSCNameOffset", 38)


def test_is_sync0_and_scope_ranges():
    assert _err(SYNC_REQUEST[:58] + b"\x02" + SYNC_REQUEST[59:]).field == "IsSync0"
    assert _err(SYNC_REQUEST[:59] + b"\x05" + SYNC_REQUEST[60:]).field == "Scope"


def test_directory_change_command_range():
    body = bytearray(mqdsrp.encode(mqdsrp.new_message(SITE_A, mqdsrp.SyncReplyMessage(
        mqdsrp.SyncReplyHeader(SITE_A, 0, 1, 0, 1, 0), [directory_change(1)]))))
    body[66] = 4
    e = _err(bytes(body))
    assert (e.structure, e.field, e.offset) == ("DirectoryChange[0]", "Command", 66)


def test_unterminated_requester_name():
    assert "unterminated" in _err(SYNC_REQUEST[:-2]).reason


@pytest.mark.parametrize("name", sorted(mqdsrp_messages()))
def test_a_decoded_message_copies_and_pickles_equal(name):
    """On both builds: the compiled records with a written-out __init__ copy and pickle through it."""
    import copy
    import pickle
    msg = mqdsrp.decode(mqdsrp.encode(mqdsrp_messages()[name]))
    assert copy.deepcopy(msg) == msg and copy.copy(msg) == msg and pickle.loads(pickle.dumps(msg)) == msg
