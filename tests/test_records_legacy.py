"""Legacy message sets (magic 0 and 1): wrappers, KIP-31 relative offsets, nesting and the lz4 quirk."""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import pytest
from test_records_oracle import CODEC_IDS, GZIP, LZ4, NONE, SNAPPY, Record, build_legacy

from kwsniff.records import summarize_records
from kwsniff.records._lz4frame import xxh32

T0 = 1_600_000_000_000
RECORDS: list[Record] = [
    (T0, b"a", b"alpha" * 30, []),
    (T0 + 1, None, b"beta" * 30, []),
    (T0 + 2, b"c", None, []),
]


def _message(
    offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None, value: bytes | None
) -> bytes:
    """One legacy message packed field by field; the CRC32 covers magic to the end."""
    body = struct.pack(">bb", magic, attributes)
    if magic:
        body += struct.pack(">q", timestamp)
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body)) + body


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_each_magic_and_codec_counts_every_message(magic: int, codec: str) -> None:
    data = build_legacy(RECORDS, magic, CODEC_IDS[codec])
    summary = summarize_records(data, want_records=True, want_payloads=True)
    assert (summary.record_count, summary.compression, summary.magic, summary.crc_errors) == (
        3,
        codec,
        magic,
        0,
    )
    assert summary.batch_count == (3 if codec == "none" else 1)
    assert (summary.base_offset, summary.last_offset, summary.errors) == (0, 2, [])
    assert summary.records is not None
    stamp_type = "create" if magic else "none"
    assert [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value_size) for r in summary.records] == [
        (0, T0 if magic else -1, stamp_type, b"a", 150),
        (1, T0 + 1 if magic else -1, stamp_type, None, 120),
        (2, T0 + 2 if magic else -1, stamp_type, b"c", -1),
    ]
    assert [(r.producer_id, r.sequence, r.header_count, r.compression) for r in summary.records] == [
        (-1, -1, 0, codec)
    ] * 3


def test_magic1_wrapper_offset_is_the_last_inner_offset_kip31() -> None:
    wrapper = bytearray(build_legacy(RECORDS, 1, GZIP))
    struct.pack_into(">q", wrapper, 0, 1002)  # as a broker writes it in a Fetch response; outside the CRC
    summary = summarize_records(bytes(wrapper), want_records=True)
    assert summary.records is not None
    assert [r.offset for r in summary.records] == [1000, 1001, 1002]
    assert (summary.base_offset, summary.last_offset, summary.crc_errors) == (1000, 1002, 0)


def test_magic0_inner_offsets_are_absolute() -> None:
    inner = b"".join(_message(500 + i, 0, 0, 0, None, b"x" * 10) for i in range(3))
    data = _message(502, 0, GZIP, 0, None, gzip.compress(inner))
    summary = summarize_records(data, want_records=True)
    assert summary.records is not None
    assert [r.offset for r in summary.records] == [500, 501, 502]


def test_log_append_wrapper_timestamp_replaces_inner_timestamps() -> None:
    inner = b"".join(_message(i, 1, 0, T0 + i, None, b"x") for i in range(2))
    data = _message(11, 1, GZIP | 0x08, T0 + 999, None, gzip.compress(inner))
    summary = summarize_records(data, want_records=True)
    assert summary.records is not None
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in summary.records] == [
        (10, T0 + 999, "log_append"),
        (11, T0 + 999, "log_append"),
    ]


def _nested() -> bytes:
    inner_set = b"".join(_message(i, 1, 0, T0, b"k", b"v%d" % i) for i in range(2))
    middle = _message(1, 1, GZIP, T0, None, gzip.compress(inner_set)) + _message(2, 1, 0, T0, None, b"plain")
    return _message(2, 1, SNAPPY, T0, None, bytes(cramjam.snappy.compress_raw(middle)))


def test_wrapper_inside_wrapper_is_unwrapped() -> None:
    summary = summarize_records(_nested(), want_records=True, want_payloads=True)
    assert (summary.record_count, summary.batch_count, summary.compression, summary.errors) == (
        3,
        1,
        "snappy",
        [],
    )
    assert summary.records is not None
    assert [(r.offset, r.value) for r in summary.records] == [(0, b"v0"), (1, b"v1"), (2, b"plain")]


def test_nesting_beyond_max_depth_is_an_error_not_a_crash() -> None:
    summary = summarize_records(_nested(), max_depth=1)
    assert summary.errors == ["compressed messages nested deeper than 1 at offset 0"]
    assert summary.record_count == 1  # only the plain message beside the too-deep wrapper


def test_magic0_lz4_with_the_kafka_3160_header_checksum_decodes() -> None:
    data = build_legacy(RECORDS, 0, LZ4)
    frame = data[22 + 4 :]  # after the magic 0 message header (null key) and the value length
    descriptor_end = 6 + (8 if frame[4] & 0x08 else 0)
    # Kafka < 0.10 hashed the magic number too: the header checksum is wrong by the frame spec.
    assert frame[descriptor_end] == (xxh32(frame[:descriptor_end]) >> 8) & 0xFF
    assert frame[descriptor_end] != (xxh32(frame[4:descriptor_end]) >> 8) & 0xFF
    summary = summarize_records(data, want_records=True, want_payloads=True)
    assert (summary.record_count, summary.errors) == (3, [])
    assert summary.records is not None
    assert summary.records[0].value == b"alpha" * 30


def test_uncompressed_message_set_counts_each_message_as_a_batch() -> None:
    summary = summarize_records(build_legacy(RECORDS, 1, NONE, first_offset=70))
    assert (summary.batch_count, summary.record_count, summary.base_offset, summary.last_offset) == (
        3,
        3,
        70,
        72,
    )
