"""One capture file read in byte ranges, and again at chosen record offsets: the fleet pipeline's split.

pcap has no index, so a range that starts inside the file first finds its first record: the first
offset at which a chain of ``SYNC_CHAIN`` record headers is valid (caplen within the snaplen limit and
not above the original length, a fraction below one second, every timestamp within ``TS_WINDOW_S`` of
the file's first), or where that chain ends exactly at the end of the file. pcapng blocks carry their
length at both ends, which the chain checks as well. A range holds the records that *start* in it,
so range k ends where range k+1 begins; ``RangeScan.stop`` is where a range's walk stopped, and the
caller checks that it equals the next range's ``first``: a false start inside packet data is then
caught, never decoded.

What is not split, and says why (``Unsplittable``): compressed files (no random access), pcapng
files whose interfaces or sections change after the first packet, or that hold Simple Packet Blocks
(which take the timestamp of the packet before them). Damage stops a range's walk as it stops
`kwsniff read`: ``RangeScan.damaged`` says where.
"""

from __future__ import annotations

import mmap
import os
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from struct import Struct

from kwsniff.capture.pcap import FILE_HEADER_SIZE, PcapReader
from kwsniff.capture.pcapng import (
    EPB,
    IDB,
    PACKET_BLOCK,
    SHB,
    SPB,
    BlockLayout,
    Interface,
    PcapngReader,
    block_layout,
    parse_interface,
)
from kwsniff.capture.reader import MAX_RECORD
from kwsniff.capture.source import open_capture

SYNC_CHAIN = 8
TS_WINDOW_S = 400 * 86_400  # a record stamped further than this from the file's first is not a record
_MIN_BLOCK = 12

# (file offset, ts_us, linktype, captured bytes)
Record = tuple[int, int, int, bytes]


class Unsplittable(Exception):
    """This file cannot be read by ranges; str(err) says why, in a few words."""


@dataclass
class RangeScan:
    """What one range's walk found: its first record, where the walk stopped, and why if not at the end."""

    end: int = 0  # the range's end
    first: int | None = None  # offset of the first record starting in the range (None: none does)
    stop: int = 0  # offset of the first record at or past the range's end, or where the walk broke
    damaged: str = ""  # the reason the walk broke (the file is damaged or cut short there)
    records: int = 0


@dataclass
class Frames:
    """Where a range's records lie: record offsets, captured lengths, the bytes from a record's start to
    its data (the same for every record of a file), and the link type (one, or one per record)."""

    header: int
    linktypes: int | array[int]
    offsets: array[int] = field(default_factory=lambda: array("q"))
    caplens: array[int] = field(default_factory=lambda: array("q"))


@dataclass
class _Pcap:
    header: Struct
    divisor: int
    linktype: int
    limit: int
    frac_max: int


@dataclass
class _Pcapng:
    layout: BlockLayout
    interfaces: list[Interface] = field(default_factory=list)


