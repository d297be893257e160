"""[MS-MQSD]: the section 4 example packets, round trips, and every malformed-packet rule."""
import re
import struct

import pytest
from conftest import vector, wire_error

from streaming.wire import mqsd

# MQSD digest §7.1: the extraction put Greek and Cyrillic look-alikes into the §4 hex dumps.
HOMOGLYPHS = str.maketrans({"Α": "A", "Β": "B", "Е": "E", "З": "3", "А": "A", "В": "B", "С": "C"})


def hex_dumps_from_seed(spec_dir) -> list[bytes]:
    """The three §4 packets, read from the spec text itself, with the digest's repairs applied."""
    text = (spec_dir / "seeds" / "MS-MQSD_v20131025.txt").read_text(encoding="utf-8")
    start = text.index("Examples of the content of a TopologyClientRequest")
    section = text[start:text.index("5 Security", start)]
    packets, current = [], []
    for line in section.splitlines():
        line = line.translate(HOMOGLYPHS)
        m = re.match(r"^([0-9A-F]{7,8})\s+(.*)$", line.strip())
        if not m:
            continue
        offset = int(m.group(1), 16)
        tokens = re.sub(r"\b([0-9A-F]) ([0-9A-F])\b", r"\1\2", m.group(2)).split()
        if offset == 0 and current:
            packets.append(bytes(current))
            current = []
        assert len(current) == offset, f"offset {offset:#x} after {len(current)} bytes"
        current.extend(int(t, 16) for t in tokens)
    packets.append(bytes(current))
    return packets


def test_vectors_are_the_spec_section_4_packets(spec_dir):
    assert hex_dumps_from_seed(spec_dir) == [
        vector("mqsd_4_request"), vector("mqsd_4_reply_local"), vector("mqsd_4_reply_remote")]


def test_section_4_request_decodes_to_documented_values():
    packet = mqsd.decode(vector("mqsd_4_request"))
    req = packet.client_request
    assert packet.packet_type == "TopologyClientRequest" and packet.server_reply is None
    assert (req.header.version, req.header.type, req.header.reserved) == (0, 1, 0)
    assert req.enterprise_id == "e6eaba61-d1c6-11db-baac-0003ff4e2d22"
    assert req.request_id == "f291a103-e33c-ab4f-a930-be3a33e432dd"
    assert req.site_id == "dcc51bf6-d4ad-4543-8739-71568e8f9128"
    assert req.ipx_network_count is None and req.flags == []


def test_section_4_local_site_reply_has_no_server_list():
    reply = mqsd.decode(vector("mqsd_4_reply_local")).server_reply
    assert reply.correlation_id == "f291a103-e33c-ab4f-a930-be3a33e432dd"
    assert reply.connected_network_count == 1 and reply.connected_network_mask == 0
    assert reply.directory_service_server_size == 0
    assert reply.connected_network_array == ["e6eaba62-d1c6-11db-baac-0003ff4e2d22"]
    assert reply.responding_site_id is None and reply.directory_service_server_array is None


def test_section_4_remote_site_reply_lists_nt4pec():
    reply = mqsd.decode(vector("mqsd_4_reply_remote")).server_reply
    assert reply.directory_service_server_size == 18          # includes the EndList null
    assert reply.responding_site_id == "e6eaba60-d1c6-11db-baac-0003ff4e2d22"
    assert reply.connected_network_array == ["e6eaba62-d1c6-11db-baac-0003ff4e2d22"]
    assert reply.directory_service_server_array == [mqsd.DirectoryServiceServerEntry(True, False, "nt4pec")]


@pytest.mark.parametrize("name", ["mqsd_4_request", "mqsd_4_reply_local", "mqsd_4_reply_remote"])
def test_section_4_packets_round_trip(name):
    assert mqsd.encode(mqsd.decode(vector(name))) == vector(name)


def test_builders_reproduce_section_4_packets():
    req = mqsd.new_request("e6eaba61-d1c6-11db-baac-0003ff4e2d22", "f291a103-e33c-ab4f-a930-be3a33e432dd",
                           "dcc51bf6-d4ad-4543-8739-71568e8f9128")
    remote = mqsd.new_reply("f291a103-e33c-ab4f-a930-be3a33e432dd", ["e6eaba62-d1c6-11db-baac-0003ff4e2d22"],
                            "e6eaba60-d1c6-11db-baac-0003ff4e2d22",
                            [mqsd.DirectoryServiceServerEntry(True, False, "nt4pec")])
    assert mqsd.encode(req) == vector("mqsd_4_request")
    assert mqsd.encode(remote) == vector("mqsd_4_reply_remote")


