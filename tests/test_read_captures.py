"""Real captures (real clients, real broker) against tshark's header-level view of the same files.

tshark's view is stored next to each capture as CAPTURE.tshark.json (made by tools/tshark_expected.py
with Wireshark 4.0), so these tests do not need tshark installed.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import dpkt_connections
import pytest

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink

ROOT = Path(__file__).parent.parent
CAPTURES = sorted((ROOT / "tests" / "data" / "captures").glob("*.pcap")) + [
    ROOT / "sample_pcaps" / "quickstart.pcap"
]


def read(path: Path) -> ListSink:
    sink = ListSink()
    run_capture(path, sink, SessionOptions())
    return sink


@pytest.fixture(scope="module", params=CAPTURES, ids=[p.name for p in CAPTURES])
def decoded(request: pytest.FixtureRequest) -> tuple[Path, ListSink, dict[str, Any]]:
    path: Path = request.param
    expected = json.loads(path.with_name(path.name + ".tshark.json").read_text())
    return path, read(path), expected


def test_requests_per_api_version_equal_tsharks(decoded: tuple[Path, ListSink, dict[str, Any]]) -> None:
    _, sink, expected = decoded
    got: dict[str, dict[str, int]] = {}
    for r in sink.tables["requests"]:
        entry = got.setdefault(
            f"{r['api_key']}/{r['api_version']}", {"requests": 0, "paired": 0, "unanswered": 0}
        )
        entry["requests"] += 1
        entry["paired" if r["ts_response"] is not None else "unanswered"] += 1
    assert got == expected["summary"]["by_key_version"]


def _us(epoch: float) -> int:
    return round(epoch * 1_000_000)


def _stream_of_conn(sink: ListSink, expected: dict[str, Any]) -> dict[int, int]:
    """kwsniff's conn_id to tshark's tcp.stream, matched by (client, broker) endpoints."""
    by_endpoints = {(s["client"], s["broker"]): s["stream"] for s in expected["streams"]}
    return {
        c["conn_id"]: by_endpoints[
            (f"{c['client_ip']}:{c['client_port']}", f"{c['broker_ip']}:{c['broker_port']}")
        ]
        for c in sink.tables["connections"]
    }


def _paired_with_tshark(
    sink: ListSink, expected: dict[str, Any], table: str = "requests"
) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]]:
    """Each kwsniff `requests` row with tshark's request and response PDU: same stream, same
    correlation id, in order (a client may reuse an id on one connection)."""
    stream_of = _stream_of_conn(sink, expected)
    requests: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    responses: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for pdu in expected["requests"]:
        requests[(pdu["stream"], pdu["correlation_id"])].append(pdu)
    for pdu in expected["responses"]:
        responses[(pdu["stream"], pdu["correlation_id"])].append(pdu)
    paired = []
    for row in sorted(sink.tables[table], key=lambda r: (r["conn_id"], r["ts_request"])):
        key = (stream_of[row["conn_id"]], row["correlation_id"])
        answer = responses[key].pop(0) if row["ts_response"] is not None else None
        paired.append((row, requests[key].pop(0), answer))
    assert not any(requests.values()), "tshark saw requests kwsniff did not"
    return paired


def test_every_row_names_its_capture_file(decoded: tuple[Path, ListSink, dict[str, Any]]) -> None:
    path, sink, _ = decoded
    assert set(sink.tables) >= {"requests", "connections", "partitions"}
    assert {r["capture"] for rows in sink.tables.values() for r in rows} == {path.name}


def test_correlation_ids_per_connection_equal_tsharks(decoded: tuple[Path, ListSink, dict[str, Any]]) -> None:
    _, sink, expected = decoded
    stream_of = _stream_of_conn(sink, expected)
    assert sorted(stream_of.values()) == [s["stream"] for s in expected["streams"]]
    ours = {
        (stream_of[r["conn_id"]], r["api_key"], r["api_version"], r["correlation_id"], r["ts_request"])
        for r in sink.tables["requests"]
    }
    theirs = {
        (r["stream"], r["api_key"], r["api_version"], r["correlation_id"], _us(r["frame_time_epoch"]))
        for r in expected["requests"]
    }
    assert len(ours) == len(sink.tables["requests"]) == len(expected["requests"])
    assert ours == theirs


def test_sizes_times_and_client_ids_of_each_exchange_equal_tsharks(
    decoded: tuple[Path, ListSink, dict[str, Any]],
) -> None:
    """request_bytes and response_bytes count the 4-byte length prefix plus the PDU's length field;
    ts_response is the time of the frame the response starts in; latency is the difference."""
    _, sink, expected = decoded
    for row, request, response in _paired_with_tshark(sink, expected):
        assert row["client_id"] == request["client_id"]
        assert row["request_bytes"] == 4 + request["length"]
        if response is None:
            assert (row["response_bytes"], row["ts_response"], row["latency_ms"]) == (None, None, None)
            continue
        assert row["response_bytes"] == 4 + response["length"]
        assert row["ts_response"] == _us(response["first_frame_time_epoch"])
        latency_us = _us(response["first_frame_time_epoch"]) - _us(request["frame_time_epoch"])
        assert row["latency_ms"] == pytest.approx(latency_us / 1000, abs=1e-9)


def test_every_row_of_an_exchange_carries_its_client_and_times_as_tshark_sees_them(
    decoded: tuple[Path, ListSink, dict[str, Any]],
) -> None:
    """`requests` rows name their client's address, and `partitions`, `errors` and `groups` rows
    repeat their exchange's client id, client address and times: tshark's request and response PDUs
    of the same stream and correlation id, and the stream's client endpoint."""
    _, sink, expected = decoded
    stream_of = _stream_of_conn(sink, expected)
    address = {s["stream"]: s["client"].rsplit(":", 1)[0].strip("[]") for s in expected["streams"]}
    answered = defaultdict(list)
    for pdu in expected["responses"]:
        answered[(pdu["stream"], pdu["correlation_id"])].append(_us(pdu["first_frame_time_epoch"]))
    exchanges = defaultdict(set)  # (stream, correlation id) -> {(client id, ts_request, ts_response)}
    for pdu in expected["requests"]:
        key = (pdu["stream"], pdu["correlation_id"])
        for ts_response in answered[key] or [None]:
            exchanges[key].add((pdu["client_id"], _us(pdu["frame_time_epoch"]), ts_response))
    for r in sink.tables["requests"]:
        assert r["client_ip"] == address[stream_of[r["conn_id"]]]
    checked = Counter()
    for table, timed in (("partitions", True), ("errors", True), ("groups", False)):
        for row in sink.tables.get(table, []):
            stream = stream_of[row["conn_id"]]
            assert row["client_ip"] == address[stream], table
            ours = (row["client_id"], row["ts_request"], row["ts_response"])
            assert ours in exchanges[(stream, row["correlation_id"])], (table, ours)
            if timed and row["ts_response"] is not None:
                assert row["latency_ms"] == (row["ts_response"] - row["ts_request"]) / 1000
            checked[table] += 1
    assert checked["partitions"] >= 5


