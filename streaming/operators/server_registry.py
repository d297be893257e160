"""The enterprise's directory servers as the replicas know them together, and the security findings
that need that knowledge (sans-IO): dsrp-unknown-sender and mqsd-rogue-reply.

One replica cannot tell alone: a server never receives its own partition's objects (they change by
local administration), so the PEC does not hold the sites that name the PSCs, nor a PSC its own
site's BSCs. Together the replicas hold the whole directory. Each replica announces the directory
servers its objects name (facts): a machine object with the BSC, PSC or PEC bit of PROPID_QM_SERVICE
(its name and the IP addresses of its PROPID_QM_ADDRESS), a site's PSC (PROPID_S_PSC), the
enterprise's PEC (PROPID_E_PECNAME). A replica that does not know a sender itself, and the
discovery operator for every reply, hand the question on (checks).

Everything happens in event time, so the findings do not depend on the micro-batching: a check of a
message that arrived at t is decided once the clock passes t + DECIDE_AFTER_MS, against the names
some replica knew by then. The grace covers a directory that is still being learnt (the first
minute of an enterprise's traffic, a replica that has just asked for a sync); a check the clock has
not passed yet waits in the state.
"""
import json
from dataclasses import dataclass

from ..wire.properties import MQDS_ENTERPRISE, MQDS_MACHINE, MQDS_SITE
from ..wire.propids import propid
from .findings import BUCKET_MS, FindingLog

__all__ = ["advance", "apply_text", "CHECK", "Check", "check_text", "DECIDE_AFTER_MS", "E_PECNAME", "FACT",
           "fact_text", "IP_ADDRESS_TYPE", "ip_addresses", "QM_ADDRESS", "QM_PATHNAME", "QM_SERVICE", "S_PSC",
           "ServerRegistry", "servers_named", "SERVICE_BITS"]

DECIDE_AFTER_MS = 120_000
FACT, CHECK = "server", "check"             # the two kinds of input row
SERVICE_BITS = 0x2 | 0x4 | 0x8              # PROPID_QM_SERVICE: BSC, PSC, PEC (MS-MQMQ 2.3.2.9)
IP_ADDRESS_TYPE = 1                         # TA_ADDRESS AddressType (MS-MQMQ 2.2.4)
QM_SERVICE, QM_PATHNAME, QM_ADDRESS = propid("QM_SERVICE"), propid("QM_PATHNAME"), propid("QM_ADDRESS")
S_PSC, E_PECNAME = propid("S_PSC"), propid("E_PECNAME")


@dataclass
class Check:
    kind: str                               # dsrp-unknown-sender or mqsd-rogue-reply
    at_ms: int
    source: str | None                      # the sender's name, or the responder's address
    target: str                             # the receiving server, or the discovery client
    names: list                             # what must be a directory server: names and addresses
    evidence: dict

    def to_tuple(self) -> tuple:
        return self.kind, self.at_ms, self.source, self.target, self.names, self.evidence

    def order(self) -> tuple:
        """Event time, then what does not depend on how the topics are partitioned."""
        return self.at_ms, self.evidence.get("message_id") or "", self.kind, self.source or "", self.target, \
            self.evidence.get("offset") or 0


