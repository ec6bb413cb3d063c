"""Opening captures: sniff the format from the first bytes (never the file name), undo gzip, zstd, lz4
or xz, check headers."""

from __future__ import annotations

import os
import stat
import zlib
from typing import BinaryIO

from kwsniff.capture import pipes
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


class PipeFile(StreamFile):
    """A named pipe read as it fills (StreamFile), closed with its reader."""

    def close(self) -> None:
        os.close(self._fd)


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
        # Non-blocking: opening a FIFO nobody has opened for writing would otherwise wait for ever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise CaptureError(f"{shown}: no such file") from None
    except PermissionError:
        raise CaptureError(f"{shown}: permission denied") from None
    except OSError as err:
        # A name of kilobytes (ENAMETOOLONG) would make the error line a page.
        cut = shown if len(shown) <= 200 else shown[:200] + "..."
        raise CaptureError(f"{cut}: cannot open ({err.strerror or err})") from None
    try:
        fileobj, first = _file_of(fd, shown)
    except BaseException:
        os.close(fd)
        raise
    try:
        return _open(
            fileobj,
            shown,
            os.path.basename(shown),
            None if first is not None else os.fstat(fd).st_size,
            first,
        )
    except BaseException:
        fileobj.close()
        raise


def check_capture(path: str | os.PathLike[str]) -> None:
    """Open and close the capture at ``path`` to check its format (CaptureError if it is none). A
    named pipe is not opened: what it carries would be lost to the check; it is checked when read."""
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode):
            return
    except OSError:
        pass  # open_capture says why
    open_capture(path).close()


def _file_of(fd: int, shown: str) -> tuple[BinaryIO, bytes | None]:
    """The file object of a regular file, or of a FIFO with a writer (a stream, read as it fills, with
    the bytes read while learning that it has one); anything else is refused."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode):
        raise CaptureError(f"{shown}: is a directory, not a capture file")
    if stat.S_ISFIFO(mode):
        first = pipes.first_bytes(fd, 1 << 16)
        if first is None:
            raise CaptureError(f"{shown}: a pipe nobody writes to (a stream goes to standard input: `-`)")
        os.set_blocking(fd, True)
        return PipeFile(fd), first  # type: ignore[return-value]
    if not stat.S_ISREG(mode):
        raise CaptureError(f"{shown}: a device or socket, not a capture file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb"), None


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


def _open(
    fileobj: BinaryIO, shown: str, name: str, size: int | None, first: bytes | None = None
) -> CaptureReader:
    raw = CountingReader(fileobj)
    if first:
        raw.unread(first)
        raw.consumed += len(first)
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
