"""What every capture-file reader offers, whatever the format: packets, progress, damage report."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import BinaryIO, Protocol

# Records are parsed out of large reads rather than one read per record: the per-record cost is then a
# struct unpack and a slice, which is what makes a pure-Python reader keep up (see bench/bench_readers.py).
CHUNK_SIZE = 1 << 20

# A record longer than this is taken as corruption, never as a reason to allocate (libpcap refuses
# anything over 256 KiB for most link types; real records are at most the snaplen).
MAX_RECORD = 256 << 20
MIN_RECORD_LIMIT = 256 << 10

MAX_WARNINGS = 20

Packet = tuple[int, int, bytes]


class CaptureError(Exception):
    """A file that is not a readable capture. str(err) is one line naming the file and the problem."""


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class CountingReader:
    """The raw file as read so far: counts bytes for progress and lets the format sniffer put bytes back."""

    def __init__(self, fileobj: BinaryIO) -> None:
        self._file = fileobj
        self._pending = b""
        self.consumed = 0

    def read(self, size: int = -1) -> bytes:
        if self._pending:
            data = self._pending if size < 0 else self._pending[:size]
            self._pending = self._pending[len(data) :]
            return data
        data = self._file.read(size)
        self.consumed += len(data)
        return data

    def unread(self, data: bytes) -> None:
        self._pending = data + self._pending

    def close(self) -> None:
        self._file.close()


class CaptureReader:
    """A stream of (ts_us, linktype, data) from one capture file, read once from start to end.

    After (or during) iteration: ``truncated`` says whether the file ended or broke mid-record,
    ``warnings`` say where, ``stats`` count records and skipped blocks.
    """

    def __init__(self, name: str, size: int | None, raw: CountingReader, data: Readable, head: bytes) -> None:
        self.name = name
        self.size = size
        self.truncated = False
        self.warnings: list[str] = []
        self.stats: dict[str, int] = {"records": 0}
        # Called with the key log text of each pcapng Decryption Secrets Block (TLS keys), before the
        # packets that follow it are yielded.
        self.on_secrets: Callable[[bytes], None] | None = None
        self.compression: str | None = None  # gzip, zstd, lz4 or xz when the file is compressed
        # The largest record (pcapng: block) held to be read; set from --memory-limit before
        # packets() (kwsniff.memory.record_limit). A larger one is skipped in pieces and counted.
        self.max_record = MAX_RECORD
        self._raw = raw
        self._data = data
        # Bytes already read from the (decompressed) stream while checking the file header.
        self._head = head

    def packets(self) -> Iterator[Packet]:
        """Yields (ts_us, linktype, data): UTC microseconds, the packet's LINKTYPE, the captured bytes."""
        raise NotImplementedError

    @property
    def compressed(self) -> bool:
        """Whether the packets come through a decompressor (no random access to records)."""
        return self._data is not self._raw

    def tell(self) -> int:
        """Bytes of the file on disk (compressed, for .gz) consumed so far; runs ahead by up to one read."""
        return self._raw.consumed

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> CaptureReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _read(self, size: int) -> bytes:
        """The next bytes of the capture; b"" at the end or when the file breaks (noted, not raised)."""
        try:
            return self._data.read(size)
        except (OSError, EOFError, zlib.error) as err:
            # A failing disk, or gzip data that is damaged or stops before its end marker.
            self._stop(f"reading stopped after {self._raw.consumed} bytes of the file: {err}")
            return b""

    def _stop(self, warning: str) -> None:
        """The file is damaged here: stop reading, say where."""
        self.truncated = True
        self._warn(warning)

    def _warn(self, warning: str) -> None:
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(warning)
        elif len(self.warnings) == MAX_WARNINGS:
            self.warnings.append("further warnings suppressed")

    def _note_backwards(self, steps: int) -> None:
        """Packets whose timestamp is earlier than the one before: kept in capture order, counted once."""
        if steps:
            self.stats["ts_backwards"] = self.stats.get("ts_backwards", 0) + steps
            self._warn(f"timestamps go backwards {steps} times (packets kept in capture order)")

    def _skip(self, n: int) -> bool:
        """Read past ``n`` bytes a piece at a time, never holding them; False if the file ends first."""
        while n > 0:
            got = self._read(min(n, CHUNK_SIZE))
            if not got:
                return False
            n -= len(got)
        return True

    def _oversized(self, offset: int, size: int) -> None:
        """A record larger than max_record was skipped: counted, and said (once, then the count)."""
        self._count("oversized_records")
        if self.stats["oversized_records"] == 1:
            self._warn(
                f"record at offset {offset} of {size} bytes skipped: larger than --memory-limit allows "
                f"one record ({self.max_record} bytes)"
            )

    def _note_oversized(self) -> None:
        n = self.stats.get("oversized_records", 0)
        if n > 1:
            self._warn(f"{n} records larger than --memory-limit allows one record skipped in all")

    def _count(self, stat: str) -> None:
        self.stats[stat] = self.stats.get(stat, 0) + 1


def read_exact(data: Readable, size: int) -> bytes:
    """Up to size bytes, fewer only at the end of the stream (file objects may return short reads)."""
    got = data.read(size)
    while len(got) < size:
        more = data.read(size - len(got))
        if not more:
            break
        got += more
    return got
