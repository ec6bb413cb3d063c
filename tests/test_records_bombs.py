"""Decompression output caps: a bomb is counted in capped_batches and never allocates past the cap."""

from __future__ import annotations

import functools
import struct
import subprocess
import sys
import textwrap
import tracemalloc
import zlib
from pathlib import Path

import cramjam
import pytest
from kafka.record.util import calc_crc32c
from test_records_legacy import _message

from kwsniff.records import summarize_records
from kwsniff.records._lz4frame import xxh32

TESTS = Path(__file__).resolve().parent
GIB = 1 << 30
CAP = 8 << 20
MIB = 1 << 20


def zstd_zeros(size: int) -> bytes:
    """A zstd frame of RLE blocks (RFC 8878 3.1.1.2) with no content size, as streaming writers leave it."""
    block = 128 << 10
    frame = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")  # magic; no content size; window 2**17
    for start in range(0, size, block):
        last = start + block >= size
        header = int(last) | (1 << 1) | (min(block, size - start) << 3)
        frame += header.to_bytes(3, "little") + b"\x00"
    return bytes(frame)


@functools.cache
def gzip_zeros(size: int) -> bytes:
    """gzip of size zero bytes built from one full-flush step repeated: cheap to make at any size."""
    step = MIB
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = compressor.compress(bytes(step)) + compressor.flush(zlib.Z_FULL_FLUSH)
    repeat = compressor.compress(bytes(step)) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(size // step):
        crc = zlib.crc32(bytes(step), crc)
    final_empty_block = b"\x03\x00"
    return (
        first + repeat * (size // step - 1) + final_empty_block + struct.pack("<II", crc, size & 0xFFFFFFFF)
    )


def lz4_zeros(size: int) -> bytes:
    """An lz4 frame of identical independent 64 KiB blocks of zeros."""
    block = bytes(cramjam.lz4.compress_block(bytes(64 << 10), store_size=False))
    descriptor = b"\x60\x40"  # version 1, independent blocks, no checksums; 64 KiB blocks
    header = b"\x04\x22\x4d\x18" + descriptor + bytes([(xxh32(descriptor) >> 8) & 0xFF])
    return header + (struct.pack("<I", len(block)) + block) * (size // (64 << 10)) + b"\x00\x00\x00\x00"


def xerial_zeros(size: int) -> bytes:
    block = bytes(cramjam.snappy.compress_raw(bytes(32 << 10)))
    header = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    return header + (struct.pack(">i", len(block)) + block) * (size // (32 << 10))


def v2_batch(codec: int, payload: bytes, record_count: int = 1) -> bytes:
    after_crc = struct.pack(">hiqqqhii", codec, record_count - 1, 0, 0, -1, -1, -1, record_count) + payload
    return struct.pack(">qiiBI", 0, 9 + len(after_crc), 0, 2, calc_crc32c(after_crc)) + after_crc


def test_bomb_builders_make_what_they_claim() -> None:
    assert bytes(cramjam.zstd.decompress(zstd_zeros(300 << 10))) == bytes(300 << 10)
    assert zlib.decompress(gzip_zeros(4 * MIB), 31) == bytes(4 * MIB)
    assert bytes(cramjam.lz4.decompress(lz4_zeros(256 << 10))) == bytes(256 << 10)
    xerial = xerial_zeros(64 << 10)
    (first_block_size,) = struct.unpack_from(">i", xerial, 16)
    assert len(xerial) == 16 + 2 * (4 + first_block_size)
    assert bytes(cramjam.snappy.decompress_raw(xerial[20 : 20 + first_block_size])) == bytes(32 << 10)


BOMBS = {
    "gzip": (1, lambda: gzip_zeros(GIB)),
    "snappy-raw": (2, lambda: bytes(cramjam.snappy.compress_raw(bytes(64 * MIB)))),
    "snappy-xerial": (2, lambda: xerial_zeros(64 * MIB)),
    "lz4": (3, lambda: lz4_zeros(GIB)),
    "zstd": (4, lambda: zstd_zeros(GIB)),
}


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_v2_bomb_is_capped_and_keeps_the_header_count(bomb: str) -> None:
    codec, make = BOMBS[bomb]
    data = v2_batch(codec, make(), record_count=5)
    tracemalloc.start()
    try:
        summary = summarize_records(data, want_records=True, max_decompressed=CAP)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (summary.capped_batches, summary.record_count, summary.records, summary.errors) == (1, 5, [], [])
    assert peak < 2 * CAP


@pytest.mark.parametrize("bomb", ["gzip", "snappy-xerial", "lz4"])
def test_legacy_wrapper_bomb_is_capped_and_its_records_uncounted(bomb: str) -> None:
    codec, make = BOMBS[bomb]
    data = _message(41, 1, codec, 0, None, make())
    summary = summarize_records(data, max_decompressed=CAP)
    assert (summary.capped_batches, summary.record_count, summary.batch_count, summary.last_offset) == (
        1,
        0,
        1,
        41,
    )


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_output_of_exactly_the_cap_is_not_capped(codec: int) -> None:
    body = b"\x00" * 100  # not a valid record, so the layer reports it after decompressing in full
    payload = {
        1: lambda: zlib.compress(body, wbits=31),
        2: lambda: bytes(cramjam.snappy.compress_raw(body)),
        3: lambda: bytes(cramjam.lz4.compress(body)),
        4: lambda: bytes(cramjam.zstd.compress(body)),
    }[codec]()
    exact = summarize_records(v2_batch(codec, payload), want_records=True, max_decompressed=100)
    below = summarize_records(v2_batch(codec, payload), want_records=True, max_decompressed=99)
    assert (exact.capped_batches, below.capped_batches) == (0, 1)
    assert exact.errors != []


def test_rust_side_memory_stays_under_the_cap() -> None:
    # tracemalloc cannot see cramjam's own allocations, so measure the whole process's peak instead.
    script = textwrap.dedent(
        f"""
        import resource, sys
        sys.path[:0] = [{str(TESTS)!r}, {str(TESTS.parent)!r}]
        from test_records_bombs import lz4_zeros, v2_batch, zstd_zeros
        from kwsniff.records import summarize_records
        bombs = [v2_batch(4, zstd_zeros({GIB})), v2_batch(3, lz4_zeros({GIB}))]
        summarize_records(v2_batch(4, zstd_zeros(1000)), want_records=True)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for bomb in bombs:
            assert summarize_records(bomb, want_records=True, max_decompressed={CAP}).capped_batches == 1
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    peak_growth_kib = int(done.stdout.strip())
    assert peak_growth_kib * 1024 < 3 * CAP
