"""Walk a records field entry by entry and hand each complete batch or message to its reader."""

from __future__ import annotations

import struct
import zlib

import cramjam

from kwsniff.defaults import INT64_MAX, INT64_MIN, MAX_DECOMPRESSED, TS_MAX_US, int64_or_none
from kwsniff.memory import MemoryBudget
from kwsniff.records import _crc
from kwsniff.records._batch_v2 import BATCH_HEADER, BATCH_HEADER_SIZE, read_batch_v2
from kwsniff.records._message_set import MIN_MESSAGE_SIZE, read_message
from kwsniff.records._model import RecordInfo, RecordSetSummary
from kwsniff.records._reading import Reading
from kwsniff.records._varint import MalformedRecords

_LENGTH_AT_8 = struct.Struct(">8xi")
_LOG_OVERHEAD = 12  # offset int64 + length int32, the same in every magic
# The magic byte sits at byte 16 in every format (after the CRC in 0/1, the leader epoch in 2), which is
# how Kafka itself tells the formats apart before parsing.
_MAGIC_AT = 16
_MIN_LENGTH = (*MIN_MESSAGE_SIZE, BATCH_HEADER_SIZE - _LOG_OVERHEAD)
_READERS = (read_message, read_message, read_batch_v2)
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
_CRC_START = 21  # the magic 2 CRC covers the batch from its attributes on (KIP-98, KIP-101)
_CONTROL = 0x20
_TS_MAX_MS = TS_MAX_US // 1000
# What counts_v2 answers: record_count, record_bytes, batch_count, compression, crc_errors,
# partial_bytes, control_batches, base_offset, last_offset. last_offset is None with a base_offset
# when the last batch's baseOffset + lastOffsetDelta is past int64 (see last_in_int64).
BatchCounts = tuple[int, int, int, str, int, int, int, "int | None", "int | None"]


def counts_v2(data: bytes | memoryview) -> BatchCounts | None:
    """summarize_records' counts for the common records field, read straight from batch headers:
    only magic 2 batches with known codecs, complete or cut at the end (KIP-74). None for anything
    else (legacy messages, damage, records wanted), which summarize_records then reads in full."""
    size = len(data)
    pos = count = batches = crc_errors = control = partial = 0
    codecs = 0  # bit per codec id seen
    base = last = None
    unpack = BATCH_HEADER.unpack_from
    while pos < size:
        left = size - pos
        if left <= _MAGIC_AT:
            partial = left
            break
        (length,) = _LENGTH_AT_8.unpack_from(data, pos)
        if data[pos + _MAGIC_AT] != 2 or length < BATCH_HEADER_SIZE - _LOG_OVERHEAD:
            return None
        if length > left - _LOG_OVERHEAD:
            partial = left
            break
        (first, _, _, _, crc, attributes, delta, _, _, _, _, _, records) = unpack(data, pos)
        if records < 0 or attributes & 0x07 > 4:
            return None
        end = pos + _LOG_OVERHEAD + length
        batches += 1
        if _crc.crc32c(data[pos + _CRC_START : end]) != crc:
            crc_errors += 1
        codecs |= 1 << (attributes & 0x07)
        count += records
        if base is None:
            base = first
        last = first + delta
        if attributes & _CONTROL:
            control += 1
        pos = end
    # One bit set: that codec; more: "mixed"; none (no complete batch): "".
    compression = _CODECS[codecs.bit_length() - 1] if codecs else ""
    if codecs & (codecs - 1):
        compression = "mixed"
    return count, size, batches, compression, crc_errors, partial, control, base, last_in_int64(last)


def last_in_int64(last: int | None) -> int | None:
    """A batch's last offset (baseOffset + lastOffsetDelta, an int64 plus an int32), None where the
    sum is past int64: no log holds such an offset, and no int64 column can (the caller counts it)."""
    return None if last is None else int64_or_none(last)


def counts_from_headers(kept: bytes, size: int) -> BatchCounts | None:
    """counts_v2's answer for a records field of ``size`` bytes of which a snap length kept the first
    ``kept``: read from the magic 2 batch headers, when every batch's header (61 bytes, with its
    record count) was kept, each batch's length leading to the next and the last one ending the
    field. None when one was not, or is not magic 2: the count is then unknown. CRCs cover bytes
    that were not kept, so none is checked."""
    n = len(kept)
    pos = count = batches = control = 0
    codecs = 0
    base = last = None
    while pos < size:
        if pos + BATCH_HEADER_SIZE > n or kept[pos + _MAGIC_AT] != 2:
            return None
        (first, length, _, _, _, attributes, delta, _, _, _, _, _, records) = BATCH_HEADER.unpack_from(
            kept, pos
        )
        if records < 0 or attributes & 0x07 > 4 or length < BATCH_HEADER_SIZE - _LOG_OVERHEAD:
            return None
        batches += 1
        codecs |= 1 << (attributes & 0x07)
        count += records
        base = first if base is None else base
        last = first + delta
        control += bool(attributes & _CONTROL)
        pos += _LOG_OVERHEAD + length
    if pos != size:
        return None  # the last batch claims bytes past the field: cut by the producer (KIP-74)?
    compression = "mixed" if codecs & (codecs - 1) else (_CODECS[codecs.bit_length() - 1] if codecs else "")
    return count, size, batches, compression, 0, 0, control, base, last_in_int64(last)


