"""Splitting one direction of a Kafka connection into frames (no I/O).

Every Kafka request and response is sent as an int32 size followed by that many bytes (Kafka protocol
guide, "Common Request and Response Structure"). :class:`FrameSplitter` cuts a reassembled byte
stream at those boundaries. It never copies a frame that lies inside one chunk (the frame is a
memoryview slice of it); a frame spread over many chunks is joined exactly once, when complete.

When the stream position is unknown (capture began mid-connection, a gap lost bytes, or a size was
impossible) the splitter scans for the next position that looks like a frame start, asking the
caller's ``boundary_ok`` to confirm. Every byte fed in ends up in exactly one frame or in exactly
one ``on_skip(nbytes, offset, reason)`` report, so nothing is lost silently (DESIGN rule 4).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable

GAP = "gap"  # a partial frame dropped because the stream lost bytes inside it
RESYNC = "resync"  # bytes scanned over while looking for a frame boundary
OVERSIZE = "oversize"  # an impossible size prefix, and the bytes scanned over after it
TRUNCATED_AT_END = "truncated_at_end"  # a frame the stream ended in the middle of

# Kafka sizes are signed int32 (a negative size can only mean we are out of step).
_SIZE = struct.Struct(">i")
# boundary_ok sees at least the size prefix and this many bytes of the frame (fewer if shorter).
BOUNDARY_LOOKAHEAD = 64

FrameCallback = Callable[[bytes | memoryview, int, int, int], None]
SkipCallback = Callable[[int, int, str], None]
BoundaryCheck = Callable[[memoryview], bool]
_Pieces = list[tuple[int, memoryview]]


class FrameSplitter:
    """Kafka's size-delimited frames out of one direction's in-order byte stream."""

    __slots__ = (
        "_on_frame",
        "_on_skip",
        "_boundary_ok",
        "_max",
        "_min",
        "_max_scan",
        "_candidate",
        "frames",
        "frame_bytes",
        "skipped_bytes",
        "resyncs",
        "oversize",
        "offset",
        "_resyncing",
        "_prefix",
        "_body",
        "_have",
        "_want",
        "_ts_first",
        "_scan",
        "_scan_pieces",
        "_skip_pending",
        "_skip_reason",
    )

    def __init__(
        self,
        on_frame: FrameCallback,
        on_skip: SkipCallback,
        boundary_ok: BoundaryCheck | None = None,
        max_frame_size: int = 100 * 1024 * 1024,
        synced: bool = True,
        min_frame_size: int = 4,
        max_resync_scan: int = 1024 * 1024,
    ) -> None:
        self._on_frame = on_frame
        self._on_skip = on_skip
        self._boundary_ok = boundary_ok
        self._max = max_frame_size
        self._min = min_frame_size
        self._max_scan = max_resync_scan
        # A plausible size has a small high byte: jump between such bytes instead of trying every one.
        high = min(max(max_frame_size, 0) >> 24, 0x7F)
        self._candidate = re.compile(b"[\\x00-\\x%02x]" % high)
        self.frames = 0
        self.frame_bytes = 0  # including the 4-byte size prefixes
        self.skipped_bytes = 0
        self.resyncs = 0  # times a boundary search began (the first one too when not synced)
        self.oversize = 0  # impossible size prefixes met while in step
        self.offset = 0  # stream offset of the first byte not yet in a frame or a skip report
        # In step: a partial frame is either a partial size prefix or a size plus body pieces.
        self._prefix = b""
        self._body: list[memoryview] = []
        self._have = 0
        self._want = -1  # body length of the partial frame, -1 while at a boundary or in a prefix
        self._ts_first = 0
        # Out of step: bytes not yet ruled out as a frame start, as one string to scan and as the
        # caller's chunks (with their timestamps) to replay once a boundary is found.
        self._resyncing = False
        self._scan = b""
        self._scan_pieces: _Pieces = []
        self._skip_pending = 0  # bytes already passed over, reported as one run when it ends
        self._skip_reason = RESYNC
        if not synced:
            self._enter_resync(RESYNC)

    @property
    def buffered(self) -> int:
        """Bytes fed in that are not yet in a frame or a skip report."""
        partial = len(self._prefix) + (4 + self._have if self._want >= 0 else 0)
        return partial + self._skip_pending + len(self._scan)

    @property
    def synced(self) -> bool:
        return not self._resyncing

    # -- input ---------------------------------------------------------------------------------------
    def data(self, ts: int, chunk: memoryview | bytes) -> None:
        view = chunk if isinstance(chunk, memoryview) else memoryview(chunk)
        if not self._resyncing:
            rest = self._split(ts, view)
            if rest is None:
                return
            work: _Pieces = [(ts, rest)]
        else:
            work = [(ts, view)]
        # Out of step: scan; once in step again, replay the remaining pieces, which may lose step
        # again. A loop, not recursion, so garbage full of false starts cannot exhaust the stack.
        while True:
            self._scan_extend(work)
            work = self._find_boundary()
            for i, (piece_ts, piece) in enumerate(work):
                rest = self._split(piece_ts, piece)
                if rest is not None:
                    work = [(piece_ts, rest), *work[i + 1 :]]
                    break
            else:
                return

    def gap(self, ts: int, nbytes: int) -> None:
        """The stream lost ``nbytes`` here: drop any partial frame and look for the next boundary."""
        if self._resyncing:
            # Bytes waiting for a verdict can no longer be followed by their frame's rest.
            self._drop_scan(len(self._scan))
            self._flush_skip()
            self._skip_reason = RESYNC
            return
        self._drop_partial(GAP)
        self._enter_resync(RESYNC)

    def finish(self, ts: int) -> None:
        """End of stream: whatever is buffered is reported as skipped."""
        if self._resyncing:
            self._flush_skip()
            self._skip_pending = len(self._scan)
            self._skip_reason = TRUNCATED_AT_END
            self._scan = b""
            self._scan_pieces = []
            self._flush_skip()
            self._skip_reason = RESYNC
        else:
            self._drop_partial(TRUNCATED_AT_END)

    # -- in step -------------------------------------------------------------------------------------
    def _split(self, ts: int, view: memoryview) -> memoryview | None:
        """Cut frames from ``view``; returns the bytes to scan if an impossible size lost step."""
        n = len(view)
        pos = 0
        if self._want >= 0 or self._prefix:
            pos = self._continue_frame(ts, view)
            if self._resyncing:
                return view[pos:]
            if pos >= n:
                return None
        lo, hi = self._min, self._max
        unpack = _SIZE.unpack_from
        on_frame = self._on_frame
        offset = start = self.offset
        frames = 0
        rest = None
        while True:
            left = n - pos
            if left < 4:
                if left:
                    self._prefix = view[pos:].tobytes()
                    self._ts_first = ts
                break
            (size,) = unpack(view, pos)
            if size < lo or size > hi:
                rest = view[pos + 4 :]
                break
            end = pos + 4 + size
            if end > n:
                self._ts_first = ts
                self._want = size
                if left > 4:
                    self._body.append(view[pos + 4 :])
                    self._have = left - 4
                break
            on_frame(view[pos + 4 : end], ts, ts, offset)
            offset += 4 + size
            frames += 1
            pos = end
        self.frames += frames
        self.frame_bytes += offset - start
        self.offset = offset
        if rest is not None:
            self._lose_step()
        return rest

    def _continue_frame(self, ts: int, view: memoryview) -> int:
        """Feed the partial frame from the start of ``view``; returns how many bytes it took."""
        n = len(view)
        pos = 0
        if self._want < 0:
            need = 4 - len(self._prefix)
            if n < need:
                self._prefix += view.tobytes()
                return n
            (size,) = _SIZE.unpack(self._prefix + view[:need].tobytes())
            self._prefix = b""
            pos = need
            if size < self._min or size > self._max:
                self._lose_step()
                return pos
            self._want = size
        need = self._want - self._have
        if n - pos < need:
            if n > pos:
                self._body.append(view[pos:])
                self._have += n - pos
            return n
        piece = view[pos : pos + need]
        body = self._body
        frame: bytes | memoryview
        if body:
            body.append(piece)
            frame = b"".join(body)
            self._body = []
        else:
            frame = piece  # only the size prefix was split: the body still lies in one chunk
        size = self._want
        self._want = -1
        self._have = 0
        offset = self.offset
        self.offset = offset + 4 + size
        self.frames += 1
        self.frame_bytes += 4 + size
        self._on_frame(frame, self._ts_first, ts, offset)
        return pos + need

    def _drop_partial(self, reason: str) -> None:
        nbytes = len(self._prefix) + (4 + self._have if self._want >= 0 else 0)
        self._prefix = b""
        self._body = []
        self._have = 0
        self._want = -1
        if nbytes:
            self._skip_pending = nbytes
            self._skip_reason = reason
            self._flush_skip()

    def _lose_step(self) -> None:
        # The 4 bytes of the impossible size at self.offset are skipped; scanning starts after them.
        self.oversize += 1
        self._enter_resync(OVERSIZE)
        self._skip_pending = 4

    def _enter_resync(self, reason: str) -> None:
        self.resyncs += 1
        self._resyncing = True
        self._skip_reason = reason

    # -- out of step ---------------------------------------------------------------------------------
    def _scan_extend(self, pieces: _Pieces) -> None:
        for ts, piece in pieces:
            if len(piece):
                self._scan_pieces.append((ts, piece))
                self._scan += piece.tobytes()

    def _find_boundary(self) -> _Pieces:
        """Scan for a frame start; if found, return the pieces from it on and be in step again."""
        buf = self._scan
        n = len(buf)
        lo, hi, ok = self._min, self._max, self._boundary_ok
        search = self._candidate.search
        unpack = _SIZE.unpack_from
        p = 0
        found = False
        while n - p >= 4:
            m = search(buf, p, n - 3)
            if m is None:
                p = n - 3
                break
            p = m.start()
            (size,) = unpack(buf, p)
            if lo <= size <= hi:
                if n - p < 4 + min(size, BOUNDARY_LOOKAHEAD):
                    break  # too few bytes to judge this position yet
                if ok is None or ok(memoryview(buf)[p:]):
                    found = True
                    break
            p += 1
        self._drop_scan(p)
        if not found:
            excess = len(self._scan) - self._max_scan
            if excess > 0:
                self._drop_scan(excess)
            return []
        self._flush_skip()
        pieces = self._scan_pieces
        self._scan = b""
        self._scan_pieces = []
        self._resyncing = False
        return pieces

    def _drop_scan(self, nbytes: int) -> None:
        """Pass over the first ``nbytes`` of the scan buffer (they join the pending skip run)."""
        if nbytes <= 0:
            return
        self._skip_pending += nbytes
        self._scan = self._scan[nbytes:]
        pieces = self._scan_pieces
        i = 0
        while nbytes:
            ts, piece = pieces[i]
            if len(piece) <= nbytes:
                nbytes -= len(piece)
                i += 1
            else:
                pieces[i] = (ts, piece[nbytes:])
                nbytes = 0
        del pieces[:i]

    def _flush_skip(self) -> None:
        nbytes = self._skip_pending
        if nbytes:
            offset = self.offset
            self.offset = offset + nbytes
            self.skipped_bytes += nbytes
            self._skip_pending = 0
            self._on_skip(nbytes, offset, self._skip_reason)
