"""Sans-IO wire codecs for MS-MQCN, MC-MQDSRP and MS-MQSD: bytes in, typed records out, and back.

Nothing here imports Spark, Kafka or a database. One codec serves the producers (encode)
and the streaming job (decode).
"""
from . import mqcn, mqdsrp, mqsd
from .errors import WireError
from .records import record_to_dict

CODECS = {"mqcn": mqcn, "mqdsrp": mqdsrp, "mqsd": mqsd}
PROTOCOLS = tuple(CODECS)


def codec(protocol: str):
    module = CODECS.get(protocol)            # the job's names are lowercase already
    if module is not None:
        return module
    try:
        return CODECS[protocol.lower()]
    except KeyError:
        raise ValueError(f"unknown protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}") from None


def decode(protocol: str, body: bytes):
    """Decode one message body; raises WireError when the body breaks the protocol's format."""
    return codec(protocol).decode(body)


def encode(protocol: str, record) -> bytes:
    return codec(protocol).encode(record)


__all__ = ["CODECS", "PROTOCOLS", "WireError", "codec", "decode", "encode", "record_to_dict"]
