"""decode_prefix: as much of a message body as a capture kept, when a snap length cut it (no I/O).

A frame cut by a snap length keeps its first bytes only. The compiled decoders (compiler.py) need a
whole body; this reader walks the same schema fields one by one and stops at the first value whose
bytes were not kept. What it gives has the shape of a whole message (every field present, defaults
where nothing was read), so the tables' walkers read it as they read any message:

- an array holds the elements whose first field and naming fields were read (a topic with its
  name or id, a partition with its index), the last one as far as its bytes go;
- a tagged field (KIP-482) is read where its struct's tagged section was kept, and unknown (None)
  where it was not: its schema default would claim the tag was absent;
- a `records` field the cut fell in is a :class:`CutRecords` (how much of it was kept): its record
  count is unknown, never 0.

Slow (an interpreter over the schema), and only ever run on the few cut frames of a snap-length
capture.
"""

from __future__ import annotations

import contextlib
import struct
import uuid
from dataclasses import dataclass
from typing import Any

from kwsniff.protocol.compiler import FIXED
from kwsniff.protocol.decode import is_flexible, message_fields


@dataclass(frozen=True, slots=True)
class CutRecords:
    """A records field a snap length cut: its first bytes (``kept``) of ``size`` were captured (size
    -1: the cut came before the field)."""

    kept: bytes
    size: int


_NOT_READ = CutRecords(b"", -1)  # a records field the cut came before: its size unknown too


class _Cut(Exception):
    """The next value's bytes were not kept."""


class _Reader:
    def __init__(self, buf: bytes, flexible: bool) -> None:
        self.buf = buf
        self.pos = 0
        self.flexible = flexible
        # The cut left out more than the rest of the values it fell in: an array element or a field
        # after them (whose partitions, records... are unknown, so totals are too).
        self.short = False

    def take(self, n: int) -> bytes:
        if n > len(self.buf) - self.pos:
            raise _Cut
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def uvarint(self) -> int:
        result = 0
        for shift in range(0, 35, 7):
            (byte,) = self.take(1)
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
        raise _Cut  # not a varint: nothing more can be read

    def length(self, int32: bool) -> int:
        """A length or count: compact uvarint minus one (KIP-482), or classic int16/int32."""
        if self.flexible:
            return self.uvarint() - 1
        return int.from_bytes(self.take(4 if int32 else 2), "big", signed=True)

    def tagged_fields(self, fields: tuple[Any, ...], out: dict[str, Any]) -> None:
        """A struct's tagged section: known tags decoded from their own bounded slice (as the
        compiled decoder does), absent ones their schema default."""
        tagged = {f[4]: f for f in fields if f[4] is not None}
        seen: set[str] = set()
        for _ in range(self.uvarint()):
            field = tagged.get(self.uvarint())
            data = self.take(self.uvarint())
            if field is not None:
                sub = _Reader(data, self.flexible)
                with contextlib.suppress(_Cut):  # a tag not fully inside its own size: unknown
                    out[field[0]] = _value(sub, field[1], field[3] is not None, field[6])
                    seen.add(field[0])
        for field in tagged.values():
            if field[0] not in seen:
                out[field[0]] = _absent(field)


# Fields that name what an array element is about (what a row is keyed on): an element the cut fell
# in before one of them was read is dropped, not kept with a null name (a partition without index).
_NAMING = frozenset(
    {"name", "topic", "topic_name", "topic_id", "partition_index", "partition", "index", "partition_id"}
)


def _default(field: tuple[Any, ...]) -> Any:
    """What a field holds when its bytes were not kept: unknown (None), or no elements. A tagged field
    is unknown too, until its struct's tagged section is read (Reader.tagged_fields)."""
    kind, tag, children = field[1], field[4], field[6]
    if tag is not None:
        return None
    if kind.startswith("[]"):
        return []
    if kind == "struct":
        return {f[0]: _default(f) for f in children}
    # Records not reached are not "no records" (null): their count is unknown too.
    return _NOT_READ if kind == "records" else None


