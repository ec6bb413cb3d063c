"""One pass over packets: connections, Kafka detection, pairing statuses, gaps and resync."""

from __future__ import annotations

import struct
import tracemalloc
from typing import Any

from kafkawire import (
    ACK,
    API_VERSIONS_V0_RESPONSE,
    BROKER,
    CLIENT,
    FIN,
    LINKTYPE_RAW_IPV4,
    METADATA_V0_REQUEST,
    METADATA_V0_RESPONSE,
    PSH,
    RST,
    Flow,
    cstring,
    produce_v3_request,
    request,
    response,
)

from kwsniff.pipeline.session import Session, SessionOptions
from kwsniff.rows import ListSink


def run(packets: list[tuple[int, bytes]], **options: Any) -> tuple[ListSink, Session]:
    sink = ListSink()
    session = Session("test.pcap", sink, SessionOptions(**options))
    for ts, data in packets:
        session.packet(ts, LINKTYPE_RAW_IPV4, data)
    session.finish()
    return sink, session


def statuses(sink: ListSink) -> list[tuple[int, int, str]]:
    return [(r["api_key"], r["correlation_id"], r["status"]) for r in sink.tables["requests"]]


def test_pipelined_requests_pair_by_correlation_id_and_measure_latency() -> None:
    f = Flow().handshake()
    f.send(0, request(18, 0, 1) + request(3, 0, 2, METADATA_V0_REQUEST), dt=1000)
    f.send(1, response(1, API_VERSIONS_V0_RESPONSE), dt=2500)
    f.send(1, response(2, METADATA_V0_RESPONSE), dt=500)
    f.close()
    sink, session = run(f.packets)
    rows = sink.tables["requests"]
    assert statuses(sink) == [(18, 1, "ok"), (3, 2, "ok")]
    assert [r["latency_ms"] for r in rows] == [2.5, 3.0]
    assert [r["api_name"] for r in rows] == ["ApiVersions", "Metadata"]
    assert [r["request_bytes"] for r in rows] == [4 + 8 + 3, 4 + 8 + 3 + 4]
    (conn,) = sink.tables["connections"]
    assert (conn["client_ip"], conn["client_port"], conn["broker_ip"], conn["broker_port"]) == (
        "10.0.0.1",
        40000,
        "10.0.0.2",
        9092,
    )
    assert (conn["frames_to_broker"], conn["frames_to_client"], conn["requests"], conn["responses"]) == (
        2,
        2,
        2,
        2,
    )
    assert (conn["syn_seen"], conn["fin_seen"], conn["gaps"], conn["skipped_bytes"]) == (True, True, 0, 0)
    assert conn["client_id"] == "t"


def test_acks0_produce_without_response_is_no_response_expected_and_others_unanswered() -> None:
    f = Flow().handshake()
    f.send(0, request(0, 3, 7, produce_v3_request(acks=0)))
    f.send(0, request(0, 3, 8, produce_v3_request(acks=1)))
    f.emit(0, RST | ACK)
    sink, _ = run(f.packets)
    assert statuses(sink) == [(0, 7, "no_response_expected"), (0, 8, "unanswered")]
    assert [r["acks"] for r in sink.tables["requests"]] == [0, 1]
    (conn,) = sink.tables["connections"]
    assert (conn["rst_seen"], conn["unanswered"], conn["no_response_expected"]) == (True, 1, 1)


