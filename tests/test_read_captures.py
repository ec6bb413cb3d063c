"""Real captures (real clients, real broker) against tshark's header-level view of the same files.

tshark's view is stored next to each capture as CAPTURE.tshark.json (made by tools/tshark_expected.py
with Wireshark 4.0), so these tests do not need tshark installed.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

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


def test_correlation_ids_per_connection_equal_tsharks(decoded: tuple[Path, ListSink, dict[str, Any]]) -> None:
    _, sink, expected = decoded
    ours = Counter((r["api_key"], r["api_version"], r["correlation_id"]) for r in sink.tables["requests"])
    theirs = Counter((r["api_key"], r["api_version"], r["correlation_id"]) for r in expected["requests"])
    assert ours == theirs


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
