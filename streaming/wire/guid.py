"""GUIDs in the [MS-DTYP] 2.3.4 packet layout: Data1 u32 LE, Data2 u16 LE, Data3 u16 LE, Data4[8].

Shown as lowercase xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
"""
import re
import uuid
from functools import lru_cache

__all__ = ["guid_from_bytes", "GUID_NULL", "guid_to_bytes", "is_canonical_guid", "normalize_guid"]

GUID_NULL = "00000000-0000-0000-0000-000000000000"
_CANONICAL = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def guid_from_bytes(raw: bytes) -> str:
    return str(uuid.UUID(bytes_le=bytes(raw)))


@lru_cache(maxsize=100_000)
def guid_to_bytes(text: str) -> bytes:
    return uuid.UUID(text).bytes_le


def normalize_guid(text: str) -> str:
    """Canonical lowercase form of a GUID given with or without braces, in any case."""
    return str(uuid.UUID(text.strip("{}")))


def is_canonical_guid(text: str) -> bool:
    return bool(_CANONICAL.match(text))
