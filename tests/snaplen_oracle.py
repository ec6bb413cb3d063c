"""What a snap length keeps of a capture's Kafka exchanges, worked out by an independent reader.

dpkt reads the FULL capture: each TCP direction's payloads in sequence order, cut into frames by
Kafka's int32 size prefixes (protocol guide, "Common Request and Response Structure"), requests
paired with responses by correlation id. For a snap length N every packet keeps its first N bytes
(as `editcap -s N` or `tcpdump -s N` write it), so which bytes of every frame were kept follows from
the packets' header lengths alone. Shares no code with kwsniff: tests hold kwsniff's reading of the
cut capture against this.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from pathlib import Path

import dpkt

# Request header v0 (no client id): ControlledShutdown v0 (protocol guide, "Headers").
_NO_CLIENT_ID = {(7, 0)}


@dataclass
class Frame:
    offset: int  # stream offset of the size prefix
    size: int  # with the prefix
    ts_first: int  # microseconds, of the packet carrying the frame's first byte
    ts_last: int  # of the packet carrying its last byte
    data: bytes  # the whole frame, prefix included (from the full capture)
    kept: list[tuple[int, int]] = field(default_factory=list)  # frame-relative byte ranges kept at N

    def kept_prefix(self) -> int:
        """Bytes of the frame kept without a hole from its first byte on."""
        end = 0
        for lo, hi in sorted(self.kept):
            if lo > end:
                break
            end = max(end, hi)
        return min(end, self.size)


@dataclass
class Exchange:
    conn: tuple[str, int, str, int]  # client ip, port, broker ip, port
    request: Frame
    response: Frame | None

    @property
    def api_key(self) -> int:
        return struct.unpack_from(">h", self.request.data, 4)[0]

    @property
    def api_version(self) -> int:
        return struct.unpack_from(">h", self.request.data, 6)[0]

    @property
    def correlation_id(self) -> int:
        return struct.unpack_from(">i", self.request.data, 8)[0]

    def client_id_end(self) -> int:
        """Frame offset just past the client id (12 when the header has none)."""
        if (self.api_key, self.api_version) in _NO_CLIENT_ID:
            return 12
        (n,) = struct.unpack_from(">h", self.request.data, 12)
        return 14 + max(n, 0)

    @property
    def client_id(self) -> str | None:
        if (self.api_key, self.api_version) in _NO_CLIENT_ID:
            return None
        (n,) = struct.unpack_from(">h", self.request.data, 12)
        return None if n < 0 else self.request.data[14 : 14 + n].decode("utf-8", "replace")

    @property
    def latency_ms(self) -> float | None:
        if self.response is None:
            return None
        return (self.response.ts_first - self.request.ts_last) / 1000.0


@dataclass
class _Segment:
    ts: int
    seq: int
    payload: bytes
    kept: int  # payload bytes the snap length keeps


def _ip(link: int, buf: bytes) -> object:
    if link == dpkt.pcap.DLT_EN10MB:
        return dpkt.ethernet.Ethernet(buf).data
    if link == dpkt.pcap.DLT_LINUX_SLL:
        return dpkt.sll.SLL(buf).data
    raise ValueError(f"link type {link}")


def packet_times(path: Path) -> list[tuple[int, int, int, int, int, int]]:
    """(time in microseconds, source port, destination port, TCP sequence and acknowledgement numbers,
    IP length) of every packet of a capture: two tcpdumps of the same traffic see the same packets,
    each with its own time stamps."""
    out = []
    with path.open("rb") as f:
        reader = dpkt.pcap.Reader(f)
        link = reader.datalink()
        for ts, buf in reader:
            ip = _ip(link, buf)
            tcp = ip.data if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP) else None
            ports = (tcp.sport, tcp.dport, tcp.seq, tcp.ack) if tcp is not None else (-1, -1, -1, -1)
            out.append((round(ts * 1_000_000), *ports, ip.len if isinstance(ip, dpkt.ip.IP) else -1))
    return out


def times_of(path: Path, times_from: Path) -> list[int]:
    """The time stamps ``times_from`` (another tcpdump of the same traffic) gave each packet of
    ``path``, in ``path``'s order. Two tcpdumps on loopback each get every packet, but two packets
    of different connections that the kernel hands over at the same moment may reach them in either
    order; a packet is matched by its ports, sequence and acknowledgement numbers and length."""
    mine, theirs = packet_times(path), packet_times(times_from)
    if sorted(p[1:] for p in mine) != sorted(p[1:] for p in theirs):
        raise ValueError(f"{times_from} does not hold the packets of {path}")
    stamps: dict[tuple[int, ...], list[int]] = {}
    for p in reversed(theirs):
        stamps.setdefault(p[1:], []).append(p[0])
    return [stamps[p[1:]].pop() for p in mine]


def _segments(
    path: Path, snaplen: int, times: list[int] | None = None
) -> dict[tuple[str, int, str, int], list[_Segment]]:
    flows: dict[tuple[str, int, str, int], list[_Segment]] = {}
    with path.open("rb") as f:
        reader = dpkt.pcap.Reader(f)
        link = reader.datalink()
        for i, (ts, buf) in enumerate(reader):
            ip, link_len = _ip(link, buf), (14 if link == dpkt.pcap.DLT_EN10MB else 16)
            if not isinstance(ip, dpkt.ip.IP) or not isinstance(ip.data, dpkt.tcp.TCP):
                continue
            tcp = ip.data
            payload = bytes(tcp.data)
            if not payload:
                continue
            header = link_len + ip.hl * 4 + tcp.off * 4
            key = (dpkt.utils.inet_to_str(ip.src), tcp.sport, dpkt.utils.inet_to_str(ip.dst), tcp.dport)
            us = times[i] if times is not None else round(ts * 1_000_000)
            kept = max(0, min(len(payload), snaplen - header))
            flows.setdefault(key, []).append(_Segment(us, tcp.seq, payload, kept))
    return flows


def _frames(segments: list[_Segment]) -> list[Frame]:
    """The direction's frames: segments in sequence order (the first copy of a byte wins)."""
    base = min(s.seq for s in segments)
    stream = bytearray()
    # The stream's pieces: (first stream byte, end, the segment they came from, payload bytes skipped).
    pieces: list[tuple[int, int, _Segment, int]] = []
    for s in sorted(segments, key=lambda s: ((s.seq - base) & 0xFFFFFFFF, s.ts)):
        start = (s.seq - base) & 0xFFFFFFFF
        if start + len(s.payload) <= len(stream):
            continue  # a retransmission
        skip = len(stream) - start
        if skip < 0:
            raise ValueError("the full capture has a hole: not a reference")
        pieces.append((len(stream), start + len(s.payload), s, skip))
        stream += s.payload[skip:]
    starts = [p[0] for p in pieces]

    def piece(i: int) -> int:
        return bisect.bisect_right(starts, i) - 1

    frames = []
    pos = 0
    while pos + 4 <= len(stream):
        (size,) = struct.unpack_from(">i", stream, pos)
        end = pos + 4 + size
        if size < 0 or end > len(stream):
            break
        first, last = pieces[piece(pos)][2], pieces[piece(end - 1)][2]
        frame = Frame(pos, 4 + size, first.ts, last.ts, bytes(stream[pos:end]))
        for lo_, hi_, seg, skip in pieces[piece(pos) : piece(end - 1) + 1]:
            # A segment keeps its first `kept` payload bytes; the piece holds its bytes from `skip` on.
            lo, hi = max(lo_, pos), min(hi_, lo_ + max(0, seg.kept - skip), end)
            if hi <= lo:
                continue
            if frame.kept and frame.kept[-1][1] == lo - pos:
                frame.kept[-1] = (frame.kept[-1][0], hi - pos)
            else:
                frame.kept.append((lo - pos, hi - pos))
        frames.append(frame)
        pos = end
    return frames


