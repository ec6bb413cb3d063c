"""`kwsniff capture` on a mirror target: a VXLAN-wrapped capture replayed by `tcpreplay` into a veth pair
in a network namespace this test creates passes the default kernel filter and gives the tables of
the plain capture.

One worker: the kernel's fanout hash sees a UDP tunnel's outer headers only, and this capture's
VXLAN source port changes with every packet (as a VTEP's may per flow), so more workers would split
its connections (docs/live-capture.md, "Workers")."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import tunnelwire as tw

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
)

ROOT = Path(__file__).resolve().parent.parent
REPLAY_PPS = 2000
SETTLE_S = 1.0  # for the last replayed packets to be read before the capture is stopped


def test_capture_on_a_mirror_target_decodes_vxlan_like_the_plain_capture(tmp_path: Path) -> None:
    inner = tw.inners(tw.resegment(ROOT / "tests" / "data" / "captures" / tw.BASE_CAPTURE))
    plain = tw.write(tmp_path / "plain.pcap", [p.original for p in inner])
    vxlan = tw.write(tmp_path / "vxlan.pcap", tw.wrapped(inner, tw.vxlan()))
    out = tmp_path / "live"
    with replay_namespace("tun") as net:
        proc = start_kwsniff_capture(net, ["--out", str(out), "--workers", "1"], tmp_path / "capture.err")
        try:
            sent = tcpreplay(net, vxlan, pps=REPLAY_PPS)
            time.sleep(SETTLE_S)
        finally:
            code = stop_process(proc, timeout_s=CAPTURE_STOP_TIMEOUT_S)  # type: ignore[arg-type]
    assert code == 0, (tmp_path / "capture.err").read_text()
    assert sent.packets == len(inner)
    reference = ListSink()
    run_capture(plain, reference, SessionOptions())
    for table in ("requests", "partitions", "errors"):
        rows = ds.dataset(out / table).to_table().to_pylist()
        expected = pa.Table.from_pylist(reference.tables[table], schema=SCHEMAS[table]).to_pylist()
        drop = ("capture", "ts_request", "ts_response", "latency_ms")  # live times are the replay's
        assert sorted(repr({k: v for k, v in r.items() if k not in drop}) for r in rows) == sorted(
            repr({k: v for k, v in r.items() if k not in drop}) for r in expected
        ), table
    conns = ds.dataset(out / "connections").to_table().to_pylist()
    assert {c["tunnel"] for c in conns} == {"vxlan:vni=42"}
    stats = ds.dataset(out / "capture_stats").to_table().to_pylist()
    assert sum(r["packets"] for r in stats) == sent.packets
