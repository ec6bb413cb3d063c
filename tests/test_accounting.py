"""The accounting invariant (docs/accounting.md): per connection and direction, every byte the wire
carried is in exactly one of frame, gap, skipped, SASL token, encrypted or not-Kafka bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from kafkawire import (
    ACK,
    API_VERSIONS_V0_RESPONSE,
    LINKTYPE_RAW_IPV4,
    METADATA_V0_REQUEST,
    METADATA_V0_RESPONSE,
    PSH,
    Flow,
    request,
    response,
    write_pcap,
)

from kwsniff.capture import CaptureError
from kwsniff.cli import main
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import Session, SessionOptions, accounting_difference
from kwsniff.rows import ListSink

TESTS = Path(__file__).parent
CAPTURES = sorted(
    [
        *(TESTS / "data" / "captures").glob("*.pcap"),
        *(TESTS.parent / "sample_pcaps").glob("*.pcap"),
        *(TESTS / "data" / "hostile").glob("*.pcap*"),
    ]
)


def differences(rows: list[dict]) -> list[tuple[int, int, int]]:
    return [
        (row["conn_id"], accounting_difference(row, "to_broker"), accounting_difference(row, "to_client"))
        for row in rows
        if accounting_difference(row, "to_broker") or accounting_difference(row, "to_client")
    ]


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_every_byte_of_every_repository_capture_is_accounted_for(path: Path) -> None:
    sink = ListSink()
    try:
        result = run_capture(path, sink, SessionOptions())
    except CaptureError:
        pytest.fail(f"{path.name} is not a readable capture")
    rows = sink.tables["connections"]
    assert rows
    assert differences(rows) == []
    assert result.stats.accounting_mismatches == 0
    assert sum(r["stream_bytes_to_broker"] + r["stream_bytes_to_client"] for r in rows) > 0


def run(packets: list[tuple[int, bytes]]) -> list[dict]:
    sink = ListSink()
    session = Session("t.pcap", sink, SessionOptions())
    for ts, data in packets:
        session.packet(ts, LINKTYPE_RAW_IPV4, data)
    session.finish()
    return sink.tables["connections"]


def exchange(f: Flow, corr: int) -> None:
    f.send(0, request(3, 0, corr, METADATA_V0_REQUEST))
    f.send(1, response(corr, METADATA_V0_RESPONSE))


def test_a_lost_segment_counts_as_gap_bytes_the_wire_carried() -> None:
    f = Flow().handshake()
    exchange(f, 1)
    lost = request(3, 0, 2, METADATA_V0_REQUEST)
    f.seq[0] += len(lost)  # the capture never saw this request
    f.send(1, response(2, METADATA_V0_RESPONSE))
    exchange(f, 3)
    f.close()
    (row,) = run(f.packets)
    assert (row["gap_bytes_to_broker"], row["stream_bytes_to_broker"] - row["bytes_to_broker"]) == (19, 19)
    assert differences([row]) == []


def test_retransmissions_and_overlaps_are_counted_once() -> None:
    f = Flow().handshake()
    frame = request(18, 0, 1) + request(3, 0, 2, METADATA_V0_REQUEST)
    start = f.seq[0]
    f.send(0, frame)
    f.emit(0, ACK | PSH, frame[5:20], seq=start + 5)  # an overlapping retransmission
    f.send(1, response(1, API_VERSIONS_V0_RESPONSE) + response(2, METADATA_V0_RESPONSE))
    f.close()
    (row,) = run(f.packets)
    assert (row["duplicate_bytes"], row["stream_bytes_to_broker"], row["frame_bytes_to_broker"]) == (
        15,
        len(frame),
        len(frame),
    )
    assert differences([row]) == []


def test_resync_after_garbage_counts_the_skipped_bytes() -> None:
    f = Flow()  # mid-connection: no SYN, so the broker port is trusted and the splitter resyncs
    f.send(0, b"\x07" * 37 + request(18, 0, 4))
    f.send(1, response(4, API_VERSIONS_V0_RESPONSE))
    (row,) = run(f.packets)
    assert (row["skipped_bytes_to_broker"], row["frames_to_broker"]) == (37, 1)
    assert differences([row]) == []


def test_garbage_before_a_response_is_skipped_bytes_to_the_client() -> None:
    f = Flow()  # mid-connection, as above, with the garbage on the broker's side
    f.send(0, request(18, 0, 4))
    f.send(1, b"\x07" * 23 + response(4, API_VERSIONS_V0_RESPONSE))
    (row,) = run(f.packets)
    assert (row["skipped_bytes_to_client"], row["skipped_bytes_to_broker"], row["skipped_bytes"]) == (
        23,
        0,
        23,
    )
    assert (row["frames_to_client"], row["responses"]) == (1, 1)
    assert differences([row]) == []


def test_out_of_order_bytes_past_the_cap_give_up_the_hole_as_a_gap() -> None:
    """Segments waiting behind a hole are held up to --max-ooo-bytes; past it the hole is declared a
    gap (one overflow) and what was held is delivered."""
    f = Flow().handshake()
    exchange(f, 1)
    lost = request(3, 0, 2, METADATA_V0_REQUEST)
    f.seq[0] += len(lost)  # a hole the capture never fills
    held = b"".join(request(3, 0, corr, METADATA_V0_REQUEST) for corr in range(3, 9))
    f.send(0, held, mss=len(held) // 2)
    sink = ListSink()
    session = Session("t.pcap", sink, SessionOptions(max_ooo_bytes=len(held) // 2 + 1))
    for ts, data in f.packets:
        session.packet(ts, LINKTYPE_RAW_IPV4, data)
    session.finish()
    (row,) = sink.tables["connections"]
    assert (row["ooo_overflows"], row["gaps"], row["gap_bytes_to_broker"]) == (1, 1, len(lost))
    assert row["frames_to_broker"] == 1 + 6
    assert differences([row]) == []


def test_read_prints_the_accounting_line_with_a_check_mark(tmp_path: Path) -> None:
    f = Flow().handshake()
    exchange(f, 1)
    f.close()
    pcap = write_pcap(tmp_path / "one.pcap", f.packets)
    result = CliRunner().invoke(main, ["read", str(pcap), "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    line = next(x.strip() for x in result.output.splitlines() if "accounting:" in x)
    assert line == (
        "accounting: 35 bytes on the wire = 35 framed + 0 gaps + 0 skipped + 0 SASL tokens"
        " + 0 encrypted + 0 not Kafka ✓"
    )
