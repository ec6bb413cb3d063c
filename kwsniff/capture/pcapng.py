"""pcapng files: a sequence of sections, each a Section Header Block followed by any blocks.

Format: https://datatracker.ietf.org/doc/draft-ietf-opsawg-pcapng/ . Packets come from Enhanced (6),
Simple (3) and the obsolete Packet (2) blocks; Interface Description Blocks (1) give each interface's
link type and timestamp resolution; everything else is skipped and counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from struct import Struct

from kwsniff.capture.reader import (
    CHUNK_SIZE,
    MAX_RECORD,
    CaptureError,
    CaptureReader,
    CountingReader,
    Packet,
    Readable,
    read_exact,
)
from kwsniff.defaults import TS_MAX_US, TS_MIN_US

SHB = 0x0A0D0D0A  # a palindrome, so it reads the same before the byte order is known
IDB = 1
PACKET_BLOCK = 2
SPB = 3
EPB = 6
DSB = 10  # Decryption Secrets Block
DSB_TLS_KEY_LOG = 0x544C534B  # "TLSK": NSS key log text (pcapng draft, section 4.7)
BYTE_ORDER_MAGIC = 0x1A2B3C4D
MAGIC = b"\x0a\x0d\x0d\x0a"

# Blocks that carry no packets: name resolution, interface statistics, systemd journal export,
# decryption secrets, custom blocks (copyable and not), and the Sysdig event families.
NON_PACKET_BLOCKS = frozenset((4, 5, 9, 10, 0xBAD, 0x40000BAD, *range(0x204, 0x212)))

_OPT_TSRESOL = 9
_OPT_TSOFFSET = 14

# (linktype, snaplen, multiplier, divisor, offset_us): ts_us = raw * multiplier // divisor + offset_us.
Interface = tuple[int, int, int, int, int]


class BlockLayout:
    """The block structs for one byte order."""

    def __init__(self, order: str) -> None:
        self.order = order
        self.block = Struct(order + "II")
        # Block type and length followed by the EPB fixed fields, so an EPB costs one unpack.
        self.epb = Struct(order + "IIIIIII")
        self.packet_block = Struct(order + "IIHHIIII")
        self.spb = Struct(order + "I")
        self.idb = Struct(order + "HxxI")
        self.option = Struct(order + "HH")
        self.shb_version = Struct(order + "HH")
        self.tsoffset = Struct(order + "q")


_LAYOUTS = {BYTE_ORDER_MAGIC: BlockLayout("<"), 0x4D3C2B1A: BlockLayout(">")}
_MIN_BLOCK = 12


def block_layout(byte_order_magic: bytes) -> BlockLayout | None:
    """The block structs for a section whose byte-order magic is these 4 bytes, or None if it is bad."""
    return _LAYOUTS.get(int.from_bytes(byte_order_magic, "little"))


def is_pcapng(magic: bytes) -> bool:
    return magic == MAGIC


def _timestamp_scale(tsresol: int) -> tuple[int, int]:
    """(multiplier, divisor) from if_tsresol: MSB clear means 10^-n seconds, set means 2^-n."""
    exponent = tsresol & 0x7F
    if tsresol & 0x80:
        return 1_000_000, 1 << exponent
    if exponent <= 6:
        return 10 ** (6 - exponent), 1
    return 1, 10 ** (exponent - 6)


def parse_interface(layout: BlockLayout, buf: bytes, off: int, end: int) -> Interface:
    """An Interface Description Block's link type, snaplen and timestamp scale (default microseconds)."""
    linktype, snaplen = layout.idb.unpack_from(buf, off + 8)
    multiplier, divisor, offset_us = 1, 1, 0
    pos = off + 16
    option = layout.option.unpack_from
    while pos + 4 <= end:
        code, length = option(buf, pos)
        value = pos + 4
        if code == 0 or value + length > end:
            break
        if code == _OPT_TSRESOL and length >= 1:
            multiplier, divisor = _timestamp_scale(buf[value])
        elif code == _OPT_TSOFFSET and length >= 8:
            offset_us = layout.tsoffset.unpack_from(buf, value)[0] * 1_000_000
        pos = value + ((length + 3) & ~3)
    return linktype, snaplen, multiplier, divisor, offset_us


