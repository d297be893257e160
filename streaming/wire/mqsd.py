"""[MS-MQSD] Directory Service Discovery packets (2.2.1-2.2.3), decode and encode.

All integers little-endian, GUIDs in the MS-DTYP packet layout, no padding.
"""
from dataclasses import dataclass, field
from typing import Any

from .guid import guid_to_bytes
from .reader import Reader, u32_bytes, utf16_text
from .records import rebuilt_by_init

__all__ = ["decode", "DirectoryServiceServerEntry", "encode", "encode_reply", "encode_request", "HEADER_SIZE",
           "MAX_NETWORKS", "MqsdPacket", "new_reply", "new_request", "PROTOCOL", "REPLY_FIXED_SIZE",
           "REQUEST_IP_SIZE", "REQUEST_MIN_IPX_SIZE", "server_array_bytes", "TopologyClientRequest",
           "TopologyPacketHeader", "TopologyServerReply", "TYPE_CLIENT_REQUEST", "TYPE_SERVER_REPLY"]

PROTOCOL = "MQSD"
TYPE_CLIENT_REQUEST = 0x01
TYPE_SERVER_REPLY = 0x02
HEADER_SIZE = 4
REQUEST_IP_SIZE = 52
REQUEST_MIN_IPX_SIZE = 60          # 52 + IPXNetworkCount + one IPXNetworkNumberArray entry (3.2.5.1)
REPLY_FIXED_SIZE = 32
MAX_NETWORKS = 32                   # IPXNetworkCount and ConnectedNetworkCount: 1 to 32 inclusive


@dataclass(slots=True)
class TopologyPacketHeader:
    version: int
    type: int
    reserved: int

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, version: int, type: int, reserved: int) -> None:
        self.version = version
        self.type = type
        self.reserved = reserved

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class TopologyClientRequest:
    header: TopologyPacketHeader
    enterprise_id: str
    request_id: str
    site_id: str
    ipx_network_count: int | None = None          # present only for IPX
    ipx_network_number_array: list[int] | None = None
    ignored_trailing: bytes = b""                 # 3.2.5.1: a packet under 60 bytes has its IPX fields ignored
    flags: list[str] = field(default_factory=list)

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, header: TopologyPacketHeader, enterprise_id: str, request_id: str, site_id: str,
                 ipx_network_count: int | None = None, ipx_network_number_array: list[int] | None = None,
                 ignored_trailing: bytes = b"", flags: list[str] | None = None) -> None:
        self.header = header
        self.enterprise_id = enterprise_id
        self.request_id = request_id
        self.site_id = site_id
        self.ipx_network_count = ipx_network_count
        self.ipx_network_number_array = ipx_network_number_array
        self.ignored_trailing = ignored_trailing
        self.flags = [] if flags is None else flags

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class DirectoryServiceServerEntry:
    ip_supported: bool
    ipx_supported: bool
    name: str

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, ip_supported: bool, ipx_supported: bool, name: str) -> None:
        self.ip_supported = ip_supported
        self.ipx_supported = ipx_supported
        self.name = name

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class TopologyServerReply:
    header: TopologyPacketHeader
    correlation_id: str
    connected_network_count: int
    connected_network_mask: int
    directory_service_server_size: int
    connected_network_array: list[str]
    responding_site_id: str | None = None
    directory_service_server_array: list[DirectoryServiceServerEntry] | None = None
    flags: list[str] = field(default_factory=list)

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, header: TopologyPacketHeader, correlation_id: str, connected_network_count: int,
                 connected_network_mask: int, directory_service_server_size: int, connected_network_array: list[str],
                 responding_site_id: str | None = None,
                 directory_service_server_array: list[DirectoryServiceServerEntry] | None = None,
                 flags: list[str] | None = None) -> None:
        self.header = header
        self.correlation_id = correlation_id
        self.connected_network_count = connected_network_count
        self.connected_network_mask = connected_network_mask
        self.directory_service_server_size = directory_service_server_size
        self.connected_network_array = connected_network_array
        self.responding_site_id = responding_site_id
        self.directory_service_server_array = directory_service_server_array
        self.flags = [] if flags is None else flags

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)


@dataclass(slots=True)
class MqsdPacket:
    """One MQSD packet: exactly one of client_request / server_reply is set."""
    packet_type: str                               # "TopologyClientRequest" or "TopologyServerReply"
    client_request: TopologyClientRequest | None = None
    server_reply: TopologyServerReply | None = None

    # written out: mypyc compiles it (see Property.__init__)
    def __init__(self, packet_type: str, client_request: TopologyClientRequest | None = None,
                 server_reply: TopologyServerReply | None = None) -> None:
        self.packet_type = packet_type
        self.client_request = client_request
        self.server_reply = server_reply

    def __reduce__(self) -> tuple:
        return rebuilt_by_init(self)

    @property
    def message(self) -> Any:
        return self.client_request or self.server_reply


