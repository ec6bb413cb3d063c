"""TcpReassembler: one direction of one TCP connection back into an in-order byte stream."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kwsniff.tcp import (
    IMPLAUSIBLE_GAP,
    LOST_SEGMENT,
    MAX_WINDOW,
    OOO_OVERFLOW,
    SNAPLEN,
    TcpReassembler,
    seq_distance,
)

ISN = 1000
DATA = bytes(range(256)) * 4  # 1024 distinct-looking bytes


class Stream:
    """A reassembler wired to lists, so tests can read what came out and in which order."""

    def __init__(self, **caps: int) -> None:
        self.chunks: list[tuple[int, memoryview | bytes]] = []
        self.gaps: list[tuple[int, int, str]] = []
        self.events: list[tuple[str, int, bytes | int]] = []
        self.r = TcpReassembler(self._data, self._gap, **caps)

    def _data(self, ts: int, chunk: memoryview | bytes) -> None:
        self.chunks.append((ts, chunk))
        self.events.append(("data", ts, bytes(chunk)))

    def _gap(self, ts: int, nbytes: int, reason: str) -> None:
        self.gaps.append((ts, nbytes, reason))
        self.events.append((reason, ts, nbytes))

    @property
    def delivered(self) -> bytes:
        return b"".join(bytes(c) for _, c in self.chunks)

    def send(self, ts: int, offset: int, end: int, isn: int = ISN) -> None:
        """Give the segment DATA[offset:end] as a view, with sequence numbers counted from isn."""
        self.r.segment(ts, (isn + 1 + offset) & 0xFFFFFFFF, memoryview(DATA)[offset:end])


def test_in_order_segment_is_handed_on_as_the_same_view() -> None:
    s = Stream()
    s.r.syn(ISN)
    view = memoryview(DATA)[0:100]
    s.r.segment(7, ISN + 1, view)
    assert s.chunks[0][1] is view
    assert s.chunks[0][0] == 7
    assert s.r.next_seq == ISN + 101
    assert s.r.bytes_delivered == 100


def test_syn_makes_data_start_one_after_the_syn_sequence_number() -> None:
    s = Stream()
    assert s.r.next_seq is None
    s.r.syn(ISN)
    assert s.r.next_seq == ISN + 1
    s.send(1, 10, 20)  # ahead of the start: waits for bytes 0..9
    assert s.chunks == []
    s.send(2, 0, 10)
    assert s.delivered == DATA[0:20]


def test_retransmitted_segment_is_delivered_once() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 0, 100)
    s.send(2, 100, 200)
    s.send(3, 0, 100)
    s.send(4, 100, 200)
    assert s.delivered == DATA[0:200]
    assert s.r.bytes_duplicate == 200
    assert s.r.segments == 4
    assert s.r.gaps == 0


def test_overlapping_retransmission_delivers_only_the_new_tail() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 0, 100)
    s.send(2, 60, 150)  # 40 old bytes, 50 new
    assert s.delivered == DATA[0:150]
    assert [bytes(c) for _, c in s.chunks] == [DATA[0:100], DATA[100:150]]
    assert s.r.bytes_duplicate == 40
    assert s.r.bytes_delivered == 150


def test_keepalive_probe_one_byte_before_next_seq_counts_as_duplicate() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 0, 100)
    s.send(2, 99, 100)
    assert s.delivered == DATA[0:100]
    assert s.r.bytes_duplicate == 1
    assert s.r.next_seq == ISN + 101


def test_out_of_order_segments_come_out_in_order_each_with_its_own_ts() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 200, 300)
    s.send(2, 100, 200)
    s.send(3, 300, 400)
    assert s.chunks == []
    assert s.r.segments_out_of_order == 3
    s.send(4, 0, 100)
    assert [(ts, bytes(c)) for ts, c in s.chunks] == [
        (4, DATA[0:100]),
        (2, DATA[100:200]),
        (1, DATA[200:300]),
        (3, DATA[300:400]),
    ]
    assert s.r.buffered_bytes == 0
    assert s.r.next_seq == ISN + 401


def test_same_segment_buffered_twice_is_kept_once() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 100, 200)
    s.send(2, 100, 200)
    s.send(3, 100, 150)  # shorter copy of the same start
    assert s.r.buffered_bytes == 100
    s.send(4, 0, 100)
    assert s.delivered == DATA[0:200]
    assert s.r.bytes_duplicate == 150


def test_longer_copy_of_a_buffered_segment_replaces_the_shorter_one() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 100, 150)
    s.send(2, 100, 250)
    assert s.r.buffered_bytes == 150
    s.send(3, 0, 100)
    assert s.delivered == DATA[0:250]
    assert s.r.bytes_duplicate == 50


def test_overlapping_buffered_segments_deliver_each_byte_once() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 100, 300)
    s.send(2, 150, 250)  # inside the first
    s.send(3, 280, 400)  # overlaps its tail by 20
    s.send(4, 0, 120)  # overlaps the head of the first by 20
    assert s.delivered == DATA[0:400]
    assert s.r.bytes_delivered == 400
    assert s.r.bytes_duplicate == 20 + 100 + 20


def test_stream_crossing_the_sequence_number_wrap_is_delivered_in_order() -> None:
    isn = 0xFFFFFFFF - 150  # data starts 150 bytes before the wrap
    s = Stream()
    s.r.syn(isn)
    s.send(1, 0, 100, isn)
    s.send(2, 200, 300, isn)  # after the wrap, out of order
    s.send(3, 100, 200, isn)  # crosses the wrap
    s.send(4, 150, 250, isn)  # retransmission across the wrap
    assert s.delivered == DATA[0:300]
    assert s.r.bytes_duplicate == 100
    assert s.r.next_seq == (isn + 301) & 0xFFFFFFFF == 150


def test_seq_distance_is_signed_modulo_two_to_the_32() -> None:
    assert seq_distance(5, 0xFFFFFFFB) == 10
    assert seq_distance(0xFFFFFFFB, 5) == -10
    assert seq_distance(7, 7) == 0
    assert seq_distance(0x80000000, 0) == -(1 << 31)


def test_capture_starting_mid_connection_starts_the_stream_at_the_first_data() -> None:
    s = Stream()
    s.r.segment(1, 555_000, b"abc")
    s.r.segment(2, 555_003, b"def")
    s.r.segment(3, 554_990, b"0123456789")  # before the stream start: already gone
    assert s.delivered == b"abcdef"
    assert s.r.next_seq == 555_006
    assert s.r.bytes_duplicate == 10


def test_zero_length_segments_are_ignored() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.r.segment(1, ISN + 1, b"")
    s.r.segment(2, ISN + 50, memoryview(b""))
    assert s.chunks == []
    assert s.r.segments == 0
    assert s.r.next_seq == ISN + 1


def test_peer_ack_beyond_a_hole_declares_the_hole_lost_and_delivers_what_waited() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 0, 100)
    s.send(2, 200, 300)  # 100..199 never captured
    s.r.peer_ack(3, ISN + 1 + 150)  # not past the hole yet: only 100..149 is proven lost
    assert s.gaps == [(3, 50, LOST_SEGMENT)]
    s.r.peer_ack(4, ISN + 1 + 300)
    assert s.events == [
        ("data", 1, DATA[0:100]),
        (LOST_SEGMENT, 3, 50),
        (LOST_SEGMENT, 4, 50),
        ("data", 2, DATA[200:300]),
    ]
    assert s.r.gaps == 2
    assert s.r.gap_bytes == 100
    assert s.r.next_seq == ISN + 301


def test_peer_ack_with_nothing_buffered_declares_nothing() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 0, 100)
    s.r.peer_ack(2, ISN + 1 + 500)
    s.r.peer_ack(3, ISN + 1 + 50)
    assert s.gaps == []
    assert s.r.next_seq == ISN + 101


def test_late_retransmission_of_a_hole_already_declared_lost_is_a_duplicate() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 0, 100)
    s.send(2, 200, 300)
    s.r.peer_ack(3, ISN + 301)
    s.send(4, 100, 200)
    assert s.r.bytes_duplicate == 100
    assert s.delivered == DATA[0:100] + DATA[200:300]


def test_out_of_order_buffer_over_its_byte_cap_gives_up_on_the_oldest_hole() -> None:
    s = Stream(max_ooo_bytes=250)
    s.r.syn(ISN)
    s.send(1, 0, 100)
    s.send(2, 200, 300)
    s.send(3, 300, 400)
    s.send(4, 500, 600)  # 300 bytes waiting > 250
    assert s.r.ooo_overflows == 1
    assert s.gaps == [(4, 100, OOO_OVERFLOW)]
    assert s.delivered == DATA[0:100] + DATA[200:400]
    assert s.r.buffered_bytes == 100  # 500..599 still waits for 400..499
    s.send(5, 400, 500)
    assert s.delivered == DATA[0:100] + DATA[200:600]
    assert s.r.gap_bytes == 100


def test_out_of_order_buffer_over_its_segment_cap_gives_up_on_the_oldest_hole() -> None:
    s = Stream(max_ooo_segments=2)
    s.r.syn(ISN)
    s.send(1, 10, 20)
    s.send(2, 30, 40)
    assert s.r.ooo_overflows == 0
    s.send(3, 50, 60)
    assert s.r.ooo_overflows == 1
    assert s.gaps == [(3, 10, OOO_OVERFLOW)]
    assert s.delivered == DATA[10:20]
    assert s.r.next_seq == ISN + 21


def test_flush_turns_holes_into_lost_segment_gaps_and_delivers_the_rest() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 0, 100)
    s.send(2, 400, 500)
    s.send(3, 200, 300)
    s.r.flush(9)
    assert s.events == [
        ("data", 1, DATA[0:100]),
        (LOST_SEGMENT, 9, 100),
        ("data", 3, DATA[200:300]),
        (LOST_SEGMENT, 9, 100),
        ("data", 2, DATA[400:500]),
    ]
    assert (s.r.gaps, s.r.gap_bytes) == (2, 200)


def test_flush_declares_bytes_missing_before_the_fin() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 0, 100)
    s.r.fin(2, ISN + 1 + 160)  # the last 60 bytes were never captured
    s.r.flush(3)
    assert s.gaps == [(3, 60, LOST_SEGMENT)]
    assert s.delivered == DATA[0:100]


def test_fin_right_after_the_data_leaves_no_gap() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 0, 100)
    s.r.fin(1, ISN + 101)
    s.r.flush(2)
    assert s.gaps == []
    assert s.r.gap_bytes == 0


def test_bytes_cut_by_the_snaplen_become_a_snaplen_gap_after_the_payload() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.r.segment(1, ISN + 1, memoryview(DATA)[0:60], missing=40)
    s.send(2, 100, 150)
    assert s.events == [("data", 1, DATA[0:60]), (SNAPLEN, 1, 40), ("data", 2, DATA[100:150])]
    assert (s.r.gaps, s.r.gap_bytes, s.r.bytes_delivered) == (1, 40, 110)


def test_snaplen_cut_out_of_order_segment_keeps_its_gap_in_place() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.r.segment(1, ISN + 101, memoryview(DATA)[100:130], missing=70)
    s.send(2, 200, 250)
    s.send(3, 0, 100)
    assert s.events == [
        ("data", 3, DATA[0:100]),
        ("data", 1, DATA[100:130]),
        (SNAPLEN, 1, 70),
        ("data", 2, DATA[200:250]),
    ]


def test_segment_with_no_captured_payload_is_all_snaplen_gap() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.r.segment(1, ISN + 1, b"", missing=1448)
    assert s.gaps == [(1, 1448, SNAPLEN)]
    assert s.r.segments == 1
    assert s.r.next_seq == ISN + 1449


def test_delivered_and_gap_bytes_account_for_every_sequence_number() -> None:
    s = Stream(max_ooo_segments=3)
    s.r.syn(ISN)
    order = [(0, 50), (60, 80), (100, 130), (55, 70), (140, 150), (200, 210), (205, 260), (300, 310)]
    for ts, (a, b) in enumerate(order):
        s.send(ts, a, b)
    s.r.flush(99)
    assert [(nbytes, reason) for _, nbytes, reason in s.gaps] == [
        (5, OOO_OVERFLOW),
        (20, OOO_OVERFLOW),
        (10, OOO_OVERFLOW),
        (50, LOST_SEGMENT),
        (40, LOST_SEGMENT),
    ]
    assert s.r.ooo_overflows == 3
    assert (
        s.delivered
        == DATA[0:50] + DATA[55:80] + DATA[100:130] + DATA[140:150] + DATA[200:260] + DATA[300:310]
    )
    assert (s.r.bytes_delivered, s.r.gap_bytes, s.r.bytes_duplicate) == (185, 125, 15)
    assert s.r.bytes_delivered + s.r.gap_bytes == 310
    assert s.r.next_seq == ISN + 311


@st.composite
def segment_storm(draw: st.DrawFn) -> tuple[int, list[tuple[str, int, int, int]]]:
    """Random segments (any range, some cut by the snaplen), acks, caps: anything a capture can show."""
    isn = draw(st.one_of(st.integers(0, 0xFFFFFFFF), st.integers(0xFFFFFFFF - 500, 0xFFFFFFFF)))
    # Starts on a coarse grid too, so retransmissions often share a start with a buffered segment.
    start = st.one_of(st.integers(0, 1000), st.integers(0, 20).map(lambda k: k * 50))
    seg = st.tuples(st.just("seg"), start, st.integers(0, 200), st.integers(0, 30))
    ack = st.tuples(st.just("ack"), st.integers(0, 1100), st.just(0), st.just(0))
    return isn, draw(st.lists(st.one_of(seg, seg, seg, ack), max_size=60))


@settings(max_examples=300, deadline=None)
@given(segment_storm(), st.integers(1, 6), st.booleans())
def test_every_sequence_number_comes_out_once_as_its_own_byte_or_as_a_gap(
    case: tuple[int, list[tuple[str, int, int, int]]], max_segments: int, with_syn: bool
) -> None:
    isn, actions = case
    fed = 0
    s = Stream(max_ooo_segments=max_segments, max_ooo_bytes=600)
    if with_syn:
        s.r.syn(isn)
    for ts, (kind, a, n, missing) in enumerate(actions):
        if kind == "seg":
            end = min(a + n, len(DATA))
            missing = min(missing, end - a)
            fed += end - a
            s.r.segment(ts, (isn + 1 + a) & 0xFFFFFFFF, memoryview(DATA)[a : end - missing], missing)
        else:
            s.r.peer_ack(ts, (isn + 1 + a) & 0xFFFFFFFF)
        assert s.r.buffered_bytes <= 600 + 200
    s.r.flush(len(actions))
    assert s.r.buffered_bytes == 0
    if s.r.next_seq is None:
        assert s.events == []
        return
    # Walk the output: each chunk must be the source bytes at its stream position.
    pos = seq_distance(s.r.next_seq, (isn + 1) & 0xFFFFFFFF) - s.r.bytes_delivered - s.r.gap_bytes
    for kind, _, value in s.events:
        if kind == "data":
            assert isinstance(value, bytes)
            assert value == DATA[pos : pos + len(value)]
            pos += len(value)
        else:
            assert isinstance(value, int) and value > 0
            pos += value
    # Every byte the capture carried (or said it cut) was delivered, dropped as a duplicate, or a snaplen gap.
    snaplen_bytes = sum(n for _, n, reason in s.gaps if reason == SNAPLEN)
    assert fed == s.r.bytes_delivered + s.r.bytes_duplicate + snaplen_bytes


def test_a_jump_past_any_window_restarts_the_stream_instead_of_a_gap() -> None:
    """A new connection on reused ports (its SYN lost) is not 2 GiB of lost bytes: the segment
    waiting behind a provable hole is delivered, the jump is counted and the stream goes on there."""
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 0, 100)
    s.send(2, 200, 300)  # 100..199 missing, proven by the bytes after it
    new_isn = ISN + (1 << 31) + 12345
    s.send(3, 0, 50, isn=new_isn)
    s.r.peer_ack(4, ISN + 1 + MAX_WINDOW + 1000)  # an acknowledgement no window explains proves nothing
    s.r.flush(5)
    assert s.events == [
        ("data", 1, DATA[0:100]),
        (LOST_SEGMENT, 3, 100),
        ("data", 2, DATA[200:300]),
        (IMPLAUSIBLE_GAP, 3, 0),
        ("data", 3, DATA[0:50]),
    ]
    assert (s.r.gaps, s.r.gap_bytes, s.r.implausible_gaps) == (1, 100, 1)


def test_a_syn_with_a_new_isn_restarts_the_stream_a_retransmitted_one_does_not() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 0, 100)
    s.r.syn(ISN, 2)  # the same SYN again
    s.r.syn(ISN + 5000, 3)  # a new connection on the same ports, 4,900 bytes on: no gap either
    s.send(4, 0, 10, isn=ISN + 5000)
    assert s.events == [("data", 1, DATA[0:100]), (IMPLAUSIBLE_GAP, 3, 0), ("data", 4, DATA[0:10])]
    assert (s.r.gap_bytes, s.r.implausible_gaps) == (0, 1)


def test_an_acknowledgement_past_any_window_at_the_end_is_no_gap() -> None:
    s = Stream()
    s.r.syn(ISN)
    s.send(1, 0, 100)
    s.r.peer_ack(2, ISN + 1 + 100 + MAX_WINDOW + 1)
    s.r.flush(3)
    assert (s.r.gap_bytes, s.r.implausible_gaps) == (0, 1)
