"""The findings on a capture's own quality, each on a copy of a real capture damaged in a known way:
acks_modes.pcap with two Metadata requests' topic counts overwritten (two frames that do not decode),
produce_codecs.pcap cut to the seconds of its consumer's Fetch v16 requests (topic ids, KIP-516)
after the Metadata that named them, and acks_modes.pcap captured live (kwsniff's capture thread,
queue and decode thread; the libpcap handle a stand-in reporting chosen kernel and interface drops)
with its decoder started only once the capture thread has read it all, so that what does not fit
the queue is dropped. The expected numbers are the damage done, the full capture's own rows and the
packets the queue could not take. On DuckDB and on Spark, the same sentences
(tests/test_report_findings.py's helpers)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import dpkt
import duckdb
import pytest
from click.testing import CliRunner
from realparts import wait_until
from test_report_findings import by_rule, findings

from kwsniff.capture.live import LiveCapture
from kwsniff.cli import main
from kwsniff.pipeline.run_live import LiveDecoder, LiveOptions
from kwsniff.pipeline.session import SessionOptions
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.view.stats import LiveStats

ROOT = Path(__file__).resolve().parent.parent
ACKS = ROOT / "tests/data/captures/acks_modes.pcap"
CODECS = ROOT / "tests/data/captures/produce_codecs.pcap"
METADATA, METADATA_V12 = 3, 12
TOO_MANY = 0x7F  # a compact array's count byte: 126 topics, in a body of 3 bytes


def read(pcap: Path, out: Path) -> Path:
    done = CliRunner().invoke(main, ["read", "-q", str(pcap), "--out", str(out), "--summaries", "never"])
    assert done.exit_code == 0, done.output
    return out


def subjects(rows: list[dict], rule: str) -> list[tuple[str, str, str]]:
    """Each finding of ``rule``: its severity, the section showing its rows, and its capture."""
    return [(r["severity"], r["shown_in"], r["capture"]) for r in rows if r["rule"] == rule]


def packets(path: Path) -> tuple[int, list[tuple[float, bytes]]]:
    with path.open("rb") as f:
        reader = dpkt.pcap.Reader(f)
        return reader.datalink(), [(float(ts), buf) for ts, buf in reader]


def write(path: Path, link: int, kept: list[tuple[float, bytes]]) -> Path:
    with path.open("wb") as f:
        writer = dpkt.pcap.Writer(f, linktype=link)
        for ts, buf in kept:
            writer.writepkt(buf, ts)
    return path


def empty_metadata_topics(buf: bytes) -> int | None:
    """The offset in ``buf``'s TCP payload of the topics count of a whole Metadata v12 request asking
    for no topic (compact array count 1: empty), or None. Its header is v2: key, version,
    correlation id, client id (int16 length), tagged fields (KIP-482)."""
    tcp = dpkt.ethernet.Ethernet(buf).data.data
    if not isinstance(tcp, dpkt.tcp.TCP) or len(tcp.data) < 14:
        return None
    size, key, version, _, cid = struct.unpack_from(">ihhih", tcp.data)
    at = 14 + cid + 1
    whole = (key, version, size + 4) == (METADATA, METADATA_V12, len(tcp.data))
    no_tags_no_topics = tcp.data[at - 1 : at + 1] == b"\0\1"
    return at if whole and no_tags_no_topics else None


def damaged_metadata(src: Path, dst: Path, frames: int) -> Path:
    """``src`` with the first ``frames`` Metadata v12 requests asking for no topic made to announce
    TOO_MANY topics their body does not hold; TCP checksums made again."""
    link, kept = packets(src)
    done = 0
    for i, (ts, buf) in enumerate(kept):
        at = empty_metadata_topics(buf) if done < frames else None
        if at is not None:
            eth = dpkt.ethernet.Ethernet(buf)
            tcp = eth.data.data
            tcp.data = tcp.data[:at] + bytes([TOO_MANY]) + tcp.data[at + 1 :]
            tcp.sum = 0  # dpkt computes it again when the packet is written
            kept[i] = (ts, bytes(eth))
            done += 1
    assert done == frames
    return write(dst, link, kept)


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_frames_that_do_not_decode_are_a_finding(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # The admin's two Metadata requests, each on its own connection: two frames on two connections.
    pcap = damaged_metadata(ACKS, tmp_path / "damaged.pcap", 2)
    out = read(pcap, tmp_path / "tables")
    failed = duckdb.sql(
        f"SELECT api_name, reason FROM '{out}/requests/*.parquet' WHERE status = 'decode_error'"
    ).fetchall()
    reason = f"request: array count {TOO_MANY - 1} exceeds body at topics (offset 1)"
    assert failed == [("Metadata", reason)] * 2
    found = findings(out, engine, request)
    assert subjects(found, "decode_errors") == [("info", "connections", "damaged.pcap")]
    rules = by_rule(found)
    assert rules["decode_errors"] == [
        "capture `damaged.pcap` has 2 frames that did not decode on 2 connections"
    ]
    assert set(rules) == {"decode_errors"}


def fetch_window(full: Path) -> tuple[float, float]:
    """From the first Fetch request to the last Fetch response of the full capture's tables."""
    ((first, last),) = duckdb.sql(
        f"SELECT MIN(ts_request), MAX(ts_response) FROM '{full}/requests/*.parquet' WHERE api_name = 'Fetch'"
    ).fetchall()
    return first.timestamp(), last.timestamp()


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_topic_ids_no_captured_metadata_named_are_a_finding(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    full = read(CODECS, tmp_path / "full")
    first, last = fetch_window(full)
    # What the cut keeps of the full capture's rows: the Fetch v16 partitions of those seconds, each
    # by topic id, each named there by a Metadata response from before them.
    ((rows, ids, named),) = duckdb.sql(
        f"SELECT COUNT(*), COUNT(DISTINCT topic_id), COUNT(topic) FROM '{full}/partitions/*.parquet'"
        f" WHERE api_name = 'Fetch' AND topic_id IS NOT NULL"
        f" AND EPOCH(ts_request) >= {first} AND EPOCH(ts_response) <= {last}"
    ).fetchall()
    assert rows > ids > 1 and named == rows
    assert "unnamed_topic_ids" not in by_rule(findings(full, "duckdb", request))
    link, kept = packets(CODECS)
    cut = write(tmp_path / "fetches.pcap", link, [(ts, buf) for ts, buf in kept if first <= ts <= last])
    found = findings(read(cut, tmp_path / "cut"), engine, request)
    assert subjects(found, "unnamed_topic_ids") == [("info", "partitions", "fetches.pcap")]
    rules = by_rule(found)
    assert rules["unnamed_topic_ids"] == [
        f"capture `fetches.pcap` has {rows} partition rows of {ids} topic ids without a topic name"
        " (no Metadata naming them was captured)"
    ]


# As `kwsniff capture`: every table but `captures` (one row per input file, read's and spark's).
LIVE_TABLES = (*(t for t in DEFAULT_TABLES if t != "captures"), "capture_stats")
KERNEL_DROPS, IF_DROPS = 7, 3  # what the stand-in handle says libpcap counted (ps_drop, ps_ifdrop)


class CaptureHandle:
    """A stand-in for the pcapy handle kwsniff.capture.live opens: ``batches`` of (time in µs, frame),
    one per next_batch call, then nothing; its stats() are libpcap's (received, dropped, ifdropped)."""

    def __init__(self, link: int, batches: list[list[tuple[int, bytes]]]) -> None:
        self.link, self.batches = link, list(batches)
        self.read_fd, self.write_fd = os.pipe()
        os.write(self.write_fd, b"x")  # always readable

    def datalink(self) -> int:
        return self.link

    def getfd(self) -> int:
        return self.read_fd

    def next_batch(self, count: int) -> tuple[bytes, bytes]:
        if not self.batches:
            return b"", b""
        data, meta = b"", b""
        for ts, frame in self.batches.pop(0):
            meta += struct.pack("=IIII", ts // 1_000_000, ts % 1_000_000, len(data), len(frame))
            data += frame
        return data, meta

    def stats(self) -> tuple[int, int, int]:
        return (0, KERNEL_DROPS, IF_DROPS)

    def close(self) -> None:
        os.close(self.read_fd)
        os.close(self.write_fd)


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_packets_a_live_capture_dropped_are_a_finding(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    link, kept = packets(ACKS)
    frames = [(round(ts * 1_000_000), buf) for ts, buf in kept]
    half = len(frames) // 2
    first, second = frames[:half], frames[half:]
    # A queue that holds the first half's bytes: the second half, read while nothing decodes, is dropped.
    live = LiveCapture(CaptureHandle(link, [first, second]), queue_bytes=sum(len(b) for _, b in first))
    live.start()
    try:
        wait_until(
            lambda: live.snapshot().captured + live.snapshot().queue_drops == len(frames),
            "the capture thread's reading of both halves",
            10,
        )
    finally:
        live.stop()
        live.join(10)
    assert not live.running
    out = tmp_path / "live"
    decoder = LiveDecoder(
        live, SessionOptions(), LiveOptions(out, "dropping", LIVE_TABLES, 3600.0, 0.0), LiveStats()
    )
    decoder.start()
    decoder.join(30)
    assert decoder.error is None and not decoder.running
    dropped = len(second)
    found = findings(out, engine, request)
    assert subjects(found, "dropped_packets") == [("info", "capture_stats", "dropping")]
    rules = by_rule(found)
    assert rules["dropped_packets"] == [
        f"capture `dropping` dropped {KERNEL_DROPS + IF_DROPS + dropped} packets"
        f" (kernel {KERNEL_DROPS}, interface {IF_DROPS}, queue {dropped})"
    ]
