"""Capture edges are not decode errors (issue 10, item 4): a response the connection or the capture
ended in the middle of is `response_cut`, with how much was seen; `--strict` passes on it. Bytes a
client acknowledged but the capture never showed are a counted gap."""

from __future__ import annotations

import struct
from pathlib import Path

from click.testing import CliRunner
from kafkawire import (
    ACK,
    LINKTYPE_RAW_IPV4,
    METADATA_V0_REQUEST,
    METADATA_V0_RESPONSE,
    Flow,
    request,
    response,
    write_pcap,
)

from kwsniff.cli import main
from kwsniff.pipeline.session import Session, SessionOptions, accounting_difference
from kwsniff.rows import ListSink

BIG = 3_000_000  # a large Fetch-sized response
SEEN = 55_000


def run(f: Flow) -> ListSink:
    sink = ListSink()
    session = Session("t.pcap", sink, SessionOptions())
    for ts, data in f.packets:
        session.packet(ts, LINKTYPE_RAW_IPV4, data)
    session.finish()
    for conn in sink.tables["connections"]:
        assert accounting_difference(conn, "to_broker") == accounting_difference(conn, "to_client") == 0
    return sink


def cut_response_flow(close: bool) -> Flow:
    f = Flow().handshake()
    f.send(0, request(3, 0, 1, METADATA_V0_REQUEST))
    f.send(1, response(1, METADATA_V0_RESPONSE))
    f.send(0, request(3, 0, 2, METADATA_V0_REQUEST))
    # Size prefix of a 3 MB response, of which the capture holds the first 55,000 bytes.
    head = struct.pack(">ii", BIG - 4, 2)
    f.send(1, head + b"\x00" * (SEEN - len(head)))
    if close:
        f.close()
    return f


def outcomes(sink: ListSink) -> list[tuple[int, str, str | None]]:
    return [(r["correlation_id"], r["status"], r["reason"]) for r in sink.tables["requests"]]


def test_a_response_cut_by_the_end_of_the_capture_is_response_cut_with_what_was_seen() -> None:
    sink = run(cut_response_flow(close=False))
    assert outcomes(sink) == [
        (1, "ok", None),
        (2, "response_cut", "response cut by the end of the connection or capture after 55,000 of 3,000,000 bytes"),
    ]  # fmt: skip
    (conn,) = sink.tables["connections"]
    assert (conn["decode_errors"], conn["unanswered"], conn["gap_bytes"], conn["skipped_bytes"]) == (
        0,
        1,
        0,
        0,
    )
    # The 55,000 bytes seen were a frame's, cut by the capture's edge: frame bytes, not skipped.
    assert conn["frame_bytes_to_client"] == len(response(1, METADATA_V0_RESPONSE)) + SEEN


def test_a_response_cut_by_the_connection_closing_is_response_cut_too() -> None:
    sink = run(cut_response_flow(close=True))
    assert outcomes(sink)[1][:2] == (2, "response_cut")


def test_a_request_cut_by_the_end_of_the_capture_is_unanswered_with_what_was_seen() -> None:
    f = Flow().handshake()
    body = METADATA_V0_REQUEST + b"\x00" * 100
    whole = request(3, 0, 7, body)
    f.send(0, struct.pack(">i", len(whole) - 4 + 1000) + whole[4:])  # 1,000 more bytes never came
    sink = run(f)
    assert outcomes(sink) == [
        (7, "unanswered", f"request cut by the end of the connection or capture after {len(whole)} of {len(whole) + 1000:,} bytes"),
    ]  # fmt: skip


def test_strict_passes_on_a_response_cut_by_the_capture_end(tmp_path: Path) -> None:
    pcap = write_pcap(tmp_path / "cut.pcap", cut_response_flow(close=False).packets)
    result = CliRunner().invoke(main, ["read", str(pcap), "-o", str(tmp_path / "t"), "--strict"])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert (
        "requests 2: ok 1, no_response_expected 0, unanswered 0, response_cut 1, decode_error 0"
        in result.output
    )


def test_broker_bytes_a_client_acknowledged_but_the_capture_never_saw_are_a_gap() -> None:
    f = Flow().handshake()
    f.send(0, request(3, 0, 1, METADATA_V0_REQUEST))
    answer = response(1, METADATA_V0_RESPONSE + b"\x00" * 3000)
    f.send(1, answer[:1460])
    f.seq[1] += len(answer) - 1460  # the rest was sent and received, but not captured
    f.emit(0, ACK)  # the client acknowledges all of it; then the capture ends
    sink = run(f)
    (conn,) = sink.tables["connections"]
    assert (conn["gaps"], conn["gap_bytes_to_client"], conn["gap_bytes_to_broker"]) == (
        1,
        len(answer) - 1460,
        0,
    )
    assert conn["stream_bytes_to_client"] == len(answer)
    assert outcomes(sink) == [
        (1, "decode_error", f"response: cut by a gap after 1460 of {len(answer)} bytes"),
    ]


def test_an_ack_of_what_was_captured_declares_no_gap() -> None:
    f = Flow().handshake()
    f.send(0, request(3, 0, 1, METADATA_V0_REQUEST))
    f.send(1, response(1, METADATA_V0_RESPONSE))
    f.emit(0, ACK)
    sink = run(f)
    (conn,) = sink.tables["connections"]
    assert (conn["gaps"], conn["gap_bytes"]) == (0, 0)
    assert outcomes(sink) == [(1, "ok", None)]
