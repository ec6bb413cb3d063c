"""Real captures cut to begin mid-stream (issue 10, item 1): the stricter evidence that a connection on
a port nobody named speaks Kafka still finds every connection, with no decode errors.

The first 10%, 30% or 50% of each capture's packets are dropped, so connections start without their
SYN, some in the middle of an exchange. What kwsniff must find comes from tshark's view of the whole
capture (CAPTURE.tshark.json, frame numbers of every stream and of the frame each PDU starts in):
every TCP stream with a packet after the cut is a connection; it is Kafka when a request and its
response both lie wholly after the cut (a lone response, its request cut away, proves nothing); its
requests are those that start after the cut.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink

CAPTURES = Path(__file__).parent / "data" / "captures"


def drop_first_packets(src: Path, dst: Path, fraction: float) -> tuple[Path, int]:
    data = src.read_bytes()
    records, off = [], 24
    while off + 16 <= len(data):
        caplen = struct.unpack_from("<IIII", data, off)[2]
        records.append(data[off : off + 16 + caplen])
        off += 16 + caplen
    cut = int(len(records) * fraction)
    dst.write_bytes(data[:24] + b"".join(records[cut:]))
    return dst, cut


def tshark_expected(name: str, cut: int) -> tuple[int, int, int]:
    """(Kafka connections, connections, requests) of a capture whose first ``cut`` frames are gone."""
    view = json.loads((CAPTURES / f"{name}.pcap.tshark.json").read_text())
    streams = {s["stream"] for s in view["streams"] if s["last_frame"] > cut}
    requests = [r for r in view["requests"] if r["first_frame"] > cut]
    answered = {(r["stream"], r["correlation_id"]) for r in view["responses"] if r["first_frame"] > cut}
    kafka = {r["stream"] for r in requests if (r["stream"], r["correlation_id"]) in answered}
    return len(kafka), len(streams), sum(r["stream"] in kafka for r in requests)


CUTS = [(name, fraction) for name in ("acks_modes", "kafka_python", "legacy_msgset", "produce_codecs")
        for fraction in (0.1, 0.3, 0.5)]  # fmt: skip


@pytest.mark.parametrize(("name", "fraction"), CUTS, ids=[f"{n}-{f}" for n, f in CUTS])
def test_mid_stream_cut_of_a_real_capture_finds_what_tshark_saw_after_the_cut(
    tmp_path: Path, name: str, fraction: float
) -> None:
    pcap, cut = drop_first_packets(CAPTURES / f"{name}.pcap", tmp_path / "mid.pcap", fraction)
    sink = ListSink()
    run_capture(pcap, sink, SessionOptions())
    connections, requests = sink.tables["connections"], sink.tables.get("requests", [])
    assert (sum(c["kafka"] for c in connections), len(connections), len(requests)) == tshark_expected(
        name, cut
    )
    assert [r for r in requests if r["status"] == "decode_error"] == []
    assert all(c["not_kafka_bytes"] == 0 for c in connections if c["kafka"])