class ServerRegistry:
    """known: a name (lower case) or address -> the earliest event time a replica announced it."""

    def __init__(self, known: dict | None = None, checks: list | None = None, findings: FindingLog | None = None,
                 configured: tuple = ()):
        self.known: dict[str, int] = dict(known or {})
        self.checks: list[Check] = [Check(*c) for c in checks or []]
        self.findings = findings or FindingLog()
        self.configured = {n.lower() for n in configured if n}     # --pec-name: known from the start

    def learn(self, name: str, at_ms: int) -> None:
        key = name.lower()
        self.known[key] = min(self.known.get(key, at_ms), at_ms)

    def check(self, c: Check) -> None:
        """A check whose names are all known by its deadline already is no finding, whatever comes
        later (a name's time only ever moves earlier): only the others wait in the state."""
        if c.names and all(self.knew(n, c.at_ms + DECIDE_AFTER_MS) for n in c.names):
            return
        self.checks.append(c)

    def knew(self, name: str | None, by_ms: int) -> bool:
        if not name:
            return False
        key = name.lower()
        return key in self.configured or self.known.get(key, by_ms + 1) <= by_ms

    def decide(self, watermark_ms: int) -> None:
        """Every check the clock has passed by DECIDE_AFTER_MS, in event-time order: a finding when one
        of its names was not known by then."""
        due = sorted((c for c in self.checks if c.at_ms + DECIDE_AFTER_MS <= watermark_ms), key=Check.order)
        if not due:
            return
        self.checks = [c for c in self.checks if c.at_ms + DECIDE_AFTER_MS > watermark_ms]
        for c in due:
            unknown = [n for n in c.names if not self.knew(n, c.at_ms + DECIDE_AFTER_MS)]
            if unknown or not c.names:
                self.findings.record(c.kind, c.source, c.target, c.at_ms, c.evidence,
                                     detail={"not_directory_servers": unknown or [c.source]})
        self.findings.forget(watermark_ms - DECIDE_AFTER_MS - BUCKET_MS)

    def next_timer_ms(self) -> int | None:
        return min(c.at_ms for c in self.checks) + DECIDE_AFTER_MS if self.checks else None

    def to_bytes(self) -> bytes:
        return json.dumps([self.known, [c.to_tuple() for c in self.checks], self.findings.to_list()]).encode()

    @classmethod
    def from_bytes(cls, raw: bytes | None, configured: tuple = ()) -> "ServerRegistry":
        if not raw:
            return cls(configured=configured)
        known, checks, findings = json.loads(raw)
        return cls(known, checks, FindingLog(findings), configured)


# ------------------------------------------------------------------ what the operators hand on
def fact_text(name: str) -> str:
    """A directory server a replica's objects name (a name or an IP address)."""
    return json.dumps([FACT, name])


def check_text(c: Check) -> str:
    return json.dumps([CHECK, *c.to_tuple()])


def apply_text(registry: ServerRegistry, at_ms: int, text: str) -> None:
    """One input row (fact_text or check_text at its event time)."""
    kind, *rest = json.loads(text)
    if kind == FACT:
        registry.learn(rest[0], at_ms)
    else:
        registry.check(Check(*rest))


def advance(registry: ServerRegistry, held: list, watermark_ms: int) -> tuple[ServerRegistry, list]:
    """held: input rows (streaming.operators.notification_input.Row: event_ms, body the text).
    The rows the clock has passed are applied, then the checks it has passed by the grace are
    decided; returns the rows still waiting."""
    ready = sorted((r for r in held if r.event_ms <= watermark_ms), key=lambda r: (r.event_ms, bytes(r.body)))
    waiting = [r for r in held if r.event_ms > watermark_ms]
    for row in ready:
        apply_text(registry, row.event_ms, bytes(row.body).decode())
    registry.decide(watermark_ms)
    return registry, waiting


def servers_named(object_type: int, properties: dict) -> list[str]:
    """The directory servers one stored object names: a machine with a directory service bit (its
    path name and IP addresses), a site's PSC, the enterprise's PEC."""
    if object_type == MQDS_MACHINE:
        service, name = properties.get(QM_SERVICE), properties.get(QM_PATHNAME)
        if not (isinstance(service, int) and service & SERVICE_BITS and name):
            return []
        return [name] + ip_addresses(properties.get(QM_ADDRESS))
    named = properties.get({MQDS_SITE: S_PSC, MQDS_ENTERPRISE: E_PECNAME}.get(object_type, -1))
    return [named] if isinstance(named, str) and named else []


def ip_addresses(blob) -> list[str]:
    """The IP addresses of a PROPID_QM_ADDRESS blob: packed TA_ADDRESS entries (u16 AddressLength,
    u16 AddressType, the address); anything malformed ends the walk."""
    if not isinstance(blob, (bytes, bytearray)):
        return []
    out, at = [], 0
    while at + 4 <= len(blob):
        length = int.from_bytes(blob[at:at + 2], "little")
        kind = int.from_bytes(blob[at + 2:at + 4], "little")
        address = blob[at + 4:at + 4 + length]
        if len(address) < length:
            break
        if kind == IP_ADDRESS_TYPE and length == 4:
            out.append(".".join(str(b) for b in address))
        at += 4 + length
    return out