class SplitCapture:
    """A plain (uncompressed) pcap or pcapng file mapped into memory, read by range or by offsets."""

    def __init__(self, path: str) -> None:
        with open_capture(path) as reader:
            if reader.compressed:
                raise Unsplittable(f"{reader.compression}-compressed")
            self.size = os.path.getsize(path)
            self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
            try:
                self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if self.size else b""
                if isinstance(reader, PcapReader):
                    self._setup_pcap(reader)
                elif isinstance(reader, PcapngReader):
                    self._setup_pcapng()
                else:  # pragma: no cover - every reader is one of the two
                    raise Unsplittable(type(reader).__name__)
            except BaseException:
                self.close()
                raise

    @property
    def data(self) -> mmap.mmap | bytes:
        """The whole file, mapped."""
        return self._map

    def close(self) -> None:
        if isinstance(self._map, mmap.mmap):
            self._map.close()
        self._file.close()

    def __enter__(self) -> SplitCapture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- pcap -----------------------------------------------------------------------------------------

    def _setup_pcap(self, reader: PcapReader) -> None:
        header, divisor, linktype, limit = reader.record_format()
        self._pcap = _Pcap(header, divisor, linktype, limit, 1_000_000 * divisor)
        self._pcapng: _Pcapng | None = None
        self.start = FILE_HEADER_SIZE
        self._first_sec = header.unpack_from(self._map, self.start)[0] if self._pcap_fits(self.start) else 0

    def _pcap_fits(self, off: int) -> bool:
        return off + self._pcap.header.size <= self.size

    def _pcap_next(self, off: int) -> int:
        """The offset after a plausible record header at ``off``, or -1."""
        p = self._pcap
        if not self._pcap_fits(off):
            return -1
        sec, frac, caplen, wirelen = p.header.unpack_from(self._map, off)
        if (
            caplen > p.limit
            or caplen > wirelen
            or frac >= p.frac_max
            or abs(sec - self._first_sec) > TS_WINDOW_S
        ):
            return -1
        nxt = off + p.header.size + caplen
        return nxt if nxt <= self.size else -1

    def _pcap_walk(self, off: int, end: int, scan: RangeScan) -> Frames:
        p = self._pcap
        mm, size, hdr, unpack_from, limit = self._map, self.size, p.header.size, p.header.unpack_from, p.limit
        frames = Frames(hdr, p.linktype)
        offsets, caplens = frames.offsets.append, frames.caplens.append
        try:
            while off < end:
                if off + hdr > size:
                    if off < size:
                        scan.damaged = f"last record cut short at offset {off}"
                    break
                caplen = unpack_from(mm, off)[2]
                nxt = off + hdr + caplen
                if caplen > limit:
                    scan.damaged = (
                        f"record at offset {off} claims {caplen} bytes (limit {limit}): file damaged"
                    )
                    break
                if nxt > size:
                    scan.damaged = f"last record cut short at offset {off}"
                    break
                offsets(off)
                caplens(caplen)
                off = nxt
        finally:
            scan.stop = off
            scan.records += len(frames.offsets)
        return frames

    # -- pcapng ---------------------------------------------------------------------------------------

    def _setup_pcapng(self) -> None:
        """The section header and the interfaces declared before the first packet."""
        mm = self._map
        layout = block_layout(bytes(mm[8:12]))
        if layout is None:
            raise Unsplittable("bad pcapng byte-order magic")
        state = _Pcapng(layout)
        off = 0
        while off + _MIN_BLOCK <= self.size:
            btype, blen = layout.block.unpack_from(mm, off)
            if blen < _MIN_BLOCK or blen & 3 or off + blen > self.size:
                break
            if btype in (EPB, SPB, PACKET_BLOCK):
                break
            if btype == SHB and off:
                raise Unsplittable("pcapng file of several sections")
            if btype == IDB and blen >= 20:
                state.interfaces.append(parse_interface(layout, mm[off : off + blen], 0, blen - 4))
            off += blen
        self._pcapng = state
        self.start = off

    def _block_next(self, off: int) -> int:
        """The offset after a plausible pcapng block at ``off`` (length repeated at its end), or -1."""
        assert self._pcapng is not None
        block = self._pcapng.layout.block
        if off + _MIN_BLOCK > self.size:
            return -1
        btype, blen = block.unpack_from(self._map, off)
        if blen < _MIN_BLOCK or blen & 3 or blen > MAX_RECORD or off + blen > self.size or btype > 0x7FFFFFFF:
            return -1
        if block.unpack_from(self._map, off + blen - 8)[1] != blen:
            return -1
        return off + blen

    def _pcapng_walk(self, off: int, end: int, scan: RangeScan) -> Frames:
        assert self._pcapng is not None
        layout, interfaces = self._pcapng.layout, self._pcapng.interfaces
        epb, block, packet_block = layout.epb, layout.block, layout.packet_block
        mm, size = self._map, self.size
        frames = Frames(28, array("l"))
        offsets, caplens = frames.offsets.append, frames.caplens.append
        linktypes = frames.linktypes.append  # type: ignore[union-attr]
        try:
            while off < end:
                if off + _MIN_BLOCK > size:
                    if off < size:
                        scan.damaged = f"last block cut short at offset {off}"
                    break
                btype, blen = block.unpack_from(mm, off)
                if blen < _MIN_BLOCK or blen > MAX_RECORD or blen & 3:
                    scan.damaged = f"block at offset {off} has impossible length {blen}: file damaged"
                    break
                if off + blen > size:
                    scan.damaged = f"last block cut short at offset {off}"
                    break
                if btype == EPB or (btype == PACKET_BLOCK and blen >= 32):
                    if btype == EPB:
                        _t, _l, ifid, _h, _lo, caplen, _w = epb.unpack_from(mm, off)
                    else:
                        _t, _l, ifid, _d, _h, _lo, caplen, _w = packet_block.unpack_from(mm, off)
                    # As the reader: a block whose interface or length does not fit is skipped.
                    if caplen <= blen - 32 and ifid < len(interfaces):
                        offsets(off)
                        caplens(caplen)
                        linktypes(interfaces[ifid][0])
                elif btype in (SHB, IDB):
                    raise Unsplittable("pcapng interfaces or sections change after the first packet")
                elif btype == SPB:
                    raise Unsplittable("pcapng Simple Packet Blocks (no timestamps of their own)")
                off += blen
        finally:
            scan.stop = off
            scan.records += len(frames.offsets)
        return frames

    # -- either format --------------------------------------------------------------------------------

    def first_record(self, start: int, end: int) -> int | None:
        """The first offset in [start, end) where a chain of valid record headers begins, or None."""
        start = max(start, self.start)
        step = self._pcap_next if self._pcapng is None else self._block_next
        for off in range(start, min(end, self.size)):
            nxt = off
            for _ in range(SYNC_CHAIN):
                nxt = step(nxt)
                if nxt < 0 or nxt == self.size:
                    break
            if nxt >= 0:
                return off
        return None

    def walk(self, start: int, end: int, scan: RangeScan) -> Frames:
        """Where the records starting in [start, end) lie, in file order; ``scan`` says where the walk went."""
        scan.first, scan.end = None, end
        if end <= self.start:
            scan.stop = self.start
            return Frames(0, 0)
        first = self.start if start <= self.start else self.first_record(start, end)
        scan.first = first
        if first is None:
            scan.stop = end
            return Frames(0, 0)
        if self._pcapng is None:
            return self._pcap_walk(first, end, scan)
        return self._pcapng_walk(first, end, scan)

    def scan(self, start: int, end: int, scan: RangeScan) -> Iterator[Record]:
        """(offset, ts_us, linktype, data) of the records starting in [start, end)."""
        offsets = self.walk(start, end, scan).offsets
        for off, (ts, linktype, data) in zip(offsets, self.at(offsets), strict=True):
            yield off, ts, linktype, data

    def at(self, offsets: Sequence[int]) -> Iterator[tuple[int, int, bytes]]:
        """(ts_us, linktype, data) of the records at ``offsets``, which ``scan`` of this file found."""
        mm = self._map
        if self._pcapng is None:
            p = self._pcap
            hdr, unpack_from, divisor, linktype = p.header.size, p.header.unpack_from, p.divisor, p.linktype
            for off in offsets:
                sec, frac, caplen, _wirelen = unpack_from(mm, off)
                yield sec * 1_000_000 + frac // divisor, linktype, mm[off + hdr : off + hdr + caplen]
            return
        layout, interfaces = self._pcapng.layout, self._pcapng.interfaces
        epb, packet_block = layout.epb, layout.packet_block
        for off in offsets:
            btype, _l, ifid, ts_high, ts_low, caplen, _w = epb.unpack_from(mm, off)
            if btype != EPB:
                _t, _l, ifid, _d, ts_high, ts_low, caplen, _w = packet_block.unpack_from(mm, off)
            linktype, _snap, multiplier, divisor, offset_us = interfaces[ifid]
            ts = (ts_high << 32 | ts_low) * multiplier // divisor + offset_us
            yield ts, linktype, mm[off + 28 : off + 28 + caplen]


def byte_ranges(start: int, size: int, parts: int) -> list[tuple[int, int]]:
    """[start, size) cut into ``parts`` ranges of (nearly) equal length."""
    parts = max(1, min(parts, size - start)) if size > start else 1
    cuts = [start + (size - start) * i // parts for i in range(parts + 1)]
    return list(zip(cuts, cuts[1:], strict=False)) or [(start, size)]


def joined_ranges(scans: Sequence[RangeScan]) -> int:
    """How many of a file's range scans, in file order, make one unbroken walk of its records: all,
    or up to and including the first that met damage (`kwsniff read` stops there too).

    Unsplittable when a range's first record is not where the walk of the range before it stopped:
    a start found inside packet data, or a record the range's search missed."""
    pos = -1
    for k, scan in enumerate(scans):
        if k and (scan.first is not None or pos < scan.end) and scan.first != pos:
            raise Unsplittable(
                f"byte range {k} starts at offset {scan.first}, the one before it stopped at {pos}"
            )
        if scan.first is not None or k == 0:
            pos = scan.stop
        if scan.damaged:
            return k + 1
    return len(scans)
