"""Opening captures: sniff the format from the first bytes (never the file name), undo gzip, zstd, lz4
or xz, check headers."""

from __future__ import annotations

import os
import zlib
from typing import BinaryIO

from kwsniff.capture.decompress import DecompressingReader, compression_of
from kwsniff.capture.gunzip import GunzipReader
from kwsniff.capture.pcap import PcapReader, is_pcap
from kwsniff.capture.pcapng import PcapngReader, is_pcapng
from kwsniff.capture.reader import CaptureError, CaptureReader, CountingReader, Readable, read_exact

GZIP_MAGIC = b"\x1f\x8b"


STDIN = "-"


class StreamFile:
    """A pipe or terminal read as it fills: ``read(n)`` returns the bytes available now (at most n,
    waiting only when there are none), so packets are decoded as they arrive, not per 1 MiB chunk."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def read(self, size: int = -1) -> bytes:
        return os.read(self._fd, size if size >= 0 else 1 << 20)

    def close(self) -> None:
        """stdin stays open: it belongs to the process."""


def open_stream(fd: int, name: str = "stdin") -> CaptureReader:
    """A reader over a pcap or pcapng stream on ``fd`` (`kwsniff read -`: `tcpdump -w - | kwsniff read -`)."""
    return _open(StreamFile(fd), name, name, None)  # type: ignore[arg-type]


def open_capture(path: str | os.PathLike[str]) -> CaptureReader:
    """A reader for the pcap or pcapng file (optionally compressed by gzip, zstd, lz4 or xz) at path, or standard input for
    `-`; CaptureError if it is none."""
    shown = os.fspath(path)
    if shown == STDIN:
        return open_stream(0)
    try:
        fileobj = open(path, "rb")  # noqa: SIM115 - the reader owns and closes it
    except FileNotFoundError:
        raise CaptureError(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise CaptureError(f"{shown}: is a directory, not a capture file") from None
    except PermissionError:
        raise CaptureError(f"{shown}: permission denied") from None
    except OSError as err:
        raise CaptureError(f"{shown}: cannot open ({err.strerror or err})") from None
    try:
        size = os.fstat(fileobj.fileno()).st_size
        return _open(fileobj, shown, os.path.basename(shown), size)
    except BaseException:
        fileobj.close()
        raise


def open_capture_file(fileobj: BinaryIO, name: str) -> CaptureReader:
    """A reader over any binary file object positioned at the start of a capture; name labels the rows."""
    return _open(fileobj, name, os.path.basename(name), _remaining_size(fileobj))


def _remaining_size(fileobj: BinaryIO) -> int | None:
    try:
        if not fileobj.seekable():
            return None
        here = fileobj.tell()
        size = fileobj.seek(0, os.SEEK_END) - here
        fileobj.seek(here)
        return size
    except (OSError, AttributeError, ValueError):
        return None


def _open(fileobj: BinaryIO, shown: str, name: str, size: int | None) -> CaptureReader:
    raw = CountingReader(fileobj)
    head = _read_head(raw, shown)
    if not head:
        raise CaptureError(f"{shown}: empty file")
    data: Readable = raw
    inside = ""
    kind = "gzip" if head.startswith(GZIP_MAGIC) else compression_of(head)
    if kind is not None:
        raw.unread(head)
        try:
            data = GunzipReader(raw) if kind == "gzip" else DecompressingReader(raw, kind)
        except ImportError as err:
            raise CaptureError(
                f"{shown}: a {kind} file, and {kind} support is not installed ({err})"
            ) from None
        inside = f"{kind} content "
        try:
            head = read_exact(data, 4)
        except (OSError, EOFError, zlib.error) as err:
            raise CaptureError(f"{shown}: damaged {kind} data ({err})") from None
        if not head:
            raise CaptureError(f"{shown}: empty file (after {kind} decompression)")
    reader: CaptureReader
    try:
        if is_pcap(head):
            reader = PcapReader(shown, size, raw, data, head)
        elif is_pcapng(head):
            reader = PcapngReader(shown, size, raw, data, head)
        else:
            raise CaptureError(f"{shown}: not a pcap or pcapng file ({inside}starts with {head!r})")
    except (OSError, EOFError, zlib.error) as err:
        # The file header itself is damaged or cut short inside the gzip stream: nothing to salvage.
        raise CaptureError(f"{shown}: damaged {kind} data in the file header ({err})") from None
    reader.name = name
    reader.compression = kind
    return reader


def _read_head(raw: CountingReader, shown: str) -> bytes:
    try:
        return read_exact(raw, 4)
    except IsADirectoryError:
        raise CaptureError(f"{shown}: is a directory, not a capture file") from None
    except OSError as err:
        raise CaptureError(f"{shown}: cannot read ({err.strerror or err})") from None
