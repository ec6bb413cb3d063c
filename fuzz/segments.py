"""The byte format the stream and session fuzz targets read: a sequence of TCP segments.

Each segment is an 8-byte header and its payload:

    byte 0      TCP flags (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10); bit 7: broker to client
    bytes 1-4   signed int32: sequence number minus the sender's next sequence number
    bytes 5-6   uint16 payload length (clipped to the bytes left)
    byte 7      bytes the snaplen cut off after the payload, in units of 16

A sender's next sequence number follows what it last sent, so a delta of 0 is an in-order stream and
other deltas are retransmissions, overlaps and holes. An ACK acknowledges everything the other side has
sent so far, which is how a capture that lost segments looks.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

HEADER = struct.Struct(">BiHB")
TO_CLIENT = 0x80
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
ISN = (1_000, 0xFFFF_F000)  # the broker's sequence numbers wrap early in every stream
_MASK = 0xFFFFFFFF

# (direction, ts, seq, ack, flags, payload, missing)
Segment = tuple[int, int, int, int, int, bytes, int]


def segments(data: bytes) -> Iterator[Segment]:
    """The segments encoded in ``data`` (a trailing partial header is ignored)."""
    nxt = list(ISN)
    pos = 0
    ts = 1_700_000_000_000_000
    while pos + HEADER.size <= len(data):
        byte0, delta, length, missing16 = HEADER.unpack_from(data, pos)
        pos += HEADER.size
        payload = data[pos : pos + length]
        pos += len(payload)
        d = 1 if byte0 & TO_CLIENT else 0
        flags = byte0 & 0x1F
        missing = missing16 * 16
        seq = (nxt[d] + delta) & _MASK
        ts += 1
        yield d, ts, seq, nxt[1 - d], flags, payload, missing
        used = len(payload) + missing + (1 if flags & SYN else 0) + (1 if flags & FIN else 0)
        nxt[d] = (seq + used) & _MASK


def encode(d: int, flags: int, payload: bytes, delta: int = 0, missing16: int = 0) -> bytes:
    """One segment in the fuzz format (for building seed corpora)."""
    return HEADER.pack(flags | (TO_CLIENT if d else 0), delta, len(payload), missing16) + payload


CLIENT = (bytes([10, 0, 0, 1]), 40000)
BROKER = (bytes([10, 0, 0, 2]), 9092)


def ipv4_tcp(d: int, seq: int, ack: int, flags: int, payload: bytes, missing: int) -> bytes:
    """A raw IPv4/TCP packet (LINKTYPE_IPV4) for the segment; ``missing`` bytes counted in the IP length."""
    src, dst = (CLIENT, BROKER) if d == 0 else (BROKER, CLIENT)
    payload = payload[: 0xFFFF - 40]
    missing = min(missing, 0xFFFF - 40 - len(payload))
    tcp_header = struct.pack(">HHIIBBHHH", src[1], dst[1], seq, ack, 5 << 4, flags, 65535, 0, 0)
    total = 40 + len(payload) + missing
    ip_header = struct.pack(">BBHHHBBH4s4s", 0x45, 0, total, 0, 0x4000, 64, 6, 0, src[0], dst[0])
    return ip_header + tcp_header + payload