# ---------------------------------------------------------------------------- decoding
def decode(body: bytes) -> MqsdPacket:
    r = Reader(body, PROTOCOL)
    header = _read_header(r)
    if header.type == TYPE_CLIENT_REQUEST:
        return MqsdPacket("TopologyClientRequest", client_request=_read_request(r, header))
    if header.type == TYPE_SERVER_REPLY:
        return MqsdPacket("TopologyServerReply", server_reply=_read_reply(r, header))
    raise r.error("Type", f"unknown packet type 0x{header.type:02x}: must be 0x01 (request) or 0x02 (reply)", 1)


def _read_header(r: Reader) -> TopologyPacketHeader:
    r.structure = "TopologyPacketHeader"
    return TopologyPacketHeader(r.u8("Version"), r.u8("Type"), r.u16("Reserved"))


def _header_flags(header: TopologyPacketHeader) -> list[str]:
    # 2.2.1: servers MUST ignore Version and Reserved: kept and flagged, never rejected.
    flags = []
    if header.version != 0:
        flags.append(f"version_nonzero:{header.version}")
    if header.reserved != 0:
        flags.append(f"reserved_nonzero:{header.reserved}")
    return flags


def _read_request(r: Reader, header: TopologyPacketHeader) -> TopologyClientRequest:
    r.structure = "TopologyClientRequest"
    req = TopologyClientRequest(header, r.guid("EnterpriseID"), r.guid("RequestID"), r.guid("SiteID"))
    req.flags = _header_flags(header)
    if len(r.buf) < REQUEST_MIN_IPX_SIZE:
        # 3.2.5.1: shorter than a request with IPXNetworkCount and one entry: IPX fields
        # are considered not present and MUST be ignored.
        req.ignored_trailing = bytes(r.raw("IPXNetworkCount", r.remaining()))
        if req.ignored_trailing:
            req.flags.append(f"ipx_fields_ignored:{len(req.ignored_trailing)}_bytes")
        return req
    at = r.pos
    count = r.u32("IPXNetworkCount")
    if not 1 <= count <= MAX_NETWORKS:
        raise r.error("IPXNetworkCount", f"must be in the range 1 to 32, got {count}", at)
    r.count("IPXNetworkNumberArray", count, 4)
    req.ipx_network_count = count
    req.ipx_network_number_array = [r.u32(f"IPXNetworkNumberArray[{i}]") for i in range(count)]
    r.expect_end()
    return req


def _read_reply(r: Reader, header: TopologyPacketHeader) -> TopologyServerReply:
    r.structure = "TopologyServerReply"
    correlation_id = r.guid("CorrelationID")
    at = r.pos
    count = r.u32("ConnectedNetworkCount")
    if not 1 <= count <= MAX_NETWORKS:
        raise r.error("ConnectedNetworkCount", f"must be in the range 1 to 32, got {count}", at)
    mask_at = r.pos
    mask = r.u32("ConnectedNetworkMask")
    # 2.2.3: all zeros over IP; over IPX the count of 1-bits MUST equal ConnectedNetworkCount.
    if mask != 0 and bin(mask).count("1") != count:
        raise r.error("ConnectedNetworkMask",
                      f"0x{mask:08x} has {bin(mask).count('1')} bits set; must be 0 (IP) or have {count} (IPX)", mask_at)
    size_at = r.pos
    size = r.u32("DirectoryServiceServerSize")
    r.count("ConnectedNetworkArray", count, 16)
    networks = [r.guid(f"ConnectedNetworkArray[{i}]") for i in range(count)]
    reply = TopologyServerReply(header, correlation_id, count, mask, size, networks, flags=_header_flags(header))
    if size == 0:
        # The responder is in the requester's site: RespondingSiteID and the array MUST NOT be present.
        r.expect_end()
        return reply
    reply.responding_site_id = r.guid("RespondingSiteID")
    if r.remaining() != size:
        raise r.error("DirectoryServiceServerArray",
                      f"DirectoryServiceServerSize (at byte {size_at}) says {size} bytes, {r.remaining()} remain")
    reply.directory_service_server_array = _read_server_array(r, size)
    return reply


