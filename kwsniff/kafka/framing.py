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

from kwsniff.defaults import MAX_FRAME_SIZE
from kwsniff.kafka.frame_chain import MAX_CHAIN_HELD, chain_start

GAP = "gap"  # a partial frame dropped because the stream lost bytes inside it
RESYNC = "resync"  # bytes scanned over while looking for a frame boundary
OVERSIZE = "oversize"  # an impossible size prefix, and the bytes scanned over after it
TRUNCATED_AT_END = "truncated_at_end"  # a frame the stream ended in the middle of
DAMAGED_SIZE = "damaged_size"  # a size prefix that ran past whole frames, and the bytes up to them
# A frame some of whose bytes the capture did not keep (a snap length: `tcpdump -s`), though the
# stream carried them: its boundaries still come from its size prefix.
NOT_CAPTURED = "not_captured"

# Kafka sizes are signed int32 (a negative size can only mean we are out of step).
_SIZE = struct.Struct(">i")
# boundary_ok sees at least the size prefix and this many bytes of the frame (all of it if shorter);
# right before a gap or the stream's end, where no more bytes will come, at least BOUNDARY_MINIMUM.
BOUNDARY_LOOKAHEAD = 64
BOUNDARY_MINIMUM = 8  # a request's api key, version and correlation id; a response's correlation id

FrameCallback = Callable[[bytes | memoryview, int, int, int], None]
SkipCallback = Callable[[int, int, str], None]
# (first bytes of the frame, bytes of it seen (prefix included), its full size with prefix, ts of its
# first byte, ts of its last byte (of its first when the frame's end was never seen), its stream
# offset, reason)
CutCallback = Callable[[bytes, int, int, int, int, int, str], None]
# How much of a cut frame on_cut sees: enough for any request or response header.
CUT_HEAD = 512
BoundaryCheck = Callable[[memoryview], bool]
_Pieces = list[tuple[int, memoryview]]


