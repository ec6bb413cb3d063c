"""pcapng files: sections, interfaces with their own link types and clocks, and every packet block kind."""

from __future__ import annotations

import io
import struct

import pytest

from kwsniff.capture import CaptureReader, open_capture_file

SHB, IDB, PB, SPB, NRB, ISB, EPB = 0x0A0D0D0A, 1, 2, 3, 4, 5, 6


def pad(data: bytes) -> bytes:
    return data + b"\x00" * (-len(data) % 4)


def block(btype: int, body: bytes, order: str = "<") -> bytes:
    body = pad(body)
    total = 12 + len(body)
    return struct.pack(order + "II", btype, total) + body + struct.pack(order + "I", total)


def option(code: int, value: bytes, order: str = "<") -> bytes:
    return struct.pack(order + "HH", code, len(value)) + pad(value)


def shb(order: str = "<") -> bytes:
    return block(SHB, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1), order)


def idb(
    linktype: int, order: str = "<", snaplen: int = 0, tsresol: int | None = None, tsoffset: int = 0
) -> bytes:
    options = b""
    if tsresol is not None:
        options += option(9, bytes([tsresol]), order)
    if tsoffset:
        options += option(14, struct.pack(order + "q", tsoffset), order)
    if options:
        options += option(0, b"", order)
    return block(IDB, struct.pack(order + "HHI", linktype, 0, snaplen) + options, order)


def epb(ifid: int, ts: int, data: bytes, order: str = "<", comment: bytes = b"") -> bytes:
    fields = struct.pack(order + "IIIII", ifid, ts >> 32, ts & 0xFFFFFFFF, len(data), len(data))
    options = option(1, comment, order) + option(0, b"", order) if comment else b""
    return block(EPB, fields + pad(data) + options, order)


def spb(data: bytes, wirelen: int | None = None, order: str = "<") -> bytes:
    return block(SPB, struct.pack(order + "I", len(data) if wirelen is None else wirelen) + data, order)


def packet_block(ifid: int, ts: int, data: bytes, order: str = "<") -> bytes:
    fields = struct.pack(order + "HHIIII", ifid, 0, ts >> 32, ts & 0xFFFFFFFF, len(data), len(data))
    return block(PB, fields + data, order)


def read_all(blob: bytes) -> tuple[list[tuple[int, int, bytes]], CaptureReader]:
    reader = open_capture_file(io.BytesIO(blob), "test.pcapng")
    return list(reader.packets()), reader


T = 1_700_000_000  # seconds


def test_interfaces_keep_their_own_linktype_and_timestamp_resolution() -> None:
    blob = (
        shb()
        + idb(1)  # default resolution: microseconds
        + idb(113, tsresol=9)  # nanoseconds
        + idb(101, tsresol=0x80 | 20)  # 2^-20 seconds
        + epb(0, T * 10**6 + 123456, b"eth")
        + epb(1, T * 10**9 + 123456789, b"sll")
        + epb(2, (T << 20) + (1 << 19), b"raw")
        + epb(0, T * 10**6 + 7, b"eth again", comment=b"an option after the data")
    )
    packets, reader = read_all(blob)
    assert packets == [
        (T * 10**6 + 123456, 1, b"eth"),
        (T * 10**6 + 123456, 113, b"sll"),
        (T * 10**6 + 500000, 101, b"raw"),
        (T * 10**6 + 7, 1, b"eth again"),
    ]
    # Interface 0's clock steps back from +123456 us to +7 us: counted, the packets stay in file order.
    assert (reader.truncated, reader.warnings) == (
        False,
        ["timestamps go backwards 1 times (packets kept in capture order)"],
    )
    assert reader.stats == {
        "records": 4,
        "skipped_blocks": 0,
        "unknown_block_types": 0,
        "bad_blocks": 0,
        "ts_backwards": 1,
    }


def test_millisecond_resolution_and_timestamp_offset() -> None:
    blob = shb() + idb(1, tsresol=3, tsoffset=100) + epb(0, 1500, b"x")
    assert read_all(blob)[0] == [(101_500_000, 1, b"x")]


def test_big_endian_section() -> None:
    blob = shb(">") + idb(1, ">", tsresol=9) + epb(0, T * 10**9 + 1000, b"big endian", ">")
    assert read_all(blob)[0] == [(T * 10**6 + 1, 1, b"big endian")]


def test_new_section_resets_interfaces_and_may_switch_byte_order() -> None:
    blob = (
        shb("<")
        + idb(1, "<")
        + idb(113, "<")
        + epb(1, 1, b"first section")
        + shb(">")
        + idb(276, ">", tsresol=9)
        + epb(0, 5000, b"second section", ">")
        + epb(1, 2, b"interface 1 is gone", ">")
    )
    packets, reader = read_all(blob)
    assert packets == [(1, 113, b"first section"), (5, 276, b"second section")]
    assert reader.stats["bad_blocks"] == 1
    second_section = len(shb() + idb(1) + idb(113) + epb(1, 1, b"first section"))
    bad_at = second_section + len(shb() + idb(276, tsresol=9) + epb(0, 5000, b"second section"))
    assert reader.warnings == [
        f"enhanced packet block at offset {bad_at} skipped: interface 1, 19 captured bytes do not fit"
    ]
    assert reader.truncated is False


