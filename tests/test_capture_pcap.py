"""Classic pcap files: byte orders, timestamp resolutions, damage at the end, and the real captures."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import dpkt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kwsniff.capture import CaptureReader, open_capture, open_capture_file

CAPTURES = Path(__file__).parent / "data" / "captures"

FRAMES = [b"first frame", b"second, a little longer frame", b"3"]


def pcap_bytes(
    records: list[tuple[int, int, bytes]],
    order: str = "<",
    magic: int = 0xA1B2C3D4,
    linktype: int = 1,
    snaplen: int = 65535,
) -> bytes:
    out = struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)
    for sec, frac, data in records:
        out += struct.pack(order + "IIII", sec, frac, len(data), len(data) + 4) + data
    return out


def read_all(blob: bytes, name: str = "test.pcap") -> tuple[list[tuple[int, int, bytes]], CaptureReader]:
    reader = open_capture_file(io.BytesIO(blob), name)
    return list(reader.packets()), reader


class ShortReads(io.RawIOBase):
    """A pipe-like stream: every read returns at most `step` bytes, and it cannot seek."""

    def __init__(self, blob: bytes, step: int) -> None:
        self._blob = blob
        self._pos = 0
        self._step = step

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        take = self._step if size < 0 else min(size, self._step)
        chunk = self._blob[self._pos : self._pos + take]
        self._pos += len(chunk)
        return chunk


MICRO_RECORDS = [(1700000000, 1, FRAMES[0]), (1700000000, 999999, FRAMES[1]), (1700000123, 500000, FRAMES[2])]
MICRO_EXPECTED = [
    (1700000000_000001, 1, FRAMES[0]),
    (1700000000_999999, 1, FRAMES[1]),
    (1700000123_500000, 1, FRAMES[2]),
]


@pytest.mark.parametrize("order", ["<", ">"], ids=["little_endian", "big_endian"])
def test_microsecond_pcap_in_either_byte_order(order: str) -> None:
    packets, reader = read_all(pcap_bytes(MICRO_RECORDS, order))
    assert packets == MICRO_EXPECTED
    assert (reader.truncated, reader.warnings, reader.stats) == (False, [], {"records": 3})


@pytest.mark.parametrize("order", ["<", ">"], ids=["little_endian", "big_endian"])
def test_nanosecond_pcap_is_floored_to_microseconds(order: str) -> None:
    records = [(1700000000, 1999, FRAMES[0]), (1700000000, 999_999_999, FRAMES[1])]
    packets, _ = read_all(pcap_bytes(records, order, magic=0xA1B23C4D))
    assert packets == [(1700000000_000001, 1, FRAMES[0]), (1700000000_999999, 1, FRAMES[1])]


def test_kuznetzov_modified_pcap_skips_its_extra_record_fields() -> None:
    header = struct.pack("<IHHiIII", 0xA1B2CD34, 2, 4, 0, 0, 65535, 113)
    record = struct.pack("<IIIIIHBx", 5, 6, 3, 3, 2, 0x0800, 0) + b"abc"
    packets, _ = read_all(header + record)
    assert packets == [(5_000006, 113, b"abc")]


def test_fcs_flag_bits_are_not_part_of_the_linktype() -> None:
    packets, _ = read_all(pcap_bytes(MICRO_RECORDS[:1], linktype=0x1000_0000 | 113))
    assert packets[0][1] == 113


def test_header_only_pcap_has_no_packets() -> None:
    packets, reader = read_all(pcap_bytes([]))
    assert (packets, reader.truncated, reader.stats["records"]) == ([], False, 0)


@pytest.mark.parametrize("step", [1, 7, 100])
def test_short_reads_from_a_pipe_give_the_same_packets(step: int) -> None:
    reader = open_capture_file(ShortReads(pcap_bytes(MICRO_RECORDS, ">"), step), "pipe.pcap")  # type: ignore[arg-type]
    assert reader.size is None
    assert list(reader.packets()) == MICRO_EXPECTED


def test_records_spanning_many_read_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kwsniff.capture.pcap.CHUNK_SIZE", 10)
    big = bytes(range(256)) * 40
    packets, _ = read_all(pcap_bytes([(1, 2, big), (3, 4, b"x")]))
    assert packets == [(1_000002, 1, big), (3_000004, 1, b"x")]


def test_file_cut_inside_record_data_keeps_whole_records_and_says_where() -> None:
    blob = pcap_bytes(MICRO_RECORDS)
    third_record_at = 24 + 16 + len(FRAMES[0]) + 16 + len(FRAMES[1])
    packets, reader = read_all(blob[:-1])
    assert packets == MICRO_EXPECTED[:2]
    assert reader.truncated is True
    assert reader.warnings == [f"last record cut short at offset {third_record_at}"]
    assert reader.stats["records"] == 2


def test_file_cut_inside_record_header_is_truncated() -> None:
    blob = pcap_bytes(MICRO_RECORDS)
    cut = 24 + 16 + len(FRAMES[0]) + 5
    packets, reader = read_all(blob[:cut])
    assert (len(packets), reader.truncated) == (1, True)
    assert reader.warnings == [f"last record cut short at offset {24 + 16 + len(FRAMES[0])}"]


def test_absurd_record_length_stops_reading_without_allocating() -> None:
    blob = pcap_bytes(MICRO_RECORDS[:1]) + struct.pack("<IIII", 1, 1, 0xFFFF_FFF0, 10) + b"garbage"
    packets, reader = read_all(blob)
    assert packets == MICRO_EXPECTED[:1]
    assert reader.truncated is True
    assert reader.warnings == [
        f"record at offset {24 + 16 + len(FRAMES[0])} claims {0xFFFF_FFF0} bytes (limit 262144): file damaged"
    ]


@given(cut=st.integers(min_value=24, max_value=24 + 3 * 16 + sum(map(len, FRAMES))))
def test_any_cut_yields_the_whole_records_before_it(cut: int) -> None:
    blob = pcap_bytes(MICRO_RECORDS)
    packets, reader = read_all(blob[:cut])
    ends = [24 + 16 * (i + 1) + sum(map(len, FRAMES[: i + 1])) for i in range(3)]
    whole = sum(1 for end in ends if end <= cut)
    assert packets == MICRO_EXPECTED[:whole]
    assert reader.truncated is (cut not in [24, *ends])


def test_real_capture_has_every_packet_tcpdump_wrote() -> None:
    with open_capture(CAPTURES / "acks_modes.pcap") as reader:
        packets = list(reader.packets())
        assert reader.name == "acks_modes.pcap"
        assert reader.size == 233919
        assert reader.tell() == 233919
    assert len(packets) == 360
    assert packets[0][:2] == (1795367428_740545, 1)
    assert len(packets[0][2]) == 74
    assert {linktype for _, linktype, _ in packets} == {1}
    assert (reader.truncated, reader.warnings, reader.stats) == (False, [], {"records": 360})


@pytest.mark.parametrize(
    "name", ["acks_modes.pcap", "kafka_python.pcap", "legacy_msgset.pcap", "produce_codecs.pcap"]
)
def test_real_captures_agree_with_dpkt_packet_for_packet(name: str) -> None:
    with open(CAPTURES / name, "rb") as f:
        theirs = [(round(ts * 1_000_000), bytes(data)) for ts, data in dpkt.pcap.Reader(f)]
    with open_capture(CAPTURES / name) as reader:
        ours = [(ts, data) for ts, _, data in reader.packets()]
    assert ours == theirs
