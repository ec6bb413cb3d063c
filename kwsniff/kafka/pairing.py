"""Pairing Kafka requests with responses by correlation id, per connection. No I/O.

A :class:`Conversation` owns the two frame splitters of one TCP connection (client to broker and
broker to client). Request frames are parsed for their header and kept as pending until a response
with the same correlation id arrives; the broker answers in order per connection, but pipelined
requests (several in flight) are the normal case, so pending is a dict, not a queue.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kwsniff.defaults import MAX_FRAME_SIZE
from kwsniff.kafka.framing import GAP, NOT_CAPTURED, TRUNCATED_AT_END, FrameSplitter
from kwsniff.kafka.sasl import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SaslProgress,
    Secrets,
    authenticate_response_token,
    authenticate_token,
)
from kwsniff.protocol import DecodeError, error_name, parse_request_header, parse_response_header
from kwsniff.protocol.headers import is_plausible_request_version, request_header_version

# Statuses a request row can end with (DESIGN.md "Nothing silently lost").
OK = "ok"
NO_RESPONSE_EXPECTED = "no_response_expected"
UNANSWERED = "unanswered"
# The connection or the capture ended in the middle of the response: a capture edge, not an error.
RESPONSE_CUT = "response_cut"
DECODE_ERROR = "decode_error"

PRODUCE = 0
# The smallest request header: api_key, api_version, correlation_id (header v0).
_MIN_REQUEST = 8
_MIN_RESPONSE = 4
# Broker-side cap on in-flight requests a sniffer will remember per connection; a client that
# pipelines more than this (or a stream we mis-split) must not grow memory without bound.
MAX_PENDING = 10_000


@dataclass(slots=True)
class Frame:
    """Where a frame sat in its stream; ``info`` is free for the layer above (decoded summary)."""

    header_len: int
    ts_first: int
    ts_last: int
    size: int  # with the 4-byte size prefix
    offset: int  # stream offset of the size prefix
    info: Any = None
    error: str | None = None
    # Why the frame is incomplete when that is a capture edge (the stream ended inside it).
    cut: str | None = None
    # Bytes of the frame the capture's snap length did not keep (its body is then a prefix).
    missing: int = 0


@dataclass(slots=True)
class Response(Frame):
    correlation_id: int = 0


@dataclass(slots=True)
class Request(Frame):
    api_key: int = 0
    api_version: int = 0
    correlation_id: int = 0
    client_id: str | None = None


class ConversationHandler:
    """What a :class:`Conversation` reports to. Subclass and override; the defaults do nothing."""

    def request(self, req: Request, body: memoryview | bytes) -> None:
        """A request frame; ``body`` is the message after the header, valid only during this call."""

    def response(self, req: Request, resp: Response, body: memoryview | bytes) -> None:
        """A response paired with its request; ``body`` valid only during this call."""

    def exchange(self, req: Request, resp: Response | None, status: str) -> None:
        """A request's final outcome: called once per request, paired or not."""

    def orphan_response(self, correlation_id: int, ts: int, size: int, offset: int) -> None:
        """A response whose request was never seen (the capture began after it)."""

    def undecodable_frame(self, direction: int, ts: int, size: int, offset: int, reason: str) -> None:
        """A frame whose header could not be read; its bytes stay counted in frame_bytes."""

    def use_secrets(self, secrets: Secrets) -> None:
        """The secrets the connection's client will send (kafka.sasl.Secrets, filled as its SASL
        tokens pass): the broker's answers are to be cleaned of them."""


def plausible_request(view: memoryview) -> bool:
    """Could a Kafka request frame start here (size prefix included)? Used to resynchronise a stream."""
    if len(view) < 4 + _MIN_REQUEST:
        return False
    api_key = (view[4] << 8) | view[5]
    api_version = (view[6] << 8) | view[7]
    if not is_plausible_request_version(api_key, api_version):
        return False
    if len(view) < 14:
        return True
    # header v1+: client id is an int16-length nullable string, which must fit in the frame.
    size = int.from_bytes(view[0:4], "big", signed=True)
    n = int.from_bytes(view[12:14], "big", signed=True)
    return n == -1 or 0 <= n <= size - 10 or api_key == 7  # ControlledShutdown v0 has no client id


_KEY_VERSION_CORR = struct.Struct(">hhi")
_CUT_BY = {GAP: "a gap", TRUNCATED_AT_END: "the end of the connection or capture"}


