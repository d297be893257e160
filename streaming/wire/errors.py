"""The one error type every wire codec raises for a body that breaks its format."""

__all__ = ["WireError"]


class WireError(ValueError):
    """A body that does not follow its protocol's wire format.

    Names the protocol, the structure and field being read, the byte offset
    (from the start of the body) where the problem was found, and why.
    """

    def __init__(self, protocol: str, structure: str, field: str, offset: int, reason: str):
        self.protocol = protocol
        self.structure = structure
        self.field = field
        self.offset = offset
        self.reason = reason
        super().__init__(f"{protocol} {structure}.{field} at byte {offset}: {reason}")

    def as_dict(self) -> dict:
        return {
            "protocol": self.protocol,
            "structure": self.structure,
            "field": self.field,
            "offset": self.offset,
            "reason": self.reason,
        }
