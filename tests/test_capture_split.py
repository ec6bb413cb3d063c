"""A capture read in byte ranges, then at the offsets found, gives exactly the packets `kwsniff read` reads."""

from __future__ import annotations

import gzip
import re
import struct
from pathlib import Path

import pytest

from kwsniff.capture import open_capture
from kwsniff.capture.split import RangeScan, SplitCapture, Unsplittable, byte_ranges, joined_ranges
from kwsniff.spark.tasks import flow_bucket, flow_buckets, index_range
from tests.test_capture_pcapng import block, epb, idb, packet_block, shb, spb

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "tests/data/captures").glob("*.pcap")) + [ROOT / "sample_pcaps/quickstart.pcap"]
PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
T = 1_700_000_000


def read_packets(path: Path) -> list[tuple[int, int, bytes]]:
    with open_capture(path) as reader:
        return list(reader.packets())


def scan_in_ranges(path: Path, parts: int) -> tuple[list[tuple[int, int, int, bytes]], list[RangeScan]]:
    records, scans = [], []
    with SplitCapture(str(path)) as capture:
        for start, end in byte_ranges(0, capture.size, parts):
            scan = RangeScan()
            records += list(capture.scan(start, end, scan))
            scans.append(scan)
    return records, scans


def as_pcapng(path: Path, out: Path) -> Path:
    """The same packets as a pcapng file (Ethernet interface, microsecond timestamps)."""
    blob = shb() + idb(1) + b"".join(epb(0, ts, data) for ts, _lt, data in read_packets(path))
    out.write_bytes(blob)
    return out


def pcap(records: list[tuple[int, bytes]]) -> bytes:
    return PCAP_HEADER + b"".join(struct.pack("<IIII", s, 0, len(d), len(d)) + d for s, d in records)


@pytest.mark.parametrize("parts", [1, 2, 3, 7, 40])
@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name)
def test_ranges_hold_every_record_once_in_order(capture: Path, parts: int) -> None:
    expected = read_packets(capture)
    records, scans = scan_in_ranges(capture, parts)
    assert [(ts, lt, data) for _off, ts, lt, data in records] == expected
    assert joined_ranges(scans) == parts
    assert sum(s.records for s in scans) == len(expected)
    # Each range starts where the one before it stopped; the first at the end of the file header.
    assert scans[0].first == 24 and scans[-1].stop == capture.stat().st_size
    walked = [s for s in scans if s.first is not None]
    assert [s.first for s in walked[1:]] == [s.stop for s in walked[:-1]]


@pytest.mark.parametrize("parts", [1, 4, 25])
def test_pcapng_ranges_hold_every_record_once_in_order(tmp_path: Path, parts: int) -> None:
    path = as_pcapng(CAPTURES[0], tmp_path / "acks.pcapng")
    records, scans = scan_in_ranges(path, parts)
    assert [(ts, lt, data) for _off, ts, lt, data in records] == read_packets(path)
    assert len(records) == 360 and joined_ranges(scans) == parts
    # The section header (28 bytes) and the interface (20) come before the first packet block.
    assert scans[0].first == 48


def test_offsets_read_back_the_same_records() -> None:
    records, _ = scan_in_ranges(CAPTURES[-1], 3)
    with SplitCapture(str(CAPTURES[-1])) as capture:
        wanted = [off for off, *_ in records][1::2]
        assert list(capture.at(wanted)) == [(ts, lt, data) for _o, ts, lt, data in records][1::2]


def test_a_start_found_inside_packet_data_is_caught(tmp_path: Path) -> None:
    # A packet whose payload is itself a chain of 9 valid pcap records: a range starting inside it
    # finds that chain first, and the check against the range before refuses it.
    inner = b"".join(struct.pack("<IIII", T, 0, 4, 4) + b"abcd" for _ in range(9))
    path = tmp_path / "fake.pcap"
    path.write_bytes(pcap([(T, b"\x00" * 40), (T, inner), (T, b"\x01" * 60)]))
    with SplitCapture(str(path)) as capture:
        assert capture.first_record(93, 352) == 96  # inside the second record's data
        first, second = RangeScan(), RangeScan()
        assert [off for off, *_ in capture.scan(0, 93, first)] == [24, 80]
        assert [off for off, *_ in capture.scan(93, 352, second)][:2] == [96, 116]
    assert (first.stop, second.first) == (276, 96)
    with pytest.raises(
        Unsplittable, match="^byte range 1 starts at offset 96, the one before it stopped at 276$"
    ):
        joined_ranges([first, second])


