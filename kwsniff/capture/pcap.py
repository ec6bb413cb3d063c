"""Classic libpcap files: a 24-byte file header, then (16-byte record header, captured bytes) records.

Format: https://datatracker.ietf.org/doc/draft-ietf-opsawg-pcap/ (and tcpdump.org/manpages/pcap-savefile.5).
"""

from __future__ import annotations

from collections.abc import Iterator
from struct import Struct

from kwsniff.capture.reader import (
    CHUNK_SIZE,
    MAX_RECORD,
    MIN_RECORD_LIMIT,
    CaptureError,
    CaptureReader,
    CountingReader,
    Packet,
    Readable,
    read_exact,
)

FILE_HEADER_SIZE = 24

# magic as read little-endian -> (byte order, divisor from the fraction field to microseconds,
# record header size). 0xa1b2cd34 is Alexey Kuznetzov's patched libpcap, whose records carry 8 more
# bytes (ifindex, protocol, packet type) that we skip.
MAGICS = {
    0xA1B2C3D4: ("<", 1, 16),
    0xD4C3B2A1: (">", 1, 16),
    0xA1B23C4D: ("<", 1000, 16),
    0x4D3CB2A1: (">", 1000, 16),
    0xA1B2CD34: ("<", 1, 24),
    0x34CDB2A1: (">", 1, 24),
}

# The link-type field's upper bits carry FCS-length flags, not the link type (LT_LINKTYPE in libpcap).
_LINKTYPE_MASK = 0x03FFFFFF


def is_pcap(magic: bytes) -> bool:
    return len(magic) == 4 and int.from_bytes(magic, "little") in MAGICS


class PcapReader(CaptureReader):
    """A classic pcap file of any byte order, microsecond or nanosecond timestamps."""

    def __init__(self, name: str, size: int | None, raw: CountingReader, data: Readable, head: bytes) -> None:
        super().__init__(name, size, raw, data, b"")
        order, self._fraction_divisor, record_size = MAGICS[int.from_bytes(head, "little")]
        header = head + read_exact(data, FILE_HEADER_SIZE - len(head))
        if len(header) < FILE_HEADER_SIZE:
            raise CaptureError(
                f"{name}: pcap file header cut short ({len(header)} of {FILE_HEADER_SIZE} bytes)"
            )
        major, minor, _zone, _sigfigs, snaplen, network = Struct(order + "HHiIII").unpack_from(header, 4)
        if major == 0x0200:
            # Some writers put the version fields in the other byte order than the magic (2.4 reads
            # as 512.1024). libpcap refuses such files; Wireshark reads them, and so do we.
            major, minor = 2, int.from_bytes(minor.to_bytes(2, "little"), "big")
            self._warn(f"pcap header version fields are byte-swapped (read as version 2.{minor})")
        if major != 2:
            raise CaptureError(f"{name}: unsupported pcap version {major}.{minor}")
        self.snaplen = snaplen
        self.linktype = network & _LINKTYPE_MASK
        self._record = Struct(order + ("IIII" if record_size == 16 else "IIII8x"))
        self._limit = min(max(snaplen, MIN_RECORD_LIMIT), MAX_RECORD)

    def record_format(self) -> tuple[Struct, int, int, int]:
        """(record header struct, fraction divisor to microseconds, link type, caplen limit)."""
        return self._record, self._fraction_divisor, self.linktype, self._limit

    def packets(self) -> Iterator[Packet]:
        unpack_from = self._record.unpack_from
        hdr = self._record.size
        divisor = self._fraction_divisor
        linktype = self.linktype
        damaged = self._limit  # past the snaplen (or MAX_RECORD): the file is damaged
        limit = min(damaged, self.max_record)  # past --memory-limit's share: skipped in pieces
        read = self._read
        buf = b""
        base = FILE_HEADER_SIZE  # stream offset of buf[0], for warnings
        off = 0
        caplen = 0
        count = 0
        last_ts = 0
        backwards = 0
        try:
            while True:
                end = len(buf)
                while off + hdr <= end:
                    sec, frac, caplen, _wirelen = unpack_from(buf, off)
                    nxt = off + hdr + caplen
                    if nxt > end or caplen > limit:
                        break
                    ts = sec * 1_000_000 + frac // divisor
                    if ts < last_ts:
                        backwards += 1
                    last_ts = ts
                    yield ts, linktype, buf[off + hdr : nxt]
                    count += 1
                    off = nxt
                if off + hdr <= end and caplen > limit:
                    if caplen > damaged:
                        self._stop(
                            f"record at offset {base + off} claims {caplen} bytes (limit {damaged}): file damaged"
                        )
                        return
                    # A record the snaplen allows but the budget does not: read past, never held.
                    self._oversized(base + off, caplen)
                    nxt = off + hdr + caplen
                    if nxt <= end:
                        off = nxt
                        continue
                    if not self._skip(nxt - end):
                        self._stop(f"last record cut short at offset {base + off}")
                        return
                    base, buf, off = base + nxt, b"", 0
                    continue
                # A record cut by the end of the chunk is completed by a read of just its missing
                # bytes, and the next chunk starts after it: the chunk itself is never copied again
                # (prepending the cut record to the whole next chunk copied every byte once more).
                rest = end - off
                if rest >= hdr:
                    more = read(hdr + unpack_from(buf, off)[2] - rest)
                else:
                    more = read(hdr - rest if rest else CHUNK_SIZE)
                if not more:
                    if rest:
                        self._stop(f"last record cut short at offset {base + off}")
                    return
                buf = buf[off:] + more if rest else more
                base += off
                off = 0
        finally:
            self.stats["records"] += count
            self._note_backwards(backwards)
            self._note_oversized()
