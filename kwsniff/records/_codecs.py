"""Bounded decompression of a batch's (magic 2) or wrapper message's (magic 0/1) payload.

Every codec writes into output that never grows past ``cap + 1`` bytes, so a decompression bomb costs at
most the cap in memory; the extra byte tells "exactly the cap" from "more than the cap".
"""

from __future__ import annotations

import struct
import zlib

import cramjam

from kwsniff.records._decompressed import CAPPED, Decompressed
from kwsniff.records._lz4frame import decompress_lz4_frame
from kwsniff.records._model import CODEC_NAMES

# zlib hands out output in steps of this size so the total can stop at the cap without ever holding
# two copies of a cap-sized result.
_GZIP_STEP = 1 << 20
_GZIP_AUTO_HEADER = 32 + 15  # wbits: accept gzip or zlib headers, largest window

# The Java client's snappy streams use xerial's framing (snappy-java SnappyOutputStream): this 8-byte magic,
# int32 version and compat, then blocks of int32 length + raw snappy. librdkafka sends raw snappy.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16
_INT32 = struct.Struct(">i")

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_FIRST_GUESS = 256 * 1024


def decompress(codec_id: int, payload: memoryview, cap: int) -> Decompressed:
    """Decompress payload with Kafka codec id 1-4; unknown ids are an error value, never an exception."""
    try:
        if codec_id == 1:
            return _gunzip(payload, cap)
        if codec_id == 2:
            return _unsnappy(payload, cap)
        if codec_id == 3:
            return decompress_lz4_frame(payload, cap)
        if codec_id == 4:
            return _unzstd(payload, cap)
    except (cramjam.DecompressionError, zlib.error, ValueError) as exc:
        return Decompressed(None, False, f"{CODEC_NAMES[codec_id]} data corrupt ({exc})")
    return Decompressed(None, False, f"unknown codec id {codec_id}")


def _gunzip(payload: memoryview, cap: int) -> Decompressed:
    inflater = zlib.decompressobj(_GZIP_AUTO_HEADER)
    first = inflater.decompress(payload, min(cap + 1, _GZIP_STEP))
    if len(first) > cap:
        return CAPPED
    if inflater.eof and not inflater.unused_data:
        return Decompressed(memoryview(first), False, "")  # the common case: one member, one step
    out = bytearray(first)
    pending: bytes | memoryview = inflater.unconsumed_tail
    while True:
        if len(out) > cap:
            return CAPPED
        if inflater.eof:
            pending = inflater.unused_data
            # Concatenated gzip members are one stream (RFC 1952 section 2.2); anything else after the
            # end is padding that Java's GZIPInputStream ignores too.
            if pending[:2] != b"\x1f\x8b":
                return Decompressed(memoryview(out), False, "")
            inflater = zlib.decompressobj(_GZIP_AUTO_HEADER)
        chunk = inflater.decompress(pending, min(cap + 1 - len(out), _GZIP_STEP))
        pending = inflater.unconsumed_tail
        if not chunk and not pending and not inflater.eof:
            return Decompressed(None, False, "gzip data truncated")
        out += chunk


def _unsnappy(payload: memoryview, cap: int) -> Decompressed:
    if payload[:8] != _XERIAL_MAGIC:
        if cramjam.snappy.decompress_raw_len(payload) > cap:
            return CAPPED
        return Decompressed(memoryview(cramjam.snappy.decompress_raw(payload)), False, "")
    blocks: list[tuple[memoryview, int]] = []
    total = 0
    pos = _XERIAL_HEADER_SIZE
    end = len(payload)
    while pos < end:
        if end - pos < 4:
            return Decompressed(None, False, "snappy xerial block header truncated")
        (size,) = _INT32.unpack_from(payload, pos)
        pos += 4
        if size < 0 or size > end - pos:
            return Decompressed(None, False, f"snappy xerial block length {size} out of range")
        block = payload[pos : pos + size]
        pos += size
        block_out = cramjam.snappy.decompress_raw_len(block)
        total += block_out
        if total > cap:
            return CAPPED
        blocks.append((block, block_out))
    out = bytearray(total)
    view = memoryview(out)
    at = 0
    for block, block_out in blocks:
        cramjam.snappy.decompress_raw_into(block, view[at : at + block_out])
        at += block_out
    return Decompressed(view, False, "")


def _unzstd(payload: memoryview, cap: int) -> Decompressed:
    declared = _zstd_content_size(payload)
    # Streaming producers (zstd-jni's ZstdOutputStream in the Java client) leave the content size out, so
    # guess, and grow on overflow: at most log4(cap / guess) retries before the cap decides.
    size = declared + 1 if declared is not None else max(_ZSTD_FIRST_GUESS, len(payload) * 8)
    size = min(size, cap + 1)
    while True:
        out = bytearray(size)
        try:
            written = cramjam.zstd.decompress_into(payload, out)
        except cramjam.DecompressionError as exc:
            # cramjam reports a full output buffer as an io WriteZero: "failed to write whole buffer".
            if "whole buffer" not in str(exc):
                raise
            if size > cap:
                return CAPPED
            size = min(size * 4, cap + 1)
            continue
        if written > cap:
            return CAPPED
        return Decompressed(memoryview(out)[:written], False, "")


def _zstd_content_size(payload: memoryview) -> int | None:
    """Frame content size from the first zstd frame header (RFC 8878 section 3.1.1.1), if it has one."""
    if len(payload) < 6 or int.from_bytes(payload[:4], "little") != _ZSTD_MAGIC:
        return None
    descriptor = payload[4]
    size_flag = descriptor >> 6
    single_segment = (descriptor >> 5) & 1
    field_size = (0, 2, 4, 8)[size_flag] or single_segment
    if field_size == 0:
        return None
    start = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
    if len(payload) < start + field_size:
        return None
    value = int.from_bytes(payload[start : start + field_size], "little")
    return value + 256 if field_size == 2 else value
