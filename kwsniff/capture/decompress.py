"""zstd, lz4 (frame format) and xz captures read as streams, beside gzip (kwsniff.capture.gunzip).

Each is detected by its magic bytes (never the file name). Like GunzipReader, read() hands on every
byte decompressed before damage or a cut, and raises only on the call after them. Input is fed to
the decompressor in small pieces so that one call never expands past a bounded size, whatever the
ratio a damaged or hostile file claims (a zstd RLE block turns 4 bytes into 128 KiB).

zstd through the `zstandard` package and lz4 frames through `lz4` (cramjam's decompressors need whole
frames in memory); xz through the standard library's lzma. All three are imported only when such a
file is opened.
"""

from __future__ import annotations

import lzma
from collections.abc import Callable
from typing import Any

from kwsniff.capture.reader import CHUNK_SIZE, Readable

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
LZ4_MAGIC = b"\x04\x22\x4d\x18"
XZ_MAGIC = b"\xfd\x37\x7a\x58"  # then "Z\0"
# Bytes fed per decompress call: at zstd's worst ratio (32768:1) that is 8 MiB out per call, held
# with what a read joins of it, well inside the 64 MiB --memory-limit's share (at 1024, 32 MiB a call
# took a read of 64 MiB zero records ~90 MiB over its baseline: tests/test_input_bounds.py). A call
# costs ~1 µs: 4 s a GB of compressed input.
PIECE = 256


def compression_of(head: bytes) -> str | None:
    """'zstd', 'lz4' or 'xz' for a file starting with ``head`` (4 bytes), None for anything else."""
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    if head.startswith(LZ4_MAGIC):
        return "lz4"
    if head.startswith(XZ_MAGIC):
        return "xz"
    return None


def _decompressor_factory(kind: str) -> tuple[Callable[[], Any], tuple[type[BaseException], ...]]:
    if kind == "zstd":
        import zstandard

        dctx = zstandard.ZstdDecompressor()
        return dctx.decompressobj, (zstandard.ZstdError,)
    if kind == "lz4":
        import lz4.frame

        return lz4.frame.LZ4FrameDecompressor, (RuntimeError, ValueError)
    return lzma.LZMADecompressor, (lzma.LZMAError,)


class DecompressingReader:
    """A readable over the decompressed content of concatenated zstd, lz4 or xz frames/streams."""

    def __init__(self, compressed: Readable, kind: str) -> None:
        self.kind = kind
        self._compressed = compressed
        self._new, self._errors = _decompressor_factory(kind)
        self._input = memoryview(b"")
        self._pos = 0
        # Decompressed bytes not yet handed on, as a view: a call that made 8 MiB hands them on a
        # read at a time without copying the rest on every read.
        self._output = memoryview(b"")
        self._frame: Any = None
        self._input_done = False
        self._error: Exception | None = None

    def read(self, size: int = -1) -> bytes:
        limit = size if size >= 0 else 1 << 62
        if len(self._output) >= limit:
            out = bytes(self._output[:limit])
            self._output = self._output[limit:]
            return out
        parts: list[bytes | memoryview] = [self._output]
        have = len(self._output)
        while have < limit and self._error is None:
            if self._pos >= len(self._input) and (self._input_done or not self._fill()):
                break
            if self._frame is None:
                if self.kind == "xz" and not self._skip_padding():
                    continue
                self._frame = self._new()
            piece = self._input[self._pos : self._pos + PIECE]
            self._pos += len(piece)
            try:
                out = self._frame.decompress(piece)
            except self._errors as err:
                self._error = OSError(f"{self.kind} data damaged ({err})")
                break
            if out:
                parts.append(out)
                have += len(out)
            if self._frame.eof:
                # What the frame did not use belongs to the next frame (or stream).
                rest = bytes(self._frame.unused_data or b"")
                self._input = memoryview(rest + bytes(self._input[self._pos :]))
                self._pos = 0
                self._frame = None
        if have > limit:
            # Only the last part reaches past the limit: keep its tail as a view, join the rest.
            last = memoryview(parts[-1])
            cut = len(last) - (have - limit)
            parts[-1], self._output = last[:cut], last[cut:]
        else:
            self._output = memoryview(b"")
        out = b"".join(parts)
        if not out and self._error is not None:
            raise self._error
        return out

    def _skip_padding(self) -> bool:
        """xz stream padding (null bytes between streams); False when the input held nothing else."""
        data = self._input
        while self._pos < len(data) and data[self._pos] == 0:
            self._pos += 1
        return self._pos < len(data)

    def _fill(self) -> bool:
        data = self._compressed.read(CHUNK_SIZE)
        if data:
            self._input, self._pos = memoryview(data), 0
            return True
        self._input_done = True
        if self._frame is not None:
            self._error = EOFError(f"{self.kind} stream ends before its end marker")
        return False
