"""The `int64` fuzz target's input format: bytes choose the offset fields of one Produce v8 and one
Fetch v11 exchange from int64's edges, and this module writes them as IPv4 packets of one connection.

Every int the tables take or derive offsets from is drawn here: a batch's baseOffset,
lastOffsetDelta, record count, base and max timestamps and producer id; each record's offset and
timestamp deltas; a Produce response's base_offset, log_append_time and log_start_offset; a Fetch
request's fetch_offset and a Fetch response's high_watermark, last_stable_offset and
log_start_offset. One byte picks a value: an edge (-2^63, -2^63+1, -2^62, -2^31, -1, 0, 1, 2^31-1,
2^62, 2^63-2, 2^63-1), an edge plus a small step, or eight raw bytes. The batches carry a valid
CRC32C, so both the compiled walker and the Python path read them.
"""

from __future__ import annotations

import struct

from segments import ACK, PSH, SYN, ipv4_tcp

from kwsniff.records import _crc

MIN, MAX = -(2**63), 2**63 - 1
EDGES = (MIN, MIN + 1, -(2**62), -(2**31), -1, 0, 1, 2**31 - 1, 2**62, MAX - 1, MAX)
INT32_EDGES = (-(2**31), -1, 0, 1, 2, 3, 2**31 - 1)
TOPIC = b"edge"


class Draw:
    """Values taken from the input, front to back; zeros once it is used up."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            return 0
        self.at += 1
        return self.data[self.at - 1]

    def int64(self) -> int:
        b = self.byte()
        if b < 0xC0:
            edge = EDGES[b % len(EDGES)]
            step = (b // len(EDGES) + 2) % 5 - 2  # 0, 1, 2, -2, -1: the edge itself first
            value = edge + step
            return value if MIN <= value <= MAX else edge
        raw = bytes(self.byte() for _ in range(8))
        return int(struct.unpack(">q", raw)[0])

    def int32(self) -> int:
        b = self.byte()
        if b < 0xE0:
            return INT32_EDGES[b % len(INT32_EDGES)]
        return int(struct.unpack(">i", bytes(self.byte() for _ in range(4)))[0])

    def small(self, top: int) -> int:
        return self.byte() % (top + 1)


def varint(n: int) -> bytes:
    """Kafka's zigzag varint (records' deltas and lengths), 64-bit."""
    z = ((n << 1) ^ (n >> 63)) & (2**64 - 1)
    out = bytearray()
    while z >= 0x80:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def batch(draw: Draw) -> bytes:
    """One magic 2 batch, uncompressed, its header's ints and its records' deltas drawn."""
    count = draw.small(3)
    records = b""
    for i in range(count):
        timestamp_delta = draw.int64() if draw.byte() & 1 else i
        offset_delta = draw.int32() if draw.byte() & 1 else i
        body = b"\x00" + varint(timestamp_delta) + varint(offset_delta) + varint(-1) + varint(1) + b"v"
        body += varint(0)
        records += varint(len(body)) + body
    claimed = count if draw.byte() & 1 else draw.int32()
    last_delta = count - 1 if draw.byte() & 1 else draw.int32()
    base_offset, base_ts, max_ts, producer = draw.int64(), draw.int64(), draw.int64(), draw.int64()
    attributes = 0x08 if draw.byte() & 1 else 0  # log append time: every record takes max_ts
    after_crc = struct.pack(">hiqqqhii", attributes, last_delta, base_ts, max_ts, producer, 0, 0, claimed)
    after_crc += records
    crc = _crc.crc32c(after_crc)
    length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, then the rest
    return struct.pack(">qiibI", base_offset, length, 0, 2, crc) + after_crc


def records_field(draw: Draw) -> bytes:
    return b"".join(batch(draw) for _ in range(draw.small(2)))


def string(s: bytes | None) -> bytes:
    return struct.pack(">h", -1) if s is None else struct.pack(">h", len(s)) + s


def produce(draw: Draw, partitions: int) -> tuple[bytes, bytes]:
    request = (
        string(None) + struct.pack(">hii", -1, 30_000, 1) + string(TOPIC) + struct.pack(">i", partitions)
    )
    response = struct.pack(">i", 1) + string(TOPIC) + struct.pack(">i", partitions)
    for p in range(partitions):
        data = records_field(draw)
        request += struct.pack(">ii", p, len(data)) + data
        base, append_time, log_start = draw.int64(), draw.int64(), draw.int64()
        response += struct.pack(">ihqqqi", p, 0, base, append_time, log_start, 0) + string(None)
    return request, response + struct.pack(">i", 0)


def fetch(draw: Draw, partitions: int) -> tuple[bytes, bytes]:
    request = struct.pack(">iiiibii", -1, 500, 1, 52428800, 0, 0, -1) + struct.pack(">i", 1) + string(TOPIC)
    request += struct.pack(">i", partitions)
    response = struct.pack(">ihii", 0, 0, 0, 1) + string(TOPIC) + struct.pack(">i", partitions)
    for p in range(partitions):
        request += struct.pack(">iiqqi", p, -1, draw.int64(), draw.int64(), 1 << 20)
        hwm, lso, log_start = draw.int64(), draw.int64(), draw.int64()
        data = records_field(draw)
        response += struct.pack(">ihqqq", p, 0, hwm, lso, log_start) + struct.pack(">ii", -1, -1)
        response += struct.pack(">i", len(data)) + data
    return request + struct.pack(">i", 0) + string(b""), response


def frame(header: bytes, body: bytes) -> bytes:
    return struct.pack(">i", len(header) + len(body)) + header + body


def packets(data: bytes) -> list[tuple[int, bytes]]:
    """The exchanges the input draws, as (µs, IPv4 packet) of one connection."""
    draw = Draw(data)
    frames: list[tuple[int, bytes]] = []
    for corr, (api_key, version, build) in enumerate(((0, 8, produce), (1, 11, fetch)), 1):
        request, response = build(draw, 1 + draw.small(2))
        frames.append((0, frame(struct.pack(">hhih", api_key, version, corr, 1) + b"f", request)))
        frames.append((1, frame(struct.pack(">i", corr), response)))
    seq = {0: 1000, 1: 5000}
    out: list[tuple[int, bytes]] = []
    ts = 1_700_000_000_000_000

    def emit(d: int, flags: int, payload: bytes = b"") -> None:
        nonlocal ts
        ts += 100
        out.append((ts, ipv4_tcp(d, seq[d], seq[1 - d], flags, payload, 0)))
        seq[d] = (seq[d] + len(payload) + (1 if flags & SYN else 0)) & 0xFFFFFFFF

    emit(0, SYN)
    emit(1, SYN | ACK)
    emit(0, ACK)
    for d, payload in frames:
        for i in range(0, len(payload), 1400):
            emit(d, ACK | PSH, payload[i : i + 1400])
    return out
