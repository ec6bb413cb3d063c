"""gzip decompression that keeps every byte decompressed before the damage.

gzip.GzipFile raises from read() when a stream is cut short or damaged and drops what that call had
already decompressed, up to a whole read's worth of packets. A capture still being written, or copied in
part, is exactly such a stream, so we drive zlib ourselves and report the damage only after handing on
the good bytes.
"""

from __future__ import annotations

import zlib

from kwsniff.capture.reader import CHUNK_SIZE, Readable

_GZIP_WBITS = 31  # zlib's "gzip header and trailer" mode (RFC 1952)
# After a zlib error the failed call's input (at most one read) is fed again byte by byte, so every
# byte before the damage is kept; it happens once per damaged file.
_SALVAGE_PIECE = 1


class GunzipReader:
    """A readable over the decompressed content of one or more concatenated gzip members (RFC 1952 2.2).

    read() returns the good bytes first and raises (zlib.error or EOFError) only on the call after them.
    """

    def __init__(self, compressed: Readable) -> None:
        self._compressed = compressed
        self._input = b""
        self._output = b""  # decompressed beyond what the last read asked for
        self._member: zlib._Decompress | None = None
        self._input_done = False
        self._error: Exception | None = None

    def read(self, size: int = -1) -> bytes:
        limit = size if size >= 0 else 1 << 62
        out = self._output
        while len(out) < limit and self._error is None:
            if not self._input and (self._input_done or not self._fill()):
                break
            if self._member is None:
                # Some tools pad gzip files with zeros after the last member; gzip(1) ignores them.
                self._input = self._input.lstrip(b"\x00")
                if not self._input:
                    continue
                self._member = zlib.decompressobj(_GZIP_WBITS)
            out += self._inflate(self._member, limit - len(out))
        if not out and self._error is not None:
            raise self._error
        self._output = out[limit:]
        return out[:limit]

    def _inflate(self, member: zlib._Decompress, want: int) -> bytes:
        saved = member.copy()
        try:
            out = member.decompress(self._input, want)
        except zlib.error as err:
            self._error = err
            return self._salvage(saved)
        if member.eof:
            self._input = member.unused_data
            self._member = None
        else:
            self._input = member.unconsumed_tail
        return out

    def _salvage(self, member: zlib._Decompress) -> bytes:
        parts = []
        data = self._input
        for start in range(0, len(data), _SALVAGE_PIECE):
            try:
                parts.append(member.decompress(data[start : start + _SALVAGE_PIECE]))
            except zlib.error:
                break
            if member.eof:
                break
        self._input = b""
        self._input_done = True
        return b"".join(parts)

    def _fill(self) -> bool:
        self._input = self._compressed.read(CHUNK_SIZE)
        if self._input:
            return True
        self._input_done = True
        if self._member is not None:
            self._error = EOFError("gzip stream ends before its end-of-stream marker")
        return False
