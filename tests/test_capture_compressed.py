"""zstd, lz4 (frame format) and xz captures are read as streams, like gzip: detected by magic bytes,
every good packet kept before a cut or damage, which is reported in one line."""

from __future__ import annotations

import lzma
from collections.abc import Callable
from pathlib import Path

import lz4.frame
import pytest
import zstandard
from click.testing import CliRunner

from kwsniff.capture import open_capture
from kwsniff.cli import main
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink

CAPTURE = Path(__file__).parent / "data" / "captures" / "produce_codecs.pcap"
PLAIN = CAPTURE.read_bytes()


def zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(data)


def lz4f(data: bytes) -> bytes:
    # 64 KiB blocks, as `lz4 -B4` writes them, so that a cut file still holds whole blocks.
    return lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB)


def xz(data: bytes) -> bytes:
    return lzma.compress(data, format=lzma.FORMAT_XZ)


COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {"zstd": zstd, "lz4": lz4f, "xz": xz}


def tables(path: Path) -> dict[str, list[dict]]:
    sink = ListSink()
    run_capture(path, sink, SessionOptions(), name="codecs")
    return sink.tables


@pytest.fixture(scope="module")
def plain_tables() -> dict[str, list[dict]]:
    return tables(CAPTURE)


@pytest.mark.parametrize("kind", list(COMPRESSORS))
def test_compressed_capture_gives_the_plain_tables(
    kind: str, tmp_path: Path, plain_tables: dict[str, list[dict]]
) -> None:
    path = tmp_path / "codecs.pcap.bin"  # the name says nothing: the magic bytes decide
    path.write_bytes(COMPRESSORS[kind](PLAIN))
    with open_capture(path) as reader:
        assert (reader.compression, reader.compressed) == (kind, True)
    assert tables(path) == plain_tables


@pytest.mark.parametrize("kind", list(COMPRESSORS))
def test_concatenated_frames_are_one_stream(kind: str, tmp_path: Path) -> None:
    compress = COMPRESSORS[kind]
    padding = b"\x00" * 8 if kind == "xz" else b""  # xz stream padding, a multiple of 4 bytes
    path = tmp_path / "joined"
    path.write_bytes(compress(PLAIN[:100_000]) + padding + compress(PLAIN[100_000:]))
    with open_capture(path) as reader:
        count = sum(1 for _ in reader.packets())
        assert not reader.truncated
    with open_capture(CAPTURE) as reader:
        assert count == sum(1 for _ in reader.packets())


@pytest.mark.parametrize("kind", list(COMPRESSORS))
def test_cut_stream_keeps_the_good_packets_and_says_where_it_stopped(kind: str, tmp_path: Path) -> None:
    compressed = COMPRESSORS[kind](PLAIN)
    cut = len(compressed) // 2
    path = tmp_path / "cut"
    path.write_bytes(compressed[:cut])
    with open_capture(path) as reader:
        count = sum(1 for _ in reader.packets())
        assert reader.truncated
        assert reader.warnings[0] == (
            f"reading stopped after {cut} bytes of the file: {kind} stream ends before its end marker"
        )
    assert 0 < count < 407


def test_damaged_zstd_data_is_one_line_error_on_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "damaged.zst"
    data = bytearray(zstd(PLAIN))
    data[8:40] = b"\xff" * 32  # inside the first block
    path.write_bytes(bytes(data))
    result = CliRunner().invoke(main, ["read", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert result.output.startswith(f"kwsniff: error: {path}: damaged zstd data (zstd data damaged (")
    assert result.output.count("\n") == 1


def test_show_reads_an_lz4_capture(tmp_path: Path) -> None:
    path = tmp_path / "codecs.pcap.lz4"
    path.write_bytes(lz4f(PLAIN))
    result = CliRunner().invoke(main, ["show", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert len(result.output.splitlines()) == 111  # one line per exchange, as for the plain file