class Conversation:
    """Kafka frames and request/response pairing over one TCP connection (both directions)."""

    def __init__(
        self,
        handler: ConversationHandler,
        *,
        max_frame_size: int = MAX_FRAME_SIZE,
        synced: tuple[bool, bool] = (True, True),
        held: list[int] | None = None,
    ) -> None:
        self.handler = handler
        self.pending: dict[int, Request] = {}
        self.requests = 0
        self.responses = 0
        self.orphans = 0
        self.pending_overflows = 0
        self.client = FrameSplitter(
            self._on_request_frame,
            self._on_skip_c2b,
            boundary_ok=plausible_request,
            max_frame_size=max_frame_size,
            synced=synced[0],
            min_frame_size=_MIN_REQUEST,
            on_cut=self._on_request_cut,
            held=held,
        )
        self.broker = FrameSplitter(
            self._on_response_frame,
            self._on_skip_b2c,
            boundary_ok=self._plausible_response,
            max_frame_size=max_frame_size,
            synced=synced[1],
            min_frame_size=_MIN_RESPONSE,
            on_cut=self._on_response_cut,
            held=held,
        )
        self.skip_reasons: dict[str, int] = {}
        self.on_skip: Callable[[int, int, int, str], None] | None = None
        self.sasl = SaslProgress()
        handler.use_secrets(self.sasl.secrets)
        self.sasl_tokens_mode = False

    # -- SASL tokens (Kafka protocol guide, "SASL Authentication Sequence") -------------------------
    def start_sasl_tokens(self, mechanism: str | None = None) -> None:
        """From here both directions carry bare size-prefixed SASL tokens, not Kafka frames: after
        a SaslHandshake v0 (KIP-43), or from the first byte for a Kafka 0.9 GSSAPI client."""
        self.sasl_tokens_mode = True
        if mechanism is not None:
            self.sasl.mechanism = mechanism
        # A token may be shorter than any Kafka header, or empty (PLAIN's success reply).
        self.client.min_frame_size = 0
        self.broker.min_frame_size = 0

    def _end_sasl_tokens(self) -> None:
        self.sasl_tokens_mode = False
        self.client.min_frame_size = _MIN_REQUEST
        self.broker.min_frame_size = _MIN_RESPONSE
        self.sasl.request_after()

    # -- frame callbacks ---------------------------------------------------------------------------
    def _on_request_frame(self, frame: memoryview | bytes, ts_first: int, ts_last: int, offset: int) -> None:
        if self.sasl_tokens_mode:
            # The client is done with tokens once it sends something that reads as a request again.
            if not plausible_request(memoryview(len(frame).to_bytes(4, "big") + bytes(frame[:16]))):
                self.sasl.client_token(bytes(frame))
                self.sasl.token(0, len(frame) + 4)
                return
            self._end_sasl_tokens()
        try:
            api_key, api_version, corr, client_id, hlen = parse_request_header(frame)
        except DecodeError as exc:
            self.handler.undecodable_frame(
                0, ts_first, len(frame) + 4, offset, f"request header: {exc.reason}"
            )
            return
        req = Request(
            hlen,
            ts_first,
            ts_last,
            len(frame) + 4,
            offset,
            api_key=api_key,
            api_version=api_version,
            correlation_id=corr,
            client_id=client_id,
        )
        self.requests += 1
        if api_key == SASL_HANDSHAKE:
            self.sasl.handshake_request(api_version, _mechanism(frame, hlen))
        elif api_key == SASL_AUTHENTICATE:
            self.sasl.client_token(authenticate_token(memoryview(frame)[hlen:], api_version))
        elif self.sasl.started:
            self.sasl.request_after()
        self.handler.request(req, memoryview(frame)[hlen:])
        old = self.pending.get(corr)
        if old is not None:
            # Correlation ids are chosen by the client and may wrap or repeat; the older request lost
            # its chance to be answered (Kafka answers in order per connection).
            self.handler.exchange(old, None, _unanswered(old))
        elif len(self.pending) >= MAX_PENDING:
            self.pending_overflows += 1
            oldest = self.pending.pop(next(iter(self.pending)))
            self.handler.exchange(oldest, None, _unanswered(oldest))
        self.pending[corr] = req

    def _on_response_frame(self, frame: memoryview | bytes, ts_first: int, ts_last: int, offset: int) -> None:
        if self.sasl_tokens_mode and (
            len(frame) < 4 or int.from_bytes(frame[0:4], "big", signed=True) not in self.pending
        ):
            self.sasl.token(1, len(frame) + 4)
            self.sasl.server_token(bytes(frame))
            return
        if len(frame) < 4:
            self.handler.undecodable_frame(
                1, ts_first, len(frame) + 4, offset, "response shorter than header"
            )
            return
        corr = int.from_bytes(frame[0:4], "big", signed=True)
        req = self.pending.pop(corr, None)
        if req is None and self.client.recover_damaged_size(_has_correlation_id(corr)):
            # Kafka answers each request after receiving it, so a response to a request held inside
            # a partial request frame proves that frame's size prefix wrong: its requests are replayed.
            req = self.pending.pop(corr, None)
        if req is None:
            self.orphans += 1
            self.handler.orphan_response(corr, ts_first, len(frame) + 4, offset)
            return
        self.responses += 1
        _answered(req)
        try:
            corr, hlen = parse_response_header(frame, req.api_key, req.api_version)
        except DecodeError as exc:
            resp = Response(4, ts_first, ts_last, len(frame) + 4, offset, correlation_id=corr)
            resp.error = f"response header: {exc.reason}"
            self.handler.exchange(req, resp, DECODE_ERROR)
            return
        resp = Response(hlen, ts_first, ts_last, len(frame) + 4, offset, correlation_id=corr)
        if req.api_key == SASL_HANDSHAKE or req.api_key == SASL_AUTHENTICATE:
            self._sasl_response(req, memoryview(frame)[hlen:])
        self.handler.response(req, resp, memoryview(frame)[hlen:])
        status = DECODE_ERROR if (req.error or resp.error) else OK
        self.handler.exchange(req, resp, status)

    # -- frames cut short by a gap or the end of the stream, or kept with holes by a snap length ------
    def _on_request_cut(
        self, head: bytes, got: int, size: int, ts_first: int, ts_last: int, offset: int, reason: str
    ) -> None:
        if self.sasl_tokens_mode or len(head) < _MIN_REQUEST:
            return
        try:
            api_key, api_version, corr, client_id, hlen = parse_request_header(head)
            header_whole = True
        except DecodeError:
            # The header's end was cut: the fixed fields are still there, but where the body starts
            # is not (what follows byte 8 is the client id), so no body is read (null facts).
            (api_key, api_version, corr), hlen = _KEY_VERSION_CORR.unpack_from(head), 8
            client_id, header_whole = _cut_client_id(head, api_key, api_version), False
        req = Request(
            hlen,
            ts_first,
            ts_last,
            size,
            offset,
            api_key=api_key,
            api_version=api_version,
            correlation_id=corr,
            client_id=client_id,
        )
        if reason == NOT_CAPTURED:
            # What the snap length kept of the body still names topics and partitions.
            req.missing = size - got
            if header_whole:
                self.handler.request(req, head[hlen:])
            req.error = f"request: {_not_captured(got, size)}"
        elif reason == TRUNCATED_AT_END:
            # The stream ended while the client was still sending: never answered in the capture.
            req.cut = f"request cut by {_CUT_BY[reason]} after {got:,} of {size:,} bytes"
        else:
            req.error = f"request: cut by {_CUT_BY.get(reason, reason)} after {got} of {size} bytes"
        if req.info is None:
            req.info = {}
        self.requests += 1
        old = self.pending.pop(corr, None)
        if old is not None:
            self.handler.exchange(old, None, _unanswered(old))
        self.pending[corr] = req

    def _on_response_cut(
        self, head: bytes, got: int, size: int, ts_first: int, ts_last: int, offset: int, reason: str
    ) -> None:
        if len(head) < 4:
            return
        req = self.pending.pop(int.from_bytes(head[:4], "big", signed=True), None)
        if req is None:
            if reason == NOT_CAPTURED:
                # Its boundaries are sure (the size prefix held across the holes): an orphan.
                self.orphans += 1
                self.handler.orphan_response(
                    int.from_bytes(head[:4], "big", signed=True), ts_first, size, offset
                )
            return  # otherwise its bytes are counted as skipped; an orphan needs a whole frame to be sure
        self.responses += 1
        _answered(req)
        resp = Response(4, ts_first, ts_last, size, offset, correlation_id=req.correlation_id)
        if reason == NOT_CAPTURED:
            resp.missing = size - got
            try:
                _, resp.header_len = parse_response_header(head, req.api_key, req.api_version)
            except DecodeError:
                pass  # the header's tagged fields were cut: no body to read
            else:
                self.handler.response(req, resp, head[resp.header_len :])
            resp.error = f"response: {_not_captured(got, size)}"
            self.handler.exchange(req, resp, DECODE_ERROR)
            return
        if reason == TRUNCATED_AT_END:
            resp.cut = f"response cut by {_CUT_BY[reason]} after {got:,} of {size:,} bytes"
            self.handler.exchange(req, resp, DECODE_ERROR if req.error else RESPONSE_CUT)
            return
        resp.error = f"response: cut by {_CUT_BY.get(reason, reason)} after {got} of {size} bytes"
        self.handler.exchange(req, resp, DECODE_ERROR)

    def _sasl_response(self, req: Request, body: memoryview) -> None:
        # Both responses start with an int16 error code in every version.
        if len(body) < 2:
            return
        code = int.from_bytes(body[0:2], "big", signed=True)
        if code:
            self.sasl.failed(error_name(code))
        elif req.api_key == SASL_AUTHENTICATE:
            self.sasl.rounds_ok += 1
            self.sasl.server_token(authenticate_response_token(body, req.api_version))
        elif req.api_version == 0:
            self.start_sasl_tokens()

    def _plausible_response(self, view: memoryview) -> bool:
        # A response boundary is one whose correlation id we are waiting for, or the very first
        # byte of a capture that began mid-connection: that response's request was never seen,
        # and it must be counted as an orphan rather than skipped.
        return len(view) >= 8 and (
            int.from_bytes(view[4:8], "big", signed=True) in self.pending or self.broker.candidate_offset == 0
        )

    def _on_skip_c2b(self, nbytes: int, offset: int, reason: str) -> None:
        self._skip(0, nbytes, offset, reason)

    def _on_skip_b2c(self, nbytes: int, offset: int, reason: str) -> None:
        self._skip(1, nbytes, offset, reason)

    def _skip(self, direction: int, nbytes: int, offset: int, reason: str) -> None:
        self.skip_reasons[reason] = self.skip_reasons.get(reason, 0) + nbytes
        if self.on_skip is not None:
            self.on_skip(direction, nbytes, offset, reason)

    # -- end of connection ---------------------------------------------------------------------------
    def close(self, ts: int) -> None:
        """The connection ended (or the capture did): settle every request still pending."""
        self.client.finish(ts)
        self.broker.finish(ts)
        for req in self.pending.values():
            self.handler.exchange(req, None, _unanswered(req))
        self.pending.clear()


