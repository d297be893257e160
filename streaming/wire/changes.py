"""The layout MQCN's Notification Update (2.2.6) shares with MQDSRP's DirectoryChange (2.2.4).

Command, UseGuid, then PathName (null-terminated UTF-16, only if UseGuid = 0x00) or
GuidIdentifier (16 bytes, only if UseGuid = 0x01) - digest MQCN B.5 / MQDSRP §3.3.
"""
from collections.abc import Mapping

from .guid import guid_to_bytes
from .reader import Reader, utf16z_bytes

__all__ = ["MIN_CHANGE_SIZE", "read_target", "target_bytes", "USE_GUID", "USE_PATH_NAME"]

USE_PATH_NAME = 0x00
USE_GUID = 0x01


def read_target(r: Reader, commands: Mapping[int, str]) -> tuple[int, int, str | None, str | None]:
    at = r.pos
    if at + 2 <= len(r.buf):
        command, use_guid = r.buf[at], r.buf[at + 1]
        r.pos = at + 2
    else:
        command, use_guid = r.u8("Command"), r.u8("UseGuid")
    if command not in commands:
        raise r.error("Command", f"must be one of {_choices(commands)}, got 0x{command:02x}", at)
    if use_guid == USE_PATH_NAME:
        return command, use_guid, r.utf16z("PathName"), None
    if use_guid == USE_GUID:
        return command, use_guid, None, r.guid("GuidIdentifier")
    raise r.error("UseGuid", f"must be 0x00 (PathName) or 0x01 (GuidIdentifier), got 0x{use_guid:02x}", at + 1)


def target_bytes(command: int, use_guid: int, path_name: str | None, guid_identifier: str | None) -> bytes:
    head = bytes([command, use_guid])
    if use_guid == USE_PATH_NAME:
        if path_name is None:
            raise ValueError("UseGuid 0x00 needs a PathName")
        return head + utf16z_bytes(path_name)
    if use_guid == USE_GUID:
        if guid_identifier is None:
            raise ValueError("UseGuid 0x01 needs a GuidIdentifier")
        return head + guid_to_bytes(guid_identifier)
    raise ValueError(f"UseGuid must be 0 or 1, got {use_guid}")


def _choices(commands: Mapping[int, str]) -> str:
    return ", ".join(f"0x{k:02x} ({v})" for k, v in sorted(commands.items()))


# Smallest possible encoding of a change: Command, UseGuid, an empty PathName (2), then the
# 16-byte GUID, 24 bytes and NumberOfProperties shared by both layouts.
MIN_CHANGE_SIZE = 2 + 2 + 16 + 24 + 1