def exchanges(
    path: Path, broker_port: int, snaplen: int = 262144, times_from: Path | None = None
) -> list[Exchange]:
    """Every request of the capture with its response (or None), in order per connection.

    ``times_from``: a second capture of the same packets (another tcpdump at the same time) whose
    time stamps to use."""
    times = None if times_from is None else times_of(path, times_from)
    flows = _segments(path, snaplen, times)
    out = []
    for key, segments in flows.items():
        if key[3] != broker_port:
            continue
        requests = _frames(segments)
        back = (key[2], key[3], key[0], key[1])
        responses = {struct.unpack_from(">i", f.data, 4)[0]: f for f in _frames(flows.get(back, []))}
        for req in requests:
            corr = struct.unpack_from(">i", req.data, 8)[0]
            out.append(Exchange(key, req, responses.get(corr)))
    return out


def header_kept(ex: Exchange) -> bool:
    """The request's size prefix, api key, version and correlation id, and its response's size
    prefix and correlation id (when it has one) are all inside the kept bytes."""
    if ex.request.kept_prefix() < 12:
        return False
    return ex.response is None or ex.response.kept_prefix() >= 8


@dataclass
class ProducedPartition:
    topic: str
    partition: int
    index_end: int  # frame offset just past the partition index
    records: int | None  # records in its batches (magic 2 batch headers), None for another format
    headers_end: int  # frame offset just past the last batch header (61 bytes each)
    records_start: int  # frame offset of the records field's first byte (after its length)
    records_size: int


def produced_partitions(ex: Exchange) -> list[ProducedPartition]:
    """The topic-partitions of a Produce request v3+ (Kafka's ProduceRequest.json; compact lengths
    and tagged fields from v9, KIP-482), read from the whole frame with their byte positions."""
    assert ex.api_key == 0 and ex.api_version >= 3
    data = ex.request.data
    flexible = ex.api_version >= 9
    pos = ex.client_id_end()

    def uvarint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    def length(classic: str) -> int:
        nonlocal pos
        if flexible:
            return uvarint() - 1
        (n,) = struct.unpack_from(classic, data, pos)
        pos += struct.calcsize(classic)
        return int(n)

    def skip_tags() -> None:
        nonlocal pos
        if flexible:
            for _ in range(uvarint()):
                uvarint()
                n = uvarint()
                pos += n

    skip_tags()  # request header v2's tagged fields
    n = length(">h")  # transactional_id (before `pos +=`, which would read pos first)
    pos += max(n, 0)
    pos += 2 + 4  # acks, timeout_ms
    out = []
    for _ in range(length(">i")):
        n = length(">h")
        topic = data[pos : pos + n].decode()
        pos += n
        for _ in range(length(">i")):
            (index,) = struct.unpack_from(">i", data, pos)
            pos += 4
            index_end = pos
            size = length(">i")
            end = pos + max(size, 0)
            count: int | None = 0
            headers_end = pos
            batch = pos
            while batch < end:
                magic = data[batch + 16]
                if magic != 2:
                    count = None
                    break
                (batch_length,) = struct.unpack_from(">i", data, batch + 8)
                (records,) = struct.unpack_from(">i", data, batch + 57)
                count = (count or 0) + records
                headers_end = batch + 61
                batch += 12 + batch_length
            out.append(ProducedPartition(topic, index, index_end, count, headers_end, end - size, size))
            pos = end
            skip_tags()
        skip_tags()
    return out
