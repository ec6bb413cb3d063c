"""Decode throughput of kwsniff.protocol on the Kafka bodies in tests/data/captures/*.pcap.

Usage: python bench/bench_decode.py [--repeat N] [PCAP ...]    (N rounds, default 20)

Frames are pulled out with a tiny standalone pcap + TCP loop (one in-order Kafka frame sequence per
TCP direction, as on loopback), so this measures the body decoders alone. Prints messages/s and MB/s
per API and direction (first decode of each version, which compiles it, is outside the timed loop).

Peer, measured in the same run: kio (PyPI kio 0.6, native readers) reads the very same bodies with its
entity_reader wherever it has a schema for the (api key, version, direction); kio 0.6 lacks versions
before KIP-896, so for some APIs it covers only part of the bodies and the ratio is taken on that part
(kwsniff is timed on it separately); versions kio lacks are listed under the table, and an API with
no kio schema at all shows "-". Rounds alternate kwsniff and kio so that noise from a shared machine
falls on both; within a round a group of fewer than 200 bodies is decoded several times over.
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from importlib.metadata import version as package_version
from pathlib import Path
from pkgutil import resolve_name
from typing import Any

from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader
from kio.serial.readers import Reader
from kio.static.constants import EntityType

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kwsniff.protocol import (  # noqa: E402
    api_name,
    decode_request,
    decode_request_view,
    decode_response,
    decode_response_view,
    parse_request_header,
    parse_response_header,
)
from kwsniff.rows import compiled  # noqa: E402
from kwsniff.rows.extract import request_summary, response_summary  # noqa: E402

KIO_VERSION = package_version("kio")
MIN_BODIES_PER_ROUND = 200  # a group with fewer bodies is decoded several times per round

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


def kio_reader(key: int, version: int, direction: str) -> Reader[Any] | None:
    """kio's reader for the body of one (api key, version, direction), None where kio 0.6 has no schema.

    Same mapping as tests/test_protocol_oracle_kio.py (kio's api_key_map and schema_name_map).
    """
    paths = schema_name_map.get(api_key_map.get(key, ""), {}).get(version, {})
    entity = paths.get(EntityType.request if direction == "request" else EntityType.response)
    return None if entity is None else entity_reader(resolve_name(entity))


def decoder(direction: str) -> Callable[[int, int, bytes], Any]:
    return decode_request if direction == "request" else decode_response


def time_kwsniff(group: list[Message], direction: str) -> float:
    decode = decoder(direction)
    start = time.perf_counter()
    for _dir, key, version, body in group:
        decode(key, version, body)
    return time.perf_counter() - start


def time_kio(group: list[tuple[Reader[Any], bytes]]) -> float:
    start = time.perf_counter()
    for read, body in group:
        read(body, 0)
    return time.perf_counter() - start


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}" if seconds > 0 else "-"


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
    readers: dict[tuple[int, int, str], Reader[Any] | None] = {}
    rejected: dict[tuple[int, int, str], str] = {}
    print(
        f"{len(messages)} bodies from {len(paths)} captures, {args.repeat} repeats; peer: kio {KIO_VERSION}"
    )
    print(
        f"{'api':<27}{'dir':<9}{'msgs':>5}{'msgs/s':>11}{'MB/s':>8}"
        f"{'kio msgs':>9}{'kio msgs/s':>12}{'ratio':>7}"
    )
    total_count = total_bytes = covered_count = 0
    total_time = ours_covered_time = kio_time = 0.0
    for (key, direction), group in sorted(groups.items()):
        decode = decoder(direction)
        covered: list[tuple[Reader[Any], bytes]] = []
        covered_messages: list[Message] = []
        for message in group:  # compile outside the timed loop; kio must read each body exactly
            _dir, k, v, body = message
            decode(k, v, body)
            triple = (k, v, direction)
            if triple not in readers:
                readers[triple] = kio_reader(k, v, direction)
            read = readers[triple]
            if read is None:
                continue
            try:
                _entity, size = read(body, 0)
            except Exception as error:  # a body kio cannot read is left out of the comparison, and said so
                rejected[triple] = f"{type(error).__name__}: {error}"
                continue
            if size != len(body):
                rejected[triple] = f"read {size} of {len(body)} bytes"
                continue
            covered.append((read, body))
            covered_messages.append(message)
        # Small groups are decoded several times per round, so that no timed block is a handful of
        # microseconds; every figure below is then brought back to one pass over the group's bodies.
        inner = -(-MIN_BODIES_PER_ROUND // len(group))
        passes = args.repeat * inner
        ours_timed, covered_timed = group * inner, covered_messages * inner
        theirs_timed = covered * inner
        ours = ours_covered = theirs = 0.0
        for _ in range(args.repeat):  # alternate the two so that noise on a shared machine hits both
            ours += time_kwsniff(ours_timed, direction)
            if covered and len(covered) < len(group):
                ours_covered += time_kwsniff(covered_timed, direction)
            theirs += time_kio(theirs_timed)
        if len(covered) == len(group):
            ours_covered = ours
        ours, ours_covered, theirs = ours / passes, ours_covered / passes, theirs / passes
        size = sum(len(m[3]) for m in group)
        total_count, total_bytes, total_time = total_count + len(group), total_bytes + size, total_time + ours
        line = f"{api_name(key):<27}{direction:<9}{len(group):>5}{rate(len(group), ours):>11}{size / ours / 1e6:>8.1f}"
        if covered:
            covered_count += len(covered)
            ours_covered_time += ours_covered
            kio_time += theirs
            line += f"{len(covered):>9}{rate(len(covered), theirs):>12}{theirs / ours_covered:>7.2f}"
        else:
            line += f"{'-':>9}{'-':>12}{'-':>7}"
        print(line)
    covered_line = (
        f"{covered_count:>9}{rate(covered_count, kio_time):>12}{kio_time / ours_covered_time:>7.2f}"
        if covered_count
        else f"{'-':>9}{'-':>12}{'-':>7}"
    )
    print(
        f"{'all':<36}{total_count:>5}{rate(total_count, total_time):>11}"
        f"{total_bytes / total_time / 1e6:>8.1f}{covered_line}"
    )
    print(
        "ratio = kio time / kwsniff time on the same bodies (those kio covers); above 1: kwsniff is faster. "
        "'all' weighs each body once, as in the captures."
    )
    uncovered = sorted(t for t, r in readers.items() if r is None)
    if uncovered:
        print("not in kio: " + ", ".join(f"{api_name(k)} v{v} {d}" for k, v, d in uncovered))
    for (k, v, d), reason in sorted(rejected.items()):
        print(f"kio could not read {api_name(k)} v{v} {d}: {reason}")

    produce_fetch_table(messages, args.repeat)


def summarize_produce_fetch(group: list[Message]) -> float:
    """What `kwsniff read` runs on Produce and Fetch bodies: the compiled walker's summary
    (kwsniff/rows/compiled.py), or where it does not answer, the decoder and the Python summary."""
    start = time.perf_counter()
    for direction, key, version, body in group:
        if direction == "request":
            if compiled.request_info(key, version, body) is None:
                request_summary(key, version, decode_request_view(key, version, body))
        elif compiled.response_info(key, version, body) is None:
            response_summary(key, version, decode_response_view(key, version, body))
    return time.perf_counter() - start


def produce_fetch_table(messages: list[Message], repeat: int) -> None:
    """Produce and Fetch bodies per version: `read`'s summary of them (compiled walker, or decoder and
    Python summary where it does not answer), the decoder alone, and kio's reader, alternated."""
    groups: dict[tuple[int, int, str], list[Message]] = defaultdict(list)
    for message in messages:
        if message[1] in (0, 1):
            groups[(message[1], message[2], message[0])].append(message)
    if not groups:
        return
    print()
    print(f"Produce and Fetch, per version: `read`'s summary (compiled: {compiled.AVAILABLE}) against kio")
    print(
        f"{'api':<9}{'v':>3} {'dir':<9}{'msgs':>6}{'compiled':>9}{'summary/s':>11}{'decoder/s':>11}"
        f"{'kio/s':>11}{'summary÷kio':>12}{'decoder÷kio':>12}"
    )
    for (key, version, direction), group in sorted(groups.items()):
        read = kio_reader(key, version, direction)
        answered = sum(
            (compiled.request_info if d == "request" else compiled.response_info)(k, v, b) is not None
            for d, k, v, b in group
        )
        summarize_produce_fetch(group)  # compile the decoders and walkers outside the timed loop
        kio_group: list[tuple[Reader[Any], bytes]] = []
        if read is not None:
            try:
                if all(read(body, 0)[1] == len(body) for _d, _k, _v, body in group):
                    kio_group = [(read, body) for _d, _k, _v, body in group]
            except Exception:  # kio cannot read one of them: no kio figure for this version
                kio_group = []
        inner = -(-MIN_BODIES_PER_ROUND // len(group))
        timed = group * inner
        summary = decoder_only = theirs = 0.0
        for _ in range(repeat):
            summary += summarize_produce_fetch(timed)
            decoder_only += time_kwsniff(timed, direction)
            if kio_group:
                theirs += time_kio(kio_group * inner)
        count = len(group) * inner * repeat
        line = (
            f"{'Produce' if key == 0 else 'Fetch':<9}{version:>3} {direction:<9}{len(group):>6}"
            f"{answered / len(group):>8.0%} {rate(count, summary):>11}{rate(count, decoder_only):>11}"
        )
        if kio_group:
            line += f"{rate(count, theirs):>11}{theirs / summary:>12.2f}{theirs / decoder_only:>12.2f}"
        else:
            line += f"{'-':>11}{'-':>12}{'-':>12}"
        print(line)
    print(
        "compiled: share of the bodies the compiled walker answered (the rest: decoder + Python summary);"
        " X÷kio: kio time / kwsniff time on the same bodies, above 1: kwsniff is faster"
    )


if __name__ == "__main__":
    main()
