"""The compiled packet path (kwsniff/pipeline/_fastpath.c) against the pure-Python one.

The extension must be built and used where kwsniff is installed (so CI cannot silently fall back to
the pure path), `kwsniff read` must write the same Parquet bytes both ways, and any packet order the
capture might have (reordered, re-segmented, copied, lost packets: the cases the compiled path hands
back to Python, interleaved with the ones it handles) must leave the same rows and counters.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kwsniff.capture import open_capture
from kwsniff.pipeline.session import Session, SessionOptions, compiled
from kwsniff.rows import ListSink

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "tests" / "data" / "captures"
PURE = {**os.environ, "KWSNIFF_PURE_PYTHON": "1"}
COMPILED = {k: v for k, v in os.environ.items() if k != "KWSNIFF_PURE_PYTHON"}
# The `captures` table's columns that differ between any two runs.
VARYING = ("started", "duration_ms")


def test_the_extension_is_built_and_used() -> None:
    code = (
        "import kwsniff.pipeline._fastpath as f, kwsniff, pathlib;"
        "from kwsniff.pipeline.session import Session, compiled;"
        "from kwsniff.rows import ListSink;"
        "print(compiled(), type(Session('x', ListSink()).packet.__self__).__name__,"
        " pathlib.Path(f.__file__).parent == pathlib.Path(kwsniff.__file__).parent / 'pipeline',"
        " f.__file__.endswith('.so'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=COMPILED, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["True", "FastPath", "True", "True"], done.stderr
    done = subprocess.run(
        [sys.executable, "-c", "from kwsniff.pipeline.session import compiled; print(compiled())"],
        env=PURE,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == ["False"], done.stderr


def read_tables(out: Path, env: dict[str, str]) -> dict[str, bytes]:
    captures = [*sorted(CAPTURES.glob("*.pcap")), ROOT / "sample_pcaps" / "quickstart.pcap"]
    done = subprocess.run(
        [sys.executable, "-m", "kwsniff", "read", *map(str, captures), "--out", str(out), "--records", "-q"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert files
    return files


def test_read_writes_the_same_bytes_both_ways(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    compiled_files = read_tables(tmp_path / "compiled", COMPILED)
    pure_files = read_tables(tmp_path / "pure", PURE)
    assert sorted(compiled_files) == sorted(pure_files)
    tables = {name.split("/")[0] for name in compiled_files}
    assert {"requests", "connections", "partitions", "records", "captures"} <= tables
    for name, data in compiled_files.items():
        if name.startswith("captures/"):
            # When the run began and how long it took: every other column must be equal.
            rows = [
                pq.read_table(tmp_path / side / name).drop_columns(list(VARYING)).to_pylist()
                for side in ("compiled", "pure")
            ]
            assert rows[0] == rows[1], name
        else:
            assert data == pure_files[name], name


# -- any packet order, both ways ------------------------------------------------------------------


def packets_of(name: str) -> list[tuple[int, int, bytes]]:
    with open_capture(CAPTURES / name) as reader:
        return [(ts, linktype, bytes(data)) for ts, linktype, data in reader.packets()]


def split_segment(data: bytes, at: int) -> tuple[bytes, bytes] | None:
    """An Ethernet/IPv4/TCP frame cut into two segments at payload byte ``at`` (IP lengths and the
    second sequence number adjusted; checksums are not checked by kwsniff), or None."""
    if len(data) < 54 or data[12:14] != b"\x08\x00" or data[14] != 0x45 or data[23] != 6:
        return None
    total = struct.unpack_from("!H", data, 16)[0]
    start = 34 + ((data[46] >> 2) & 0x3C)
    end = 14 + total
    if not start < start + at < end <= len(data):
        return None
    head = bytearray(data[:start])
    first = bytearray(head)
    struct.pack_into("!H", first, 16, start - 14 + at)
    second = bytearray(head)
    struct.pack_into("!H", second, 16, end - start - at + start - 14)
    seq = struct.unpack_from("!I", data, 38)[0]
    struct.pack_into("!I", second, 38, (seq + at) & 0xFFFFFFFF)
    first[47] &= ~0x09  # FIN and PSH belong to the last piece
    return bytes(first) + data[start : start + at], bytes(second) + data[start + at : end]


# A Linux cooked (SLL) header for IPv4 (what `tcpdump -i any` writes): packet type, ARPHRD_ETHER,
# address length and address, protocol.
SLL_IPV4 = b"\x00\x00\x00\x01\x00\x06" + bytes(8) + b"\x08\x00"


def as_sll(packets: list[tuple[int, int, bytes]]) -> list[tuple[int, int, bytes]]:
    """The Ethernet frames as LINKTYPE_LINUX_SLL (113) frames."""
    return [(ts, 113, SLL_IPV4 + data[14:]) for ts, _linktype, data in packets]


def mangle(packets: list[tuple[int, int, bytes]], seed: int, rate: float) -> list[tuple[int, int, bytes]]:
    """The packets with some of them split in two, swapped with the next one, sent twice, or lost."""
    rnd = random.Random(seed)
    out: list[tuple[int, int, bytes]] = []
    for ts, linktype, data in packets:
        roll = rnd.random()
        if roll < rate:
            pieces = split_segment(data, rnd.randint(1, 1400))
            if pieces is not None:
                out += [(ts, linktype, pieces[0]), (ts, linktype, pieces[1])]
                continue
        elif roll < 2 * rate and out:
            out.insert(len(out) - 1, (ts, linktype, data))  # before the previous packet
            continue
        elif roll < 3 * rate:
            out += [(ts, linktype, data), (ts, linktype, data)]
            continue
        elif roll < 3.3 * rate:
            continue  # the capture lost it
        out.append((ts, linktype, data))
    return out


def decode(
    packets: list[tuple[int, int, bytes]], compiled_path: bool
) -> tuple[dict[str, Any], Any, tuple[int, int]]:
    sink = ListSink()
    session = Session("mangled", sink, SessionOptions(records=True))
    if not compiled_path:
        vars(session).pop("packet")  # the class's method: the pure path
    feed = session.packet
    for ts, linktype, data in packets:
        feed(ts, linktype, data)
    counts = feed.__self__.counts() if compiled_path else (0, 0)  # type: ignore[attr-defined]
    stats = session.finish()
    return dict(sink.tables), stats, counts


@pytest.fixture(scope="module")
def captured() -> dict[str, list[tuple[int, int, bytes]]]:
    return {name: packets_of(name) for name in ("kafka_python.pcap", "acks_modes.pcap")}


@pytest.mark.parametrize("framing", ["ethernet", "sll"])
def test_the_compiled_path_handles_the_common_packet(
    captured: dict[str, list[tuple[int, int, bytes]]], framing: str
) -> None:
    assert compiled(), "the extension is not loaded: the tests below would compare the pure path with itself"
    packets = captured["kafka_python.pcap"]
    if framing == "sll":
        packets = as_sll(packets)
    tables, stats, (fast, slow) = decode(packets, True)
    pure_tables, pure_stats, _ = decode(packets, False)
    assert tables == pure_tables
    assert stats == pure_stats
    assert fast + slow == stats.packets == len(packets)
    # Python gets the 28 SYN, FIN and RST packets and the last ACK of each of the 7 connections
    # (it comes after the connection closed); the compiled path every other packet.
    assert sum(1 for _, _, d in captured["kafka_python.pcap"] if d[47] & 0x07) == 28
    assert len(tables["connections"]) == 7
    assert (fast, slow) == (158 - 28 - 7, 28 + 7)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    rate=st.sampled_from([0.01, 0.05, 0.2]),
    name=st.sampled_from(["kafka_python.pcap", "acks_modes.pcap"]),
    sll=st.booleans(),
)
def test_any_packet_order_gives_the_same_rows_both_ways(
    captured: dict[str, list[tuple[int, int, bytes]]], seed: int, rate: float, name: str, sll: bool
) -> None:
    packets = mangle(captured[name], seed, rate)
    if sll:
        packets = as_sll(packets)
    tables, stats, (fast, slow) = decode(packets, True)
    pure_tables, pure_stats, _ = decode(packets, False)
    assert tables == pure_tables
    assert stats == pure_stats
    assert fast + slow == len(packets)
