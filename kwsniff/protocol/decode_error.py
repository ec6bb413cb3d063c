"""The one exception the protocol decoders raise for malformed or unknown input."""

from __future__ import annotations


class DecodeError(Exception):
    """A body or header that does not match its schema.

    offset: byte offset in the decoded buffer (body or frame) of the read that failed.
    path:   where in the message, e.g. "topics[2].partitions[0].records" ("" for the message itself).
    reason: short machine-friendly text, e.g. "truncated", "trailing bytes", "unsupported version".
    """

    def __init__(self, offset: int, path: str, reason: str) -> None:
        super().__init__(offset, path, reason)
        self.offset = offset
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"{self.reason}{where} (offset {self.offset})"
