"""Request and response headers: which header version a message uses, and parsing it.

A "frame" here is one Kafka message without its int32 size prefix: header followed by body.
"""

from __future__ import annotations

import struct
from typing import Any, cast

from kwsniff.protocol import _schema
from kwsniff.protocol.decode_error import DecodeError

_API_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

_NO_FLEXIBLE_VERSION = 1 << 16


def _version_tables() -> tuple[dict[int, str], dict[int, tuple[int, int]], dict[int, int], dict[int, int]]:
    names: dict[int, str] = {}
    request_ranges: dict[int, tuple[int, int]] = {}
    first_flexible: list[dict[int, int]] = [{}, {}]
    for key, (name, request, response) in cast(dict[int, Any], _schema.APIS).items():
        names[key] = name
        if request:
            request_ranges[key] = (request[0][0], request[-1][1])
        for table, segments in zip(first_flexible, (request, response), strict=True):
            flexible = [segment[2] for segment in segments if segment[2] is not None]
            table[key] = min(flexible) if flexible else _NO_FLEXIBLE_VERSION
    return names, request_ranges, first_flexible[0], first_flexible[1]


_API_NAMES, _REQUEST_VERSIONS, _FIRST_FLEXIBLE_REQUEST, _FIRST_FLEXIBLE_RESPONSE = _version_tables()

API_KEY_API_VERSIONS = 18
API_KEY_CONTROLLED_SHUTDOWN = 7


def api_name(api_key: int) -> str:
    """ "Produce", "Fetch", ...; "Unknown(99)" for keys no Kafka release defines."""
    name = _API_NAMES.get(api_key)
    return name if name is not None else f"Unknown({api_key})"


def api_names() -> dict[int, str]:
    """Every api key some Kafka release defines, with its name."""
    return dict(_API_NAMES)


def is_valid_request_version(api_key: int, api_version: int) -> bool:
    """Whether any Kafka release speaks this (api key, version); cheap enough for stream resync."""
    versions = _REQUEST_VERSIONS.get(api_key)
    return versions is not None and versions[0] <= api_version <= versions[1]


# Versions newer than the schema set that still look like a request when judging a connection's
# opening or resynchronising: clients ahead of this snapshot (Kafka releases after 4.5) bump versions
# one at a time, and an ApiVersions request deliberately carries the client's newest (KIP-511).
FUTURE_VERSIONS = 8


def is_plausible_request_version(api_key: int, api_version: int) -> bool:
    """A known api key at a known version or up to FUTURE_VERSIONS newer."""
    versions = _REQUEST_VERSIONS.get(api_key)
    return versions is not None and versions[0] <= api_version <= versions[1] + FUTURE_VERSIONS


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether this request version uses flexible encodings and tagged fields (KIP-482).

    Versions newer than the schema set count as flexible: once an API goes flexible it stays so.
    """
    return api_version >= _FIRST_FLEXIBLE_REQUEST.get(api_key, _NO_FLEXIBLE_VERSION)


def request_header_version(api_key: int, api_version: int) -> int:
    """Request header version: 2 for flexible request versions (KIP-482), else 1.

    ControlledShutdown v0 is the one exception: it predates client ids and uses header v0
    (no client id), as Kafka's ApiKeys.CONTROLLED_SHUTDOWN.requestHeaderVersion says.
    """
    if api_key == API_KEY_CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    if api_version >= _FIRST_FLEXIBLE_REQUEST.get(api_key, _NO_FLEXIBLE_VERSION):
        return 2
    return 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Response header version: 1 for flexible response versions (KIP-482), else 0.

    ApiVersions responses always use header v0 (KIP-511): a client that sent a version the broker
    does not support must still be able to read the broker's answer (correlation id, error code).
    """
    if api_key == API_KEY_API_VERSIONS:
        return 0
    if api_version >= _FIRST_FLEXIBLE_RESPONSE.get(api_key, _NO_FLEXIBLE_VERSION):
        return 1
    return 0


def _skip_tagged_fields(frame: bytes | memoryview, pos: int) -> int:
    """Skip a tagged-field section (uvarint count, then tag, size, data); return the offset after it."""
    end = len(frame)
    count, pos = _read_uvarint(frame, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(frame, pos)
        size, pos = _read_uvarint(frame, pos)
        if size > end - pos:
            raise DecodeError(pos, "header._tagged_fields", "tagged field size exceeds frame")
        pos += size
    return pos


def _read_uvarint(frame: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    for shift in range(0, 35, 7):
        if pos >= len(frame):
            raise DecodeError(pos, "header._tagged_fields", "truncated")
        byte = frame[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
    raise DecodeError(pos, "header._tagged_fields", "varint too long")


def parse_request_header(frame: bytes | memoryview) -> tuple[int, int, int, str | None, int]:
    """(api_key, api_version, correlation_id, client_id, header_len); the body is frame[header_len:].

    The client id is a classic nullable string (int16 length) in header v1 AND v2: RequestHeader.json
    marks it flexibleVersions "none" so that any broker can read it before knowing the api version.
    Unknown api keys are parsed as header v1 (the caller decides what to do with them).
    """
    size = len(frame)
    if size < 8:
        raise DecodeError(size, "header", "truncated")
    api_key, api_version, correlation_id = _API_KEY_VERSION_CORRELATION.unpack_from(frame, 0)
    header_version = request_header_version(api_key, api_version)
    if header_version == 0:
        return api_key, api_version, correlation_id, None, 8
    if size < 10:
        raise DecodeError(8, "header.client_id", "truncated")
    (length,) = _INT16.unpack_from(frame, 8)
    pos = 10
    client_id: str | None = None
    if length >= 0:
        if length > size - pos:
            raise DecodeError(pos, "header.client_id", "string length exceeds frame")
        # Like Kafka's own reader, undecodable bytes become U+FFFD rather than failing the frame.
        client_id = str(frame[pos : pos + length], "utf-8", "replace")
        pos += length
    elif length != -1:
        raise DecodeError(8, "header.client_id", "negative string length")
    if header_version == 2:
        pos = _skip_tagged_fields(frame, pos)
    return api_key, api_version, correlation_id, client_id, pos


def parse_response_header(frame: bytes | memoryview, api_key: int, api_version: int) -> tuple[int, int]:
    """(correlation_id, header_len) of a response to the given request; the body is frame[header_len:]."""
    if len(frame) < 4:
        raise DecodeError(len(frame), "header", "truncated")
    (correlation_id,) = _INT32.unpack_from(frame, 0)
    if response_header_version(api_key, api_version) == 0:
        return correlation_id, 4
    return correlation_id, _skip_tagged_fields(frame, 4)