def summarize_records(
    data: bytes | bytearray | memoryview | None,
    *,
    want_records: bool = False,
    want_payloads: bool = False,
    max_decompressed: int = MAX_DECOMPRESSED,
    max_depth: int = 4,
    check_crc: bool = True,
    budget: MemoryBudget | None = None,
) -> RecordSetSummary:
    """Summarize the record batches (magic 2) or message set (magic 0/1) in a Produce/Fetch records field.

    Never raises on damaged bytes: damage lands in errors, crc_errors, partial_bytes or capped_batches.

    With a ``budget``, records are read only while its records pool has room (a batch past it is
    counted in capped_batches); ``held_bytes`` of the summary is what stays charged for ``records``,
    for the caller to release once they are written.
    """
    summary = RecordSetSummary(records=[] if want_records else None)
    if not data:
        return summary
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    size = len(view)
    summary.record_bytes = size
    reading = Reading(
        summary,
        want_payloads=want_payloads,
        cap=max_decompressed,
        max_depth=max_depth,
        check_crc=check_crc,
        budget=budget,
    )
    pos = 0
    while pos < size:
        left = size - pos
        if left <= _MAGIC_AT:
            summary.partial_bytes = left  # Fetch responses may stop inside a batch (KIP-74)
            break
        (length,) = _LENGTH_AT_8.unpack_from(view, pos)
        magic = view[pos + _MAGIC_AT]
        if magic > 2:
            reading.error(f"unknown magic {magic}", pos)
            break
        if length < _MIN_LENGTH[magic]:
            reading.error(f"bad batch length {length} for magic {magic}", pos)
            break
        if length > left - _LOG_OVERHEAD:
            summary.partial_bytes = left
            break
        if summary.magic is None:
            summary.magic = magic
        before = len(summary.records) if summary.records is not None else 0
        try:
            _READERS[magic](view, pos, reading)
        except (
            MalformedRecords,
            IndexError,
            ValueError,
            struct.error,
            zlib.error,
            cramjam.DecompressionError,
        ) as exc:
            reading.error(f"{type(exc).__name__}: {exc}", pos)  # a reader missed a check: keep going
        if summary.records is not None:
            _null_impossible_timestamps(summary.records, before, pos, reading)
            _null_offsets_past_int64(summary.records, before, summary, magic)
        pos += _LOG_OVERHEAD + length
    # A batch's last offset (and a legacy wrapper's inner offsets) may be past int64.
    if last_in_int64(summary.base_offset) is None and summary.base_offset is not None:
        summary.base_offset = None
        summary.past_int64 += 1
    if last_in_int64(summary.last_offset) is None and summary.last_offset is not None:
        summary.last_offset = None
        summary.past_int64 += 1
    if summary.records is None:
        # Counts only: records read on the way (legacy wrappers) are already gone.
        reading.refund(summary.held_bytes)
    seen = reading.codecs_seen
    summary.compression = seen.pop() if len(seen) == 1 else ("mixed" if seen else "")
    return summary


def _null_impossible_timestamps(records: list[RecordInfo], start: int, pos: int, reading: Reading) -> None:
    """Timestamps past 9999-12-31 (a baseTimestamp of 2^62, say) fit no timestamp column: they become
    -1, "no timestamp" (null in the records table), counted as one error of the batch at pos."""
    bad = [r for r in records[start:] if r.timestamp > _TS_MAX_MS]
    if bad:
        reading.error(
            f"{len(bad)} record timestamps after year 9999 (first {bad[0].timestamp} ms): left null", pos
        )
        for r in bad:
            r.timestamp = -1


def _null_offsets_past_int64(
    records: list[RecordInfo], start: int, summary: RecordSetSummary, magic: int
) -> None:
    """Record offsets (a batch's baseOffset plus each record's delta, a legacy wrapper's offset plus
    its inner ones) past int64 become None, each counted in ``summary.past_int64``. A magic 2 batch's
    offsets are all within 2^32 of its first record's (int32 deltas from one base): only one near an
    edge is looked at record by record."""
    if len(records) <= start:
        return
    first = records[start].offset
    if magic == 2 and first is not None and INT64_MIN + 2**32 < first < INT64_MAX - 2**32:
        return
    for r in records[start:]:
        if r.offset is not None and not INT64_MIN <= r.offset <= INT64_MAX:
            r.offset = None
            summary.past_int64 += 1