def test_a_range_that_meets_damage_ends_the_walk_there(tmp_path: Path) -> None:
    # Records at 24, 140, 256, 372 and 488; the one at 256 claims 4 GB. `kwsniff read` stops there.
    records = [struct.pack("<IIII", T, 0, 100, 100) + bytes(100) for _ in range(5)]
    records[2] = struct.pack("<IIII", T, 0, 0xFFFFFFF0, 100) + bytes(100)
    path = tmp_path / "damaged.pcap"
    path.write_bytes(PCAP_HEADER + b"".join(records))
    assert len(read_packets(path)) == 2
    got, scans = scan_in_ranges(path, 2)  # [0, 302) and [302, 604)
    assert scans[0].damaged == "record at offset 256 claims 4294967280 bytes (limit 262144): file damaged"
    assert (scans[0].records, scans[0].stop, scans[1].first) == (2, 256, 372)
    assert joined_ranges(scans) == 1  # the second range, past the damage, is not used
    assert [off for off, *_ in got][:2] == [24, 140]
    # Cut into three, the damaged record starts in the second range, whose search skips it: refused.
    _, scans = scan_in_ranges(path, 3)
    with pytest.raises(
        Unsplittable, match="^byte range 1 starts at offset 372, the one before it stopped at 256$"
    ):
        joined_ranges(scans)


def test_a_capture_cut_short_ends_in_its_last_range(tmp_path: Path) -> None:
    path = tmp_path / "cut.pcap"
    path.write_bytes(CAPTURES[-1].read_bytes()[:-10])
    got, scans = scan_in_ranges(path, 4)
    assert [(ts, lt, d) for _o, ts, lt, d in got] == read_packets(path)
    assert scans[-1].damaged == f"last record cut short at offset {got[-1][0] + 16 + len(got[-1][3])}"
    assert joined_ranges(scans) == 4


def test_what_cannot_be_split_says_why(tmp_path: Path) -> None:
    gz = tmp_path / "cap.pcap.gz"
    gz.write_bytes(gzip.compress(CAPTURES[-1].read_bytes()))
    late_interface = tmp_path / "late.pcapng"
    late_interface.write_bytes(shb() + idb(1) + epb(0, T, b"a") + idb(101) + epb(1, T, b"b"))
    simple = tmp_path / "simple.pcapng"
    simple.write_bytes(shb() + idb(1) + spb(b"abc"))
    with pytest.raises(Unsplittable, match="^gzip-compressed$"):
        SplitCapture(str(gz))
    for path, why in (
        (late_interface, "pcapng interfaces or sections change after the first packet"),
        (simple, "pcapng Simple Packet Blocks (no timestamps of their own)"),
    ):
        with SplitCapture(str(path)) as capture, pytest.raises(Unsplittable, match=re.escape(why)):
            capture.walk(0, capture.size, RangeScan())
    rows = index_range(str(gz), 0, 0, gz.stat().st_size, 2)
    assert [(r["bucket"], r["unsplittable"]) for r in rows] == [(-1, "gzip-compressed")]


def test_pcapng_packet_blocks_and_skipped_blocks(tmp_path: Path) -> None:
    path = tmp_path / "mixed.pcapng"
    path.write_bytes(
        shb() + idb(1) + idb(113, tsresol=9)
        + epb(0, T * 10**6, b"one") + block(4, b"\x00" * 4) + packet_block(1, T * 10**9 + 5, b"two")
        + epb(7, T * 10**6, b"bad interface") + epb(1, T * 10**9 + 9_000, b"three")
    )  # fmt: skip
    records, scans = scan_in_ranges(path, 1)
    assert (
        [(ts, lt, d) for _o, ts, lt, d in records]
        == read_packets(path)
        == [
            (T * 10**6, 1, b"one"),
            (T * 10**6, 113, b"two"),
            (T * 10**6 + 9, 113, b"three"),
        ]
    )


@pytest.mark.parametrize(
    "capture", [*CAPTURES, ROOT / "tests/data/hostile/ip_fragments.pcap"], ids=lambda p: p.name
)
def test_vector_flow_buckets_equal_the_per_packet_ones(capture: Path) -> None:
    with SplitCapture(str(capture)) as split:
        frames = split.walk(0, split.size, RangeScan())
        packets = list(split.at(frames.offsets))
        assert flow_buckets(split.data, frames, 5).tolist() == [
            flow_bucket(lt, d, 5) for _ts, lt, d in packets
        ]


def test_index_rows_give_each_bucket_its_offsets_in_file_order() -> None:
    path = str(CAPTURES[-1])
    rows = index_range(path, 0, 0, CAPTURES[-1].stat().st_size, 3)
    summary, *buckets = rows
    assert {k: summary[k] for k in ("bucket", "first", "stop", "damaged")} == {
        "bucket": -1,
        "first": 24,
        "stop": CAPTURES[-1].stat().st_size,
        "damaged": "",
    }
    assert summary["first_ts"] == read_packets(CAPTURES[-1])[0][0]
    import array

    offsets = {}
    for row in buckets:
        offsets[row["bucket"]] = array.array("q", row["offsets"]).tolist()
    every = sorted(o for offs in offsets.values() for o in offs)
    assert len(every) == len(read_packets(CAPTURES[-1])) and all(o == sorted(o) for o in offsets.values())
    with SplitCapture(path) as split:
        for bucket, offs in offsets.items():
            assert {flow_bucket(lt, d, 3) for _ts, lt, d in split.at(offs)} == {bucket}


