"""Plain frames delivered twice (SPAN of both switch ports: the same bytes, no tunnel) are decoded once
and counted as `duplicate_packets`, not as retransmissions; a real retransmission (a new IP id) still
is one. The copies are made by scapy from a real capture re-segmented to a 1500-byte MTU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tunnelwire as tw
from scapy.layers.inet import IP, TCP

from kwsniff.pipeline.run import CaptureResult, run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink

ROOT = Path(__file__).parent.parent
TABLES = ("requests", "partitions", "errors", "groups")
# The columns of `connections` a copy changes; every other one must not.
COPY_COLUMNS = ("duplicate_packets",)


@pytest.fixture(scope="module")
def packets() -> list[Any]:
    return tw.resegment(ROOT / "tests" / "data" / "captures" / tw.BASE_CAPTURE)


def read(path: Path) -> tuple[CaptureResult, ListSink]:
    sink = ListSink()
    return run_capture(path, sink, SessionOptions(), name="kafka"), sink


@pytest.fixture(scope="module")
def plain(packets: list[Any], tmp_path_factory: pytest.TempPathFactory) -> tuple[CaptureResult, ListSink]:
    return read(tw.write(tmp_path_factory.mktemp("plain") / "plain.pcap", packets))


def same_tables(sink: ListSink, reference: ListSink) -> None:
    for table in TABLES:
        assert sink.tables[table] == reference.tables[table], table
    conns, ref = sink.tables["connections"], reference.tables["connections"]
    keep = [k for k in ref[0] if k not in COPY_COLUMNS]
    assert [{k: c[k] for k in keep} for c in conns] == [{k: c[k] for k in keep} for c in ref]


def test_every_frame_twice_is_decoded_once(
    packets: list[Any], plain: tuple[CaptureResult, ListSink], tmp_path: Path
) -> None:
    twice = tw.write(tmp_path / "twice.pcap", [p for pkt in packets for p in (pkt, pkt)])
    result, sink = read(twice)
    same_tables(sink, plain[1])
    assert plain[0].stats.duplicate_packets == 0
    assert result.stats.packets == 2 * 229
    assert result.stats.duplicate_packets == 229
    conns = sink.tables["connections"]
    # The copies of each connection's last two packets come after its row was written.
    assert sum(c["duplicate_packets"] for c in conns) == 229 - 2 * 7
    assert sum(c["duplicate_bytes"] for c in conns) == 0  # not retransmissions


def test_copies_three_frames_late_are_still_copies(
    packets: list[Any], plain: tuple[CaptureResult, ListSink], tmp_path: Path
) -> None:
    late: list[Any] = []
    for n, pkt in enumerate(packets):
        late.append(pkt)
        if n >= 3:
            late.append(packets[n - 3])
    late += packets[-3:]
    result, sink = read(tw.write(tmp_path / "late.pcap", late))
    same_tables(sink, plain[1])
    assert result.stats.duplicate_packets == 229
    assert sum(c["duplicate_bytes"] for c in sink.tables["connections"]) == 0


def test_a_retransmission_with_a_new_ip_id_is_not_a_copy(
    packets: list[Any], plain: tuple[CaptureResult, ListSink], tmp_path: Path
) -> None:
    n = next(i for i, p in enumerate(packets) if len(p[TCP].payload) > 1000)
    again = packets[n].copy()
    again[IP].id = (again[IP].id + 1) & 0xFFFF
    del again[IP].chksum
    size = len(again[TCP].payload)
    frames = [p for pkt in packets for p in (pkt, pkt)]
    frames.insert(2 * n + 2, again)  # after the original and its copy
    result, sink = read(tw.write(tmp_path / "retransmitted.pcap", frames))
    for table in TABLES:
        assert sink.tables[table] == plain[1].tables[table], table
    assert result.stats.duplicate_packets == 229
    conns = sink.tables["connections"]
    assert sum(c["duplicate_bytes"] for c in conns) == size
    counted = [
        sum(c["packets_to_broker"] + c["packets_to_client"] for c in t)
        for t in (conns, plain[1].tables["connections"])
    ]
    assert counted[0] == counted[1] + 1  # the retransmission is a packet of its connection