def _read_server_array(r: Reader, size: int) -> list[DirectoryServiceServerEntry]:
    """2.2.3 ABNF: Entry *(Delim Entry) EndList; Entry = IP IPX 1*NameChar (no comma, no null)."""
    field_name = "DirectoryServiceServerArray"
    start = r.pos
    if size % 2:
        raise r.error(field_name, f"size {size} is odd: the array is UTF-16 code units")
    raw = r.raw(field_name, size)
    text = utf16_text(raw)
    if not text.endswith("\x00"):
        raise r.error(field_name, "does not end with the EndList null (0x0000)", start + size - 2)
    entries = []
    offset = start
    for item in text[:-1].split(","):
        if "\x00" in item:
            raise r.error(field_name, "null character inside an entry (only allowed as EndList)",
                          offset + 2 * item.index("\x00"))
        if len(item) < 3:
            raise r.error(field_name, f"entry {item!r} is shorter than IP flag + IPX flag + a 1-character name", offset)
        for k, flag_name in ((0, "IP"), (1, "IPX")):
            if item[k] not in "01":
                raise r.error(field_name, f"{flag_name} flag must be '0' or '1', got {item[k]!r}", offset + 2 * k)
        entries.append(DirectoryServiceServerEntry(item[0] == "1", item[1] == "1", item[2:]))
        offset += 2 * (len(item) + 1)
    return entries


# ---------------------------------------------------------------------------- encoding
def encode(packet: MqsdPacket) -> bytes:
    if packet.client_request is not None:
        return encode_request(packet.client_request)
    if packet.server_reply is not None:
        return encode_reply(packet.server_reply)
    raise ValueError("MqsdPacket has neither a client_request nor a server_reply")


def _header_bytes(h: TopologyPacketHeader) -> bytes:
    return bytes([h.version, h.type]) + h.reserved.to_bytes(2, "little")


def encode_request(req: TopologyClientRequest) -> bytes:
    parts = [_header_bytes(req.header), guid_to_bytes(req.enterprise_id), guid_to_bytes(req.request_id),
             guid_to_bytes(req.site_id)]
    if req.ipx_network_number_array is not None:
        parts.append(u32_bytes(len(req.ipx_network_number_array)))
        parts.extend(u32_bytes(n) for n in req.ipx_network_number_array)
    else:
        parts.append(req.ignored_trailing)
    return b"".join(parts)


def server_array_bytes(entries: list[DirectoryServiceServerEntry]) -> bytes:
    for e in entries:
        if not e.name or "," in e.name or "\x00" in e.name:
            raise ValueError(f"server name {e.name!r} must be non-empty and hold no comma or null (2.2.3)")
    text = ",".join(f"{int(e.ip_supported)}{int(e.ipx_supported)}{e.name}" for e in entries) + "\x00"
    return text.encode("utf-16-le", "surrogatepass")


def encode_reply(reply: TopologyServerReply) -> bytes:
    array = b"" if reply.directory_service_server_array is None else server_array_bytes(
        reply.directory_service_server_array)
    parts = [_header_bytes(reply.header), guid_to_bytes(reply.correlation_id),
             u32_bytes(len(reply.connected_network_array)), u32_bytes(reply.connected_network_mask),
             u32_bytes(len(array))]
    parts.extend(guid_to_bytes(g) for g in reply.connected_network_array)
    if array:
        parts.append(guid_to_bytes(reply.responding_site_id))
        parts.append(array)
    return b"".join(parts)


# ---------------------------------------------------------------------------- builders
def new_request(enterprise_id: str, request_id: str, site_id: str, ipx_networks: list[int] | None = None):
    header = TopologyPacketHeader(0, TYPE_CLIENT_REQUEST, 0)
    req = TopologyClientRequest(header, enterprise_id, request_id, site_id)
    if ipx_networks is not None:
        req.ipx_network_count = len(ipx_networks)
        req.ipx_network_number_array = list(ipx_networks)
    return MqsdPacket("TopologyClientRequest", client_request=req)


def new_reply(correlation_id: str, connected_networks: list[str], responding_site_id: str | None = None,
              servers: list[DirectoryServiceServerEntry] | None = None, mask: int = 0) -> MqsdPacket:
    """A reply; pass responding_site_id and servers only for a responder outside the requester's site."""
    header = TopologyPacketHeader(0, TYPE_SERVER_REPLY, 0)
    size = len(server_array_bytes(servers)) if servers else 0
    reply = TopologyServerReply(header, correlation_id, len(connected_networks), mask, size, list(connected_networks),
                                responding_site_id if servers else None, servers if servers else None)
    return MqsdPacket("TopologyServerReply", server_reply=reply)