def test_range_count_is_one_per_core_within_bounds() -> None:
    from kwsniff.spark.pipeline import range_count

    mib, gib = 1 << 20, 1 << 30
    assert range_count(0, 16) == 1
    assert range_count(100 * mib, 16) == 1  # ranges of 64 MiB at least
    assert range_count(2_600 * mib, 16) == 16
    assert range_count(2_600 * mib, 2) == 4  # ranges of 1 GiB at most, in whole waves of 2
    assert range_count(10 * gib, 2) == 10
    assert range_count(10 * gib, 4) == 12
    assert range_count(10 * gib, 64) == 64
    assert range_count(1_000, 2, range_bytes=300) == 4


def test_fine_buckets_are_grouped_by_bytes() -> None:
    from collections import Counter

    from kwsniff.spark.pipeline import balanced

    # 16 connections of equal size in hash buckets that `% 2` would split 9 to 7; by bytes, 8 and 8.
    load = Counter({b: 100 for b in (3, 5, 7, 9, 11, 13, 15, 17, 19, 2, 4, 6, 8, 10, 12, 14)})
    assert [len(g) for g in balanced(load, 2)] == [8, 8]
    assert balanced(Counter({1: 50, 2: 30, 3: 20, 4: 20, 5: 10}), 2) == [[1, 4], [2, 3, 5]]  # 70 / 60
    assert balanced(Counter({7: 5}), 4) == [[7]]  # never more groups than buckets with traffic
    assert balanced(Counter(), 4) == []


def test_auto_buckets_split_only_captures_bigger_than_a_core_share() -> None:
    from kwsniff.spark.pipeline import auto_buckets

    mib = 1 << 20
    assert auto_buckets([2_650 * mib], 2) == [2]  # one big capture: every core
    assert auto_buckets([2_650 * mib], 16) == [16]
    assert auto_buckets([82 * mib] * 52, 2) == [1] * 52  # a fleet of equals keeps the cores busy
    assert auto_buckets([10_240 * mib] + [10 * mib] * 100, 16) == [15] + [1] * 100  # 10 GiB of 11,240 MiB
    assert auto_buckets([300 * mib, 300 * mib], 4) == [2, 2]
    assert auto_buckets([100 * mib], 8) == [1]  # under 256 MiB: never split
    assert auto_buckets([0, 0], 2) == [1, 1]
    assert auto_buckets([], 2) == []


def relinked(capture: Path, out: Path, linktype: int) -> Path:
    """``capture``'s Ethernet frames behind another link header: Linux cooked v1 (113) or v2
    (276), raw IP (101), or 802.1Q-tagged Ethernet (1, which numpy leaves to the per-packet path)."""
    records = []
    for ts, _lt, frame in read_packets(capture):
        ethertype, ip = frame[12:14], frame[14:]
        if linktype == 113:
            frame = struct.pack(">HHH", 0, 1, 6) + frame[6:12] + b"\0\0" + ethertype + ip
        elif linktype == 276:
            frame = ethertype + b"\0\0" + struct.pack(">IHBB", 1, 1, 0, 6) + frame[6:12] + b"\0\0" + ip
        elif linktype == 101:
            frame = ip
        else:
            frame = frame[:12] + b"\x81\x00\x00\x07" + frame[12:]
        records.append(struct.pack("<IIII", ts // 10**6, ts % 10**6, len(frame), len(frame)) + frame)
    out.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype) + b"".join(records))
    return out


@pytest.mark.parametrize(("linktype", "name"), [(113, "sll"), (276, "sll2"), (101, "raw"), (1, "vlan")])
def test_a_flow_keeps_its_bucket_whatever_the_link_header(tmp_path: Path, linktype: int, name: str) -> None:
    def buckets(path: Path) -> list[int]:
        with SplitCapture(str(path)) as split:
            frames = split.walk(0, split.size, RangeScan())
            vector = flow_buckets(split.data, frames, 4096).tolist()
            assert vector == [flow_bucket(lt, d, 4096) for _ts, lt, d in split.at(frames.offsets)]
            return vector

    ethernet = buckets(CAPTURES[-1])
    assert buckets(relinked(CAPTURES[-1], tmp_path / f"{name}.pcap", linktype)) == ethernet
    assert len(set(ethernet)) == 16  # quickstart's 16 connections, each its own fine bucket
