"""Opening captures: format by magic (not by name), gzip, and one-line errors for everything else."""

from __future__ import annotations

import gzip
import io
import os
import struct
import zlib
from pathlib import Path

import pytest

from kwsniff.capture import CaptureError, open_capture, open_capture_file

CAPTURES = Path(__file__).parent / "data" / "captures"

PCAP = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + struct.pack("<IIII", 7, 8, 3, 3) + b"abc"
PCAPNG = (
    struct.pack("<IIIHHqI", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1, 28)
    + struct.pack("<IIHHII", 1, 20, 1, 0, 0, 20)
    + struct.pack("<IIIIIII", 6, 36, 0, 0, 7_000_008, 3, 3)
    + b"abc\x00"
    + struct.pack("<I", 36)
)


def write(tmp_path: Path, name: str, blob: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(blob)
    return path


@pytest.mark.parametrize("blob", [PCAP, PCAPNG], ids=["pcap", "pcapng"])
def test_format_comes_from_magic_whatever_the_extension(tmp_path: Path, blob: bytes) -> None:
    with open_capture(write(tmp_path, "capture.txt", blob)) as reader:
        assert list(reader.packets()) == [(7_000_008, 1, b"abc")]


@pytest.mark.parametrize("blob", [PCAP, PCAPNG], ids=["pcap", "pcapng"])
def test_gzip_capture_is_read_transparently_and_progress_counts_compressed_bytes(
    tmp_path: Path, blob: bytes
) -> None:
    compressed = gzip.compress(blob)
    path = write(tmp_path, "capture.pcap", compressed)  # no .gz in the name: the magic decides
    with open_capture(path) as reader:
        assert reader.name == "capture.pcap"
        assert reader.size == len(compressed)
        assert list(reader.packets()) == [(7_000_008, 1, b"abc")]
        assert reader.tell() == len(compressed)
        assert reader.truncated is False


def test_cut_gzip_stream_ends_as_truncated_not_as_an_exception(tmp_path: Path) -> None:
    records = b"".join(struct.pack("<IIII", i, 0, 100, 100) + bytes([i]) * 100 for i in range(200))
    compressed = gzip.compress(PCAP[:24] + records)
    cut = len(compressed) // 2
    with open_capture(write(tmp_path, "cut.pcap.gz", compressed[:cut])) as reader:
        packets = list(reader.packets())
    assert reader.truncated is True
    # Everything zlib could decompress from the first half is delivered, up to the last whole record.
    whole = len(zlib.decompressobj(31).decompress(compressed[:cut])[24:]) // 116
    assert whole > 50
    assert packets == [(i * 1_000_000, 1, bytes([i]) * 100) for i in range(whole)]
    assert reader.warnings == [
        f"reading stopped after {cut} bytes of the file: gzip stream ends before its end-of-stream marker",
        f"last record cut short at offset {24 + whole * 116}",
    ]


def test_damaged_gzip_data_stops_after_the_good_packets(tmp_path: Path) -> None:
    records = b"".join(struct.pack("<IIII", i, 0, 100, 100) + bytes(range(i, i + 100)) for i in range(50))
    compressed = bytearray(gzip.compress(PCAP[:24] + records, compresslevel=0))
    compressed[len(compressed) - 8] ^= 0xFF  # the CRC-32 in the trailer
    with open_capture(write(tmp_path, "bad.pcap.gz", bytes(compressed))) as reader:
        packets = list(reader.packets())
    assert len(packets) == 50
    assert reader.truncated is True
    assert reader.warnings == [
        f"reading stopped after {len(compressed)} bytes of the file: Error -3 while decompressing data: incorrect data check"
    ]


def test_concatenated_gzip_members_and_zero_padding_are_one_stream(tmp_path: Path) -> None:
    blob = PCAP + struct.pack("<IIII", 9, 10, 2, 2) + b"de"
    compressed = gzip.compress(blob[:30]) + gzip.compress(blob[30:]) + b"\x00" * 512
    with open_capture(write(tmp_path, "members.pcap", compressed)) as reader:
        assert list(reader.packets()) == [(7_000_008, 1, b"abc"), (9_000_010, 1, b"de")]
        assert (reader.truncated, reader.warnings) == (False, [])


def test_file_object_reader_reports_remaining_size_and_name(tmp_path: Path) -> None:
    reader = open_capture_file(io.BytesIO(PCAP), "s3://bucket/captures/host1.pcap")
    assert (reader.name, reader.size) == ("host1.pcap", len(PCAP))
    assert reader.stats == {"records": 0}
    assert len(list(reader.packets())) == 1
    assert reader.stats == {"records": 1}


def test_closing_the_reader_closes_the_file(tmp_path: Path) -> None:
    fileobj = io.BytesIO(PCAP)
    with open_capture_file(fileobj, "x.pcap"):
        pass
    assert fileobj.closed


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"", "{path}: empty file"),
        (b"hello world\n", "{path}: not a pcap or pcapng file (starts with b'hell')"),
        (b"PK\x03", "{path}: not a pcap or pcapng file (starts with b'PK\\x03')"),
        (PCAP[:10], "{path}: pcap file header cut short (10 of 24 bytes)"),
        (PCAP[:4] + b"\x03\x00" + PCAP[6:], "{path}: unsupported pcap version 3.4"),
        (PCAPNG[:12], "{path}: pcapng section header cut short (12 of 16 bytes)"),
        (PCAPNG[:8] + b"ABCD" + PCAPNG[12:], "{path}: bad pcapng byte-order magic b'ABCD'"),
        (PCAPNG[:12] + b"\x02\x00" + PCAPNG[14:], "{path}: unsupported pcapng version 2.0"),
        (gzip.compress(b""), "{path}: empty file (after gzip decompression)"),
        (gzip.compress(b"just text"), "{path}: not a pcap or pcapng file (gzip content starts with b'just')"),
        (
            b"\x1f\x8b\x08\x00garbage",
            "{path}: damaged gzip data (gzip stream ends before its end-of-stream marker)",
        ),
    ],
    ids=[
        "empty",
        "text",
        "zip",
        "short_pcap_header",
        "pcap_version",
        "short_shb",
        "byte_order_magic",
        "pcapng_version",
        "empty_gzip",
        "gzipped_text",
        "broken_gzip",
    ],
)
def test_files_that_are_not_captures_give_one_line_errors(tmp_path: Path, blob: bytes, message: str) -> None:
    path = write(tmp_path, "input.bin", blob)
    with pytest.raises(CaptureError) as caught:
        open_capture(path)
    assert str(caught.value) == message.format(path=path)
    assert "\n" not in str(caught.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match=r"^.*nope\.pcap: no such file$"):
        open_capture(tmp_path / "nope.pcap")


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(CaptureError) as caught:
        open_capture(tmp_path)
    assert str(caught.value) == f"{tmp_path}: is a directory, not a capture file"


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "secret.pcap", PCAP)
    if os.geteuid() == 0:
        # root reads anything, so make opening this file refuse the way it would for a normal user.
        real_open = os.open

        def refuse(name: str | os.PathLike[str], *args: int, **kwargs: int) -> int:
            if os.fspath(name) == os.fspath(path):
                raise PermissionError(13, "Permission denied")
            return real_open(name, *args, **kwargs)

        monkeypatch.setattr(os, "open", refuse)
    else:
        path.chmod(0)
    with pytest.raises(CaptureError) as caught:
        open_capture(path)
    assert str(caught.value) == f"{path}: permission denied"


def test_real_capture_through_gzip_matches_the_plain_file(tmp_path: Path) -> None:
    plain = (CAPTURES / "acks_modes.pcap").read_bytes()
    with open_capture(write(tmp_path, "acks_modes.pcap.gz", gzip.compress(plain))) as reader:
        packets = list(reader.packets())
    assert len(packets) == 360
    assert packets[0][0] == 1795367428_740545
    with open_capture(CAPTURES / "acks_modes.pcap") as reader:
        assert list(reader.packets()) == packets
