"""decode_request / decode_response: message bodies to plain Python values.

Each (api key, version, direction) is compiled once, on first use, into a specialised function
(see compiler.py) and cached; later messages go straight to it with one dict lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from kwsniff.protocol import _schema, wire
from kwsniff.protocol.compiler import compile_message
from kwsniff.protocol.decode_error import DecodeError

Decoder = Callable[[bytes | memoryview], dict[str, Any]]

_REQUEST, _RESPONSE = 1, 2
_API_VERSIONS = 18
# Direction codes of the variants whose `records` fields are memoryviews over the body (no copy).
_REQUEST_VIEW, _RESPONSE_VIEW = 3, 4
_DIRECTION_NAMES = {_REQUEST: "request", _RESPONSE: "response"}

# The generated tables are heterogeneous tuples; Any keeps mypy out of them.
_APIS = cast(dict[int, Any], _schema.APIS)

_cache: dict[tuple[int, int, int], Decoder] = {}


def _segment(api_key: int, api_version: int, direction: int) -> tuple[Any, ...]:
    api = _APIS.get(api_key)
    if api is None:
        raise DecodeError(0, "", f"unknown api key {api_key}")
    for segment in api[direction]:
        if segment[0] <= api_version <= segment[1]:
            return tuple(segment)
    raise DecodeError(0, "", "unsupported version")


def _newest(api_key: int, direction: int) -> int:
    return int(_APIS[api_key][direction][-1][1])


def message_fields(api_key: int, api_version: int, response: bool) -> tuple[Any, ...]:
    """The fields one message version has, nested, in order: the shape of its decoded dict."""
    direction = _RESPONSE if response else _REQUEST
    if api_key == _API_VERSIONS and response and api_version > _newest(api_key, direction):
        api_version = 0  # KIP-511: decoded as v0, see decoder_for
    return _present(_segment(api_key, api_version, direction)[3], api_version)


def is_flexible(api_key: int, api_version: int, response: bool) -> bool:
    """Whether the message version uses compact lengths and tagged fields (KIP-482)."""
    first_flexible = _segment(api_key, api_version, _RESPONSE if response else _REQUEST)[2]
    return first_flexible is not None and api_version >= first_flexible


def _present(fields: tuple[Any, ...], version: int) -> tuple[Any, ...]:
    return tuple(
        (*f[:6], None if f[6] is None else _present(f[6], version))
        for f in fields
        if f[2][0] <= version <= f[2][1]
    )


def decoder_for(api_key: int, api_version: int, direction: int) -> Decoder:
    """The compiled decoder of one message version (compiled now if this is its first use)."""
    cache_key = (api_key, api_version, direction)
    decoder = _cache.get(cache_key)
    if decoder is None:
        records_view = direction > _RESPONSE
        base = direction - 2 if records_view else direction
        if api_key == _API_VERSIONS and base == _RESPONSE and api_version > _newest(api_key, base):
            # KIP-511: a broker answers an ApiVersions request of a version it does not know with a
            # v0 response (UNSUPPORTED_VERSION and its ranges), so that any client can read it.
            return decoder_for(api_key, 0, direction)
        lowest, _highest, first_flexible, fields = _segment(api_key, api_version, base)
        flexible = first_flexible is not None and api_version >= first_flexible
        label = f"{api_key} v{api_version} {_DIRECTION_NAMES[base]}"
        decoder = compile_message(fields, api_version, flexible, label, records_view)
        _cache[cache_key] = decoder
    return decoder


def decode_request(api_key: int, api_version: int, body: bytes | memoryview) -> dict[str, Any]:
    """Decode a request body (the bytes after the request header)."""
    decoder = _cache.get((api_key, api_version, _REQUEST)) or decoder_for(api_key, api_version, _REQUEST)
    return decoder(body)


def decode_response(api_key: int, api_version: int, body: bytes | memoryview) -> dict[str, Any]:
    """Decode a response body (the bytes after the response header)."""
    decoder = _cache.get((api_key, api_version, _RESPONSE)) or decoder_for(api_key, api_version, _RESPONSE)
    return decoder(body)


def decode_request_view(api_key: int, api_version: int, body: bytes | memoryview) -> dict[str, Any]:
    """decode_request, but `records` fields are memoryviews over ``body``: valid only while it is."""
    key = (api_key, api_version, _REQUEST_VIEW)
    return (_cache.get(key) or decoder_for(*key))(body)


def decode_response_view(api_key: int, api_version: int, body: bytes | memoryview) -> dict[str, Any]:
    """decode_response, but `records` fields are memoryviews over ``body``: valid only while it is."""
    key = (api_key, api_version, _RESPONSE_VIEW)
    return (_cache.get(key) or decoder_for(*key))(body)


def schema_triples() -> list[tuple[int, int, str]]:
    """Every (api key, version, "request"|"response") the schema set defines."""
    triples = []
    for key, api in sorted(_APIS.items()):
        for direction in (_REQUEST, _RESPONSE):
            for lowest, highest, _flex, _fields in api[direction]:
                triples += [
                    (key, version, _DIRECTION_NAMES[direction]) for version in range(lowest, highest + 1)
                ]
    return triples


_METADATA_RECORDS = cast(dict[int, Any], _schema.METADATA_RECORDS)
_record_decoders: dict[tuple[int, int], Decoder] = {}


def decode_metadata_record(value: bytes | memoryview) -> tuple[str, dict[str, Any]] | None:
    """A KRaft metadata-log record (a record's value on __cluster_metadata): its name and fields, or
    None for a record type the schema set does not keep. The value is a frame version, the record
    type and its version, as unsigned varints, then the record, flexible (Kafka's
    MetadataRecordSerde, KIP-631). Raises DecodeError when the bytes do not hold one."""
    buf = value if type(value) is memoryview else memoryview(value)
    try:
        _frame, pos = wire.read_uvarint(buf, 0)
        kind, pos = wire.read_uvarint(buf, pos)
        version, pos = wire.read_uvarint(buf, pos)
    except wire.Fail as x:
        raise x.to_error() from None
    except IndexError:
        raise DecodeError(len(buf), "", "metadata record header cut") from None
    spec = _METADATA_RECORDS.get(kind)
    if spec is None:
        return None
    decoder = _record_decoders.get((kind, version))
    if decoder is None:
        segment = next((s for s in spec[1] if s[0] <= version <= s[1]), None)
        if segment is None:
            raise DecodeError(pos, "", f"unsupported {spec[0]} version {version}")
        decoder = compile_message(segment[3], version, True, f"{spec[0]} v{version}")
        _record_decoders[(kind, version)] = decoder
    return spec[0], decoder(buf[pos:])
