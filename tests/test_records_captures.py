"""Record data lifted from real captures: librdkafka batches in every codec, kafka-python legacy sets.

Entries are found by their own checksums (CRC32C for magic 2, CRC32 for magic 0/1) in the client-to-broker
byte streams, so this needs no protocol decoder.
"""

from __future__ import annotations

import struct
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import dpkt
from crc32c import crc32c

from kwsniff.records import summarize_records

CAPTURES = Path(__file__).parent / "data" / "captures"


def _client_streams(name: str, broker_port: int) -> list[bytes]:
    flows: dict[tuple[bytes, int], tuple[int, list[bytes]]] = {}
    with open(CAPTURES / name, "rb") as capture:
        for _ts, frame in dpkt.pcap.Reader(capture):
            ip = dpkt.ethernet.Ethernet(frame).data
            tcp = ip.data
            if not isinstance(tcp, dpkt.tcp.TCP) or tcp.dport != broker_port or not tcp.data:
                continue
            expected, parts = flows.get((ip.src, tcp.sport), (tcp.seq, []))
            if tcp.seq == expected:  # loopback: no loss, so skipping retransmissions is enough
                parts.append(bytes(tcp.data))
                flows[(ip.src, tcp.sport)] = (tcp.seq + len(tcp.data), parts)
    return [b"".join(parts) for _, parts in flows.values()]


def _entries(stream: bytes) -> Iterator[bytes]:
    pos = 0
    while pos < len(stream) - 26:
        magic = stream[pos + 16]
        (length,) = struct.unpack_from(">i", stream, pos + 8)
        if magic <= 2 and 14 <= length <= len(stream) - pos - 12:
            entry = stream[pos : pos + 12 + length]
            (crc,) = struct.unpack_from(">I", entry, 17 if magic == 2 else 12)
            if (crc32c(entry[21:]) if magic == 2 else zlib.crc32(entry[16:])) == crc:
                yield entry
                pos += len(entry)
                continue
        pos += 1


def test_librdkafka_batches_of_every_codec_match_what_was_produced() -> None:
    seen: Counter[tuple[str, str]] = Counter()
    for stream in _client_streams("produce_codecs.pcap", 19101):
        for entry in _entries(stream):
            summary = summarize_records(entry, want_records=True)
            assert (summary.magic, summary.errors, summary.crc_errors) == (2, [], 0)
            assert summary.records is not None
            seen[summary.compression, "records"] += summary.record_count
            seen[summary.compression, "listed"] += len(summary.records)
            seen[summary.compression, "null values"] += sum(r.value_size == -1 for r in summary.records)
            seen[summary.compression, "with 2 headers"] += sum(r.header_count == 2 for r in summary.records)
    # The workload: 300 records per codec, every 50th a tombstone, every 10th with 2 headers.
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert (
            seen[codec, "records"],
            seen[codec, "listed"],
            seen[codec, "null values"],
            seen[codec, "with 2 headers"],
        ) == (300, 300, 6, 30), codec


def test_kafka_python_legacy_message_sets_decode() -> None:
    found = []
    for stream in _client_streams("legacy_msgset.pcap", 19106):
        for entry in _entries(stream):
            summary = summarize_records(entry, want_records=True, want_payloads=True)
            if summary.magic == 2:
                continue
            assert summary.records is not None
            found.append(
                (summary.magic, summary.compression, summary.errors)
                + tuple((r.offset, r.key, r.value_size, r.timestamp_type) for r in summary.records)
            )
    assert sorted(found) == [
        (0, "none", [], (0, b"legacy", 29, "none")),
        (1, "gzip", [], (0, b"legacy", 29, "create")),
    ]
