"""Decode throughput of kwsniff.protocol on the Kafka bodies in tests/data/captures/*.pcap.

Usage: python bench/bench_decode.py [--repeat N] [PCAP ...]

Frames are pulled out with a tiny standalone pcap + TCP loop (one in-order Kafka frame sequence per
TCP direction, as on loopback), so this measures the body decoders alone. Prints messages/s and MB/s
per API and direction (first decode of each version, which compiles it, is outside the timed loop).
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kwsniff.protocol import (  # noqa: E402
    api_name,
    decode_request,
    decode_response,
    parse_request_header,
    parse_response_header,
)

Message = tuple[str, int, int, bytes]  # ("request"|"response", api key, version, body)


def tcp_payloads(path: Path) -> Iterator[tuple[tuple[bytes, int, bytes, int], int, int, bytes]]:
    """(flow, seq, flags, payload) of every IPv4/IPv6 TCP segment in a classic pcap file."""
    data = path.read_bytes()
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    linktype = struct.unpack_from(endian + "I", data, 20)[0]
    record = struct.Struct(endian + "IIII")
    pos = 24
    while pos + 16 <= len(data):
        _sec, _frac, caplen, _length = record.unpack_from(data, pos)
        packet = data[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen
        if linktype == 1:
            ethertype, offset = struct.unpack_from(">H", packet, 12)[0], 14
        elif linktype == 113:
            ethertype, offset = struct.unpack_from(">H", packet, 14)[0], 16
        elif linktype == 0:
            family, offset = struct.unpack_from("<I", packet, 0)[0], 4
            ethertype = 0x86DD if family in (24, 28, 30) else 0x0800
        else:
            raise SystemExit(f"{path}: unsupported link type {linktype}")
        if ethertype == 0x0800:
            ihl = (packet[offset] & 0x0F) * 4
            total = struct.unpack_from(">H", packet, offset + 2)[0]
            if packet[offset + 9] != 6:
                continue
            src, dst = packet[offset + 12 : offset + 16], packet[offset + 16 : offset + 20]
            tcp, end = offset + ihl, offset + total
        elif ethertype == 0x86DD:
            if packet[offset + 6] != 6:
                continue
            plen = struct.unpack_from(">H", packet, offset + 4)[0]
            src, dst = packet[offset + 8 : offset + 24], packet[offset + 24 : offset + 40]
            tcp, end = offset + 40, offset + 40 + plen
        else:
            continue
        sport, dport, seq = struct.unpack_from(">HHI", packet, tcp)
        flags = packet[tcp + 13]
        header = (packet[tcp + 12] >> 4) * 4
        yield (src, sport, dst, dport), seq, flags, packet[tcp + header : end]


def kafka_messages(path: Path) -> list[Message]:
    """Request and response bodies of a capture, in capture order."""
    streams: dict[tuple[bytes, int, bytes, int], bytearray] = defaultdict(bytearray)
    next_seq: dict[tuple[bytes, int, bytes, int], int] = {}
    clients: set[tuple[bytes, int, bytes, int]] = set()
    order: list[tuple[bytes, int, bytes, int]] = []
    for flow, seq, flags, payload in tcp_payloads(path):
        if flags & 0x02:  # SYN: the sender of a bare SYN is the client
            next_seq[flow] = seq + 1
            if not flags & 0x10:
                clients.add(flow)
            continue
        expected = next_seq.setdefault(flow, seq)
        if not payload or seq != expected:
            continue  # retransmission or out of order: loopback captures have neither in practice
        next_seq[flow] = seq + len(payload)
        if flow not in streams:
            order.append(flow)
        streams[flow] += payload
    messages: list[Message] = []
    for flow in order:
        if flow not in clients:
            continue
        reverse = (flow[2], flow[3], flow[0], flow[1])
        versions: dict[int, tuple[int, int]] = {}
        for frame in frames(streams[flow]):
            key, version, correlation, _client, header_len = parse_request_header(frame)
            versions[correlation] = (key, version)
            messages.append(("request", key, version, frame[header_len:]))
        for frame in frames(streams.get(reverse, bytearray())):
            correlation = struct.unpack_from(">i", frame, 0)[0]
            key, version = versions[correlation]
            _correlation, header_len = parse_response_header(frame, key, version)
            messages.append(("response", key, version, frame[header_len:]))
    return messages


def frames(stream: bytearray) -> Iterator[bytes]:
    pos = 0
    while pos + 4 <= len(stream):
        size = struct.unpack_from(">i", stream, pos)[0]
        if pos + 4 + size > len(stream):
            return
        yield bytes(stream[pos + 4 : pos + 4 + size])
        pos += 4 + size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("pcaps", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    paths = args.pcaps or sorted((REPO / "tests" / "data" / "captures").glob("*.pcap"))
    messages = [m for path in paths for m in kafka_messages(path)]
    groups: dict[tuple[int, str], list[Message]] = defaultdict(list)
    for message in messages:
        groups[(message[1], message[0])].append(message)
    print(f"{len(messages)} bodies from {len(paths)} captures, {args.repeat} repeats")
    print(f"{'api':<22}{'dir':<9}{'msgs':>6}{'msgs/s':>12}{'MB/s':>9}")
    total_count = total_bytes = 0
    total_time = 0.0
    for (key, direction), group in sorted(groups.items()):
        decode = decode_request if direction == "request" else decode_response
        for _dir, k, v, body in group:  # compile outside the timed loop
            decode(k, v, body)
        start = time.perf_counter()
        for _ in range(args.repeat):
            for _dir, k, v, body in group:
                decode(k, v, body)
        elapsed = time.perf_counter() - start
        count = len(group) * args.repeat
        size = sum(len(m[3]) for m in group) * args.repeat
        total_count, total_bytes, total_time = total_count + count, total_bytes + size, total_time + elapsed
        print(
            f"{api_name(key):<22}{direction:<9}{len(group):>6}{count / elapsed:>12,.0f}{size / elapsed / 1e6:>9.1f}"
        )
    print(
        f"{'all':<31}{total_count // args.repeat:>6}{total_count / total_time:>12,.0f}"
        f"{total_bytes / total_time / 1e6:>9.1f}"
    )


if __name__ == "__main__":
    main()
