"""Throughput of summarize_records per codec, counting only and listing every record.

Peer: kafka-python's DefaultRecordBatch reader iterating the same batches (cramjam lent to it for codecs
it would need extra packages for). Run: python bench/bench_records.py [megabytes per codec]
"""

from __future__ import annotations

import functools
import random
import struct
import sys
import time
import zlib
from collections.abc import Callable

import cramjam
import kafka.codec
import kafka.record.default_records as default_records
from crc32c import crc32c

from kwsniff.records import summarize_records

RECORDS_PER_BATCH = 1000
COMPRESSORS: dict[str, tuple[int, Callable[[bytes], bytes]]] = {
    "none": (0, bytes),
    "gzip": (1, lambda body: zlib.compress(body, 6, 31)),
    "snappy": (2, lambda body: bytes(cramjam.snappy.compress_raw(body))),
    "lz4": (3, lambda body: bytes(cramjam.lz4.compress(body))),
    "zstd": (4, lambda body: bytes(cramjam.zstd.compress(body))),
}


def _value(rng: random.Random) -> bytes:
    fields = ",".join(
        f'"f{i}":"{rng.choice(["alpha", "beta", "gamma", "delta"])}{rng.randrange(1000)}"' for i in range(40)
    )
    return ("{" + fields + "}").encode()


def plain_batches(megabytes: int) -> list[bytes]:
    rng = random.Random(7)
    batches: list[bytes] = []
    size = 0
    offset = 0
    while size < megabytes << 20:
        builder = default_records.DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
        for index in range(RECORDS_PER_BATCH):
            builder.append(index, 1_700_000_000_000 + index, b"key-%d" % (offset + index), _value(rng), [])
        batch = bytearray(builder.build())
        struct.pack_into(">q", batch, 0, offset)
        batches.append(bytes(batch))
        size += len(batch)
        offset += RECORDS_PER_BATCH
    return batches


def recompress(batch: bytes, codec_id: int, compress: Callable[[bytes], bytes]) -> bytes:
    after_crc = bytearray(batch[21:61]) + compress(batch[61:])
    struct.pack_into(">h", after_crc, 0, codec_id)
    head = bytearray(batch[:21])
    struct.pack_into(">i", head, 8, 9 + len(after_crc))
    struct.pack_into(">I", head, 17, crc32c(after_crc))
    return bytes(head + after_crc)


def lend_cramjam_to_kafka_python() -> None:
    kafka.codec.has_snappy = kafka.codec.has_lz4 = kafka.codec.has_zstd = lambda: True
    default_records.snappy_decode = lambda data: bytes(cramjam.snappy.decompress_raw(data))
    default_records.lz4_decode = lambda data: bytes(cramjam.lz4.decompress(data))
    default_records.zstd_decode = lambda data: bytes(cramjam.zstd.decompress(data))


def best_of(runs: int, work: Callable[[], int]) -> tuple[float, int]:
    times = []
    result = 0
    for _ in range(runs):
        start = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - start)
    return min(times), result


def _counted(data: bytes) -> int:
    return summarize_records(data).record_count


def _listed(data: bytes) -> int:
    records = summarize_records(data, want_records=True).records
    return len(records) if records is not None else 0


def _peer_listed(batches: list[bytes]) -> int:
    return sum(sum(1 for _ in default_records.DefaultRecordBatch(batch)) for batch in batches)


def main() -> None:
    megabytes = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    lend_cramjam_to_kafka_python()
    plain = plain_batches(megabytes)
    print(
        f"{len(plain)} batches of {RECORDS_PER_BATCH} records, {sum(map(len, plain)) / 1e6:.1f} MB uncompressed"
    )
    print(
        f"{'codec':7} {'MB sent':>8} {'count MB/s':>11} {'list rec/s':>11} {'list MB/s':>10} {'peer rec/s':>11} {'ratio':>6}"
    )
    for name, (codec_id, compress) in COMPRESSORS.items():
        batches = [recompress(batch, codec_id, compress) for batch in plain]
        data = b"".join(batches)
        megabytes_sent = len(data) / 1e6

        count_time, counted = best_of(3, functools.partial(_counted, data))
        list_time, listed = best_of(2, functools.partial(_listed, data))
        peer_time, peered = best_of(1, functools.partial(_peer_listed, batches))
        assert counted == listed == peered, (counted, listed, peered)
        print(
            f"{name:7} {megabytes_sent:8.1f} {megabytes_sent / count_time:11.0f} {listed / list_time:11.0f} "
            f"{megabytes_sent / list_time:10.1f} {peered / peer_time:11.0f} {peer_time / list_time:6.2f}"
        )


if __name__ == "__main__":
    main()
