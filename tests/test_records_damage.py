"""Damaged, truncated and foreign bytes: counted with a reason and an offset, never raised."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from test_records_batches import RECORDS, _hand_built_batch, _record
from test_records_legacy import _message
from test_records_oracle import GZIP, NONE, ZSTD, build_legacy, build_v2

from kwsniff.records import RecordSetSummary, summarize_records

T0 = 1_700_000_000_000


def test_empty_and_missing_records_are_an_empty_summary() -> None:
    for data in (None, b"", memoryview(b"")):
        assert summarize_records(data) == RecordSetSummary()
    assert summarize_records(None, want_records=True).records == []


def test_partial_trailing_batch_is_counted_in_partial_bytes_without_error() -> None:
    first = build_v2(RECORDS, NONE, first_offset=5)
    second = build_v2(RECORDS, GZIP, first_offset=8)
    summary = summarize_records(first + second[:100])
    assert (summary.record_count, summary.batch_count, summary.partial_bytes, summary.errors) == (
        3,
        1,
        100,
        [],
    )
    assert (summary.last_offset, summary.record_bytes) == (7, len(first) + 100)


def test_trailing_bytes_too_short_to_hold_a_magic_byte_are_partial() -> None:
    summary = summarize_records(build_v2(RECORDS) + b"\x00" * 16)
    assert (summary.partial_bytes, summary.record_count, summary.errors) == (16, 3, [])


def test_partial_legacy_message_is_partial_bytes() -> None:
    third = _message(2, 1, 0, T0, b"c", b"gamma")
    data = _message(0, 1, 0, T0, b"a", b"alpha") + _message(1, 1, 0, T0, b"b", b"beta") + third
    summary = summarize_records(data[:-5])
    assert (summary.record_count, summary.partial_bytes, summary.last_offset) == (2, len(third) - 5, 1)


def test_view_into_a_larger_buffer_reads_only_its_own_bytes() -> None:
    frame = b"\xff" * 7 + build_v2(RECORDS, ZSTD, first_offset=3) + b"\xee" * 9
    summary = summarize_records(memoryview(frame)[7:-9])
    assert (summary.record_count, summary.errors, summary.partial_bytes) == (3, [], 0)


def test_corrupt_crc_is_counted_and_counts_stay_right() -> None:
    batch = bytearray(build_v2(RECORDS, NONE))
    batch[-3] ^= 0x01  # a value byte inside the CRC32C's range
    summary = summarize_records(bytes(batch) + build_v2(RECORDS, GZIP, first_offset=3), want_records=True)
    assert (summary.crc_errors, summary.record_count, summary.batch_count, summary.errors) == (1, 6, 2, [])
    assert summary.records is not None and len(summary.records) == 6
    assert summarize_records(bytes(batch), check_crc=False).crc_errors == 0


def test_corrupt_legacy_crc_is_counted() -> None:
    messages = bytearray(build_legacy(RECORDS, 0))
    messages[30] ^= 0xFF  # inside the first message's key/value
    summary = summarize_records(bytes(messages))
    assert (summary.crc_errors, summary.record_count) == (1, 3)


def test_unknown_magic_stops_with_its_offset() -> None:
    batch = build_v2(RECORDS)
    foreign = bytearray(batch)
    foreign[16] = 7
    summary = summarize_records(batch + bytes(foreign))
    assert summary.errors == [f"unknown magic 7 at offset {len(batch)}"]
    assert summary.record_count == 3


def test_impossible_batch_length_is_an_error() -> None:
    batch = bytearray(build_v2(RECORDS))
    struct.pack_into(">i", batch, 8, 20)
    assert summarize_records(bytes(batch)).errors == ["bad batch length 20 for magic 2 at offset 0"]


def test_unknown_codec_id_is_an_error_and_keeps_the_header_count() -> None:
    batch = _hand_built_batch(0, 5, [_record(0, b"k", b"v")], base_timestamp=T0, max_timestamp=T0)
    summary = summarize_records(batch, want_records=True)
    assert (summary.errors, summary.record_count, summary.compression) == (
        ["unknown codec id 5 at offset 0"],
        1,
        "unknown",
    )


def test_corrupt_compressed_body_is_an_error_with_the_batch_offset() -> None:
    first = build_v2(RECORDS)
    batch = bytearray(build_v2(RECORDS, GZIP, first_offset=3))
    batch[70:80] = b"\x00" * 10
    summary = summarize_records(first + bytes(batch), want_records=True, check_crc=False)
    assert len(summary.errors) == 1
    assert summary.errors[0].startswith("gzip data corrupt (")
    assert summary.errors[0].endswith(f"at offset {len(first)}")
    assert summary.record_count == 6


def test_corrupt_varint_is_an_error_and_earlier_records_are_kept() -> None:
    good = _record(0, b"k", b"v")
    bad = b"\xff" * 6
    summary = summarize_records(
        _hand_built_batch(0, 0, [good, bad], base_timestamp=T0, max_timestamp=T0), want_records=True
    )
    assert summary.errors == ["record 1: varint longer than 5 bytes at offset 0"]
    assert summary.records is not None and [r.key_size for r in summary.records] == [1]


def test_record_longer_than_its_batch_is_an_error() -> None:
    summary = summarize_records(
        _hand_built_batch(0, 0, [b"\x7e\x00"], base_timestamp=T0, max_timestamp=T0), want_records=True
    )
    assert summary.errors == ["record 0: record length 63 out of range at offset 0"]


def test_garbage_is_reported_not_raised() -> None:
    summary = summarize_records(b"this is not a kafka record batch at all, only text" * 3)
    assert summary.errors == ["unknown magic 102 at offset 0"]  # byte 16 is the "f" of "kafka"
    assert summary.record_count == 0


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=400))
def test_random_bytes_never_raise(data: bytes) -> None:
    summary = summarize_records(data, want_records=True, want_payloads=True, max_decompressed=1 << 16)
    assert summary.record_bytes == len(data)
    assert summary.partial_bytes <= len(data)
    assert summary.record_count == 0 or summary.batch_count > 0


_VALID = [
    build_v2(RECORDS, GZIP, producer=(5, 1, 0)),
    build_v2(RECORDS, ZSTD),
    build_v2(RECORDS, 3),
    build_v2(RECORDS, 2),
    build_legacy(RECORDS, 1, GZIP),
    build_legacy(RECORDS, 0, 3),
    build_legacy(RECORDS, 1, 2),
]


@settings(max_examples=400, deadline=None)
@given(
    which=st.integers(0, len(_VALID) - 1),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
    cut=st.integers(0, 10_000),
)
def test_mutated_batches_never_raise(which: int, flips: list[tuple[int, int]], cut: int) -> None:
    data = bytearray(_VALID[which])
    for at, mask in flips:
        data[at % len(data)] ^= mask
    data = data[: max(cut, len(data) // 2)]
    summary = summarize_records(bytes(data), want_records=True, want_payloads=True, max_decompressed=1 << 16)
    assert summary.record_bytes == len(data)
    for error in summary.errors:
        reason, _, offset = error.rpartition(" at offset ")
        assert reason and 0 <= int(offset) < len(data)
