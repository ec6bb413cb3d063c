"""Bytes the tests assemble themselves: Kafka frames, TCP/IPv4 packets and pcap files."""

from __future__ import annotations

import struct
from pathlib import Path

LINKTYPE_RAW_IPV4 = 228
CLIENT = (bytes([10, 0, 0, 1]), 40000)
BROKER = (bytes([10, 0, 0, 2]), 9092)

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10


# -- primitive encoders (Kafka's wire types, for bodies the tests assemble) -----------------------
def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def string(s: str | None) -> bytes:
    """A classic (int16 length) nullable string."""
    if s is None:
        return i16(-1)
    raw = s.encode()
    return i16(len(raw)) + raw


def cstring(s: str | None) -> bytes:
    """A compact (unsigned varint length + 1) nullable string of flexible versions."""
    if s is None:
        return uvarint(0)
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


# -- frames ------------------------------------------------------------------------------------------
def request(api_key: int, version: int, corr: int, body: bytes = b"", client_id: str | None = "t") -> bytes:
    """A size-prefixed request frame with header v1 (classic nullable client id)."""
    cid = b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id)) + client_id.encode()
    payload = struct.pack(">hhi", api_key, version, corr) + cid + body
    return struct.pack(">i", len(payload)) + payload


def response(corr: int, body: bytes = b"") -> bytes:
    """A size-prefixed response frame with header v0."""
    payload = struct.pack(">i", corr) + body
    return struct.pack(">i", len(payload)) + payload


# Bodies that decode cleanly in the schema set.
API_VERSIONS_V0_RESPONSE = struct.pack(">hi", 0, 0)  # error_code, empty api_keys array
METADATA_V0_REQUEST = struct.pack(">i", 0)  # no topics
METADATA_V0_RESPONSE = struct.pack(">ii", 0, 0)  # no brokers, no topics


def produce_v3_request(acks: int) -> bytes:
    # transactional_id null, acks, timeout_ms, no topics
    return struct.pack(">hhii", -1, acks, 1000, 0)


def tcp(
    src: tuple[bytes, int],
    dst: tuple[bytes, int],
    seq: int,
    ack: int,
    flags: int,
    payload: bytes = b"",
    ident: int = 0,
) -> bytes:
    """An IPv4/TCP packet (raw IPv4 link type) with IP id ``ident``, checksums left zero."""
    tcp_hdr = struct.pack(
        ">HHIIBBHHH", src[1], dst[1], seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags, 65535, 0, 0
    )
    total = 20 + len(tcp_hdr) + len(payload)
    ip_hdr = struct.pack(">BBHHHBBH4s4s", 0x45, 0, total, ident & 0xFFFF, 0x4000, 64, 6, 0, src[0], dst[0])
    return ip_hdr + tcp_hdr + payload


class Flow:
    """Both directions of one TCP connection, tracking sequence numbers as a real stack would."""

    def __init__(
        self,
        client: tuple[bytes, int] = CLIENT,
        broker: tuple[bytes, int] = BROKER,
        isn_c: int = 1000,
        isn_b: int = 5000,
    ) -> None:
        self.client, self.broker = client, broker
        self.seq = {0: isn_c, 1: isn_b}
        self.packets: list[tuple[int, bytes]] = []
        self.ts = 1_700_000_000_000_000

    def _ends(self, d: int) -> tuple[tuple[bytes, int], tuple[bytes, int]]:
        return (self.client, self.broker) if d == 0 else (self.broker, self.client)

    def emit(
        self, d: int, flags: int, payload: bytes = b"", dt: int = 100, seq: int | None = None, ident: int = 0
    ) -> None:
        """One packet; ``ident`` its IP id (a retransmission needs another than its original's, as
        real stacks give it, or it is taken for a mirror's copy: kwsniff.net.duplicates)."""
        src, dst = self._ends(d)
        s = self.seq[d] if seq is None else seq
        self.ts += dt
        self.packets.append((self.ts, tcp(src, dst, s, self.seq[1 - d], flags, payload, ident)))
        if seq is None:
            self.seq[d] = (self.seq[d] + len(payload) + (1 if flags & (SYN | FIN) else 0)) & 0xFFFFFFFF

    def handshake(self) -> Flow:
        self.emit(0, SYN)
        self.emit(1, SYN | ACK)
        self.emit(0, ACK)
        return self

    def send(self, d: int, data: bytes, mss: int = 1460, dt: int = 100) -> None:
        for i in range(0, len(data), mss):
            self.emit(d, ACK | PSH, data[i : i + mss], dt=dt)

    def close(self) -> None:
        self.emit(0, FIN | ACK)
        self.emit(1, FIN | ACK)
        self.emit(0, ACK)


def write_pcap(path: Path, packets: list[tuple[int, bytes]], linktype: int = LINKTYPE_RAW_IPV4) -> Path:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, linktype)]
    for ts, data in packets:
        out.append(struct.pack("<IIII", ts // 1_000_000, ts % 1_000_000, len(data), len(data)) + data)
    path.write_bytes(b"".join(out))
    return path
