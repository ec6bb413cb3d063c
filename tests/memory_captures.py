"""Captures that attack memory (issue 22, item 4), assembled here for tests/test_memory_budget.py and
bench/bench_memory.py: a record-count bomb, many single-packet flows, big one-way payloads and
frames bigger than the live queue's share."""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator

from kafka.record.util import calc_crc32c
from kafkawire import BROKER, SYN, Flow, i16, i32, i64, request, response, string, tcp, uvarint

PRODUCE = 0
GZIP = 1
# The smallest record (7 bytes): length 6, attributes, timestamp delta, offset delta 0, null key,
# null value, no headers. Varints are zigzag (KIP-98): 6 -> 12, -1 -> 1.
TINY_RECORD = bytes([12, 0, 0, 0, 1, 1, 0])


def record(value: bytes, offset_delta: int = 0) -> bytes:
    """One magic 2 record with a null key and ``value``."""

    def zigzag(v: int) -> bytes:
        return uvarint((v << 1) ^ (v >> 63))

    body = b"\x00" + zigzag(0) + zigzag(offset_delta) + zigzag(-1) + zigzag(len(value)) + value + zigzag(0)
    return zigzag(len(body)) + body


def batch_v2(records: bytes, record_count: int, codec: int = 0) -> bytes:
    """A magic 2 record batch (KIP-98) holding ``records`` (compressed with gzip when codec is 1)."""
    payload = zlib.compress(records, 9, wbits=31) if codec == GZIP else records
    after_crc = struct.pack(">hiqqqhii", codec, record_count - 1, 0, 0, -1, -1, -1, record_count) + payload
    return struct.pack(">qiiBI", 0, 9 + len(after_crc), 0, 2, calc_crc32c(after_crc)) + after_crc


def record_count_bomb(records: int) -> bytes:
    """One gzip batch of ``records`` 7-byte records: a few KB on the wire, ~1 KB a record decoded."""
    return batch_v2(TINY_RECORD * records, records, GZIP)


def produce_v3(corr: int, batches: list[bytes], topic: str = "t") -> bytes:
    """A Produce v3 request: acks 1, one topic, partition i holding batches[i]."""
    parts = b"".join(i32(i) + i32(len(b)) + b for i, b in enumerate(batches))
    body = i16(-1) + i16(1) + i32(30_000) + i32(1) + string(topic) + i32(len(batches)) + parts
    return request(PRODUCE, 3, corr, body)


def produce_v3_response(corr: int, partitions: int, topic: str = "t") -> bytes:
    parts = b"".join(i32(i) + i16(0) + i64(100 * i) + i64(-1) for i in range(partitions))
    return response(corr, i32(1) + string(topic) + i32(partitions) + parts + i32(0))


def bomb_capture(records: int) -> list[tuple[int, bytes]]:
    """One Produce exchange whose only batch is a record-count bomb."""
    flow = Flow().handshake()
    flow.send(0, produce_v3(1, [record_count_bomb(records)]), mss=60_000)
    flow.send(1, produce_v3_response(1, 1))
    flow.close()
    return flow.packets


def one_way_produce(requests: int, records_per_request: int, value_size: int) -> list[tuple[int, bytes]]:
    """Produce requests of one connection and none of their responses (a capture of one direction):
    every request's records wait for a response that never comes."""
    flow = Flow().handshake()
    value = b"v" * value_size
    data = b"".join(record(value, i) for i in range(records_per_request))
    batch = batch_v2(data, records_per_request)
    for corr in range(1, requests + 1):
        flow.send(0, produce_v3(corr, [batch]), mss=60_000)
    return flow.packets


def single_packet_flows(flows: int, step_us: int = 10) -> Iterator[tuple[int, bytes]]:
    """``flows`` connections of one SYN each, from distinct clients to the broker, ``step_us`` apart."""
    ts = 1_700_000_000_000_000
    for i in range(flows):
        client = (bytes([10, 1 + (i >> 16), (i >> 8) & 0xFF, i & 0xFF]), 40000)
        yield ts + i * step_us, tcp(client, BROKER, 1000, 0, SYN)


def big_partial_frames(sizes: list[int], frame_size: int = 50 * 1024 * 1024) -> list[tuple[int, bytes]]:
    """One connection per entry of ``sizes``, each sending the first ``sizes[i]`` bytes of a
    ``frame_size`` Produce request and then nothing: the frame splitter holds them all."""
    packets: list[tuple[int, bytes]] = []
    for n, size in enumerate(sizes):
        flow = Flow(client=(bytes([10, 0, 0, 1]), 41000 + n))
        flow.ts += n * 1_000_000
        flow.handshake()
        head = struct.pack(">ihhih", frame_size - 4, PRODUCE, 3, 1, 1) + b"t"
        flow.send(0, (head + bytes(size))[:size], mss=64_000)
        packets += flow.packets
    packets.sort(key=lambda p: p[0])
    return packets


class FramesHandle:
    """A pcapy handle that has ``batches`` batches of one 90 MiB frame's worth of packets ready."""

    PACKET = 256 * 1024  # the largest snaplen

    def __init__(self, batches: int, frame: int = 90 * 1024 * 1024) -> None:
        self.left = batches
        count = frame // self.PACKET
        self.data = bytes(frame)
        self.meta = b"".join(struct.pack("=IIII", 1, 0, i * self.PACKET, self.PACKET) for i in range(count))
        self.read_fd, write_fd = os.pipe()
        os.write(write_fd, b"x")  # always readable
        self.write_fd = write_fd

    def datalink(self) -> int:
        return 228  # raw IPv4

    def getfd(self) -> int:
        return self.read_fd

    def next_batch(self, count: int) -> tuple[bytes, bytes]:
        if self.left == 0:
            return b"", b""
        self.left -= 1
        return self.data, self.meta

    def stats(self) -> tuple[int, int, int]:
        return (0, 0, 0)

    def close(self) -> None:
        os.close(self.read_fd)
        os.close(self.write_fd)