def test_ipx_request_carries_network_numbers():
    body = vector("mqsd_4_request") + struct.pack("<3I", 2, 0x11, 0x22)
    req = mqsd.decode(body).client_request
    assert req.ipx_network_count == 2 and req.ipx_network_number_array == [0x11, 0x22]
    assert mqsd.encode(mqsd.decode(body)) == body


def test_request_under_60_bytes_ignores_ipx_fields():
    # 3.2.5.1: IPXNetworkCount present but no array entry: the fields MUST be ignored.
    body = vector("mqsd_4_request") + struct.pack("<I", 5)
    req = mqsd.decode(body).client_request
    assert req.ipx_network_count is None and req.ignored_trailing == b"\x05\x00\x00\x00"
    assert req.flags == ["ipx_fields_ignored:4_bytes"]
    assert mqsd.encode(mqsd.decode(body)) == body


def test_nonzero_version_and_reserved_are_flagged_not_rejected():
    body = b"\x07\x01\x01\x00" + vector("mqsd_4_request")[4:]
    assert mqsd.decode(body).client_request.flags == ["version_nonzero:7", "reserved_nonzero:1"]


def _err(body: bytes):
    return wire_error("mqsd", body)


def test_truncated_request_names_field_and_offset():
    e = _err(vector("mqsd_4_request")[:40])
    assert (e.structure, e.field, e.offset) == ("TopologyClientRequest", "SiteID", 36)


@pytest.mark.parametrize("count", [0, 33])
def test_ipx_count_out_of_range(count):
    e = _err(vector("mqsd_4_request") + struct.pack("<2I", count, 1))
    assert (e.field, e.offset) == ("IPXNetworkCount", 52) and "1 to 32" in e.reason


def test_ipx_count_larger_than_packet():
    e = _err(vector("mqsd_4_request") + struct.pack("<2I", 3, 1))
    assert e.field == "IPXNetworkNumberArray" and "count 3" in e.reason


def test_ipx_request_with_trailing_garbage():
    e = _err(vector("mqsd_4_request") + struct.pack("<2I", 1, 1) + b"\x00")
    assert "trailing garbage" in e.reason and e.offset == 60


def test_unknown_packet_type():
    e = _err(b"\x00\x03\x00\x00" + bytes(48))
    assert (e.field, e.offset) == ("Type", 1)


def _reply(count=1, mask=0, size=0, networks=1, tail=b""):
    return (b"\x00\x02\x00\x00" + bytes(16) + struct.pack("<3I", count, mask, size) + bytes(16 * networks) + tail)


@pytest.mark.parametrize("count", [0, 33])
def test_reply_network_count_out_of_range(count):
    assert _err(_reply(count=count)).field == "ConnectedNetworkCount"


def test_reply_mask_must_be_zero_or_match_count():
    assert _err(_reply(count=1, mask=0b11)).field == "ConnectedNetworkMask"
    assert mqsd.decode(_reply(count=2, mask=0b11, networks=2)).server_reply.connected_network_mask == 3


def test_reply_network_array_truncated():
    e = _err(_reply(count=3, networks=2))
    assert e.field == "ConnectedNetworkArray" and e.offset == 32


def test_local_reply_with_trailing_bytes_is_rejected():
    assert "trailing garbage" in _err(_reply(tail=b"\x00")).reason


def test_server_array_size_must_match_remaining_bytes():
    array = "10nt4pec\x00".encode("utf-16-le")
    e = _err(_reply(size=len(array) + 2, tail=bytes(16) + array))
    assert e.field == "DirectoryServiceServerArray" and "says 20 bytes" in e.reason


@pytest.mark.parametrize("text,reason", [
    ("10nt4pec", "EndList"),
    ("1", "odd"),
    ("10,11b\x00", "shorter than"),
    ("10a,x1b\x00", "IP flag"),
    ("10a,1xb\x00", "IPX flag"),
    ("10a\x00b\x00", "null character inside"),
])
def test_malformed_server_arrays(text, reason):
    array = text.encode("utf-16-le") if text != "1" else b"1"
    e = _err(_reply(size=len(array), tail=bytes(16) + array))
    assert e.field == "DirectoryServiceServerArray" and reason in e.reason


def test_several_servers_parse_with_flags():
    array = "10a,01bb,11ccc\x00".encode("utf-16-le")
    reply = mqsd.decode(_reply(size=len(array), tail=bytes(16) + array)).server_reply
    assert [(e.ip_supported, e.ipx_supported, e.name) for e in reply.directory_service_server_array] == [
        (True, False, "a"), (False, True, "bb"), (True, True, "ccc")]
