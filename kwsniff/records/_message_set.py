"""Legacy message sets, magic 0 and 1: one message per entry, compression by wrapping a whole message set.

Message: offset int64, messageSize int32, crc uint32 (CRC32 from magic on), magic int8, attributes int8,
timestamp int64 (magic 1 only), key bytes (int32 length), value bytes (int32 length). A compressed
message (codec bits set) carries a compressed inner message set as its value.
"""

from __future__ import annotations

import struct
import zlib

from kwsniff.memory import RECORD_COST
from kwsniff.records._codecs import decompress
from kwsniff.records._model import RecordInfo, codec_name
from kwsniff.records._reading import Reading

_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_LOG_OVERHEAD = 12
_CRC_START = 16
# Smallest messageSize per magic: crc, magic, attributes, [timestamp], key length, value length.
MIN_MESSAGE_SIZE = (14, 22)

_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08


class _Message:
    """One parsed message header; key/value are (start, size) in the view it came from."""

    __slots__ = ("offset", "end", "magic", "codec", "timestamp", "timestamp_type", "key", "value")

    def __init__(self, view: memoryview, pos: int) -> None:
        offset, size, crc, magic, attributes = _HEAD.unpack_from(view, pos)
        self.offset = offset
        self.end = pos + _LOG_OVERHEAD + size
        self.magic = magic
        self.codec = attributes & _CODEC_MASK
        at = pos + 18
        if magic == 0:
            self.timestamp = -1
            self.timestamp_type = "none"
        else:
            (self.timestamp,) = _TIMESTAMP.unpack_from(view, at)
            self.timestamp_type = "log_append" if attributes & _LOG_APPEND_TIME else "create"
            at += 8
        self.key, at = _sized_bytes(view, at, self.end)
        self.value, at = _sized_bytes(view, at, self.end)
        if at != self.end:
            raise ValueError(f"message fields end {at - self.end:+d} bytes from its size")


def _sized_bytes(view: memoryview, pos: int, end: int) -> tuple[tuple[int, int], int]:
    if pos + 4 > end:
        raise ValueError("message truncated")
    (size,) = _LENGTH.unpack_from(view, pos)
    pos += 4
    if size < -1 or pos + max(size, 0) > end:
        raise ValueError(f"bytes length {size} out of range")
    return (pos, size), pos + max(size, 0)


def crc_matches(view: memoryview, pos: int, end: int) -> bool:
    return zlib.crc32(view[pos + _CRC_START : end]) == _HEAD.unpack_from(view, pos)[2]


def read_message(view: memoryview, pos: int, reading: Reading) -> None:
    """Count the complete top-level message at pos (a compressed wrapper counts as one batch)."""
    summary = reading.summary
    summary.batch_count += 1
    try:
        message = _Message(view, pos)
    except ValueError as exc:
        reading.error(str(exc), pos)
        return
    if reading.check_crc and not crc_matches(view, pos, message.end):
        summary.crc_errors += 1
    compression = codec_name(message.codec)
    reading.codecs_seen.add(compression)
    if not message.codec:
        summary.record_count += 1
        reading.count_offsets(message.offset, message.offset)
        if not reading.admit(_cost(message, reading)):
            summary.capped_batches += 1
        elif reading.records is not None:
            reading.records.append(_record_info(view, message, message.offset, reading, compression))
        return
    inner = _unwrap(view, message, 1, pos, reading)
    if not inner:
        # Capped or damaged: the wrapper's own offset is all we know (the last inner offset from magic 1).
        reading.count_offsets(message.offset, message.offset)
        return
    summary.record_count += len(inner)
    reading.count_offsets(inner[0].offset, inner[-1].offset)
    if reading.records is not None:
        reading.records.extend(inner)


