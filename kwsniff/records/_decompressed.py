"""The outcome of decompressing one payload, shared by the codec readers."""

from __future__ import annotations

from typing import NamedTuple


class Decompressed(NamedTuple):
    data: memoryview | None  # None when capped or damaged
    capped: bool
    error: str  # "" when the payload decompressed


CAPPED = Decompressed(None, True, "")
