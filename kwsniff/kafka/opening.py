"""Evidence that a connection on a port nobody named speaks Kafka. No I/O.

Four bytes of "size" and four of "api key, version" are easy to hit by chance: FastCGI, SMPP, FINS,
HiSLIP, OpenFlow... all open with bytes that read as a plausible request header. So a connection is
called Kafka only on proof: a request that decodes completely (a version some Kafka release
defines, a printable client id, a body the schema accepts) answered by a response that carries
its correlation id and decodes as that API's response. Any frame in the window that breaks the
rules (an absurd size, a version no release has, a binary client id) disproves it.
"""

from __future__ import annotations

from kwsniff.protocol import (
    DecodeError,
    decode_request,
    decode_response,
    is_plausible_request_version,
    is_valid_request_version,
    parse_request_header,
    parse_response_header,
)

API_VERSIONS = 18
CONTROLLED_SHUTDOWN = 7  # v0 has request header v0: no client id


class _Disproved(Exception):
    pass


# The smallest request header (v0: api key, version, correlation id) and response header.
_REQUEST_HEAD = 8
_RESPONSE_HEAD = 4


def frames_at_start(buf: bytes, smallest: int, largest: int) -> list[memoryview]:
    """The run of size-prefixed frames at the start of ``buf`` (the last may be incomplete);
    _Disproved when a size is outside ``smallest..largest``."""
    view, out, p = memoryview(buf), [], 0
    while len(view) - p >= 4:
        size = int.from_bytes(view[p : p + 4], "big", signed=True)
        if not smallest <= size <= largest:
            raise _Disproved
        out.append(view[p : p + 4 + size])
        p += 4 + size
    return out


def sane_client_id(client_id: str | None) -> bool:
    """Null, or printable text: clients name themselves (`rdkafka`, `consumer-1`, an app name)."""
    return client_id is None or (client_id.isprintable() and "\ufffd" not in client_id)


def _cut_request(frame: memoryview, api_key: int, version: int) -> tuple[int, int, int] | None:
    """A request frame the capture cut (snaplen, a lost segment): what is visible must be a header
    of a version some release defines, with a printable client id as far as it goes."""
    if len(frame) < 12 or not is_valid_request_version(api_key, version):
        return None
    corr = int.from_bytes(frame[8:12], "big", signed=True)
    if api_key != CONTROLLED_SHUTDOWN or version:
        if len(frame) < 14:
            return None
        n = int.from_bytes(frame[12:14], "big", signed=True)
        if n < -1 or n > int.from_bytes(frame[0:4], "big") - _REQUEST_HEAD - 2:
            raise _Disproved
        visible = str(frame[14 : 14 + max(n, 0)], "utf-8", "replace")
        if 14 + n > len(frame):
            visible = visible.rstrip("\ufffd")  # a character cut in the middle by the capture
        if not sane_client_id(visible):
            raise _Disproved
    return api_key, version, corr


def _request(frame: memoryview, cut: bool) -> tuple[int, int, int] | None:
    """(api_key, api_version, correlation_id) of a request frame that decodes completely (or, when
    ``cut``, whose visible header is sound); None when the frame is not complete yet or its version
    is newer than the schema set; _Disproved when it cannot be a request."""
    if len(frame) < 8:
        return None
    size = int.from_bytes(frame[0:4], "big")
    api_key = int.from_bytes(frame[4:6], "big")
    version = int.from_bytes(frame[6:8], "big")
    if not is_plausible_request_version(api_key, version):
        raise _Disproved
    if len(frame) < 4 + size:
        return _cut_request(frame, api_key, version) if cut else None
    try:
        api_key, version, corr, client_id, header_len = parse_request_header(frame[4:])
    except DecodeError:
        raise _Disproved from None
    if not sane_client_id(client_id):
        raise _Disproved
    if not is_valid_request_version(api_key, version):
        # Newer than the schema set: an ApiVersions request may be (KIP-511); its v0 answer decodes.
        return (api_key, version, corr) if api_key == API_VERSIONS else None
    try:
        decode_request(api_key, version, frame[4 + header_len :])
    except DecodeError:
        raise _Disproved from None
    return api_key, version, corr


def _response_decodes(frame: memoryview, api_key: int, version: int) -> bool:
    try:
        _, header_len = parse_response_header(frame[4:], api_key, version)
        decode_response(api_key, version, frame[4 + header_len :])
    except DecodeError:
        return False
    return True


def kafka_evidence(
    requests: bytes,
    responses: bytes,
    *,
    max_frame_size: int,
    window: int,
    final: bool,
    opening: bool,
    requests_cut: bool = False,
    responses_cut: bool = False,
) -> bool | None:
    """Do these two byte streams (each starting on a frame) prove a Kafka client and broker?

    True: a verified request/response pair. False: disproved. None: not yet (more bytes needed).
    ``opening``: the streams are the connection's first bytes, so the first response must answer
    one of the first requests, in order. ``window``: bytes a caller buffers at most; a response
    larger than that is accepted on its correlation id. ``final``: no more bytes will come.
    ``requests_cut``/``responses_cut``: the capture lost what follows these bytes (snaplen, a gap),
    so a frame they end in is judged on what is visible.
    """
    try:
        verified: dict[int, tuple[int, int]] = {}
        for frame in frames_at_start(requests, _REQUEST_HEAD, max_frame_size):
            found = _request(frame, requests_cut)
            if found is not None:
                verified[found[2]] = found[:2]
        for frame in frames_at_start(responses, _RESPONSE_HEAD, max_frame_size):
            if len(frame) < 8:
                break
            size = int.from_bytes(frame[0:4], "big")
            corr = int.from_bytes(frame[4:8], "big", signed=True)
            if corr not in verified:
                if opening:
                    # A broker answers only whole requests, in order: the first response must
                    # answer a request already seen.
                    return False
                continue  # mid-stream: a response to a request before the capture began
            api_key, version = verified[corr]
            if len(frame) == 4 + size:
                if _response_decodes(frame, api_key, version):
                    return True
                if is_valid_request_version(api_key, version):
                    return False
                # An ApiVersions request newer than the schema set, answered in that version by a
                # broker as new as the client: not decodable here, so no evidence either way.
                continue
            # A response bigger than what is buffered, or cut by the end: its id is the evidence.
            return True if final or responses_cut or 4 + size > window else None
    except _Disproved:
        return False
    return False if final else None