class FrameSplitter:
    """Kafka's size-delimited frames out of one direction's in-order byte stream.

    Frames are views of the chunks given to :meth:`data`, and partial frames are kept as such views
    until complete, so a caller must not reuse a chunk's memory after handing it in. Counters are
    updated when a chunk has been handled; a skip run is reported (and counted) when it ends.
    """

    __slots__ = (
        "_on_frame",
        "_on_skip",
        "_on_cut",
        "cut_frames",
        "cut_frame_bytes",
        "_boundary_ok",
        "_max",
        "_min",
        "_max_scan",
        "_candidate",
        "frames",
        "skipped_bytes",
        "resyncs",
        "oversize",
        "offset",
        "candidate_offset",
        "_resyncing",
        "_prefix",
        "_body",
        "_body_ts",
        "damaged_sizes",
        "_size",
        "_need",
        "_ts_first",
        "_scan",
        "_scan_pieces",
        "_skip_pending",
        "_skip_reason",
        "_held",
        "_cut_at",
        "_cut_missing",
    )

    def __init__(
        self,
        on_frame: FrameCallback,
        on_skip: SkipCallback,
        boundary_ok: BoundaryCheck | None = None,
        max_frame_size: int = MAX_FRAME_SIZE,
        synced: bool = True,
        min_frame_size: int = 4,
        max_resync_scan: int = 1024 * 1024,
        on_cut: CutCallback | None = None,
        held: list[int] | None = None,
    ) -> None:
        self._on_frame = on_frame
        self._on_skip = on_skip
        # A frame whose size prefix was read but whose body a gap or the stream's end cut short: its
        # bytes are skipped like any partial frame, and on_cut still sees its head (a snaplen capture
        # keeps request headers, so requests stay countable; see tcpdump -s).
        self._on_cut = on_cut
        self.cut_frames = 0
        self.cut_frame_bytes = 0  # bytes of frames the stream ended in: frame bytes, a capture edge
        self._boundary_ok = boundary_ok
        self._max = max_frame_size
        self._min = min_frame_size
        self._max_scan = max_resync_scan
        # A plausible size has a small high byte: jump between such bytes instead of trying every one.
        high = min(max(max_frame_size, 0) >> 24, 0x7F)
        self._candidate = re.compile(b"[\\x00-\\x%02x]" % high)
        self.frames = 0
        self.skipped_bytes = 0
        self.resyncs = 0  # times a boundary search began (the first one too when not synced)
        self.oversize = 0  # impossible size prefixes met while in step
        self.offset = 0  # stream offset of the first byte not yet in a frame or a skip report
        # Stream offset of the position boundary_ok is judging (0: the first byte this splitter saw,
        # where a mid-stream capture may well start on a boundary whose request was never seen).
        self.candidate_offset = 0
        # In step: a partial frame is either a partial size prefix or a size plus body pieces.
        self._prefix = b""
        self._body: list[memoryview] = []
        self._body_ts: list[int] = []  # each body piece's timestamp, to replay it if its size was damaged
        self.damaged_sizes = 0  # frames whose size prefix ran past the frames that follow it
        self._size = 0  # body length of the partial frame
        self._need = -1  # body bytes it still needs, -1 while at a boundary or in a prefix
        self._ts_first = 0
        # Out of step: bytes not yet ruled out as a frame start, as one string to scan and as the
        # caller's chunks (with their timestamps) to replay once a boundary is found.
        self._resyncing = False
        self._scan = b""
        self._scan_pieces: _Pieces = []
        self._skip_pending = 0  # bytes already passed over, reported as one run when it ends
        self._skip_reason = RESYNC
        # The run's reassembly memory pool (kwsniff.memory): a partial frame's body bytes are charged
        # there while they wait for the rest of the frame.
        self._held = held if held is not None else [0]
        # A partial frame the capture did not keep whole: body bytes kept before its first hole
        # (-1: no hole), and the bytes of it not kept. Its pieces after the hole are held, not read.
        self._cut_at = -1
        self._cut_missing = 0
        if not synced:
            self._enter_resync(RESYNC)

    @property
    def buffered(self) -> int:
        """Bytes fed in that are not yet in a frame or a skip report."""
        return self._partial_bytes() + self._skip_pending + len(self._scan)

    @property
    def frame_bytes(self) -> int:
        """Bytes in frames, size prefixes included (every consumed byte not skipped was in a frame)."""
        return self.offset - self.skipped_bytes

    @property
    def synced(self) -> bool:
        return not self._resyncing

    # -- input ---------------------------------------------------------------------------------------
    def data(self, ts: int, chunk: memoryview | bytes) -> None:
        view = chunk if isinstance(chunk, memoryview) else memoryview(chunk)
        n = len(view)
        if 0 < n < self._need:
            # The middle of a frame that began in an earlier chunk (most packets of a large frame on
            # an MTU-sized link): keep the piece and wait for the rest. _need > 0 means in step.
            self._body.append(view)
            self._body_ts.append(ts)
            self._need -= n
            self._held[0] += n
            return
        if self._resyncing:
            self._scan_and_replay([(ts, view)])
            return
        rest = self._split(ts, view)
        if rest is not None:
            self._scan_and_replay([(ts, rest)])

    def gap(self, ts: int, nbytes: int) -> None:
        """The stream lost ``nbytes`` here: drop any partial frame and look for the next boundary."""
        # A loop: frames replayed after a damaged size may end in a partial frame of their own.
        while True:
            if self._resyncing:
                # Nothing will follow the bytes waiting for a verdict: a complete frame among them still counts.
                self._scan_and_replay([], final=True)
            if self._resyncing:
                self._drop_scan(len(self._scan))
                self._flush_skip()
                self._skip_reason = RESYNC
                return
            if not self.recover_damaged_size():
                self._drop_partial(GAP)
                self._enter_resync(RESYNC)
                return

    def uncaptured(self, ts: int, nbytes: int) -> None:
        """The stream carried ``nbytes`` here that the capture did not keep (the packet was longer on
        the wire than the snap length). Inside a frame's body the splitter stays in step: the frame
        ends where its size prefix says, and on_cut gets what was kept before the first hole. A hole
        over a size prefix loses step like any gap."""
        need = self._need
        if self._resyncing or need <= 0 or nbytes <= 0:
            self.gap(ts, nbytes)
            return
        if self._cut_at < 0:
            self._cut_at = self._size - need
        take = min(nbytes, need)
        self._cut_missing += take
        self._need = need - take
        if self._need == 0:
            self._end_cut_frame(ts)
        if nbytes > take:
            self.gap(ts, nbytes - take)  # the next frame's size prefix was not kept

    def _end_cut_frame(self, ts: int) -> None:
        """The partial frame with holes ends here (its last byte at ``ts``): one frame, cut."""
        kept = self._size - self._cut_missing  # body bytes captured, held as pieces
        self._held[0] -= kept
        head = self._cut_head()
        self._body = []
        self._body_ts = []
        self._need = -1
        self._cut_at = -1
        self._cut_missing = 0
        offset = self.offset
        self.offset = offset + 4 + kept
        self.frames += 1
        self.cut_frames += 1
        if self._on_cut is not None:
            self._on_cut(head, 4 + kept, 4 + self._size, self._ts_first, ts, offset, NOT_CAPTURED)

    def finish(self, ts: int) -> None:
        """End of stream: whatever is buffered is reported as skipped."""
        while True:
            if self._resyncing:
                self._scan_and_replay([], final=True)
            if self._resyncing:
                self._drop_scan(len(self._scan))  # fewer than 4 bytes: no frame can start there
                self._flush_skip()
                self._skip_reason = RESYNC
                return
            if not self.recover_damaged_size():
                self._drop_partial(TRUNCATED_AT_END)
                return

    def recover_damaged_size(
        self, proof: BoundaryCheck | None = None, after: tuple[int, memoryview] | None = None
    ) -> bool:
        """The partial frame's held bytes hold a chain of whole frames: its size prefix was damaged (a
        flipped byte made 67 bytes read as 65,347) and swallowed the frames after it. Skip the prefix
        and the bytes up to the chain (reason DAMAGED_SIZE) and replay the chain in step, each piece
        with its own timestamp, so the later frames still count.

        Called when a gap or the stream's end cuts the frame short (the chain must then be two frames
        long), or by the caller with ``proof``, a frame start the chain must hold (a request whose
        response the other direction already carries: one frame is then enough), or when a frame
        spread over chunks is complete but what follows it in the chunk is no frame start: ``after`` is
        that chunk's rest from the frame's remaining bytes on, judged and replayed with the frame."""
        if self._need < 0 or not self._body or self._boundary_ok is None or self._cut_at >= 0:
            return False
        if self._size - self._need > MAX_CHAIN_HELD:
            return False
        body, stamps = self._body, self._body_ts
        if after is not None:
            body, stamps = [*body, after[1]], [*stamps, after[0]]
        held = b"".join(body)  # one copy, only for a frame cut short or out of step
        base = self.offset + 4  # stream offset of held[0]

        def judge(view: memoryview, at: int) -> bool:
            self.candidate_offset = base + at
            return self._boundary_ok(view)  # type: ignore[misc]

        start = chain_start(held, self._min, self._max, judge, proof)
        if start is None:
            return False
        pieces = list(zip(stamps, body, strict=True))
        self._body = []
        self._body_ts = []
        self._need = -1
        self.damaged_sizes += 1
        self.resyncs += 1
        self._skip_pending = 4 + start
        self._skip_reason = DAMAGED_SIZE
        self._flush_skip()
        while start:
            ts, piece = pieces[0]
            if len(piece) <= start:
                start -= len(piece)
                del pieces[0]
            else:
                pieces[0] = (ts, piece[start:])
                start = 0
        for i, (ts, piece) in enumerate(pieces):
            rest = self._split(ts, piece)
            if rest is not None:
                self._scan_and_replay([(ts, rest), *pieces[i + 1 :]])
                break
        return True

    # -- in step -------------------------------------------------------------------------------------
    def _split(self, ts: int, view: memoryview) -> memoryview | None:
        """Cut frames from ``view``; returns the bytes to scan if an impossible size lost step."""
        n = len(view)
        pos = 0
        if self._prefix:
            pos = self._take_prefix(view)
            if self._resyncing:
                return view[pos:]
        offset = self.offset
        frames = 0
        need = self._need
        if need >= 0:
            # The rest of a frame that began in an earlier chunk.
            left = n - pos
            if left < need:
                if left:
                    self._body.append(view[pos:])
                    self._body_ts.append(ts)
                    self._held[0] += left
                self._need = need - left
                return None
            if self._cut_at >= 0:
                # The end of a frame the capture kept with holes: its size prefix still holds.
                self._body.append(view[pos : pos + need])
                self._body_ts.append(ts)
                self._held[0] += need
                self._need = 0
                self._end_cut_frame(ts)
                offset = self.offset
                pos += need
                need = -1
        if need >= 0:
            self._held[0] -= self._size - need  # the body held so far (every piece was charged)
            body = self._body
            if (
                body
                and n - pos - need >= 4
                and not self._next_is_frame(view[pos + need :])
                and self.recover_damaged_size(after=(ts, view[pos:]))
            ):
                # A frame spread over chunks ended where no frame starts, and its bytes held whole
                # frames: its size was damaged. They were replayed to the chunk's end; if that lost
                # step, the caller's next chunks join the scan.
                return view[n:] if self._resyncing else None
            frame: bytes | memoryview
            if body:
                body.append(view[pos : pos + need])
                frame = b"".join(body)  # the one copy of a frame that spans chunks
                self._body = []
                self._body_ts = []
            else:
                frame = view[pos : pos + need]  # only the size prefix was split: still one chunk
            self._need = -1
            self._on_frame(frame, self._ts_first, ts, offset)
            offset += 4 + self._size
            frames = 1
            pos += need
        lo, hi = self._min, self._max
        unpack = _SIZE.unpack_from
        on_frame = self._on_frame
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
                self._size = size
                self._need = end - n
                if left > 4:
                    self._body.append(view[pos + 4 :])
                    self._body_ts.append(ts)
                    self._held[0] += left - 4
                break
            on_frame(view[pos + 4 : end], ts, ts, offset)
            offset += 4 + size
            frames += 1
            pos = end
        self.frames += frames
        self.offset = offset
        if rest is not None:
            self._lose_step()
        return rest

    def _next_is_frame(self, view: memoryview) -> bool:
        """Whether the bytes after a frame (at least a size prefix) may start the next one."""
        (size,) = _SIZE.unpack_from(view, 0)
        if not self._min <= size <= self._max:
            return False
        if self._boundary_ok is None or len(view) - 4 < min(size, BOUNDARY_LOOKAHEAD):
            return True  # too little to judge: trust the stream, as in step
        self.candidate_offset = self.offset + 4 + self._size
        return self._boundary_ok(view)

    def _take_prefix(self, view: memoryview) -> int:
        """Complete a size prefix split across chunks; returns how many bytes of ``view`` it took."""
        need = 4 - len(self._prefix)
        if len(view) < need:
            self._prefix += view.tobytes()
            return len(view)
        (size,) = _SIZE.unpack(self._prefix + view[:need].tobytes())
        self._prefix = b""
        if size < self._min or size > self._max:
            self._lose_step()
        else:
            self._size = size
            self._need = size
        return need

    def _partial_bytes(self) -> int:
        need = self._need
        return len(self._prefix) + (4 + self._size - need - self._cut_missing if need >= 0 else 0)

    def _drop_partial(self, reason: str) -> None:
        nbytes = self._partial_bytes()
        in_frame = self._need >= 0
        if in_frame:
            self._held[0] -= self._size - self._need - self._cut_missing
            self.cut_frames += 1
            if self._on_cut is not None:
                ts = self._ts_first
                self._on_cut(self._cut_head(), nbytes, 4 + self._size, ts, ts, self.offset, reason)
        self._prefix = b""
        self._body = []
        self._body_ts = []
        self._need = -1
        self._cut_at = -1
        self._cut_missing = 0
        if in_frame and reason == TRUNCATED_AT_END:
            # The stream ended inside a frame: its bytes were a frame, cut by the capture's edge, not
            # bytes passed over.
            self.offset += nbytes
            self.cut_frame_bytes += nbytes
        elif nbytes:
            self._skip_pending = nbytes
            self._skip_reason = reason
            self._flush_skip()

    def _cut_head(self) -> bytes:
        """The frame's first bytes after its size prefix, up to CUT_HEAD and its first hole."""
        # A frame kept with holes gives all it kept before the first (its body is read that far).
        limit = CUT_HEAD if self._cut_at < 0 else self._cut_at
        head = bytearray()
        for piece in self._body:
            head += piece[: limit - len(head)]
            if len(head) >= limit:
                break
        return bytes(head)

    def _lose_step(self) -> None:
        # The 4 bytes of the impossible size at self.offset are skipped; scanning starts after them.
        self.oversize += 1
        self._enter_resync(OVERSIZE)
        self._skip_pending = 4

    def _enter_resync(self, reason: str) -> None:
        self.resyncs += 1
        self._resyncing = True
        self._skip_reason = reason

    @property
    def min_frame_size(self) -> int:
        """Smallest size prefix accepted in step. The caller may lower it for a stretch of the stream
        whose frames are not Kafka messages (SASL tokens after a SaslHandshake v0 may be empty)."""
        return self._min

    @min_frame_size.setter
    def min_frame_size(self, value: int) -> None:
        self._min = value

    # -- out of step ---------------------------------------------------------------------------------
    def _scan_extend(self, pieces: _Pieces) -> None:
        for ts, piece in pieces:
            if len(piece):
                self._scan_pieces.append((ts, piece))
                self._scan += piece.tobytes()

    def _scan_and_replay(self, work: _Pieces, final: bool = False) -> None:
        """Scan for a boundary; once in step, replay the pieces after it, which may lose step again.

        A loop, not recursion, so garbage full of false starts cannot exhaust the stack.
        """
        while True:
            self._scan_extend(work)
            work = self._find_boundary(final)
            for i, (piece_ts, piece) in enumerate(work):
                rest = self._split(piece_ts, piece)
                if rest is not None:
                    work = [(piece_ts, rest), *work[i + 1 :]]
                    break
            else:
                return

    def _find_boundary(self, final: bool) -> _Pieces:
        """Scan for a frame start; if found, return the pieces from it on and be in step again.

        ``final``: no more bytes will follow, so a position is judged on the bytes there are instead of
        waited on (a false start near the end must not hide a short frame after it).
        """
        buf = self._scan
        whole = memoryview(buf)  # bytes, not bytearray: a view the caller keeps cannot pin a resize
        n = len(buf)
        lo, hi, ok = self._min, self._max, self._boundary_ok
        search = self._candidate.search
        unpack = _SIZE.unpack_from
        base = self.offset + self._skip_pending  # stream offset of buf[0]
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
                # With no more bytes coming (a gap or the end follows), the check judges what there is:
                # after a snaplen cut, the frame's first bytes are all any packet will ever show.
                left = n - p - 4
                if left >= min(size, BOUNDARY_LOOKAHEAD) or (
                    final and ok is not None and left >= min(size, BOUNDARY_MINIMUM)
                ):
                    self.candidate_offset = base + p
                    if ok is None or ok(whole[p:]):
                        found = True
                        break
                else:
                    break  # too few bytes to judge this position yet: wait for more
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
