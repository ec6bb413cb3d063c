"""FrameSplitter: Kafka's int32 size-prefixed frames out of a byte stream, alone and behind TcpReassembler."""

from __future__ import annotations

import json
import random
import re
import struct
from pathlib import Path

import dpkt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kwsniff.kafka.framing import GAP, OVERSIZE, RESYNC, TRUNCATED_AT_END, FrameSplitter
from kwsniff.tcp import LOST_SEGMENT, OOO_OVERFLOW, TcpReassembler


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def body(i: int, size: int) -> bytes:
    """A recognisable frame body: a Kafka-like api key 0..9 and a marker, padded to size."""
    head = struct.pack(">hhi", i % 10, 1, 0x5A5A0000 + i)
    return (head + bytes((i + k) % 251 for k in range(size)))[:size]


BODIES = [body(i, size) for i, size in enumerate([8, 20, 300, 9, 1500, 64, 65, 8, 4000, 12])]
STREAM = b"".join(frame(b) for b in BODIES)
OFFSETS = [sum(4 + len(b) for b in BODIES[:i]) for i in range(len(BODIES))]


def looks_like_test_frame(view: memoryview) -> bool:
    # What a caller's boundary check does: the bytes after the size must look like a header.
    return len(view) >= 12 and view[4] == 0 and view[5] < 10 and view[8:10] == b"\x5a\x5a"


class Splitter:
    """A FrameSplitter wired to lists."""

    def __init__(self, **options: object) -> None:
        self.frames: list[tuple[bytes | memoryview, int, int, int]] = []
        self.skips: list[tuple[int, int, str]] = []
        self.cuts: list[tuple[int, int, str]] = []  # frames cut short: (bytes seen, offset, reason)
        self.fed = 0
        options.setdefault("on_cut", self._cut)
        self.s = FrameSplitter(self._frame, self._skip, **options)  # type: ignore[arg-type]

    def _cut(
        self, head: bytes, got: int, size: int, ts_first: int, ts_last: int, offset: int, reason: str
    ) -> None:
        self.cuts.append((got, offset, reason))

    def _frame(self, data: bytes | memoryview, ts_first: int, ts_last: int, offset: int) -> None:
        self.frames.append((data, ts_first, ts_last, offset))

    def _skip(self, nbytes: int, offset: int, reason: str) -> None:
        self.skips.append((nbytes, offset, reason))

    def data(self, ts: int, chunk: bytes | memoryview) -> None:
        self.fed += len(chunk)
        self.s.data(ts, chunk)

    @property
    def bodies(self) -> list[bytes]:
        return [bytes(f[0]) for f in self.frames]

    def assert_every_byte_accounted_for(self) -> None:
        s = self.s
        assert s.frame_bytes + s.skipped_bytes + s.buffered == self.fed
        assert s.frame_bytes == sum(4 + len(f[0]) for f in self.frames) + s.cut_frame_bytes
        assert s.skipped_bytes == sum(n for n, _, _ in self.skips)
        assert s.offset == s.frame_bytes + s.skipped_bytes


# -- in step ------------------------------------------------------------------------------------------
def test_whole_stream_gives_every_frame_as_a_view_of_the_chunk() -> None:
    sp = Splitter()
    sp.data(5, STREAM)
    assert sp.bodies == BODIES
    assert [f[3] for f in sp.frames] == OFFSETS
    assert all(isinstance(f[0], memoryview) and f[0].obj is STREAM for f in sp.frames)
    assert all((f[1], f[2]) == (5, 5) for f in sp.frames)
    assert (sp.s.frames, sp.s.frame_bytes, sp.s.offset) == (10, len(STREAM), len(STREAM))
    assert sp.skips == []
    sp.assert_every_byte_accounted_for()


def test_one_byte_at_a_time_gives_the_same_frames_with_first_and_last_timestamps() -> None:
    sp = Splitter()
    for i in range(len(STREAM)):
        sp.data(i, STREAM[i : i + 1])
        sp.assert_every_byte_accounted_for()
    assert sp.bodies == BODIES
    assert [f[3] for f in sp.frames] == OFFSETS
    # ts_first is the chunk of the size prefix's first byte, ts_last the chunk of the body's last byte.
    assert [(f[1], f[2]) for f in sp.frames] == [
        (o, o + 3 + len(b)) for o, b in zip(OFFSETS, BODIES, strict=True)
    ]
    assert all(isinstance(f[0], bytes) for f in sp.frames)
    assert sp.s.buffered == 0


