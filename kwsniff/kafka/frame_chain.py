"""Finding whole frames inside bytes a damaged size prefix claimed (no I/O).

A flipped byte in a size prefix (67 read as 65,347) makes the frame splitter wait for bytes that are
really the frames after it. When a gap or the stream's end cuts such a "frame" short, its bytes are
searched for a chain: a position where a plausible frame starts and the next frame starts right
after it, and so on to the end of the bytes. Two chained starts that the caller's boundary check
accepts are evidence a cut frame of record data does not give by chance.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from functools import lru_cache

_SIZE = struct.Struct(">i")
MIN_CHAIN = 2  # frame starts in a row, the second proving the first one's size
# boundary_ok sees at least this many bytes of a frame (all of it when shorter), like a resync's.
_LOOKAHEAD = 8
# The search looks this far into the held bytes for the chain's first frame, so a gap inside a large
# frame (kernel drops in a Produce) costs a few milliseconds, not a scan of all of it. A damaged
# prefix whose real frame is longer is not recovered: its stream resynchronises as after a gap.
MAX_CHAIN_SCAN = 16 * 1024
# Held bytes past which no chain is looked for (joining them would copy a large frame at every gap).
MAX_CHAIN_HELD = 8 * 1024 * 1024


@lru_cache(maxsize=8)
def _candidates(max_size: int, min_size: int) -> re.Pattern[bytes]:
    """Positions whose 4 bytes may be a size in [min_size, max_size]: a small high byte, and not
    three zero bytes before a too-small last one, so the C regex engine, not Python, runs over the
    zero padding and small integers record data is full of."""
    high = min(max(max_size, 0) >> 24, 0x7F)
    small = rb"(?!\x00\x00\x00[\x00-\x%02x])" % min(min_size - 1, 0xFF) if min_size > 0 else b""
    return re.compile(rb"(?=[\x00-\x%02x])" % high + small)


def chain_start(
    held: bytes,
    min_size: int,
    max_size: int,
    judge: Callable[[memoryview, int], bool],
    proof: Callable[[memoryview], bool] | None = None,
    max_scan: int = MAX_CHAIN_SCAN,
) -> int | None:
    """The first offset in ``held`` from which frames chain to its end (the last one may be cut), each
    accepted by ``judge(view, offset)``: at least MIN_CHAIN of them, or with ``proof`` any number
    holding one that ``proof`` accepts; None if there is none within the first ``max_scan`` bytes."""
    n = len(held)
    view = memoryview(held)
    limit = min(n - 4, max_scan)
    for m in _candidates(max_size, min_size).finditer(held, 0, limit + 4):
        p = m.start()
        if p >= limit:
            return None
        if _chains(view, p, n, min_size, max_size, judge, proof):
            return p
    return None


def _chains(
    view: memoryview,
    p: int,
    n: int,
    min_size: int,
    max_size: int,
    judge: Callable[[memoryview, int], bool],
    proof: Callable[[memoryview], bool] | None,
) -> bool:
    starts = 0
    proven = False
    while n - p >= 4:
        (size,) = _SIZE.unpack_from(view, p)
        if not min_size <= size <= max_size:
            return False
        if n - p - 4 < min(size, _LOOKAHEAD):
            break  # too little of this frame to judge: the chain ends in a cut frame
        if not judge(view[p:], p):
            return False
        starts += 1
        if proof is not None and not proven:
            proven = proof(view[p:])
        p += 4 + size
    return proven if proof is not None else starts >= MIN_CHAIN
