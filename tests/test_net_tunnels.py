"""Kafka where operators capture it: inside VXLAN, Geneve, GRE, ERSPAN, IP in IP and MPLS, mirrored
twice, fragmented. A real capture re-segmented to a 1500-byte MTU and wrapped by scapy
(tests/tunnelwire.py) must give the plain capture's requests, partitions and errors row for row, and
the requests tshark finds in the same wrapped file (tests/data/tunnels.tshark.json, made by
tools/tshark_tunnels.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import tunnelwire as tw

from kwsniff.pipeline.run import CaptureResult, run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink

ROOT = Path(__file__).parent.parent
TSHARK = json.loads((ROOT / "tests" / "data" / "tunnels.tshark.json").read_text())
SAME_TABLES = ("requests", "partitions", "errors", "groups")
# Columns of `connections` that a tunnel or a duplicate may change; every other one must not.
TUNNEL_COLUMNS = ("tunnel", "duplicate_packets")


@pytest.fixture(scope="session")
def inner_packets() -> list[Any]:
    return tw.inners(tw.resegment(ROOT / "tests" / "data" / "captures" / tw.BASE_CAPTURE))


@pytest.fixture(scope="session")
def wrapped_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("wrapped")


def read(path: Path, options: SessionOptions | None = None) -> tuple[CaptureResult, ListSink]:
    sink = ListSink()
    # One capture name for all, so that rows compare equal column for column.
    result = run_capture(path, sink, options or SessionOptions(), name="kafka")
    return result, sink


@pytest.fixture(scope="session")
def plain(inner_packets: list[Any], wrapped_dir: Path) -> tuple[CaptureResult, ListSink]:
    return read(tw.write(wrapped_dir / "plain.pcap", [p.original for p in inner_packets]))


def test_the_plain_resegmented_capture_decodes_whole(plain: tuple[CaptureResult, ListSink]) -> None:
    result, sink = plain
    assert result.stats.packets == 229  # 158 packets, the large ones cut into 1448-byte segments
    assert len(sink.tables["requests"]) == 46
    assert Counter(r["status"] for r in sink.tables["requests"]) == {"ok": 46}
    assert {c["tunnel"] for c in sink.tables["connections"]} == {None}


@pytest.mark.parametrize("name", list(tw.WRAPS))
def test_wrapped_capture_gives_the_plain_tables(
    name: str, inner_packets: list[Any], wrapped_dir: Path, plain: tuple[CaptureResult, ListSink]
) -> None:
    wrap, tunnel, skipped = tw.WRAPS[name]
    path = tw.write(wrapped_dir / f"{name}.pcap", tw.wrapped(inner_packets, wrap))
    result, sink = read(path)
    _, reference = plain
    conns = sink.tables["connections"]
    for table in SAME_TABLES:
        rows, expected = sink.tables[table], reference.tables[table]
        if name == "ipv6_in_ipv4":  # the inner packets are IPv6 there: each row has its connection's
            by_conn = {c["conn_id"]: c for c in conns}
            for end in ("client_ip", "broker_ip"):
                assert {
                    r.get(end, by_conn[r["conn_id"]][end]) == by_conn[r["conn_id"]][end] for r in rows
                } == {True}
            # Its Metadata lists the broker by the IPv4 address the rewritten packets no longer
            # carry: no response names fd00::1 (docs/tables.md "Which broker answered").
            assert {r.get("broker_id") for r in rows} == {None}
            rows, expected = (
                [{k: v for k, v in r.items() if k not in ("client_ip", "broker_ip", "broker_id")} for r in t]
                for t in (rows, expected)
            )
        assert rows == expected, table
    assert result.stats.skipped_packets == skipped
    assert [c["tunnel"] for c in conns] == [tunnel] * 7
    same = [
        k for k in conns[0] if k not in TUNNEL_COLUMNS and not (name == "ipv6_in_ipv4" and k.endswith("_ip"))
    ]
    assert [{k: c[k] for k in same} for c in conns] == [
        {k: c[k] for k in same} for c in reference.tables["connections"]
    ]
    if name == "ipv6_in_ipv4":
        assert {c["broker_ip"] for c in conns} == {"fd00::1"}
    # tshark found the same requests in the same file.
    ours = sorted([r["api_key"], r["api_version"], r["correlation_id"]] for r in sink.tables["requests"])
    assert ours == TSHARK["requests"][name]
    assert result.stats.accounting_mismatches == 0


def test_copies_under_two_vnis_are_counted_not_decoded(
    inner_packets: list[Any], wrapped_dir: Path, plain: tuple[CaptureResult, ListSink]
) -> None:
    path = tw.write(wrapped_dir / "dups_only.pcap", tw.wrapped(inner_packets, tw.two_vnis))
    result, sink = read(path)
    assert result.stats.duplicate_packets == 229
    assert result.stats.decapsulated == {"vxlan": 458}
    conns = sink.tables["connections"]
    # Copies after a connection closed (its last ACKs) count in the summary, not in its row.
    assert sum(c["duplicate_packets"] for c in conns) == 229 - 2 * 7
    assert sum(c["duplicate_bytes"] for c in conns) == 0  # not retransmissions
    packets = [(c["packets_to_broker"], c["packets_to_client"]) for c in conns]
    assert packets == [
        (c["packets_to_broker"], c["packets_to_client"]) for c in plain[1].tables["connections"]
    ]


def test_tunnel_headers_are_counted_as_overhead_not_stream_bytes(
    inner_packets: list[Any], wrapped_dir: Path
) -> None:
    result, sink = read(tw.write(wrapped_dir / "vxlan_overhead.pcap", tw.wrapped(inner_packets, tw.vxlan())))
    # Outer IPv4 20 + UDP 8 + VXLAN 8 + inner Ethernet 14 = 50 bytes per packet.
    assert result.stats.tunnel_overhead_bytes == 229 * 50
    assert result.stats.decapsulated == {"vxlan": 229}


def test_nesting_to_the_depth_limit_is_followed_and_deeper_is_counted(
    inner_packets: list[Any], wrapped_dir: Path
) -> None:
    few = inner_packets[:20]
    four = read(tw.write(wrapped_dir / "nested4.pcap", tw.wrapped(few, tw.nested(4))))[0]
    assert four.stats.skipped_packets == {}
    assert four.stats.decapsulated == {"vxlan": 80}
    five = read(tw.write(wrapped_dir / "nested5.pcap", tw.wrapped(few, tw.nested(5))))[0]
    assert five.stats.skipped_packets == {"tunnel_too_deep": 20}
    deeper = read(
        tw.write(wrapped_dir / "nested5_allowed.pcap", tw.wrapped(few, tw.nested(5))),
        SessionOptions(max_tunnel_depth=5),
    )[0]
    assert deeper.stats.skipped_packets == {}


def test_vxlan_on_a_port_given_as_an_option(inner_packets: list[Any], wrapped_dir: Path) -> None:
    path = tw.write(wrapped_dir / "vxlan4790.pcap", tw.wrapped(inner_packets[:30], tw.vxlan(port=4790)))
    assert read(path)[0].stats.skipped_packets == {"not_tcp": 30}
    assert read(path, SessionOptions(vxlan_ports=frozenset({4790})))[0].stats.skipped_packets == {}