class PcapngReader(CaptureReader):
    """A pcapng file: any sections, byte orders, interfaces and block order."""

    def __init__(self, name: str, size: int | None, raw: CountingReader, data: Readable, head: bytes) -> None:
        head += read_exact(data, _MIN_BLOCK + 4 - len(head))
        if len(head) < _MIN_BLOCK + 4:
            raise CaptureError(f"{name}: pcapng section header cut short ({len(head)} of 16 bytes)")
        layout = _LAYOUTS.get(int.from_bytes(head[8:12], "little"))
        if layout is None:
            raise CaptureError(f"{name}: bad pcapng byte-order magic {head[8:12]!r}")
        major, minor = layout.shb_version.unpack_from(head, 12)
        if major != 1:
            raise CaptureError(f"{name}: unsupported pcapng version {major}.{minor}")
        super().__init__(name, size, raw, data, head)
        self.stats.update(skipped_blocks=0, unknown_block_types=0, bad_blocks=0)

    def packets(self) -> Iterator[Packet]:
        read = self._read
        buf = self._head
        self._head = b""
        base = 0
        off = 0
        count = 0
        layout = _LAYOUTS[BYTE_ORDER_MAGIC]
        interfaces: list[Interface] = []
        last_ts = 0
        backwards = 0
        out_of_range = 0
        # Left over from an earlier block when a short block sits at the buffer end; the length checks
        # below reject such a block before these are used.
        ifid = ts_high = ts_low = caplen = 0
        try:
            while True:
                end = len(buf)
                need = _MIN_BLOCK
                while off + _MIN_BLOCK <= end:
                    if off + 28 <= end:
                        btype, blen, ifid, ts_high, ts_low, caplen, _wirelen = layout.epb.unpack_from(
                            buf, off
                        )
                    else:
                        btype, blen = layout.block.unpack_from(buf, off)
                    if btype == SHB:
                        found = _LAYOUTS.get(int.from_bytes(buf[off + 8 : off + 12], "little"))
                        if found is None:
                            self._stop(f"bad byte-order magic in section header at offset {base + off}")
                            return
                        layout = found
                        blen = layout.block.unpack_from(buf, off)[1]
                    if blen < _MIN_BLOCK or blen > MAX_RECORD or blen & 3:
                        self._stop(f"block at offset {base + off} has impossible length {blen}: file damaged")
                        return
                    nxt = off + blen
                    if blen > self.max_record:
                        # A block --memory-limit does not let us hold (a packet or a Decryption
                        # Secrets Block of megabytes): read past in pieces, counted.
                        self._oversized(base + off, blen)
                        if nxt <= end:
                            off = nxt
                            continue
                        if not self._skip(nxt - end):
                            self._stop(f"last block cut short at offset {base + off}")
                            return
                        base, buf, off, end = base + nxt, b"", 0, 0
                        break
                    if nxt > end:
                        need = blen
                        break
                    if btype == EPB:
                        if caplen > blen - 32 or ifid >= len(interfaces):
                            self._bad_block(base + off, "enhanced packet", ifid, caplen)
                        else:
                            linktype, _snap, multiplier, divisor, offset_us = interfaces[ifid]
                            ts = (ts_high << 32 | ts_low) * multiplier // divisor + offset_us
                            if not TS_MIN_US <= ts <= TS_MAX_US:
                                # An extreme if_tsresol (2^0 s) or if_tsoffset (int64 seconds): the bytes
                                # are good traffic, so the packet is kept with the last time seen (as a
                                # Simple Packet Block is); dropping it would tear a gap in its TCP stream.
                                ts = last_ts
                                out_of_range += 1
                            elif ts < last_ts:
                                backwards += 1
                            last_ts = ts
                            yield ts, linktype, buf[off + 28 : off + 28 + caplen]
                            count += 1
                    elif btype == IDB:
                        if blen < 20:
                            self._bad_block(base + off, "interface description", len(interfaces), 0)
                        # Appended even when damaged so later interface ids keep their meaning.
                        interfaces.append(
                            parse_interface(layout, buf, off, nxt - 4) if blen >= 20 else (0, 0, 1, 1, 0)
                        )
                    elif btype == SHB:
                        # A new section may come from another capture: its interfaces start afresh.
                        interfaces = []
                    elif btype == SPB:
                        if not interfaces or blen < 16:
                            self._bad_block(base + off, "simple packet", 0, 0)
                        else:
                            # SPBs have no timestamp or caplen: interface 0, the last time seen, and the
                            # smaller of the original length, the snaplen and what the block holds.
                            linktype, snaplen = interfaces[0][:2]
                            wirelen = layout.spb.unpack_from(buf, off + 8)[0]
                            caplen = min(wirelen, blen - 16, snaplen or wirelen)
                            yield last_ts, linktype, buf[off + 12 : off + 12 + caplen]
                            count += 1
                    elif btype == PACKET_BLOCK:
                        if blen < 32:
                            # Too short for its fixed fields, which may lie past the end of the file.
                            self._bad_block(base + off, "packet", 0, 0)
                            off = nxt
                            continue
                        _t, _l, ifid, _drops, ts_high, ts_low, caplen, _w = layout.packet_block.unpack_from(
                            buf, off
                        )
                        if caplen > blen - 32 or ifid >= len(interfaces):
                            self._bad_block(base + off, "packet", ifid, caplen)
                        else:
                            linktype, _snap, multiplier, divisor, offset_us = interfaces[ifid]
                            ts = (ts_high << 32 | ts_low) * multiplier // divisor + offset_us
                            if not TS_MIN_US <= ts <= TS_MAX_US:
                                ts = last_ts
                                out_of_range += 1
                            elif ts < last_ts:
                                backwards += 1
                            last_ts = ts
                            yield ts, linktype, buf[off + 28 : off + 28 + caplen]
                            count += 1
                    elif btype == DSB and blen >= 16:
                        secrets_type, secrets_len = layout.block.unpack_from(buf, off + 8)
                        if secrets_type == DSB_TLS_KEY_LOG and 16 + secrets_len <= blen and self.on_secrets:
                            self.on_secrets(bytes(buf[off + 16 : off + 16 + secrets_len]))
                        self.stats["skipped_blocks"] += 1
                    elif btype in NON_PACKET_BLOCKS:
                        self.stats["skipped_blocks"] += 1
                    else:
                        self.stats["unknown_block_types"] += 1
                    off = nxt
                more = read(max(CHUNK_SIZE, need))
                if not more:
                    if off < end:
                        self._stop(f"last block cut short at offset {base + off}")
                    return
                buf = buf[off:] + more
                base += off
                off = 0
        finally:
            self.stats["records"] += count
            self._note_backwards(backwards)
            self._note_oversized()
            if out_of_range:
                self.stats["ts_out_of_range"] = out_of_range
                self._warn(
                    f"{out_of_range} packets have timestamps outside the years 1-9999 (interface if_tsresol or"
                    " if_tsoffset damaged?): kept, with the time of the packet before"
                )
            unknown = self.stats["unknown_block_types"]
            if unknown:
                self._warn(f"{unknown} blocks of unknown type skipped")

    def _bad_block(self, offset: int, kind: str, ifid: int, caplen: int) -> None:
        self.stats["bad_blocks"] += 1
        self._warn(
            f"{kind} block at offset {offset} skipped: interface {ifid}, {caplen} captured bytes do not fit"
        )
