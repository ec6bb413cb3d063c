"""Reassembly of one direction of one TCP connection into an in-order byte stream (no I/O).

Bytes come out through ``on_data(ts, chunk)`` in stream order, exactly once; bytes the capture never
saw come out through ``on_gap(ts, nbytes, reason)``, so every sequence number of the stream is
accounted for by one of the two callbacks.

Sequence numbers are 32-bit and wrap (RFC 9293 section 3.4). Internally a position in the stream is
an unbounded "stream offset": bytes delivered plus gap bytes since the stream start. A segment's
offset is found from the signed 32-bit distance of its sequence number to ``next_seq``, so wrap-around
never needs special cases and the out-of-order buffer can be a plain heap of offsets.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush

_SEQ_MASK = 0xFFFFFFFF
_HALF = 1 << 31
_WRAP = 1 << 32

LOST_SEGMENT = "lost_segment"
OOO_OVERFLOW = "ooo_overflow"
SNAPLEN = "snaplen"
# A zero-byte gap: the sequence numbers jumped further than any window allows with no acknowledgement
# proving the bytes between were sent (or a SYN came with a new ISN): a new connection on a reused
# port whose FIN/RST the capture lost, or a sequence number damaged. The bytes between are not
# counted as lost; the stream restarts at the new sequence number.
IMPLAUSIBLE_GAP = "implausible_gap"
# The most bytes a sender can have in flight: a receive window (RFC 7323 allows up to 1 GiB, but
# Linux's largest default tcp_rmem is 6 MiB and tuned hosts stay far below 64 MiB). A hole larger
# than this in one step is not a loss sequence numbers can prove: a capture that lost more than a
# window at once shows an implausible gap, not gap bytes.
MAX_WINDOW = 64 * 1024 * 1024

DataCallback = Callable[[int, memoryview | bytes], None]
GapCallback = Callable[[int, int, str], None]


def seq_distance(a: int, b: int) -> int:
    """Signed distance from sequence number b to a, modulo 2**32 (RFC 1982 serial arithmetic)."""
    return (a - b + _HALF) % _WRAP - _HALF


class TcpReassembler:
    """One direction of one TCP connection: segments in any order in, stream bytes in order out.

    ``on_data`` and ``on_gap`` are public attributes, so a caller that learns late which side is
    which (mid-connection captures) can rewire them. Out-of-order payloads are kept as the caller's
    views until delivered, so their memory must not be reused meanwhile.
    """

    __slots__ = (
        "on_data",
        "on_gap",
        "max_ooo_bytes",
        "max_ooo_segments",
        "next_seq",
        "bytes_delivered",
        "bytes_duplicate",
        "gaps",
        "gap_bytes",
        "ooo_overflows",
        "segments",
        "segments_out_of_order",
        "_ooo",
        "_ooo_heap",
        "_ooo_bytes",
        "_fin_offset",
        "_last_ack",
        "_syn_seq",
        "implausible_gaps",
        "_held",
    )

    def __init__(
        self,
        on_data: DataCallback,
        on_gap: GapCallback,
        max_ooo_bytes: int = 8 * 1024 * 1024,
        max_ooo_segments: int = 4096,
        held: list[int] | None = None,
    ) -> None:
        self.on_data = on_data
        self.on_gap = on_gap
        self.max_ooo_bytes = max_ooo_bytes
        self.max_ooo_segments = max_ooo_segments
        self.next_seq: int | None = None
        self.bytes_delivered = 0
        self.bytes_duplicate = 0
        self.gaps = 0
        self.gap_bytes = 0
        self.ooo_overflows = 0
        self.segments = 0
        self.segments_out_of_order = 0
        # Out-of-order segments by stream offset: (ts, captured payload, bytes missing after it).
        self._ooo: dict[int, tuple[int, memoryview | bytes, int]] = {}
        self._ooo_heap: list[int] = []
        self._ooo_bytes = 0
        self._fin_offset: int | None = None
        self._last_ack: int | None = None  # the peer's latest acknowledgement of this direction
        self._syn_seq: int | None = None
        self.implausible_gaps = 0  # restarts: sequence jumps no window or acknowledgement explains
        # The run's reassembly memory pool (kwsniff.memory): bytes held out of order are charged there.
        self._held = held if held is not None else [0]

    @property
    def buffered_bytes(self) -> int:
        """Captured bytes held back waiting for a hole to fill."""
        return self._ooo_bytes

    def syn(self, seq: int, ts: int = 0) -> None:
        # The SYN itself consumes one sequence number; data starts right after it.
        if seq == self._syn_seq:
            return  # a retransmitted SYN
        if self.next_seq is not None:
            # A SYN with another ISN on a stream already under way: a new connection on the same
            # ports (the old one's FIN or RST was not captured).
            self._restart(ts, (seq + 1) & _SEQ_MASK)
        self._syn_seq = seq
        self.next_seq = (seq + 1) & _SEQ_MASK

    def segment(self, ts: int, seq: int, payload: memoryview | bytes, missing: int = 0) -> None:
        n = len(payload)
        if seq == self.next_seq and not missing and not self._ooo and n:
            # Hot path: the next bytes, nothing waiting. Hand the caller's view on untouched.
            self.segments += 1
            self.next_seq = (seq + n) & _SEQ_MASK
            self.bytes_delivered += n
            self.on_data(ts, payload)
            return
        if n or missing:
            self.segments += 1
            self._segment(ts, seq, payload, missing)

    def _segment(self, ts: int, seq: int, payload: memoryview | bytes, missing: int) -> None:
        next_seq = self.next_seq
        if next_seq is None:
            # Capture began mid-connection: the first data we see defines the stream start.
            self.next_seq = next_seq = seq
        here = self._next_offset()
        start = here + seq_distance(seq, next_seq)
        if abs(start - here) > MAX_WINDOW:
            # An acknowledgement cannot prove such a hole either: the peer's own acknowledgements
            # move by at most a window at a time, so one that jumps as far belongs to the new stream.
            self._restart(ts, seq)
            here = start = self._next_offset()
        if start > here:
            self._buffer(ts, start, payload, missing)
            return
        self._deliver_from(ts, start, payload, missing)
        if self._ooo:
            self._drain()

    def peer_ack(self, ts: int, ack: int) -> None:
        self._last_ack = ack
        if not self._ooo:
            return
        # The peer acknowledged bytes we never saw while later bytes wait in the buffer: the capture
        # lost them (the peer did not), so they will never be retransmitted. Declare them gone.
        here = self._next_offset()
        acked = here + seq_distance(ack, self.next_seq)  # type: ignore[arg-type]
        if acked - here > MAX_WINDOW:
            return  # no evidence: an acknowledgement from another connection on the same ports
        heap = self._ooo_heap
        while heap and acked > here:
            self._declare_gap(ts, min(acked, heap[0]) - here, LOST_SEGMENT)
            self._drain()
            here = self._next_offset()

    def fin(self, ts: int, seq: int) -> None:
        if self.next_seq is None:
            return
        self._fin_offset = self._next_offset() + seq_distance(seq, self.next_seq)

    def flush(self, ts: int) -> None:
        heap = self._ooo_heap
        while heap:
            self._declare_gap(ts, heap[0] - self._next_offset(), LOST_SEGMENT)
            self._drain()
        # Bytes before a FIN that never showed up (not even out of order) were lost too.
        if self._fin_offset is not None:
            missing = self._fin_offset - self._next_offset()
            if missing > 0:
                self._declare_gap(ts, missing, LOST_SEGMENT)
        elif self._last_ack is not None and self.next_seq is not None:
            # The peer acknowledged bytes the capture never saw, with nothing after them to show
            # the hole (the end of a response, then silence): they were sent and received, so they
            # are a gap. Checked only at the end, as a capture may show an ACK before its data. One
            # sequence number past the data is a FIN the capture did not show, not a byte.
            missing = seq_distance(self._last_ack, self.next_seq)
            if 1 < missing <= MAX_WINDOW:
                self._declare_gap(ts, missing, LOST_SEGMENT)
            elif missing > MAX_WINDOW:
                self.implausible_gaps += 1  # an acknowledgement no window explains: not a loss

    # -- internals ---------------------------------------------------------------------------------
    def _restart(self, ts: int, seq: int) -> None:
        """Start the stream afresh at ``seq``: what waits in the buffer is delivered (with the holes
        before it, which the buffer proves), the jump is counted, not declared as lost bytes."""
        heap = self._ooo_heap
        while heap:
            self._declare_gap(ts, heap[0] - self._next_offset(), LOST_SEGMENT)
            self._drain()
        self.implausible_gaps += 1
        self.next_seq = seq
        self._last_ack = None
        self._fin_offset = None
        self.on_gap(ts, 0, IMPLAUSIBLE_GAP)  # the frame splitter must look for a boundary again

    def _next_offset(self) -> int:
        # Every byte before next_seq was either delivered or declared a gap, so their sum is the
        # stream offset of next_seq; this keeps the hot path free of a second position counter.
        return self.bytes_delivered + self.gap_bytes

    def _buffer(self, ts: int, start: int, payload: memoryview | bytes, missing: int) -> None:
        self.segments_out_of_order += 1
        ooo = self._ooo
        old = ooo.get(start)
        n = len(payload)
        if old is not None:
            # Same start twice (a retransmission of a segment still waiting): keep the longer one.
            old_n = len(old[1])
            if old_n + old[2] >= n + missing:
                self.bytes_duplicate += n + missing
                return
            self.bytes_duplicate += old_n + old[2]
            self._ooo_bytes -= old_n
            self._held[0] -= old_n
        else:
            heappush(self._ooo_heap, start)
        ooo[start] = (ts, payload, missing)
        self._ooo_bytes += n
        self._held[0] += n
        while self._ooo and (self._ooo_bytes > self.max_ooo_bytes or len(self._ooo) > self.max_ooo_segments):
            # Bounded memory (DESIGN rule 3): give up on the oldest hole rather than grow.
            self.ooo_overflows += 1
            self._declare_gap(ts, self._ooo_heap[0] - self._next_offset(), OOO_OVERFLOW)
            self._drain()

    def _drain(self) -> None:
        """Deliver buffered segments that now start at or before next_seq, in stream order."""
        heap, ooo = self._ooo_heap, self._ooo
        while heap and heap[0] <= self._next_offset():
            start = heappop(heap)
            ts, payload, missing = ooo.pop(start)
            self._ooo_bytes -= len(payload)
            self._held[0] -= len(payload)
            self._deliver_from(ts, start, payload, missing)

    def _deliver_from(self, ts: int, start: int, payload: memoryview | bytes, missing: int) -> None:
        """Deliver the part of a segment at stream offset ``start`` (<= next) that is new."""
        overlap = self._next_offset() - start
        if overlap > 0:
            n = len(payload)
            if overlap >= n + missing:
                # Entirely old: a retransmission or a keep-alive probe (one byte at next_seq - 1).
                self.bytes_duplicate += n + missing
                return
            self.bytes_duplicate += overlap
            if overlap <= n:
                payload = memoryview(payload)[overlap:]
            else:
                missing -= overlap - n
                payload = b""
        n = len(payload)
        self.next_seq = (self.next_seq + n + missing) & _SEQ_MASK  # type: ignore[operator]
        if n:
            self.bytes_delivered += n
            self.on_data(ts, payload)
        if missing:
            # The packet was longer on the wire than the capture's snaplen kept.
            self.gaps += 1
            self.gap_bytes += missing
            self.on_gap(ts, missing, SNAPLEN)

    def _declare_gap(self, ts: int, nbytes: int, reason: str) -> None:
        if nbytes <= 0:
            return
        self.gaps += 1
        self.gap_bytes += nbytes
        self.next_seq = (self.next_seq + nbytes) & _SEQ_MASK  # type: ignore[operator]
        self.on_gap(ts, nbytes, reason)
