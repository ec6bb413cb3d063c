"""Walk a records field entry by entry and hand each complete batch or message to its reader."""

from __future__ import annotations

import struct
import zlib

import cramjam

from kwsniff.records._batch_v2 import BATCH_HEADER_SIZE, read_batch_v2
from kwsniff.records._message_set import MIN_MESSAGE_SIZE, read_message
from kwsniff.records._model import RecordSetSummary
from kwsniff.records._reading import Reading
from kwsniff.records._varint import MalformedRecords

_LENGTH_AT_8 = struct.Struct(">8xi")
_LOG_OVERHEAD = 12  # offset int64 + length int32, the same in every magic
# The magic byte sits at byte 16 in every format (after the CRC in 0/1, the leader epoch in 2), which is
# how Kafka itself tells the formats apart before parsing.
_MAGIC_AT = 16
_MIN_LENGTH = (*MIN_MESSAGE_SIZE, BATCH_HEADER_SIZE - _LOG_OVERHEAD)
_READERS = (read_message, read_message, read_batch_v2)


def summarize_records(
    data: bytes | bytearray | memoryview | None,
    *,
    want_records: bool = False,
    want_payloads: bool = False,
    max_decompressed: int = 64 * 1024 * 1024,
    max_depth: int = 4,
    check_crc: bool = True,
) -> RecordSetSummary:
    """Summarize the record batches (magic 2) or message set (magic 0/1) in a Produce/Fetch records field.

    Never raises on damaged bytes: damage lands in errors, crc_errors, partial_bytes or capped_batches.
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
        pos += _LOG_OVERHEAD + length
    seen = reading.codecs_seen
    summary.compression = seen.pop() if len(seen) == 1 else ("mixed" if seen else "")
    return summary
