"""kafka-python's record builders as an independent oracle, and the properties checked against it.

kafka-python looks for python-snappy, lz4, zstandard and xxhash, none of which kwsniff needs; the
builders here lend it cramjam's codecs for the raw compression only, so the framing around them (xerial
snappy blocks, the KAFKA-3160 lz4 header, batch and message layouts) is kafka-python's own.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from unittest import mock

import cramjam
import kafka.codec
import kafka.record.default_records as default_records
import kafka.record.legacy_records as legacy_records
from hypothesis import given, settings
from hypothesis import strategies as st

from kwsniff.records import summarize_records
from kwsniff.records._lz4frame import xxh32

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_IDS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
CODEC_NAMES = {codec_id: name for name, codec_id in CODEC_IDS.items()}

Header = tuple[str, bytes | None]
Record = tuple[int, bytes | None, bytes | None, list[Header]]  # timestamp, key, value, headers


def _lz4_frame(data: bytes) -> bytes:
    return bytes(cramjam.lz4.compress(bytes(data)))


@contextlib.contextmanager
def kafka_python_codecs() -> Iterator[None]:
    snappy_shim = SimpleNamespace(compress=lambda data: bytes(cramjam.snappy.compress_raw(bytes(data))))
    xxhash_shim = SimpleNamespace(
        xxh32=lambda data: SimpleNamespace(digest=lambda: xxh32(bytes(data)).to_bytes(4, "big"))
    )
    with (
        mock.patch.multiple(
            kafka.codec,
            has_snappy=lambda: True,
            has_lz4=lambda: True,
            has_zstd=lambda: True,
            snappy=snappy_shim,
            xxhash=xxhash_shim,
            lz4_encode=_lz4_frame,
        ),
        mock.patch.multiple(
            default_records,
            lz4_encode=_lz4_frame,
            zstd_encode=lambda data: bytes(cramjam.zstd.compress(bytes(data))),
        ),
        mock.patch.multiple(legacy_records, lz4_encode=_lz4_frame),
    ):
        yield


def build_v2(
    records: Sequence[Record],
    codec: int = NONE,
    *,
    first_offset: int = 0,
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
) -> bytes:
    producer_id, producer_epoch, base_sequence = producer
    with kafka_python_codecs():
        builder = default_records.DefaultRecordBatchBuilder(
            magic=2,
            compression_type=codec,
            is_transactional=transactional,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            batch_size=1 << 30,
        )
        for index, (timestamp, key, value, headers) in enumerate(records):
            builder.append(index, timestamp, key, value, headers)
        batch = bytearray(builder.build())
    if first_offset:
        struct.pack_into(">q", batch, 0, first_offset)  # the base offset sits outside the CRC
    return bytes(batch)


def build_legacy(records: Sequence[Record], magic: int, codec: int = NONE, *, first_offset: int = 0) -> bytes:
    with kafka_python_codecs():
        builder = legacy_records.LegacyRecordBatchBuilder(
            magic=magic, compression_type=codec, batch_size=1 << 30
        )
        for index, (timestamp, key, value, _headers) in enumerate(records):
            builder.append(first_offset + index, timestamp if magic else None, key, value)
        return bytes(builder.build())


def test_xxh32_matches_the_header_checksum_of_lz4_frames() -> None:
    frame = bytes(cramjam.lz4.compress(b"kafka" * 100))
    descriptor_end = 6 + (8 if frame[4] & 0x08 else 0)
    assert frame[descriptor_end] == (xxh32(frame[4:descriptor_end]) >> 8) & 0xFF
    assert xxh32(b"") == 0x02CC5D05  # the reference value of XXH32("", seed 0)


def test_oracle_builds_a_v2_batch_kafka_python_reads_back() -> None:
    batch = build_v2([(1000, b"k", b"v", [("h", b"x")])], GZIP, first_offset=7)
    records = list(default_records.DefaultRecordBatch(batch))
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (7, 1000, b"k", b"v", [("h", b"x")])
    ]


# kafka-python sends a batch uncompressed when compression does not shrink it: a compressible last record
# keeps every example compressed.
FILLER: Record = (1, b"filler", b"f" * 300, [])
_keys = st.one_of(st.none(), st.binary(max_size=40))
_headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3)
_records = st.lists(
    st.tuples(st.integers(0, 2**41), _keys, _keys, _headers),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(
    records=_records,
    codec=st.sampled_from([NONE, GZIP, SNAPPY, LZ4, ZSTD]),
    first_offset=st.integers(0, 2**40),
)
def test_v2_records_read_back_as_built(records: list[Record], codec: int, first_offset: int) -> None:
    records = [*records, FILLER]
    summary = summarize_records(
        build_v2(records, codec, first_offset=first_offset), want_records=True, want_payloads=True
    )
    assert summary.errors == []
    assert summary.records is not None
    got = [(r.offset, r.timestamp, r.key, r.value, r.header_count) for r in summary.records]
    want = [
        (first_offset + i, ts, key, value, len(headers))
        for i, (ts, key, value, headers) in enumerate(records)
    ]
    assert got == want
    assert (summary.record_count, summary.compression) == (len(records), CODEC_NAMES[codec])


@settings(max_examples=60, deadline=None)
@given(records=_records, magic=st.sampled_from([0, 1]), codec=st.sampled_from([NONE, GZIP, SNAPPY, LZ4]))
def test_legacy_records_read_back_as_built(records: list[Record], magic: int, codec: int) -> None:
    records = [*records, FILLER]
    summary = summarize_records(build_legacy(records, magic, codec), want_records=True, want_payloads=True)
    assert summary.errors == []
    assert summary.records is not None
    got = [(r.offset, r.timestamp, r.key, r.value) for r in summary.records]
    want = [(i, ts if magic else -1, key, value) for i, (ts, key, value, _h) in enumerate(records)]
    assert got == want
    assert (summary.record_count, summary.compression) == (len(records), CODEC_NAMES[codec])
    assert summary.batch_count == (1 if codec else len(records))
