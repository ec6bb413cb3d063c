"""LZ4 frames (the lz4 frame format v1.6) as Kafka writes them, with the KAFKA-3160 header quirk forgiven.

Kafka before 0.10 computed the frame descriptor's header checksum over the magic number too, so magic 0
lz4 messages carry a wrong HC byte (KAFKA-3160, KIP-57). We walk the frame once to recompute HC where it
is wrong and to bound the output from the block sizes, then let cramjam decompress into a buffer of that
bound (never more than cap + 1 bytes).
"""

from __future__ import annotations

import struct

import cramjam

from kwsniff.records._decompressed import CAPPED, Decompressed

_FRAME_MAGIC = 0x184D2204
_SKIPPABLE_MASK = 0xFFFFFFF0
_SKIPPABLE_MAGIC = 0x184D2A50
_UINT32_LE = struct.Struct("<I")
_BLOCK_MAX_SIZES = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}
_UNCOMPRESSED_BLOCK = 0x80000000
# An lz4 sequence turns each input byte into at most 255 output bytes; a tighter first guess than the
# block maximum saves zero-filling megabytes for small batches written with 4 MiB blocks.
_LZ4_MAX_RATIO = 256

_PRIME1 = 0x9E3779B1
_PRIME2 = 0x85EBCA77
_PRIME3 = 0xC2B2AE3D
_PRIME4 = 0x27D4EB2F
_PRIME5 = 0x165667B1
_MASK32 = 0xFFFFFFFF


class _FrameDamage(Exception):
    pass


def decompress_lz4_frame(payload: memoryview, cap: int) -> Decompressed:
    try:
        fixes, likely_size, bound = _walk_frames(payload)
    except _FrameDamage as exc:
        return Decompressed(None, False, f"lz4 frame damaged ({exc})")
    source: memoryview | bytearray = payload
    if fixes:
        patched = bytearray(payload)
        for at, checksum in fixes:
            patched[at] = checksum
        source = patched
    size = min(likely_size, cap) + 1
    while True:
        out = bytearray(size)
        try:
            written = cramjam.lz4.decompress_into(source, out)
        except cramjam.DecompressionError as exc:
            if "whole buffer" not in str(exc):
                return Decompressed(None, False, f"lz4 data corrupt ({exc})")
            if size > cap:
                return CAPPED
            if size > bound:
                return Decompressed(None, False, "lz4 blocks larger than their declared maximum")
            size = min(bound, cap) + 1
            continue
        if written > cap:
            return CAPPED
        return Decompressed(memoryview(out)[:written], False, "")


def _walk_frames(payload: memoryview) -> tuple[list[tuple[int, int]], int, int]:
    """Return (header checksum fixes as (position, byte), likely output size, output bound)."""
    fixes: list[tuple[int, int]] = []
    likely = bound = 0
    pos = 0
    end = len(payload)
    while pos < end:
        magic = _read_u32(payload, pos)
        if magic & _SKIPPABLE_MASK == _SKIPPABLE_MAGIC:
            pos += 8 + _read_u32(payload, pos + 4)
            continue
        if magic != _FRAME_MAGIC:
            raise _FrameDamage(f"bad magic 0x{magic:08x} at byte {pos}")
        pos, frame_likely, frame_bound = _walk_frame(payload, pos + 4, fixes)
        likely += frame_likely
        bound += frame_bound
    if pos > end:
        raise _FrameDamage("truncated")
    return fixes, likely, bound


def _walk_frame(payload: memoryview, pos: int, fixes: list[tuple[int, int]]) -> tuple[int, int, int]:
    if len(payload) < pos + 3:
        raise _FrameDamage("descriptor truncated")
    flags = payload[pos]
    block_max = _BLOCK_MAX_SIZES.get((payload[pos + 1] >> 4) & 7)
    if flags >> 6 != 1 or block_max is None:
        raise _FrameDamage(f"unsupported descriptor 0x{flags:02x}{payload[pos + 1]:02x}")
    descriptor_end = pos + 2 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
    if len(payload) <= descriptor_end:
        raise _FrameDamage("descriptor truncated")
    checksum = (xxh32(payload[pos:descriptor_end]) >> 8) & 0xFF
    if payload[descriptor_end] != checksum:
        fixes.append((descriptor_end, checksum))
    pos = descriptor_end + 1
    block_checksum = 4 if flags & 0x10 else 0
    likely = bound = 0
    while True:
        word = _read_u32(payload, pos)
        pos += 4
        if word == 0:
            break
        size = word & ~_UNCOMPRESSED_BLOCK
        if word & _UNCOMPRESSED_BLOCK:
            likely += size
            bound += size
        else:
            likely += min(block_max, size * _LZ4_MAX_RATIO)
            bound += block_max
        pos += size + block_checksum
    if flags & 0x04:
        pos += 4  # content checksum
    return pos, likely, bound


def _read_u32(payload: memoryview, pos: int) -> int:
    if len(payload) < pos + 4:
        raise _FrameDamage("truncated")
    value: int = _UINT32_LE.unpack_from(payload, pos)[0]
    return value


def xxh32(data: memoryview | bytes, seed: int = 0) -> int:
    """XXH32 of a short input (< 16 bytes: a frame descriptor), as the lz4 frame header checksum needs."""
    length = len(data)
    if length >= 16:
        raise ValueError("xxh32 here only covers inputs shorter than 16 bytes")
    acc = (seed + _PRIME5 + length) & _MASK32
    pos = 0
    while pos + 4 <= length:
        lane = int.from_bytes(data[pos : pos + 4], "little")
        acc = (acc + lane * _PRIME3) & _MASK32
        acc = (_rotate_left(acc, 17) * _PRIME4) & _MASK32
        pos += 4
    while pos < length:
        acc = (acc + data[pos] * _PRIME5) & _MASK32
        acc = (_rotate_left(acc, 11) * _PRIME1) & _MASK32
        pos += 1
    acc ^= acc >> 15
    acc = (acc * _PRIME2) & _MASK32
    acc ^= acc >> 13
    acc = (acc * _PRIME3) & _MASK32
    acc ^= acc >> 16
    return acc


def _rotate_left(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK32
