"""Zigzag varints of the magic 2 record format (the protobuf encoding Kafka adopted with KIP-98)."""

from __future__ import annotations


class MalformedRecords(Exception):
    """Raised inside the records layer only; the batch readers turn it into an error string."""


def read_varint(view: memoryview, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    """Read a zigzag varint (a varlong with max_bytes=10) at pos; return (value, next position).

    Reading past the end raises IndexError, which callers treat like MalformedRecords.
    """
    byte = view[pos]
    if byte < 0x80:  # one byte holds -64..63: most lengths and deltas
        return (byte >> 1) ^ -(byte & 1), pos + 1
    raw = byte & 0x7F
    shift = 7
    end = pos + max_bytes
    pos += 1
    while True:
        if pos >= end:
            raise MalformedRecords(f"varint longer than {max_bytes} bytes")
        byte = view[pos]
        raw |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