def test_acks0_produce_that_a_broker_answers_anyway_is_ok() -> None:
    f = Flow().handshake()
    f.send(0, request(0, 3, 7, produce_v3_request(acks=0)))
    f.send(1, response(7, b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"))  # no topics, throttle 0
    f.close()
    sink, _ = run(f.packets)
    assert statuses(sink) == [(0, 7, "ok")]
    assert sink.tables["requests"][0]["throttle_time_ms"] == 0


def test_response_without_request_is_counted_as_orphan() -> None:
    f = Flow()  # capture starts mid-connection: no handshake
    f.send(1, response(41, API_VERSIONS_V0_RESPONSE))
    f.send(0, request(18, 0, 42))
    f.send(1, response(42, API_VERSIONS_V0_RESPONSE))
    sink, _ = run(f.packets)
    assert statuses(sink) == [(18, 42, "ok")]
    (conn,) = sink.tables["connections"]
    assert (conn["orphan_responses"], conn["syn_seen"], conn["skipped_bytes"]) == (1, False, 0)


def test_kafka_on_an_unnamed_port_is_detected_from_the_handshake_and_first_request() -> None:
    broker = (BROKER[0], 19102)
    f = Flow(broker=broker).handshake()
    f.send(0, request(18, 0, 1))
    f.send(1, response(1, API_VERSIONS_V0_RESPONSE))
    f.close()
    g = Flow(client=(CLIENT[0], 40001), broker=broker)  # later connection, no SYN: known broker now
    g.send(0, request(18, 0, 5))
    g.send(1, response(5, API_VERSIONS_V0_RESPONSE))
    sink, session = run(f.packets + g.packets)
    assert statuses(sink) == [(18, 1, "ok"), (18, 5, "ok")]
    assert session.stats.kafka_connections == 2
    assert [c["broker_port"] for c in sink.tables["connections"]] == [19102, 19102]


def test_mid_stream_connection_on_an_unnamed_port_is_oriented_by_its_requests() -> None:
    # No SYN and the broker's packet first: the side sending request frames is the client.
    broker = (BROKER[0], 19200)
    f = Flow(broker=broker)
    f.send(1, response(9, API_VERSIONS_V0_RESPONSE))
    f.send(0, request(18, 0, 10) + request(3, 0, 11, METADATA_V0_REQUEST))
    f.send(1, response(10, API_VERSIONS_V0_RESPONSE) + response(11, METADATA_V0_RESPONSE))
    sink, session = run(f.packets)
    assert statuses(sink) == [(18, 10, "ok"), (3, 11, "ok")]
    (conn,) = sink.tables["connections"]
    assert (conn["client_port"], conn["broker_port"], conn["orphan_responses"]) == (40000, 19200, 1)


def test_other_protocols_on_unnamed_ports_are_counted_not_decoded() -> None:
    web = (BROKER[0], 8080)
    f = Flow(broker=web).handshake()
    f.send(0, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    f.send(1, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    f.close()
    sink, session = run(f.packets)
    assert sink.tables["requests"] == []
    (conn,) = sink.tables["connections"]
    assert (conn["kafka"], conn["not_kafka_bytes"], conn["frames_to_broker"]) == (False, 27 + 38, 0)
    assert session.stats.non_kafka_connections == 1


def test_lost_segment_becomes_a_gap_and_the_stream_resynchronises_on_the_next_request() -> None:
    f = Flow().handshake()
    f.send(0, request(18, 0, 1))
    f.send(1, response(1, API_VERSIONS_V0_RESPONSE))
    big = request(3, 0, 2, METADATA_V0_REQUEST + b"\x00" * 3000)  # a frame over three segments
    f.send(0, big[:1460])
    lost_seq = f.seq[0]
    f.seq[0] += 1460  # the middle segment never reaches the capture
    f.send(0, big[2920:] + request(18, 0, 3))
    f.send(1, response(3, API_VERSIONS_V0_RESPONSE), dt=10)
    f.close()
    assert lost_seq
    sink, _ = run(f.packets)
    # Request 2's header was seen before the gap cut its body: counted (never answered), not lost.
    assert [(r["correlation_id"], r["status"], r["reason"]) for r in sink.tables["requests"]] == [
        (1, "ok", None),
        (3, "ok", None),
        (2, "decode_error", f"request: cut by a gap after 1460 of {len(big)} bytes"),
    ]
    (conn,) = sink.tables["connections"]
    assert (conn["gaps"], conn["gap_bytes"]) == (1, 1460)
    # the partial frame before the gap and its tail after it are skipped, nothing else
    assert conn["skipped_bytes"] == len(big) - 1460


def test_a_reused_four_tuple_after_close_is_a_new_connection() -> None:
    f = Flow().handshake()
    f.send(0, request(18, 0, 1))
    f.send(1, response(1, API_VERSIONS_V0_RESPONSE))
    f.close()
    g = Flow(isn_c=900_000, isn_b=7_000_000).handshake()
    g.send(0, request(18, 0, 1))
    g.send(1, response(1, API_VERSIONS_V0_RESPONSE))
    g.close()
    sink, session = run(f.packets + g.packets)
    assert [c["conn_id"] for c in sink.tables["connections"]] == [1, 2]
    assert statuses(sink) == [(18, 1, "ok"), (18, 1, "ok")]


def test_retransmitted_request_is_decoded_once() -> None:
    f = Flow().handshake()
    frame = request(18, 0, 1)
    start = f.seq[0]
    f.send(0, frame)
    f.emit(0, ACK | PSH, frame, seq=start, ident=1)  # retransmission (a new IP id: not a copy)
    f.send(1, response(1, API_VERSIONS_V0_RESPONSE))
    f.close()
    sink, _ = run(f.packets)
    assert statuses(sink) == [(18, 1, "ok")]
    assert sink.tables["connections"][0]["duplicate_bytes"] == len(frame)


def test_fin_from_one_side_only_leaves_pending_requests_unanswered_at_capture_end() -> None:
    f = Flow().handshake()
    f.send(0, request(18, 0, 1))
    f.emit(0, FIN | ACK)
    sink, _ = run(f.packets)
    assert statuses(sink) == [(18, 1, "unanswered")]


class CountingSink:
    def __init__(self) -> None:
        self.rows = 0

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.rows += 1


def _peak_memory(connections: int) -> int:
    tracemalloc.start()
    session = Session("big.pcap", CountingSink(), SessionOptions())
    for i in range(connections):
        f = Flow(client=(CLIENT[0], 10000 + i % 50000)).handshake()
        for corr in range(5):
            f.send(0, request(3, 0, corr, METADATA_V0_REQUEST + b"\x00" * 2000))
            f.send(1, response(corr, METADATA_V0_RESPONSE))
        f.close()
        for ts, data in f.packets:
            session.packet(ts + i * 1_000_000, LINKTYPE_RAW_IPV4, data)
    session.finish()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def test_peak_memory_does_not_grow_with_capture_length() -> None:
    # Ten times the traffic (closed connections are forgotten as the capture clock moves on).
    small, large = _peak_memory(300), _peak_memory(3000)
    assert large < small * 1.5, (small, large)


def test_a_client_newer_than_the_schema_set_is_still_kafka_and_its_api_versions_pair() -> None:
    # KIP-511: a client sends its newest ApiVersions version; a broker that does not know it answers
    # in v0 with UNSUPPORTED_VERSION, and the client retries with a version the broker supports.
    v2_header_tags_and_body = b"\x00" + cstring("librdkafka") + cstring("9.9.9") + b"\x00"
    f = Flow().handshake()
    f.send(0, request(18, 9, 1, v2_header_tags_and_body))
    f.send(1, response(1, struct.pack(">hi", 35, 1) + struct.pack(">hhh", 18, 0, 4)))
    f.send(0, request(18, 3, 2, v2_header_tags_and_body))
    f.send(1, response(2, b"\x00\x00" + b"\x01" + b"\x00\x00\x00\x00" + b"\x00"))
    f.close()
    sink, _ = run(f.packets)
    rows = [(r["api_version"], r["status"], r["error_name"], r["reason"]) for r in sink.tables["requests"]]
    assert rows == [
        (9, "decode_error", "UNSUPPORTED_VERSION", "request: unsupported version (offset 0)"),
        (3, "ok", "NONE", None),
    ]
    (conn,) = sink.tables["connections"]
    assert (conn["kafka"], conn["client_software_name"], conn["undecodable_frames"]) == (
        True,
        "librdkafka",
        0,
    )