def test_connections_carry_what_tsharks_streams_carry(decoded: tuple[Path, ListSink, dict[str, Any]]) -> None:
    """Per connection: frames and frame bytes per direction, requests, responses and unanswered
    ones, from tshark's PDUs of the same stream; the client's id from its first request."""
    _, sink, expected = decoded
    stream_of = _stream_of_conn(sink, expected)
    paired = {(s["stream"], s["correlation_id"]) for s in expected["responses"]}
    for c in sink.tables["connections"]:
        stream = stream_of[c["conn_id"]]
        requests = [r for r in expected["requests"] if r["stream"] == stream]
        responses = [r for r in expected["responses"] if r["stream"] == stream]
        unanswered = sum((stream, r["correlation_id"]) not in paired for r in requests)
        assert (c["frames_to_broker"], c["frames_to_client"]) == (len(requests), len(responses))
        assert c["frame_bytes_to_broker"] == sum(4 + r["length"] for r in requests)
        assert c["frame_bytes_to_client"] == sum(4 + r["length"] for r in responses)
        assert (c["requests"], c["responses"]) == (len(requests), len(responses))
        assert (c["unanswered"], c["no_response_expected"]) == (unanswered, 0)  # tansu answers acks=0 too
        assert c["client_id"] == (requests[0]["client_id"] if requests else None)


