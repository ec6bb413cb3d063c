"""Writing packets to a classic pcap file (microsecond timestamps), as `--write-pcap` does."""

from __future__ import annotations

from pathlib import Path
from struct import Struct
from types import TracebackType

_FILE_HEADER = Struct("<IHHiIII")
_RECORD = Struct("<IIII")
PCAP_MAGIC_US = 0xA1B2C3D4


class PcapWriter:
    """Appends (ts_us, data) records to a new pcap file of one link type; flushed per batch."""

    def __init__(self, path: str | Path, linktype: int, snaplen: int) -> None:
        self._file = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._file.write(_FILE_HEADER.pack(PCAP_MAGIC_US, 2, 4, 0, 0, snaplen, linktype))
        self.packets = 0

    def write(self, packets: list[tuple[int, bytes]]) -> None:
        pack = _RECORD.pack
        parts = []
        for ts, data in packets:
            sec, usec = divmod(ts, 1_000_000)
            parts.append(pack(sec, usec, len(data), len(data)))
            parts.append(data)
        self._file.write(b"".join(parts))
        self._file.flush()
        self.packets += len(packets)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