def _unwrap(
    view: memoryview, wrapper: _Message, depth: int, batch_pos: int, reading: Reading
) -> list[RecordInfo]:
    """The records inside a compressed wrapper, with absolute offsets; [] when capped or damaged."""
    if wrapper.codec == 4:
        reading.error("zstd in a magic 0/1 message (zstd needs magic 2: KIP-110)", batch_pos)
    if depth > reading.max_depth:
        reading.error(f"compressed messages nested deeper than {reading.max_depth}", batch_pos)
        return []
    value_start, value_size = wrapper.value
    outcome = decompress(wrapper.codec, view[value_start : value_start + max(value_size, 0)], reading.cap)
    if outcome.capped:
        reading.summary.capped_batches += 1
        return []
    if outcome.data is None:
        reading.error(outcome.error, batch_pos)
        return []
    records = _read_inner_set(outcome.data, depth, batch_pos, reading, codec_name(wrapper.codec))
    if records and wrapper.magic > 0:
        # KIP-31: inner offsets of a magic 1 wrapper are relative, the wrapper holds the absolute offset
        # of the last one. Like Java's AbstractLegacyRecordBatch, a negative base (producers that leave
        # the wrapper offset 0) keeps the inner offsets as written.
        # (Offsets are ints here: summarize_records nulls those past int64 once the set is read.)
        last = records[-1].offset
        absolute_base = -1 if last is None else wrapper.offset - last
        if absolute_base >= 0:
            for record in records:
                if record.offset is not None:
                    record.offset += absolute_base
        if wrapper.timestamp_type == "log_append":
            for record in records:  # the broker's append time replaces every inner timestamp
                record.timestamp = wrapper.timestamp
                record.timestamp_type = "log_append"
    return records


def _read_inner_set(
    inner: memoryview, depth: int, batch_pos: int, reading: Reading, compression: str
) -> list[RecordInfo]:
    records: list[RecordInfo] = []
    size = len(inner)
    pos = 0
    charged = 0
    while pos < size:
        if size - pos < _LOG_OVERHEAD + 5:
            reading.error(f"inner message set has {size - pos} trailing bytes", batch_pos)
            break
        magic = inner[pos + 16]
        length = _HEAD.unpack_from(inner, pos)[1]
        if magic > 1 or length < MIN_MESSAGE_SIZE[magic] or length > size - pos - _LOG_OVERHEAD:
            reading.error(f"inner message with magic {magic} and size {length}", batch_pos)
            break
        try:
            message = _Message(inner, pos)
        except ValueError as exc:
            reading.error(f"inner message: {exc}", batch_pos)
            break
        if reading.check_crc and not crc_matches(inner, pos, message.end):
            reading.summary.crc_errors += 1
        if message.codec:
            records.extend(_unwrap(inner, message, depth + 1, batch_pos, reading))
        else:
            # Wrappers are read into records even for counts, so a set of millions of tiny messages
            # is a record-count bomb: read it only while the memory budget's records pool has room.
            cost = _cost(message, reading)
            if not reading.admit(cost):
                reading.refund(charged)
                reading.summary.capped_batches += 1
                return []
            charged += cost
            records.append(_record_info(inner, message, message.offset, reading, compression))
        pos = message.end
    return records


def _cost(message: _Message, reading: Reading) -> int:
    if not reading.want_payloads:
        return RECORD_COST
    return RECORD_COST + max(message.key[1], 0) + max(message.value[1], 0)


def _record_info(
    view: memoryview, message: _Message, offset: int, reading: Reading, compression: str
) -> RecordInfo:
    key_start, key_size = message.key
    value_start, value_size = message.value
    payloads = reading.want_payloads
    return RecordInfo(
        offset=offset,
        timestamp=message.timestamp,
        timestamp_type=message.timestamp_type,
        key_size=key_size,
        value_size=value_size,
        header_count=0,
        producer_id=-1,
        producer_epoch=-1,
        sequence=-1,
        compression=compression,
        is_control=False,
        key=bytes(view[key_start : key_start + key_size]) if payloads and key_size >= 0 else None,
        value=bytes(view[value_start : value_start + value_size]) if payloads and value_size >= 0 else None,
    )