def test_connection_packets_bytes_flags_and_times_equal_dpkts(
    decoded: tuple[Path, ListSink, dict[str, Any]],
) -> None:
    path, sink, expected = decoded
    flows = dpkt_connections.flows(path, expected["broker_port"])
    conns = sorted(sink.tables["connections"], key=lambda c: c["conn_id"])
    assert len(conns) == len(flows)
    for c, flow in zip(conns, flows, strict=True):
        assert ((c["client_ip"], c["client_port"]), (c["broker_ip"], c["broker_port"])) == (
            flow.client,
            flow.broker,
        )
        assert (c["ts_first"], c["ts_last"]) == (flow.ts_first, flow.ts_last)
        assert (c["syn_seen"], c["fin_seen"], c["rst_seen"]) == (flow.syn, bool(flow.fins), flow.rst)
        assert (c["packets_to_broker"], c["packets_to_client"]) == (
            flow.packets["to_broker"],
            flow.packets["to_client"],
        )
        # No retransmission in these captures: every payload byte is stream data, framed as Kafka.
        for d in ("to_broker", "to_client"):
            assert c["bytes_" + d] == c["stream_bytes_" + d] == c["frame_bytes_" + d] == flow.payload[d]


def test_no_frame_fails_to_decode(decoded: tuple[Path, ListSink, dict[str, Any]]) -> None:
    _, sink, expected = decoded
    assert [r for r in sink.tables["requests"] if r["status"] == "decode_error"] == []
    conns = sink.tables["connections"]
    assert sum(c["orphan_responses"] for c in conns) == expected["summary"]["orphan_responses"] == 0
    assert sum(c["skipped_bytes"] + c["gap_bytes"] + c["undecodable_frames"] for c in conns) == 0
    assert all(c["kafka"] for c in conns)


def test_every_connection_is_accounted_byte_for_byte(decoded: tuple[Path, ListSink, dict[str, Any]]) -> None:
    _, sink, _ = decoded
    for c in sink.tables["connections"]:
        assert c["bytes_to_broker"] - c["duplicate_bytes"] >= c["frame_bytes_to_broker"]
        delivered = c["bytes_to_broker"] + c["bytes_to_client"] - c["duplicate_bytes"]
        framed = c["frame_bytes_to_broker"] + c["frame_bytes_to_client"]
        assert delivered == framed + c["skipped_bytes"] + c["gap_bytes"] + c["not_kafka_bytes"], c


def test_acks0_requests_answered_by_tansu_are_ok() -> None:
    sink = read(ROOT / "tests" / "data" / "captures" / "acks_modes.pcap")
    produce = [r for r in sink.tables["requests"] if r["api_key"] == 0]
    assert Counter((r["acks"], r["status"]) for r in produce) == {
        (0, "ok"): 20,
        (1, "ok"): 20,
        (-1, "ok"): 40,
    }
    assert {r["client_id"] for r in produce if r["acks"] == 0} == {"rig-acks-producer-acks-0"}


def test_metadata_request_cut_off_by_the_capture_end_is_unanswered() -> None:
    sink = read(ROOT / "tests" / "data" / "captures" / "produce_codecs.pcap")
    unanswered = [
        (r["api_name"], r["api_version"]) for r in sink.tables["requests"] if r["status"] == "unanswered"
    ]
    assert unanswered == [("Metadata", 12)]


def test_latency_is_response_first_packet_minus_request_last_packet() -> None:
    sink = read(ROOT / "tests" / "data" / "captures" / "kafka_python.pcap")
    for r in sink.tables["requests"]:
        assert r["latency_ms"] == (r["ts_response"] - r["ts_request"]) / 1000.0 >= 0
    slowest = max(sink.tables["requests"], key=lambda r: r["latency_ms"])
    # The consumer group's JoinGroup waits out the broker's rebalance delay.
    assert (slowest["api_name"], slowest["latency_ms"]) == ("JoinGroup", 23031.38)