def test_frame_whose_prefix_alone_is_split_stays_a_view() -> None:
    sp = Splitter()
    raw = frame(BODIES[2])
    sp.data(1, raw[:2])
    sp.data(2, raw[2:])
    assert sp.bodies == [BODIES[2]]
    assert isinstance(sp.frames[0][0], memoryview)
    assert sp.frames[0][1:] == (1, 2, 0)


def test_frame_over_many_chunks_is_joined_once_into_bytes() -> None:
    sp = Splitter()
    big = body(3, 100_000)
    raw = frame(big) + frame(BODIES[0])
    for i in range(0, len(raw), 1448):
        sp.data(i, raw[i : i + 1448])
    assert sp.bodies == [big, BODIES[0]]
    assert isinstance(sp.frames[0][0], bytes)
    assert sp.frames[0][1:] == (0, 100_003 // 1448 * 1448, 0)
    assert sp.frames[1][3] == 100_004


def test_size_above_the_maximum_loses_step_and_skips_its_prefix_as_oversize() -> None:
    sp = Splitter(max_frame_size=5000)
    bad = struct.pack(">i", 6000) + b"\x7f" * 10
    sp.data(1, frame(BODIES[0]) + bad + STREAM)
    assert sp.s.oversize == 1
    assert sp.s.resyncs == 1
    # The impossible size, then the 10 bytes after it: all bytes scanned are one "oversize" run.
    assert sp.skips == [(14, 12, OVERSIZE)]
    assert sp.bodies == [BODIES[0], *BODIES]
    assert sp.frames[1][3] == 12 + 14
    assert sp.s.synced
    sp.assert_every_byte_accounted_for()


def test_size_below_the_minimum_and_negative_sizes_are_oversize() -> None:
    sp = Splitter(min_frame_size=8)
    sp.data(1, struct.pack(">i", 3) + STREAM)
    sp.data(2, struct.pack(">i", -1) + STREAM)
    assert sp.s.oversize == 2
    assert sp.skips == [(4, 0, OVERSIZE), (4, 4 + len(STREAM), OVERSIZE)]
    assert sp.bodies == BODIES + BODIES


def test_impossible_size_split_across_chunks_is_oversize() -> None:
    sp = Splitter(boundary_ok=looks_like_test_frame)
    sp.data(1, b"\xff\xff")
    sp.data(2, b"\xff\xff" + STREAM)
    assert sp.skips == [(4, 0, OVERSIZE)]
    assert sp.bodies == BODIES


def test_gap_drops_the_partial_frame_and_the_next_frames_are_found_again() -> None:
    sp = Splitter(boundary_ok=looks_like_test_frame)
    cut = OFFSETS[2] + 100  # inside the 300-byte frame
    sp.data(1, STREAM[:cut])
    sp.s.gap(2, 1000)
    sp.data(3, STREAM[cut + 1000 :])  # resumes inside the 1500-byte frame (BODIES[4])
    sp.s.finish(4)
    resume = cut + 1000
    assert sp.bodies == [*BODIES[:2], *BODIES[5:]]
    assert sp.skips == [
        (100, OFFSETS[2], GAP),
        (OFFSETS[5] - resume, cut, RESYNC),
    ]
    assert sp.frames[2][1:] == (3, 3, cut + OFFSETS[5] - resume)
    assert (sp.s.resyncs, sp.s.oversize) == (1, 0)
    sp.assert_every_byte_accounted_for()


def test_gap_at_a_frame_boundary_skips_nothing() -> None:
    sp = Splitter(boundary_ok=looks_like_test_frame)
    sp.data(1, STREAM[: OFFSETS[3]])
    sp.s.gap(2, OFFSETS[5] - OFFSETS[3])
    sp.data(3, STREAM[OFFSETS[5] :])
    assert sp.bodies == BODIES[:3] + BODIES[5:]
    assert sp.skips == []
    assert sp.s.resyncs == 1
    assert [f[3] for f in sp.frames[3:]] == [OFFSETS[3] + o - OFFSETS[5] for o in OFFSETS[5:]]


def test_partial_frame_at_end_of_stream_is_a_cut_frame_not_skipped_bytes() -> None:
    sp = Splitter()
    sp.data(1, STREAM[: OFFSETS[4] + 50])
    sp.s.finish(2)
    assert sp.bodies == BODIES[:4]
    assert sp.skips == []
    assert (sp.s.cut_frames, sp.s.cut_frame_bytes, sp.s.skipped_bytes) == (1, 50, 0)
    assert sp.s.buffered == 0
    sp.assert_every_byte_accounted_for()


def test_partial_size_prefix_at_end_of_stream_is_truncated_at_end() -> None:
    sp = Splitter()
    sp.data(1, STREAM[: OFFSETS[1] + 3])
    sp.s.finish(2)
    assert sp.skips == [(3, OFFSETS[1], TRUNCATED_AT_END)]


# -- out of step --------------------------------------------------------------------------------------
def test_unsynced_start_at_a_frame_boundary_skips_nothing() -> None:
    sp = Splitter(synced=False, boundary_ok=looks_like_test_frame)
    sp.data(1, STREAM)
    assert sp.bodies == BODIES
    assert sp.skips == []
    assert sp.s.resyncs == 1
    assert all(isinstance(f[0], memoryview) and f[0].obj is STREAM for f in sp.frames)


def test_unsynced_start_mid_frame_scans_to_the_next_confirmed_boundary() -> None:
    sp = Splitter(synced=False, boundary_ok=looks_like_test_frame)
    start = OFFSETS[4] + 700  # inside the 1500-byte frame
    for i in range(start, len(STREAM), 100):
        sp.data(i, STREAM[i : i + 100])
    assert sp.bodies == BODIES[5:]
    assert sp.skips == [(OFFSETS[5] - start, 0, RESYNC)]

    def chunk_ts(stream_offset: int) -> int:
        return start + (stream_offset - start) // 100 * 100

    assert sp.frames[0][1:] == (chunk_ts(OFFSETS[5]), chunk_ts(OFFSETS[6] - 1), OFFSETS[5] - start)
    sp.assert_every_byte_accounted_for()


def test_resync_waits_for_enough_bytes_to_ask_the_boundary_check() -> None:
    seen: list[int] = []

    def check(view: memoryview) -> bool:
        seen.append(len(view))
        return looks_like_test_frame(view)

    sp = Splitter(synced=False, boundary_ok=check)
    raw = frame(BODIES[2])  # 300-byte body: the check needs 4 + 64 bytes
    sp.data(1, raw[:40])
    assert seen == []
    assert sp.s.buffered == 40
    sp.data(2, raw[40:80])
    assert seen == [80]
    assert sp.bodies == []
    sp.data(3, raw[80:])
    assert sp.bodies == [BODIES[2]]
    assert sp.frames[0][1:] == (1, 3, 0)


def test_boundary_check_can_read_the_stream_offset_of_the_position_it_judges() -> None:
    judged: list[int] = []
    sp = Splitter(synced=False)

    def check(view: memoryview) -> bool:
        judged.append(sp.s.candidate_offset)
        return sp.s.candidate_offset == 0 or looks_like_test_frame(view)

    sp.s = FrameSplitter(sp._frame, sp._skip, boundary_ok=check, synced=False)
    sp.data(1, b"\x00\x00\x00\x04abcd")  # accepted only because it is where the stream starts
    sp.s.gap(2, 10)
    sp.data(3, b"\xee" * 4 + STREAM[: OFFSETS[2]])
    assert judged == [0, 12]
    assert sp.bodies == [b"abcd", BODIES[0], BODIES[1]]
    assert sp.skips == [(4, 8, RESYNC)]


def test_short_frame_is_checked_with_the_whole_frame_only() -> None:
    seen: list[bytes] = []

    def check(view: memoryview) -> bool:
        seen.append(bytes(view))
        return True

    sp = Splitter(synced=False, boundary_ok=check)
    sp.data(1, frame(BODIES[0]))
    assert seen == [frame(BODIES[0])]
    assert sp.bodies == [BODIES[0]]


def test_without_a_boundary_check_any_size_in_range_is_accepted() -> None:
    sp = Splitter(synced=False, max_frame_size=16)
    sp.data(1, b"\x20\x00\x00\x00\x00\x00\x00\x06abcdef")
    assert sp.skips == [(4, 0, RESYNC)]
    assert sp.bodies == [b"abcdef"]


def test_frame_start_short_of_the_lookahead_at_end_of_stream_is_judged_on_what_is_there() -> None:
    sp = Splitter(synced=False, boundary_ok=looks_like_test_frame)
    sp.data(1, b"\xee" * 10 + frame(BODIES[2])[:30])  # 30 bytes of a 300-byte frame, fewer than 68
    sp.s.finish(2)
    # No more bytes will come, so the 30 are judged as they are: a frame start, cut by the end.
    assert sp.skips == [(10, 0, RESYNC)]
    assert (sp.s.buffered, sp.s.cut_frames, sp.s.cut_frame_bytes) == (0, 1, 30)
    sp.assert_every_byte_accounted_for()


def test_frame_found_by_resync_and_cut_by_the_end_of_stream_is_a_cut_frame() -> None:
    sp = Splitter(synced=False, boundary_ok=looks_like_test_frame)
    sp.data(1, b"\xee" * 10 + frame(BODIES[2])[:80])
    sp.s.finish(2)
    assert sp.skips == [(10, 0, RESYNC)]
    assert sp.s.cut_frame_bytes == 80
    sp.assert_every_byte_accounted_for()


def test_gap_while_scanning_ends_the_skip_run_and_scanning_goes_on() -> None:
    sp = Splitter(synced=False, boundary_ok=looks_like_test_frame)
    sp.data(1, b"\xee" * 10 + frame(BODIES[2])[:30])
    sp.s.gap(2, 500)
    sp.data(3, b"\xdd" * 7 + STREAM)
    # The 30 bytes before the gap are judged without waiting (a snaplen cut looks like this): a frame
    # start whose body the gap cut, skipped as such; then scanning goes on after the gap.
    assert sp.skips == [(10, 0, RESYNC), (30, 10, GAP), (7, 40, RESYNC)]
    assert sp.bodies == BODIES
    assert (sp.s.resyncs, sp.s.cut_frames) == (2, 1)
    sp.assert_every_byte_accounted_for()


def test_gap_while_scanning_judges_the_bytes_before_it_without_waiting() -> None:
    sp = Splitter(synced=False, boundary_ok=looks_like_test_frame)
    sp.data(1, b"\x00\x00\x01" + frame(BODIES[0]))  # 00 00 01 00 reads as size 256: waits for 68 bytes
    assert sp.bodies == []
    sp.s.gap(2, 500)
    sp.data(3, STREAM[OFFSETS[1] :])
    assert sp.bodies == BODIES
    assert sp.skips == [(3, 0, RESYNC)]
    assert sp.s.resyncs == 2


def test_gap_while_scanning_garbage_ends_the_skip_run() -> None:
    sp = Splitter(synced=False, boundary_ok=looks_like_test_frame)
    sp.data(1, b"\xee" * 10 + b"\x00\x00\x01")
    sp.s.gap(2, 500)
    sp.data(3, STREAM)
    assert sp.skips == [(13, 0, RESYNC)]
    assert sp.bodies == BODIES
    assert sp.s.resyncs == 1


def test_false_start_waiting_for_look_ahead_does_not_hide_a_short_frame_at_the_end() -> None:
    # Mid-stream capture of two 10-byte responses: bytes 1..4 read as size 2560, which needs 68 bytes
    # to judge; the stream ends first, so the end judges every position with the bytes there are.
    sp = Splitter(synced=False, boundary_ok=lambda v: len(v) >= 8 and v[4:8] == b"\x00\x00\x00\x2a")
    sp.data(1, bytes.fromhex("0000000a00000029000000000000"))
    sp.data(2, bytes.fromhex("0000000a0000002a000000000000"))
    assert (sp.s.frames, sp.s.buffered) == (0, 28)
    sp.s.finish(3)
    assert sp.skips == [(14, 0, RESYNC)]
    assert sp.bodies == [bytes.fromhex("0000002a000000000000")]
    assert sp.frames[0][1:] == (2, 2, 14)


def test_scan_buffer_over_its_cap_drops_its_oldest_bytes() -> None:
    sp = Splitter(synced=False, boundary_ok=looks_like_test_frame, max_resync_scan=16)
    sp.data(1, frame(BODIES[2])[:40])  # a candidate that needs 68 bytes to judge
    assert sp.s.buffered == 40
    assert sp.s.skipped_bytes == 0  # the run is reported when it ends
    sp.data(2, STREAM)
    assert sp.skips == [(40, 0, RESYNC)]
    assert sp.bodies == BODIES


def test_garbage_full_of_false_starts_is_handled_without_recursion() -> None:
    sp = Splitter(max_frame_size=8)
    unit = frame(b"abcd") + b"\xff\xff\xff\xff"
    sp.data(1, unit * 20_000)
    assert sp.s.frames == 20_000
    assert sp.s.oversize == 20_000
    # The last impossible size starts a skip run that is still open: reported when the run ends.
    assert (sp.s.skipped_bytes, sp.s.buffered) == (79_996, 4)
    sp.assert_every_byte_accounted_for()
    sp.s.finish(2)
    assert sp.s.skipped_bytes == 80_000
    assert sp.skips[-1] == (4, 239_996, OVERSIZE)
    sp.assert_every_byte_accounted_for()


def test_counters_after_a_mixed_stream() -> None:
    sp = Splitter(boundary_ok=looks_like_test_frame, max_frame_size=5000)
    sp.data(1, STREAM[: OFFSETS[3]])  # frames 0..2
    sp.data(2, struct.pack(">i", 99_999) + b"\x01\x02")  # oversize: 6 bytes skipped
    sp.data(3, STREAM[OFFSETS[3] : OFFSETS[4] + 10])  # frame 3, 10 bytes of frame 4
    sp.s.gap(4, 77)  # 10 bytes dropped
    sp.data(5, STREAM[OFFSETS[6] - 5 :])  # 5 bytes scanned over, frames 6..9
    sp.s.finish(6)
    s = sp.s
    assert (s.frames, s.oversize, s.resyncs) == (8, 1, 2)
    assert s.frame_bytes == len(STREAM) - (OFFSETS[6] - OFFSETS[4])
    assert sp.skips == [
        (6, OFFSETS[3], OVERSIZE),
        (10, OFFSETS[4] + 6, GAP),
        (5, OFFSETS[4] + 16, RESYNC),
    ]
    assert s.skipped_bytes == 21
    assert s.offset == sp.fed
    sp.assert_every_byte_accounted_for()


# -- behind the reassembler ---------------------------------------------------------------------------
class Pipeline:
    """TcpReassembler feeding a FrameSplitter, as the session wires them."""

    def __init__(self, synced: bool = True, **caps: int) -> None:
        self.sp = Splitter(boundary_ok=looks_like_test_frame, synced=synced)
        self.gaps: list[tuple[int, int, str]] = []
        self.r = TcpReassembler(self.sp.data, self._gap, **caps)

    def _gap(self, ts: int, nbytes: int, reason: str) -> None:
        self.gaps.append((ts, nbytes, reason))
        self.sp.s.gap(ts, nbytes)

    def close(self, ts: int) -> None:
        self.r.flush(ts)
        self.sp.s.finish(ts)


def segments(data: bytes, size: int, isn: int) -> list[tuple[int, int, memoryview]]:
    """(index, seq, payload) for data cut into segments of `size` bytes, starting at isn + 1."""
    view = memoryview(data)
    return [
        (i, (isn + 1 + off) & 0xFFFFFFFF, view[off : off + size])
        for i, off in enumerate(range(0, len(data), size))
    ]


def test_shuffled_duplicated_and_overlapping_segments_give_the_original_frames() -> None:
    rng = random.Random(7)
    segs = segments(STREAM, 97, 5000)
    order = sorted(segs, key=lambda s: s[0] + rng.uniform(0, 6))  # reordered within a window of ~6
    order += rng.sample(segs, 15)  # late duplicates
    # Overlapping retransmissions: a coalesced copy of two neighbours, sent late.
    order += [
        (99, segs[3][1], memoryview(STREAM)[3 * 97 : 5 * 97]),
        (99, segs[40][1] + 50, memoryview(STREAM)[40 * 97 + 50 : 42 * 97]),
    ]
    p = Pipeline()
    p.r.syn(5000)
    for ts, seq, payload in order:
        p.r.segment(ts, seq, payload)
    p.close(100)
    assert p.sp.bodies == BODIES
    assert p.gaps == []
    assert p.r.bytes_delivered == len(STREAM)
    late = order[len(segs) :]
    assert (
        p.r.bytes_duplicate == sum(len(s[2]) for s in late) == sum(len(s[2]) for s in late[:15]) + 194 + 144
    )
    assert p.sp.skips == []


def test_one_byte_segments_reversed_in_blocks_give_the_original_frames() -> None:
    segs = segments(STREAM, 1, 0xFFFFFFFF - 1000)  # crosses the wrap too
    p = Pipeline()
    p.r.syn(0xFFFFFFFF - 1000)
    for block in range(0, len(segs), 10):
        for seg in reversed(segs[block : block + 10]):
            p.r.segment(*seg)
    p.close(99_999)
    assert p.sp.bodies == BODIES
    assert [f[3] for f in p.sp.frames] == OFFSETS
    assert p.r.segments_out_of_order == len(segs) - len(segs) // 10 - (len(segs) % 10 > 0)
    assert p.gaps == []


def test_hole_in_the_stream_gives_exact_gap_and_the_frames_after_resync() -> None:
    segs = segments(STREAM, 100, 77)
    lost = {45}  # stream bytes 4500..4599, inside the 4000-byte frame BODIES[8] (offsets 2006..6009)
    p = Pipeline()
    p.r.syn(77)
    for ts, seq, payload in segs:
        if ts not in lost:
            p.r.segment(ts, seq, payload)
    assert p.gaps == []  # nothing proves the hole lost yet
    p.r.peer_ack(60, (78 + len(STREAM)) & 0xFFFFFFFF)
    p.close(61)
    assert p.gaps == [(60, 100, LOST_SEGMENT)]
    assert (p.r.gaps, p.r.gap_bytes) == (1, 100)
    assert p.sp.bodies == [*BODIES[:8], BODIES[9]]
    assert p.sp.skips == [(4500 - OFFSETS[8], OFFSETS[8], GAP), (OFFSETS[9] - 4600, 4500, RESYNC)]
    assert p.sp.frames[-1][1:] == (60, 60, OFFSETS[9] - 100)  # ts: the index of the segment it came in


def test_stream_across_the_sequence_wrap_gives_the_original_frames() -> None:
    isn = 0xFFFFFFFF - 3000
    segs = segments(STREAM, 1000, isn)
    p = Pipeline()
    p.r.syn(isn)
    for i in [0, 3, 2, 1, 5, 4, 6]:
        p.r.segment(*segs[i])
    p.close(9)
    assert p.sp.bodies == BODIES
    assert p.gaps == []
    assert p.r.next_seq == (isn + 1 + len(STREAM)) & 0xFFFFFFFF == len(STREAM) - 3000


def test_capture_starting_mid_stream_finds_the_first_whole_frame() -> None:
    segs = segments(STREAM, 500, 123)
    p = Pipeline(synced=False)
    for seg in segs[5:]:  # stream offset 2500, inside BODIES[8]
        p.r.segment(*seg)
    p.close(99)
    assert p.sp.bodies == [BODIES[9]]
    assert p.sp.skips == [(OFFSETS[9] - 2500, 0, RESYNC)]
    assert p.sp.frames[0][3] == OFFSETS[9] - 2500
    assert p.gaps == []


def test_out_of_order_overflow_becomes_a_gap_the_splitter_recovers_from() -> None:
    segs = segments(STREAM, 200, 1)
    p = Pipeline(max_ooo_segments=5)
    p.r.syn(1)
    for seg in segs[:11]:  # offsets 0..2199
        p.r.segment(*seg)
    for seg in segs[12:]:  # 2200..2399 is lost; the sixth waiting segment overflows the buffer
        p.r.segment(*seg)
    p.close(99)
    assert p.r.ooo_overflows == 1
    assert p.gaps == [(17, 200, OOO_OVERFLOW)]
    assert p.sp.bodies == [*BODIES[:8], BODIES[9]]
    assert p.sp.skips == [(2200 - OFFSETS[8], OFFSETS[8], GAP), (OFFSETS[9] - 2400, 2200, RESYNC)]


@st.composite
def shuffled_segments(draw: st.DrawFn) -> tuple[list[bytes], int, list[tuple[int, int, bytes]]]:
    bodies = draw(st.lists(st.binary(min_size=0, max_size=200), min_size=1, max_size=12))
    data = b"".join(frame(b) for b in bodies)
    isn = draw(st.one_of(st.integers(0, 0xFFFFFFFF), st.integers(0xFFFFFFFF - 600, 0xFFFFFFFF)))
    cuts = sorted(set(draw(st.lists(st.integers(1, len(data) - 1), max_size=40)))) if len(data) > 1 else []
    bounds = list(zip([0, *cuts], [*cuts, len(data)], strict=True))
    window = draw(st.integers(0, 8))
    jitter = draw(st.lists(st.floats(0, window), min_size=len(bounds), max_size=len(bounds)))
    order = sorted(range(len(bounds)), key=lambda i: i + jitter[i])
    # Duplicates of whole segments, and retransmissions cut differently (any byte range), anywhere.
    dups = draw(st.lists(st.tuples(st.integers(0, len(bounds) - 1), st.integers(0, len(order))), max_size=10))
    for seg, where in dups:
        order.insert(where, seg)
    ranges = [bounds[i] for i in order]
    again = draw(
        st.lists(
            st.tuples(st.integers(0, len(data) - 1), st.integers(1, 300), st.integers(0, 99)), max_size=5
        )
    )
    for a, n, where in again:
        ranges.insert(where * len(ranges) // 100, (a, min(a + n, len(data))))
    segs = [(n, (isn + 1 + a) & 0xFFFFFFFF, data[a:b]) for n, (a, b) in enumerate(ranges)]
    return bodies, isn, segs


@settings(max_examples=300, deadline=None)
@given(shuffled_segments())
def test_any_segmentation_and_reordering_within_the_window_gives_the_original_frames(
    case: tuple[list[bytes], int, list[tuple[int, int, bytes]]],
) -> None:
    bodies, isn, segs = case
    frames: list[bytes] = []
    gaps: list[int] = []
    skips: list[int] = []
    splitter = FrameSplitter(
        lambda f, a, b, o: frames.append(bytes(f)), lambda n, o, r: skips.append(n), min_frame_size=0
    )
    r = TcpReassembler(splitter.data, lambda ts, n, reason: gaps.append(n))
    r.syn(isn)
    for ts, seq, payload in segs:
        r.segment(ts, seq, payload)
    r.flush(10_000)
    splitter.finish(10_000)
    assert frames == bodies
    assert gaps == []
    assert skips == []
    assert r.bytes_delivered == sum(4 + len(b) for b in bodies)


@st.composite
def damaged_stream(draw: st.DrawFn) -> tuple[bytes, list[tuple[str, int]], dict[str, object]]:
    """Frames mixed with garbage, cut into chunks with gaps between some of them."""
    parts = draw(
        st.lists(
            st.one_of(
                st.binary(min_size=4, max_size=120).map(frame),
                st.binary(max_size=40),
                st.sampled_from([b"\xff\xff\xff\xff", b"\x00\x00\x00\x01", b"\x00\x00\x00"]),
            ),
            max_size=15,
        )
    )
    data = b"".join(parts)
    cuts = sorted(set(draw(st.lists(st.integers(0, len(data)), max_size=20))))
    actions: list[tuple[str, int]] = []
    prev = 0
    for cut in [*cuts, len(data)]:
        actions.append(("data", cut - prev))
        if draw(st.integers(0, 5)) == 0:
            actions.append(("gap", draw(st.integers(0, 50))))
        prev = cut
    options = {
        "synced": draw(st.booleans()),
        "max_frame_size": draw(st.sampled_from([120, 1000, 100 * 1024 * 1024])),
        "max_resync_scan": draw(st.sampled_from([8, 100, 1 << 20])),
        "boundary_ok": draw(st.sampled_from([None, lambda v: v[4] % 3 != 0, looks_like_test_frame])),
    }
    return data, actions, options


@settings(max_examples=300, deadline=None)
@given(damaged_stream())
def test_every_fed_byte_is_in_exactly_one_frame_or_skip_report(
    case: tuple[bytes, list[tuple[str, int]], dict[str, object]],
) -> None:
    data, actions, options = case
    sp = Splitter(**options)
    chunk_ts: list[int] = []  # the ts of the chunk each stream byte came in
    pos = 0
    for ts, (kind, n) in enumerate(actions):
        if kind == "data":
            sp.data(ts, data[pos : pos + n])
            chunk_ts += [ts] * n
            pos += n
        else:
            sp.s.gap(ts, n)
        sp.assert_every_byte_accounted_for()
    sp.s.finish(len(actions))
    assert sp.s.buffered == 0
    sp.assert_every_byte_accounted_for()
    pieces = [(offset, 4 + len(f), "frame") for f, _, _, offset in sp.frames]
    pieces += [(offset, n, reason) for n, offset, reason in sp.skips]
    # A frame the stream ended in stays frame bytes (a capture edge), reported through on_cut.
    pieces += [(offset, n, reason) for n, offset, reason in sp.cuts if reason == TRUNCATED_AT_END and n]
    covered = 0
    for offset, n, _ in sorted(pieces):
        assert offset == covered and n > 0
        covered += n
    assert covered == len(data)
    for f, ts_first, ts_last, offset in sp.frames:
        assert data[offset : offset + 4 + len(f)] == frame(bytes(f))
        assert (ts_first, ts_last) == (chunk_ts[offset], chunk_ts[offset + 3 + len(f)])


CAPTURES = Path(__file__).parent / "data" / "captures"


@pytest.mark.parametrize(
    "name", ["acks_modes.pcap", "kafka_python.pcap", "legacy_msgset.pcap", "produce_codecs.pcap"]
)
def test_real_captures_split_into_as_many_frames_as_tshark_decodes(name: str) -> None:
    info = json.loads((CAPTURES / f"{name}.truth.json").read_text())["capture_info"]
    port = int(info["broker_address"].rsplit(":", 1)[1])
    counts = re.search(
        r"request PDUs: (\d+)\s+response PDUs: (\d+)", (CAPTURES / f"{name}.tshark.txt").read_text()
    )
    assert counts is not None
    frames = [0, 0]
    problems: list[tuple[int, str]] = []
    flows: dict[tuple[bytes, int, bytes, int], TcpReassembler] = {}
    splitters: list[FrameSplitter] = []
    with open(CAPTURES / name, "rb") as f:
        for ts_float, raw in dpkt.pcap.Reader(f):
            ip = dpkt.ethernet.Ethernet(raw).data
            tcp = ip.data
            if not isinstance(tcp, dpkt.tcp.TCP):
                continue
            ts = int(ts_float * 1_000_000)
            key = (ip.src, tcp.sport, ip.dst, tcp.dport)
            r = flows.get(key)
            if r is None:
                d = 0 if tcp.dport == port else 1  # 0: requests, 1: responses

                def count(frame: bytes | memoryview, a: int, b: int, o: int, d: int = d) -> None:
                    frames[d] += 1

                sp = FrameSplitter(count, lambda n, o, reason: problems.append((n, reason)))
                splitters.append(sp)
                r = flows[key] = TcpReassembler(sp.data, lambda t, n, reason: problems.append((n, reason)))
            seq = tcp.seq
            if tcp.flags & dpkt.tcp.TH_SYN:
                r.syn(seq)
                seq += 1
            r.segment(ts, seq & 0xFFFFFFFF, memoryview(tcp.data))
            peer = flows.get((ip.dst, tcp.dport, ip.src, tcp.sport))
            if peer is not None and tcp.flags & dpkt.tcp.TH_ACK:
                peer.peer_ack(ts, tcp.ack)
    for r in flows.values():
        r.flush(0)
    for sp in splitters:
        sp.finish(0)
    assert problems == []
    assert (frames[0], frames[1]) == (int(counts[1]), int(counts[2]))
    assert sum(sp.frame_bytes for sp in splitters) == sum(r.bytes_delivered for r in flows.values())