def test_unknown_and_non_packet_blocks_are_skipped_and_counted() -> None:
    blob = (
        shb()
        + block(NRB, b"\x00" * 4)
        + idb(1)
        + block(0x0BADCAFE, b"who knows")
        + epb(0, 1, b"a")
        + block(ISB, b"\x00" * 12)
        + block(0x12345, b"")
        + epb(0, 2, b"b")
    )
    packets, reader = read_all(blob)
    assert packets == [(1, 1, b"a"), (2, 1, b"b")]
    assert reader.stats == {"records": 2, "skipped_blocks": 2, "unknown_block_types": 2, "bad_blocks": 0}


def test_simple_packet_block_uses_interface_zero_and_the_last_timestamp() -> None:
    blob = (
        shb() + idb(1, snaplen=4) + idb(113) + epb(1, 77, b"timed") + spb(b"abcd", wirelen=1000) + spb(b"xy")
    )
    packets, _ = read_all(blob)
    assert packets == [(77, 113, b"timed"), (77, 1, b"abcd"), (77, 1, b"xy")]


def test_timestamps_beyond_year_9999_keep_the_time_before_and_are_counted() -> None:
    # Interface 1 counts whole seconds (if_tsresol 2^0) and interface 2 starts 2^62 s after 1970: both
    # overflow every timestamp column. The packets are good traffic and are kept, with the last good time.
    blob = (
        shb()
        + idb(1)
        + idb(1, tsresol=0x80)
        + idb(1, tsoffset=1 << 62)
        + epb(0, 5, b"a")
        + epb(1, 1 << 63, b"b")
        + packet_block(2, 7, b"c")
        + epb(0, 9, b"d")
    )
    packets, reader = read_all(blob)
    assert packets == [(5, 1, b"a"), (5, 1, b"b"), (5, 1, b"c"), (9, 1, b"d")]
    assert reader.stats["ts_out_of_range"] == 2
    assert reader.warnings == [
        "2 packets have timestamps outside the years 1-9999 (interface if_tsresol or if_tsoffset damaged?):"
        " kept, with the time of the packet before"
    ]


def test_obsolete_packet_block_is_read() -> None:
    blob = shb() + idb(1, tsresol=9) + packet_block(0, 3_000_000_000, b"old")
    assert read_all(blob)[0] == [(3_000_000, 1, b"old")]


def test_blocks_may_come_in_any_order_a_packet_before_its_interface_is_bad() -> None:
    blob = shb() + epb(0, 1, b"too early") + spb(b"also early") + idb(1) + epb(0, 2, b"fine")
    packets, reader = read_all(blob)
    assert packets == [(2, 1, b"fine")]
    assert reader.stats["bad_blocks"] == 2


def test_captured_length_beyond_the_block_is_a_bad_block_not_a_crash() -> None:
    broken = bytearray(epb(0, 1, b"12345678"))
    struct.pack_into("<I", broken, 20, 9999)  # caplen
    packets, reader = read_all(shb() + idb(1) + bytes(broken) + epb(0, 2, b"after"))
    assert packets == [(2, 1, b"after")]
    assert reader.stats["bad_blocks"] == 1


def test_file_cut_mid_block_keeps_whole_packets() -> None:
    head = shb() + idb(1)
    blob = head + epb(0, 1, b"one") + epb(0, 2, b"two") + epb(0, 3, b"three")
    cut_at = len(head + epb(0, 1, b"one") + epb(0, 2, b"two"))
    packets, reader = read_all(blob[: cut_at + 10])
    assert packets == [(1, 1, b"one"), (2, 1, b"two")]
    assert reader.truncated is True
    assert reader.warnings == [f"last block cut short at offset {cut_at}"]


@pytest.mark.parametrize("length", [8, 13, 0x7FFF_FFF0], ids=["too_small", "not_multiple_of_4", "absurd"])
def test_impossible_block_length_stops_with_a_warning(length: int) -> None:
    head = shb() + idb(1) + epb(0, 1, b"ok")
    blob = head + struct.pack("<II", EPB, length) + b"\x00" * 40
    packets, reader = read_all(blob)
    assert packets == [(1, 1, b"ok")]
    assert reader.truncated is True
    assert reader.warnings == [f"block at offset {len(head)} has impossible length {length}: file damaged"]


def test_bad_byte_order_magic_in_later_section_stops() -> None:
    head = shb() + idb(1) + epb(0, 1, b"ok")
    broken = bytearray(shb())
    broken[8:12] = b"WXYZ"
    packets, reader = read_all(head + bytes(broken) + idb(1))
    assert packets == [(1, 1, b"ok")]
    assert reader.warnings == [f"bad byte-order magic in section header at offset {len(head)}"]


def test_blocks_spanning_read_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kwsniff.capture.pcapng.CHUNK_SIZE", 16)
    big = bytes(range(256)) * 3
    blob = shb() + idb(1) + epb(0, 1, big) + spb(b"tail")
    assert read_all(blob)[0] == [(1, 1, big), (1, 1, b"tail")]


def test_blocks_too_short_for_their_fields_are_bad_blocks() -> None:
    blob = shb() + block(IDB, b"") + idb(113) + block(SPB, b"") + epb(1, 5, b"still interface 1")
    packets, reader = read_all(blob)
    assert packets == [(5, 113, b"still interface 1")]
    assert reader.stats["bad_blocks"] == 2
