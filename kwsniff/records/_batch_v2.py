"""Record batches, magic 2 (KIP-98): the batch header, its CRC32C and, on request, each record.

Layout: baseOffset int64, batchLength int32, partitionLeaderEpoch int32, magic int8, crc uint32,
attributes int16, lastOffsetDelta int32, baseTimestamp int64, maxTimestamp int64, producerId int64,
producerEpoch int16, baseSequence int32, recordCount int32, then the records (compressed as a whole).
"""

from __future__ import annotations

import struct

from kwsniff.memory import RECORD_COST
from kwsniff.records import _crc
from kwsniff.records._codecs import decompress
from kwsniff.records._model import RecordInfo, codec_name
from kwsniff.records._reading import Reading
from kwsniff.records._varint import MalformedRecords, read_varint

BATCH_HEADER = struct.Struct(">qiiBIhiqqqhii")
BATCH_HEADER_SIZE = BATCH_HEADER.size  # 61
# The CRC covers everything from the attributes on: the partition leader epoch is rewritten by the
# broker without touching the CRC (KIP-101).
_CRC_START = 21

_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_INT32_MAX = 0x7FFFFFFF
# The smallest record: length, attributes, timestamp delta, offset delta, key and value lengths and
# header count, one byte each. A batch cannot hold more records than its body has room for.
_MIN_RECORD = 7


def read_batch_v2(view: memoryview, pos: int, reading: Reading) -> None:
    """Count the complete batch at pos; its records too when reading.records is a list."""
    (
        base_offset,
        batch_length,
        _leader_epoch,
        _magic,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    ) = BATCH_HEADER.unpack_from(view, pos)
    end = pos + 12 + batch_length
    summary = reading.summary
    summary.batch_count += 1
    if reading.check_crc and _crc.crc32c(view[pos + _CRC_START : end]) != crc:
        summary.crc_errors += 1
    codec = attributes & _CODEC_MASK
    compression = codec_name(codec)
    reading.codecs_seen.add(compression)
    if record_count < 0:
        reading.error(f"negative record count {record_count}", pos)
        record_count = 0
    summary.record_count += record_count
    reading.count_offsets(base_offset, base_offset + last_offset_delta)
    is_control = bool(attributes & _CONTROL)
    if is_control:
        summary.control_batches += 1
    if attributes & _TRANSACTIONAL:
        summary.transactional = True
    if not reading.seen_v2:
        reading.seen_v2 = True
        summary.producer_id = producer_id
        summary.producer_epoch = producer_epoch
        summary.base_sequence = base_sequence
    if codec > 4:
        reading.error(f"unknown codec id {codec}", pos)
        return
    if reading.records is None:
        return  # the header's count is the answer: no need to decompress
    body = view[pos + BATCH_HEADER_SIZE : end]
    if codec:
        outcome = decompress(codec, body, reading.cap)
        if outcome.capped:
            summary.capped_batches += 1
            return
        if outcome.data is None:
            reading.error(outcome.error, pos)
            return
        body = outcome.data
    # A record-count bomb (millions of 7-byte records in a small compressed batch) costs memory per
    # record, not per byte: the batch is read only if the memory budget's records pool has room.
    count = min(record_count, len(body) // _MIN_RECORD + 1)
    if not reading.admit(count * RECORD_COST + (len(body) if reading.want_payloads else 0)):
        summary.capped_batches += 1
        return
    template = RecordInfo(
        offset=base_offset,
        timestamp=max_timestamp if attributes & _LOG_APPEND_TIME else base_timestamp,
        timestamp_type="log_append" if attributes & _LOG_APPEND_TIME else "create",
        key_size=-1,
        value_size=-1,
        header_count=0,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        sequence=base_sequence,
        compression=compression,
        is_control=is_control,
    )
    problem = _read_records(body, record_count, template, reading)
    if problem:
        reading.error(problem, pos)


def _read_records(body: memoryview, record_count: int, template: RecordInfo, reading: Reading) -> str:
    """Append record_count records parsed from body; return "" or what went wrong."""
    records = reading.records
    assert records is not None
    want_payloads = reading.want_payloads
    log_append = template.timestamp_type == "log_append"
    base_offset = template.offset
    assert base_offset is not None  # the batch's baseOffset, an int64 (summarize_records nulls sums past it)
    base_timestamp = template.timestamp
    base_sequence = template.sequence
    timestamp_type = template.timestamp_type
    producer_id = template.producer_id
    producer_epoch = template.producer_epoch
    compression = template.compression
    is_control = template.is_control
    size = len(body)
    pos = 0
    index = 0
    try:
        for index in range(record_count):  # noqa: B007 - index names the damaged record below
            # Single-byte varints (-64..63) are the common case: decode them inline, the rest in read_varint.
            byte = body[pos]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                length, pos = read_varint(body, pos)
            record_end = pos + length
            if length < 0 or record_end > size:
                raise MalformedRecords(f"record length {length} out of range")
            pos += 1  # record attributes: unused since KIP-98
            timestamp_delta, pos = read_varint(body, pos, 10)
            byte = body[pos]
            if byte < 0x80:
                offset_delta = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                offset_delta, pos = read_varint(body, pos)
            byte = body[pos]
            if byte < 0x80:
                key_size = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                key_size, pos = read_varint(body, pos)
            key_start = pos
            if key_size > 0:
                pos += key_size
            value_size, pos = read_varint(body, pos)
            value_start = pos
            if value_size > 0:
                pos += value_size
            byte = body[pos]
            if byte < 0x80:
                header_count = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                header_count, pos = read_varint(body, pos)
            if header_count:
                pos = _skip_headers(body, pos, header_count, record_end)
            if pos != record_end:
                raise MalformedRecords(f"record fields end at {pos - record_end:+d} bytes from its length")
            if base_sequence < 0:
                sequence = -1
            elif base_sequence > _INT32_MAX - offset_delta:
                # Sequences wrap to 0 after Int32.MAX (DefaultRecordBatch.incrementSequence).
                sequence = offset_delta - (_INT32_MAX - base_sequence) - 1
            else:
                sequence = base_sequence + offset_delta
            records.append(
                RecordInfo(
                    base_offset + offset_delta,
                    base_timestamp if log_append else base_timestamp + timestamp_delta,
                    timestamp_type,
                    key_size,
                    value_size,
                    header_count,
                    producer_id,
                    producer_epoch,
                    sequence,
                    compression,
                    is_control,
                    bytes(body[key_start : key_start + key_size])
                    if want_payloads and key_size >= 0
                    else None,
                    bytes(body[value_start : value_start + value_size])
                    if want_payloads and value_size >= 0
                    else None,
                )
            )
    except MalformedRecords as exc:
        return f"record {index}: {exc}"
    except IndexError:
        return f"record {index} truncated"
    if pos != size:
        return f"{size - pos} bytes after the last of {record_count} records"
    return ""


def _skip_headers(body: memoryview, pos: int, header_count: int, record_end: int) -> int:
    if header_count < 0:
        raise MalformedRecords(f"negative header count {header_count}")
    for _ in range(header_count):
        key_size, pos = read_varint(body, pos)
        if key_size < 0:
            raise MalformedRecords("null header key")
        value_size, pos = read_varint(body, pos + key_size)
        if value_size > 0:
            pos += value_size
        if pos > record_end:
            break  # the caller reports the overrun
    return pos
