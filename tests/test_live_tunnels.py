"""`kwsniff capture --workers 2` on a mirror target: a VXLAN-wrapped capture replayed by `tcpreplay` into
a veth pair in a network namespace this test creates passes the default kernel filter and gives the
tables of the plain capture.

The wrapped capture is the overlay between three pairs of nodes (IPv4, IPv4 with a VLAN tag, IPv6),
and the outer UDP source port changes with every packet (a VTEP picks it per flow, RFC 7348
section 5): the kernel's own fanout hash would split its connections between the workers; the
fanout group's steering program (kwsniff.capture.fanout) keeps each node pair's connections on one
worker, and the pairs give both workers a share."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import tunnelwire as tw
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Packet

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink
from kwsniff.tables.schemas import SCHEMAS
from tests.realparts import (
    CAPTURE_STOP_TIMEOUT_S,
    replay_namespace,
    start_kwsniff_capture,
    stop_process,
    tcpreplay,
    wait_for_captured_packets,
)

ROOT = Path(__file__).resolve().parent.parent
REPLAY_PPS = 2000
METRICS_PORT = 9464  # the capture's --metrics-port, inside the test's own network namespace
# Three VTEP pairs (client node, broker node, 802.1Q-tagged), and the member of a 2-worker group the
# steering program's sum of their addresses sends each to. The tagged IPv4 pair and the IPv6 pair
# share member 1: were the tag not removed, or the IPv6 addresses not read, theirs would go to
# member 0 (a load that fails or a frame not IP goes there) and the shares would differ.
NODE_PAIRS = (
    ("192.0.2.1", "192.0.2.2", True),
    ("2001:db8::1", "2001:db8::2", False),
    ("198.51.100.1", "198.51.100.2", False),
)
MEMBER = (1, 1, 0)


def keyed(rows: list[dict[str, Any]], connections: list[dict[str, Any]]) -> list[str]:
    """The rows, sorted, without the columns a replay changes: the capture's name, times (the
    replay's pace) and conn_id (numbered per worker: its connection's addresses instead)."""
    flows = {
        c["conn_id"]: (c["client_ip"], c["client_port"], c["broker_ip"], c["broker_port"])
        for c in connections
    }
    drop = ("capture", "conn_id", "ts_request", "ts_response", "latency_ms")
    return sorted(
        repr(sorted([*((k, v) for k, v in r.items() if k not in drop), ("flow", flows[r["conn_id"]])]))
        for r in rows
    )


def node_pair(pkt: Packet) -> int:
    """The node pair of an inner packet's connection, chosen by its client port (the base capture's
    broker port is below every client's; its client ports are all even)."""
    return max(pkt.original[TCP].sport, pkt.original[TCP].dport) // 2 % len(NODE_PAIRS)


def two_node_pairs(pkt: Packet, n: int) -> list[Packet]:
    """VXLAN between the node pair of the inner connection, the outer addresses swapped with the
    direction, and a new outer source port every packet; a tagged pair's frames carry an 802.1Q tag
    (a mirror port's VLAN), which the kernel removes before the steering program runs."""
    client_node, broker_node, tagged = NODE_PAIRS[node_pair(pkt)]
    to_broker = pkt.original[TCP].sport > pkt.original[TCP].dport
    src, dst = (client_node, broker_node) if to_broker else (broker_node, client_node)
    link = [Ether(**tw.OUTER_MAC, type=0x8100), Dot1Q(vlan=100)] if tagged else [Ether(**tw.OUTER_MAC)]
    outer = IPv6(src=src, dst=dst) if ":" in src else IP(src=src, dst=dst, id=n & 0xFFFF)
    return [
        tw.chain(
            *link,
            outer,
            UDP(sport=49152 + n % 1000, dport=4789),
            VXLAN(vni=42),
            pkt,
        )
    ]


def test_two_workers_on_a_mirror_target_decode_vxlan_like_the_plain_capture(tmp_path: Path) -> None:
    inner = tw.inners(tw.resegment(ROOT / "tests" / "data" / "captures" / tw.BASE_CAPTURE))
    plain = tw.write(tmp_path / "plain.pcap", [p.original for p in inner])
    vxlan = tw.write(tmp_path / "vxlan.pcap", tw.wrapped(inner, two_node_pairs))
    out = tmp_path / "live"
    with replay_namespace("tun") as net:
        args = ["--out", str(out), "--workers", "2", "--metrics-port", str(METRICS_PORT)]
        proc = start_kwsniff_capture(net, args, tmp_path / "capture.err")
        try:
            sent = tcpreplay(net, vxlan, pps=REPLAY_PPS)
            wait_for_captured_packets(METRICS_PORT, sent.packets, net.netns)
        finally:
            code = stop_process(proc, timeout_s=CAPTURE_STOP_TIMEOUT_S)  # type: ignore[arg-type]
    assert code == 0, (tmp_path / "capture.err").read_text()
    assert sent.packets == len(inner)
    reference = ListSink()
    run_capture(plain, reference, SessionOptions())
    conns = ds.dataset(out / "connections").to_table().to_pylist()
    for table in ("requests", "partitions", "errors"):
        rows = ds.dataset(out / table).to_table().to_pylist()
        expected = pa.Table.from_pylist(reference.tables[table], schema=SCHEMAS[table]).to_pylist()
        assert keyed(rows, conns) == keyed(expected, reference.tables["connections"]), table
    assert {c["tunnel"] for c in conns} == {"vxlan:vni=42"}
    stats = ds.dataset(out / "capture_stats").to_table().to_pylist()
    assert sum(r["packets"] for r in stats) == sent.packets
    assert sum(r["kernel_drops"] + r["queue_drops"] for r in stats) == 0
    # Each node pair's packets went to one worker, so each worker's share is one pair's packets.
    per_member = Counter(MEMBER[node_pair(p)] for p in inner)
    per_worker = Counter[int]()
    for r in stats:
        per_worker[r["worker"]] += r["packets"]
    # Workers join the group in any order: a worker's number need not be its member index.
    assert sorted(per_worker.values()) == sorted(per_member.values()), (per_worker, per_member)
    assert len(per_worker) == 2 and min(per_worker.values()) > 0