def _absent(field: tuple[Any, ...]) -> Any:
    """What the decoder gives a tagged field (and what is inside one) its message left out: its
    schema default."""
    kind, default, children = field[1], field[5], field[6]
    if kind.startswith("[]"):
        return []
    if kind == "struct":
        return {f[0]: _absent(f) for f in children}
    return uuid.UUID(default) if kind == "uuid" and isinstance(default, str) else default


def _named(item: dict[str, Any], fields: tuple[Any, ...]) -> bool:
    """Were the element's first field and every field naming it read?"""
    return bool(item.get("_read")) and all(
        item[f[0]] is not None for f in fields if f[0] in _NAMING and f[4] is None
    )


def _value(r: _Reader, kind: str, nullable: bool, children: tuple[Any, ...] | None) -> Any:
    if kind in FIXED:
        fmt, size = FIXED[kind]
        (value,) = struct.unpack(">" + fmt, r.take(size))
        return uuid.UUID(bytes=value) if kind == "uuid" else value
    if kind in ("string", "bytes", "records"):
        n = r.length(int32=kind != "string")
        if n < 0:
            return None
        if kind == "records" and n > len(r.buf) - r.pos:
            raise _CutValue(CutRecords(r.buf[r.pos :], n))
        data = r.take(n)
        return str(data, "utf-8", "replace") if kind == "string" else data
    if kind == "struct":
        assert children is not None
        if nullable and struct.unpack(">b", r.take(1))[0] < 0:
            return None
        out = {f[0]: _default(f) for f in children}
        _struct(r, children, out)
        return out
    if kind.startswith("[]"):
        n = r.length(int32=True)
        if n < 0:
            return None
        # A count past the kept bytes is read as far as they go (an element takes a byte or more,
        # but for an empty struct: the bound keeps that loop short too).
        n = min(n, len(r.buf) - r.pos + 1)
        items: list[Any] = []
        element = kind[2:]
        for _ in range(n):
            if element == "struct":
                assert children is not None
                item = {f[0]: _default(f) for f in children}
                try:
                    _struct(r, children, item)
                except _Cut:
                    if _named(item, children):
                        items.append(item)
                    r.short = r.short or len(items) < n
                    raise _CutValue(items) from None
                items.append(item)
            else:
                try:
                    items.append(_value(r, element, False, None))
                except _Cut:
                    r.short = True
                    raise _CutValue(items) from None
        return items
    raise ValueError(f"unknown type {kind}")


class _CutValue(_Cut):
    """Cut inside a value: what was read of it (an array's first elements, a records field's size)."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


def _struct(r: _Reader, fields: tuple[Any, ...], out: dict[str, Any]) -> None:
    first = True
    untagged = [f for f in fields if f[4] is None]
    for i, (name, kind, _versions, nullable, _tag, _default_value, children) in enumerate(untagged):
        try:
            out[name] = _value(r, kind, nullable is not None, children)
        except _CutValue as cut:
            out[name] = cut.value
            out["_read"] = True  # a cut inside the value: what came before it was read
            r.short = r.short or i < len(untagged) - 1
            raise _Cut from None
        except _Cut:
            r.short = True
            raise
        if first:
            out["_read"] = True
            first = False
    if r.flexible:
        r.tagged_fields(fields, out)


def _clean(value: Any) -> Any:
    """Drop the reader's bookkeeping key from every struct."""
    if isinstance(value, dict):
        value.pop("_read", None)
        for v in value.values():
            _clean(v)
    elif isinstance(value, list):
        for v in value:
            _clean(v)
    return value


def decode_prefix(api_key: int, api_version: int, response: bool, body: bytes) -> tuple[dict[str, Any], bool]:
    """The message as far as ``body`` (its kept first bytes) goes (see the module's docstring), and
    whether it reached every array element and field but those the cut fell in (a cut records field
    is then the last of the message: a total over its partitions holds)."""
    fields = message_fields(api_key, api_version, response)
    out = {f[0]: _default(f) for f in fields}
    r = _Reader(bytes(body), is_flexible(api_key, api_version, response))
    with contextlib.suppress(_Cut):  # where the kept bytes end
        _struct(r, fields, out)
    return _clean(out), not r.short
