"""`kwsniff capture` on a mirror target: VXLAN-wrapped Kafka sent to a veth in a network namespace this
test creates passes the default kernel filter and gives the tables of the plain capture."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
import tunnelwire as tw

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink
from kwsniff.tables.schemas import SCHEMAS
from tests.realparts import stop_process

ROOT = Path(__file__).resolve().parent.parent
NETNS = f"kwsniff-tun-{os.getpid()}"
OUTSIDE, INSIDE = f"kwt{os.getpid() % 100000}o", f"kwt{os.getpid() % 100000}i"
READY_TIMEOUT_S = 60.0


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def veth() -> Iterator[None]:
    """A veth pair: OUTSIDE here, INSIDE in a namespace of our own, both up with room for VXLAN."""
    ip("netns", "add", NETNS)
    try:
        ip("link", "add", OUTSIDE, "mtu", "9000", "type", "veth", "peer", "name", INSIDE, "mtu", "9000")
        ip("link", "set", INSIDE, "netns", NETNS)
        ip("link", "set", OUTSIDE, "up")
        ip("netns", "exec", NETNS, "ip", "link", "set", INSIDE, "up")
        yield
    finally:
        subprocess.run(["ip", "link", "del", OUTSIDE], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, timeout=30)


def capture_listening(pid: int) -> bool:
    """Whether process ``pid`` holds a packet socket in the namespace (libpcap has opened INSIDE)."""
    out = subprocess.run(
        ["ip", "netns", "exec", NETNS, "ss", "-0", "-a", "-p"], capture_output=True, text=True, timeout=30
    ).stdout
    return f"pid={pid}," in out


def test_capture_on_a_mirror_target_decodes_vxlan_like_the_plain_capture(veth: None, tmp_path: Path) -> None:
    inner = tw.inners(tw.resegment(ROOT / "tests" / "data" / "captures" / tw.BASE_CAPTURE))
    plain = tw.write(tmp_path / "plain.pcap", [p.original for p in inner])
    frames = [bytes(f) for f in tw.wrapped(inner, tw.vxlan())]
    out = tmp_path / "live"
    command = [
        sys.executable,
        "-m",
        "kwsniff",
        "capture",
        INSIDE,
        "--out",
        str(out),
        "--count",
        str(len(frames)),
        "-q",
    ]
    proc = subprocess.Popen(
        ["ip", "netns", "exec", NETNS, *command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not capture_listening(proc.pid) and proc.poll() is None:
            # `ip netns exec` execs the command, so the capture keeps the pid we started.
            assert time.monotonic() < deadline, "kwsniff capture did not open the interface"
            time.sleep(0.2)
        time.sleep(0.5)  # the filter is set after the socket opens
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as sock:
            sock.bind((OUTSIDE, 0))
            for frame in frames:
                sock.send(frame)
                time.sleep(0.0005)  # the veth queue is shallow
        proc.wait(timeout=120)
    finally:
        stop_process(proc)  # type: ignore[arg-type]
    assert proc.returncode == 0, proc.stdout.read() if proc.stdout else ""
    reference = ListSink()
    run_capture(plain, reference, SessionOptions())
    for table in ("requests", "partitions", "errors"):
        rows = ds.dataset(out / table).to_table().to_pylist()
        expected = pa.Table.from_pylist(reference.tables[table], schema=SCHEMAS[table]).to_pylist()
        drop = ("capture", "ts_request", "ts_response", "latency_ms")  # live times are the send times
        assert sorted(repr({k: v for k, v in r.items() if k not in drop}) for r in rows) == sorted(
            repr({k: v for k, v in r.items() if k not in drop}) for r in expected
        ), table
    conns = ds.dataset(out / "connections").to_table().to_pylist()
    assert {c["tunnel"] for c in conns} == {"vxlan:vni=42"}
