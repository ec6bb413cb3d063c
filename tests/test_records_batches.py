"""Record batches (magic 2): counts, offsets, codecs, producer state and control batches."""

from __future__ import annotations

import struct

import pytest
from kafka.record.util import calc_crc32c, encode_varint
from test_records_oracle import CODEC_IDS, GZIP, LZ4, NONE, SNAPPY, ZSTD, build_v2, kafka_python_codecs

from kwsniff.records import summarize_records

T0 = 1_700_000_000_000
RECORDS = [
    (T0, b"k0", b"v0" * 50, []),
    (T0 + 5, None, b"value-1", [("h1", b"a"), ("h2", None)]),
    (T0 + 9, b"key-2", None, []),
]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_each_codec_yields_counts_offsets_and_records(codec: str) -> None:
    data = build_v2(RECORDS, CODEC_IDS[codec], first_offset=40) + build_v2(
        RECORDS[:1], CODEC_IDS[codec], first_offset=43
    )
    summary = summarize_records(data, want_records=True, want_payloads=True)
    assert (summary.record_count, summary.batch_count, summary.compression, summary.magic) == (4, 2, codec, 2)
    assert (summary.base_offset, summary.last_offset, summary.record_bytes) == (40, 43, len(data))
    assert (summary.crc_errors, summary.partial_bytes, summary.capped_batches, summary.errors) == (
        0,
        0,
        0,
        [],
    )
    assert summary.records is not None
    assert [
        (r.offset, r.timestamp, r.timestamp_type, r.key_size, r.value_size, r.header_count)
        for r in summary.records
    ] == [
        (40, T0, "create", 2, 100, 0),
        (41, T0 + 5, "create", -1, 7, 2),
        (42, T0 + 9, "create", 5, -1, 0),
        (43, T0, "create", 2, 100, 0),
    ]
    assert [(r.key, r.value, r.compression) for r in summary.records[:3]] == [
        (b"k0", b"v0" * 50, codec),
        (None, b"value-1", codec),
        (b"key-2", None, codec),
    ]


def test_counting_alone_takes_the_header_count_and_lists_no_records() -> None:
    summary = summarize_records(build_v2(RECORDS, ZSTD))
    assert (summary.record_count, summary.records, summary.compression) == (3, None, "zstd")


def test_payloads_stay_none_unless_asked_for() -> None:
    summary = summarize_records(build_v2(RECORDS, GZIP), want_records=True)
    assert summary.records is not None
    assert [(r.key, r.value, r.key_size) for r in summary.records] == [
        (None, None, 2),
        (None, None, -1),
        (None, None, 5),
    ]


def test_batches_with_different_codecs_are_mixed() -> None:
    summary = summarize_records(build_v2(RECORDS, NONE) + build_v2(RECORDS, LZ4, first_offset=3))
    assert (summary.compression, summary.record_count, summary.last_offset) == ("mixed", 6, 5)


def test_idempotent_transactional_batch_reports_producer_state_and_sequences() -> None:
    data = build_v2(RECORDS, SNAPPY, producer=(9001, 7, 2_147_483_646), transactional=True)
    summary = summarize_records(data, want_records=True)
    assert (summary.producer_id, summary.producer_epoch, summary.base_sequence, summary.transactional) == (
        9001,
        7,
        2_147_483_646,
        True,
    )
    assert summary.records is not None
    # Sequences wrap from Int32.MAX to 0, as DefaultRecordBatch.incrementSequence does.
    assert [(r.producer_id, r.producer_epoch, r.sequence) for r in summary.records] == [
        (9001, 7, 2_147_483_646),
        (9001, 7, 2_147_483_647),
        (9001, 7, 0),
    ]


def test_plain_batch_has_no_producer() -> None:
    summary = summarize_records(build_v2(RECORDS))
    assert (summary.producer_id, summary.producer_epoch, summary.base_sequence, summary.transactional) == (
        -1,
        -1,
        -1,
        False,
    )


def _hand_built_batch(
    base_offset: int, attributes: int, records: list[bytes], *, base_timestamp: int, max_timestamp: int
) -> bytes:
    """A magic 2 batch packed field by field, CRC32C from kafka-python's pure-Python implementation."""
    body = b"".join(records)
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            len(records) - 1,
            base_timestamp,
            max_timestamp,
            4242,
            3,
            -1,
            len(records),
        )
        + body
    )
    crc = calc_crc32c(after_crc)
    head = struct.pack(">qiiBI", base_offset, 4 + 1 + 4 + len(after_crc), 0, 2, crc)
    return head + after_crc


def _record(offset_delta: int, key: bytes, value: bytes, timestamp_delta: int = 0) -> bytes:
    fields = bytearray(b"\x00")
    encode_varint(timestamp_delta, fields.append)
    encode_varint(offset_delta, fields.append)
    encode_varint(len(key), fields.append)
    fields += key
    encode_varint(len(value), fields.append)
    fields += value
    encode_varint(0, fields.append)
    out = bytearray()
    encode_varint(len(fields), out.append)
    return bytes(out + fields)


def test_commit_marker_counts_as_control_batch() -> None:
    # Control record key: version int16 + type int16 (1 = commit); value: version + coordinator epoch.
    marker = _record(0, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 5))
    data = build_v2(RECORDS, NONE, first_offset=10) + _hand_built_batch(
        13, 0x10 | 0x20, [marker], base_timestamp=T0, max_timestamp=T0
    )
    summary = summarize_records(data, want_records=True, want_payloads=True)
    assert (summary.control_batches, summary.transactional, summary.record_count, summary.last_offset) == (
        1,
        True,
        4,
        13,
    )
    assert summary.records is not None
    control = summary.records[-1]
    assert (control.is_control, control.offset, control.key, control.producer_id) == (
        True,
        13,
        b"\x00\x00\x00\x01",
        4242,
    )
    assert summary.crc_errors == 0


def test_log_append_time_batch_gives_every_record_the_max_timestamp() -> None:
    records = [_record(0, b"a", b"1", timestamp_delta=3), _record(1, b"b", b"2", timestamp_delta=8)]
    data = _hand_built_batch(0, 0x08, records, base_timestamp=T0, max_timestamp=T0 + 100)
    summary = summarize_records(data, want_records=True)
    assert summary.records is not None
    assert [(r.timestamp, r.timestamp_type) for r in summary.records] == [
        (T0 + 100, "log_append"),
        (T0 + 100, "log_append"),
    ]


def test_raw_snappy_as_librdkafka_writes_it_reads_like_xerial() -> None:
    import cramjam
    import kafka.record.default_records as default_records

    with kafka_python_codecs():
        builder = default_records.DefaultRecordBatchBuilder(2, SNAPPY, False, -1, -1, -1, 1 << 30)
        for index, (timestamp, key, value, headers) in enumerate(RECORDS):
            builder.append(index, timestamp, key, value, headers)
        default_records.snappy_encode, saved = (
            (lambda data: bytes(cramjam.snappy.compress_raw(bytes(data)))),
            default_records.snappy_encode,
        )
        try:
            raw = bytes(builder.build())
        finally:
            default_records.snappy_encode = saved
    assert raw[61:69] != b"\x82SNAPPY\x00"
    xerial = build_v2(RECORDS, SNAPPY)
    assert xerial[61:69] == b"\x82SNAPPY\x00"
    for data in (raw, xerial):
        summary = summarize_records(data, want_records=True, want_payloads=True)
        assert summary.records is not None
        assert [r.value for r in summary.records] == [b"v0" * 50, b"value-1", None]
        assert summary.errors == []
