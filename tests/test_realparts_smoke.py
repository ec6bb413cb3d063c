"""The real parts work end to end: broker, client workload, tcpdump, and kwsniff reading what they said."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from realparts import CapturedTraffic, consume_with_kafka_python, pcap_packet_count, produce_with_confluent

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink

PRODUCED = 5


def kwsniff_requests(traffic: CapturedTraffic) -> list[dict]:
    sink = ListSink()
    run_capture(traffic.pcap, sink, SessionOptions())
    return sink.tables["requests"]


def produce_then_consume(bootstrap: str) -> tuple[int, int]:
    delivered = produce_with_confluent(bootstrap, "smoke-topic", PRODUCED, value_size=200, flush_each=True)
    consumed = consume_with_kafka_python(bootstrap, ["smoke-topic"], "smoke-group", PRODUCED, timeout_s=30)
    return delivered, consumed


def test_flushed_records_each_travel_in_their_own_produce_request(
    capture_traffic: Callable[..., CapturedTraffic],
) -> None:
    traffic = capture_traffic(produce_then_consume)

    assert traffic.result == (PRODUCED, PRODUCED)
    packets = pcap_packet_count(traffic.pcap)
    assert packets > 0
    assert packets == traffic.tcpdump.captured
    assert traffic.tcpdump.dropped_by_kernel == 0
    requests = kwsniff_requests(traffic)
    keys = Counter(r["api_name"] for r in requests)
    produce = [r for r in requests if r["api_key"] == 0]
    assert len(produce) == PRODUCED  # one Produce per flushed record (linger.ms=0)
    assert [r["record_count"] for r in produce] == [1] * PRODUCED
    assert {r["status"] for r in requests} == {"ok"}
    assert keys["JoinGroup"] >= 1  # kafka-python joined the consumer group
    fetched = sum(r["record_count"] or 0 for r in requests if r["api_key"] == 1)
    assert fetched == PRODUCED  # and fetched every record once


DATA = Path(__file__).parent / "data" / "captures"
TABLE_ROW = re.compile(r"^\s+(\d+)\s+\S+\s+v(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\d+\s*$")


def human_table(path: Path) -> dict[str, dict[str, int]]:
    """The per-(api_key, api_version) table of a hand-made CAPTURE.tshark.txt summary."""
    rows = {}
    for line in path.read_text().splitlines():
        match = TABLE_ROW.match(line)
        if match:
            key, version, requests, paired, unanswered = match.groups()
            rows[f"{key}/{version}"] = {
                "requests": int(requests),
                "paired": int(paired),
                "unanswered": int(unanswered),
            }
    return rows


@pytest.mark.parametrize("capture", ["acks_modes", "kafka_python", "legacy_msgset", "produce_codecs"])
def test_generated_tshark_expectations_agree_with_the_hand_made_tables(capture: str) -> None:
    expected = json.loads((DATA / f"{capture}.pcap.tshark.json").read_text())
    table = human_table(DATA / f"{capture}.pcap.tshark.txt")

    assert len(table) >= 6
    assert expected["summary"]["by_key_version"] == table
    assert expected["summary"]["total_requests"] == len(expected["requests"])
    assert expected["summary"]["total_requests"] == sum(row["requests"] for row in table.values())
