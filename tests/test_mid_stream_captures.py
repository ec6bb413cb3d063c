"""Real captures cut to begin mid-stream (issue 10, item 1): the stricter evidence that a connection on
a port nobody named speaks Kafka still finds every connection it found before, with no decode errors.

The first 10%, 30% or 50% of each capture's packets are dropped, so connections start without their
SYN, some in the middle of an exchange. The expected counts are what kwsniff found before the evidence
rule (commit e82cbd1) on the same cuts; the one connection of kafka_python at 50% that is not Kafka
carries only client bytes (no answer is in the capture: nothing proves it).
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink

CAPTURES = Path(__file__).parent / "data" / "captures"


def drop_first_packets(src: Path, dst: Path, fraction: float) -> Path:
    data = src.read_bytes()
    records, off = [], 24
    while off + 16 <= len(data):
        caplen = struct.unpack_from("<IIII", data, off)[2]
        records.append(data[off : off + 16 + caplen])
        off += 16 + caplen
    dst.write_bytes(data[:24] + b"".join(records[int(len(records) * fraction) :]))
    return dst


# (capture, fraction dropped) -> (Kafka connections, connections, requests)
EXPECTED = {
    ("acks_modes", 0.1): (8, 8, 96),
    ("acks_modes", 0.3): (6, 6, 72),
    ("acks_modes", 0.5): (5, 5, 50),
    ("kafka_python", 0.1): (6, 6, 44),
    ("kafka_python", 0.3): (5, 5, 33),
    ("kafka_python", 0.5): (3, 4, 24),
    ("legacy_msgset", 0.1): (9, 9, 20),
    ("legacy_msgset", 0.3): (7, 8, 14),
    ("legacy_msgset", 0.5): (6, 6, 10),
    ("produce_codecs", 0.1): (12, 13, 103),
    ("produce_codecs", 0.3): (9, 9, 79),
    ("produce_codecs", 0.5): (6, 6, 56),
}


@pytest.mark.parametrize(
    ("name", "fraction"), sorted(EXPECTED), ids=[f"{n}-{f}" for n, f in sorted(EXPECTED)]
)
def test_mid_stream_cut_of_a_real_capture_is_detected_as_before(
    tmp_path: Path, name: str, fraction: float
) -> None:
    pcap = drop_first_packets(CAPTURES / f"{name}.pcap", tmp_path / "mid.pcap", fraction)
    sink = ListSink()
    run_capture(pcap, sink, SessionOptions())
    connections, requests = sink.tables["connections"], sink.tables.get("requests", [])
    assert (sum(c["kafka"] for c in connections), len(connections), len(requests)) == EXPECTED[
        (name, fraction)
    ]
    assert [r for r in requests if r["status"] == "decode_error"] == []
    assert all(c["not_kafka_bytes"] == 0 for c in connections if c["kafka"])