def _unanswered(req: Request) -> str:
    """The status of a request that got no response: its reason (req.error, req.cut) must agree."""
    if req.error:
        return DECODE_ERROR
    return NO_RESPONSE_EXPECTED if _expects_no_response(req) else UNANSWERED


def _answered(req: Request) -> None:
    """A response came for a request the stream ended inside: the capture, not the client, cut it
    (a broker answers whole requests only), so its body is missing like a snap length's cut."""
    if req.cut is not None:
        req.error, req.cut = f"request: {req.cut.removeprefix('request ')}", None


def _not_captured(got: int, size: int) -> str:
    return f"not captured (snap length): {size - got:,} of {size:,} bytes missing"


def _cut_client_id(head: bytes, api_key: int, api_version: int) -> str | None:
    """The client id of a request header whose end (its tagged fields) a snap length cut off: the
    id is a classic int16-length string right after the correlation id in header v1 and v2."""
    if request_header_version(api_key, api_version) == 0 or len(head) < 10:
        return None
    n = int.from_bytes(head[8:10], "big", signed=True)
    if n < 0 or len(head) < 10 + n:
        return None
    return str(head[10 : 10 + n], "utf-8", "replace")


def _mechanism(frame: memoryview | bytes, hlen: int) -> str | None:
    # SaslHandshake v0 and v1 requests: mechanism is a classic int16-length string.
    n = int.from_bytes(frame[hlen : hlen + 2], "big", signed=True)
    if n < 0 or len(frame) < hlen + 2 + n:
        return None
    return bytes(frame[hlen + 2 : hlen + 2 + n]).decode("utf-8", "replace")


def _expects_no_response(req: Request) -> bool:
    # Produce with acks=0 gets no response from Apache Kafka (some brokers, e.g. tansu, answer anyway:
    # then the pair is simply "ok"). The layer above keeps the decoded request summary in req.info.
    return req.api_key == PRODUCE and isinstance(req.info, dict) and req.info.get("acks") == 0


def _has_correlation_id(corr: int) -> Callable[[memoryview], bool]:
    """A request frame start (size prefix included) carrying this correlation id."""
    want = corr.to_bytes(4, "big", signed=True)
    return lambda view: len(view) >= 12 and bytes(view[8:12]) == want
