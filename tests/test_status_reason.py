"""A request row's status always agrees with its reason and with docs/tables.md (issue 44): one
test per pairing the code makes, each from bytes the test assembles.

| status | reason |
|---|---|
| ok | null, or a note (`request: 3 trailing bytes at offset 12`) |
| no_response_expected | null |
| unanswered | null, or `request cut by the end of the connection or capture after N of M bytes` |
| response_cut | `response cut by the end of the connection or capture after N of M bytes` |
| decode_error | `request: ...`, `response: ...` (or `rows: ...`): what could not be read |
"""

from __future__ import annotations

import re
import struct

from kafkawire import (
    LINKTYPE_RAW_IPV4,
    METADATA_V0_REQUEST,
    METADATA_V0_RESPONSE,
    Flow,
    produce_v3_request,
    request,
    response,
)

from kwsniff.pipeline.session import Session, SessionOptions
from kwsniff.rows import ListSink

CUT_BY_END = r"cut by the end of the connection or capture after [\d,]+ of [\d,]+ bytes"
AGREES = {
    "ok": r"request: \d+ trailing bytes at offset \d+",
    "no_response_expected": r"(?!)",  # never a reason
    "unanswered": "request " + CUT_BY_END,
    "response_cut": "response " + CUT_BY_END,
    # What could not be read: the request, the response, or (issue 44 goal 3) the rows built of them.
    "decode_error": r"(request|response|rows): .+",
}


def agrees(status: str, reason: str | None) -> bool:
    """Does the reason fit the status, as docs/tables.md lists them?"""
    if reason is None:
        return status not in ("response_cut", "decode_error")
    return re.fullmatch(AGREES[status], reason) is not None


def outcomes(f: Flow) -> list[tuple[int, str, str | None]]:
    sink = ListSink()
    session = Session("t.pcap", sink, SessionOptions())
    for ts, data in f.packets:
        session.packet(ts, LINKTYPE_RAW_IPV4, data)
    session.finish()
    rows = [(r["correlation_id"], r["status"], r["reason"]) for r in sink.tables["requests"]]
    assert all(agrees(status, reason) for _, status, reason in rows), rows
    return rows


def cut_request(corr: int) -> bytes:
    """A Metadata v0 request of which the stream holds 119 bytes of 1,119."""
    whole = request(3, 0, corr, METADATA_V0_REQUEST + b"\x00" * 100)
    return struct.pack(">i", len(whole) - 4 + 1000) + whole[4:]


def test_an_answered_request_is_ok_without_reason() -> None:
    f = Flow().handshake()
    f.send(0, request(3, 0, 1, METADATA_V0_REQUEST))
    f.send(1, response(1, METADATA_V0_RESPONSE))
    assert outcomes(f) == [(1, "ok", None)]


def test_an_answered_request_with_trailing_bytes_is_ok_with_the_note() -> None:
    f = Flow().handshake()
    f.send(0, request(3, 0, 1, METADATA_V0_REQUEST + b"\x00\x00\x00"))
    f.send(1, response(1, METADATA_V0_RESPONSE))
    assert outcomes(f) == [(1, "ok", "request: 3 trailing bytes at offset 4")]


def test_an_acks0_produce_without_response_is_no_response_expected_without_reason() -> None:
    f = Flow().handshake()
    f.send(0, request(0, 3, 1, produce_v3_request(0)))
    f.close()
    assert outcomes(f) == [(1, "no_response_expected", None)]


def test_a_request_the_connection_closed_before_answering_is_unanswered_without_reason() -> None:
    f = Flow().handshake()
    f.send(0, request(3, 0, 1, METADATA_V0_REQUEST))
    f.close()
    assert outcomes(f) == [(1, "unanswered", None)]


def test_a_request_the_stream_ended_inside_is_unanswered_with_how_much_was_seen() -> None:
    f = Flow().handshake()
    f.send(0, cut_request(7))
    assert outcomes(f) == [(7, "unanswered", "request cut by the end of the connection or capture after 119 of 1,119 bytes")]  # fmt: skip


def test_a_request_the_stream_ended_inside_that_still_got_an_answer_is_a_decode_error() -> None:
    # Its response lay behind a damaged size prefix, replayed at the end of the stream (as on
    # non-Kafka bytes read with a forced port). Before: status ok, with the "request cut" reason.
    f = Flow().handshake()
    f.send(0, cut_request(7))
    f.send(1, struct.pack(">i", 100_000) + response(7, METADATA_V0_RESPONSE) * 2)
    assert outcomes(f) == [
        (7, "decode_error", "request: cut by the end of the connection or capture after 119 of 1,119 bytes")
    ]


def test_a_response_the_stream_ended_inside_is_response_cut_with_how_much_was_seen() -> None:
    f = Flow().handshake()
    f.send(0, request(3, 0, 2, METADATA_V0_REQUEST))
    f.send(1, struct.pack(">ii", 999_996, 2) + b"\x00" * 992)
    assert outcomes(f) == [(2, "response_cut", "response cut by the end of the connection or capture after 1,000 of 1,000,000 bytes")]  # fmt: skip


def test_a_request_that_cannot_be_decoded_is_a_decode_error_naming_the_request() -> None:
    f = Flow().handshake()
    f.send(0, request(3, 0, 1, b"\x00\x00\x00\x05"))  # five topics in an empty array
    f.send(1, response(1, METADATA_V0_RESPONSE))
    ((corr, status, reason),) = outcomes(f)
    assert (corr, status, reason.split(":")[0]) == (1, "decode_error", "request")


def test_a_response_that_cannot_be_decoded_is_a_decode_error_naming_the_response() -> None:
    f = Flow().handshake()
    f.send(0, request(3, 0, 1, METADATA_V0_REQUEST))
    f.send(1, response(1, b"\x00\x00\x00\x09"))  # nine brokers, none there
    ((corr, status, reason),) = outcomes(f)
    assert (corr, status, reason.split(":")[0]) == (1, "decode_error", "response")


def test_a_request_that_cannot_be_decoded_and_is_never_answered_stays_a_decode_error() -> None:
    f = Flow().handshake()
    f.send(0, request(3, 0, 1, b"\x00\x00\x00\x05"))
    f.close()
    ((corr, status, reason),) = outcomes(f)
    assert (corr, status, reason.split(":")[0]) == (1, "decode_error", "request")


def test_a_request_replaced_by_a_repeated_correlation_id_keeps_the_status_its_reason_says() -> None:
    # The first request with id 1 failed to decode, the second (acks=0) expects no answer: each
    # replaced one ends as it would at the connection's close. Before: both unanswered, the first
    # with its decode error for reason.
    f = Flow().handshake()
    f.send(0, request(3, 0, 1, b"\x00\x00\x00\x05"))
    f.send(0, request(0, 3, 1, produce_v3_request(0)))
    f.send(0, request(3, 0, 1, METADATA_V0_REQUEST))
    f.send(1, response(1, METADATA_V0_RESPONSE))
    rows = outcomes(f)
    assert [(corr, status) for corr, status, _ in rows] == [
        (1, "decode_error"),
        (1, "no_response_expected"),
        (1, "ok"),
    ]
    assert rows[0][2] is not None and rows[0][2].startswith("request: ")
