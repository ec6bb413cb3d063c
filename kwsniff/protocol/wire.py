"""Runtime pieces shared by the generated decode functions: the internal failure type, varints, structs.

Generated code reads `buf` (a memoryview) at `pos` and advances `pos`; it never bound-checks fixed-size
reads itself: struct.error / IndexError on a short buffer are turned into a located failure by the
function's exception handler, which costs nothing while decoding succeeds.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from kwsniff.protocol.decode_error import DecodeError


class Fail(Exception):
    """Internal failure travelling up through generated functions, collecting its path on the way.

    path holds parts innermost first; a part "[3]" is an array index of the part after it.
    """

    __slots__ = ("offset", "reason", "path")

    def __init__(self, offset: int, reason: str, path: list[str] | None = None) -> None:
        self.offset = offset
        self.reason = reason
        self.path = path if path is not None else []

    def to_error(self) -> DecodeError:
        text = ""
        for part in reversed(self.path):
            if not part:
                continue
            if part.startswith("[") or not text:
                text += part
            else:
                text += "." + part
        return DecodeError(self.offset, text, self.reason)


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """Unsigned varint of at most 5 bytes (Kafka's readUnsignedVarint); returns (value, new pos)."""
    result = 0
    for shift in range(0, 35, 7):
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
    raise Fail(pos, "varint too long")


def located(exc: Exception, where: Any, pos: int, buf: memoryview) -> Fail:
    """Turn a low-level exception at `pos` into a Fail naming the field that ran out.

    `where` is a field name, or for a grouped fixed-size read a tuple of (name, size) pairs, in which
    case the field that crosses the end of the buffer is named with its own offset.
    """
    if isinstance(exc, (struct.error, IndexError)):
        reason = "truncated"
    elif isinstance(exc, MemoryError):
        reason = "too large"
    else:
        reason = f"{type(exc).__name__}: {exc}"
    if isinstance(where, tuple):
        end = len(buf)
        for name, size in where:
            if pos + size > end:
                return Fail(pos, reason, [name])
            pos += size
        return Fail(pos, reason, [where[-1][0]])
    return Fail(pos, reason, [where])


def make_uuid(raw: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=raw)


def unpack_array(fmt: str, count: int, buf: memoryview, pos: int) -> list[Any]:
    """count fixed-size big-endian values in one unpack (struct caches the format)."""
    return list(struct.unpack_from(f">{count}{fmt}", buf, pos))
