"""`kwsniff read` writes one `captures` row per input, and one bad input among several fails alone."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import dpkt
import duckdb
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from kwsniff.cli import main
from kwsniff.pipeline.session import Session
from kwsniff.tables.schemas import SCHEMAS

CAPTURES = Path(__file__).parent / "data" / "captures"
ACKS = CAPTURES / "acks_modes.pcap"
PYTHON = CAPTURES / "kafka_python.pcap"
NOT_A_CAPTURE = "not a pcap or pcapng file (starts with b'not ')"


def dpkt_packets(path: Path) -> int:
    """Records in a pcap file by dpkt, an independent reader."""
    return len(dpkt_times(path))


def dpkt_times(path: Path) -> list[dt.datetime]:
    """The time of each record in a pcap file by dpkt, an independent reader."""
    times = []
    with open(path, "rb") as f:
        try:
            for ts, _ in dpkt.pcap.Reader(f):
                times.append(dt.datetime.fromtimestamp(float(ts), dt.UTC))
        except dpkt.NeedData:
            pass
    return times


def same_us(a: dt.datetime | None, b: dt.datetime) -> bool:
    return a is not None and abs((a - b).total_seconds()) < 1e-6


def captures_rows(out: Path) -> list[dict[str, Any]]:
    table = ds.dataset(out / "captures").to_table()
    assert table.schema == SCHEMAS["captures"]
    rows = sorted(table.to_pylist(), key=lambda r: r["capture"])
    for row in rows:
        assert row["duration_ms"] >= 0 and row["started"].year >= 2025
        del row["duration_ms"], row["started"]
    return rows


def kwsniff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def fleet(tmp_path: Path) -> list[Path]:
    """Two good captures, one cut 100 bytes short, and a file that is not a capture."""
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(ACKS.read_bytes()[:-100])
    notes = tmp_path / "notes.pcap"
    notes.write_text("not a capture\n")
    return [ACKS, PYTHON, cut, notes]


def test_read_writes_a_captures_row_per_input_and_a_bad_input_fails_alone(
    tmp_path: Path, fleet: list[Path]
) -> None:
    out = tmp_path / "t"
    proc = kwsniff("read", *map(str, fleet), "--out", str(out), "-q")
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert proc.stderr == (
        f"kwsniff: warning: cut.pcap: last record cut short at offset 233755\n"
        f"kwsniff: warning: notes.pcap: failed: {NOT_A_CAPTURE}\n"
    )
    acks, python, cut, notes = fleet
    found = captures_rows(out)
    # Where each capture ended: its last packet by dpkt (which also yields the cut record, 48 of
    # its 66 bytes, that kwsniff does not count as a packet); none for the input that failed.
    ended = [row.pop("ended") for row in found]
    assert ended[3] is None
    for got, path, last in zip(ended, (acks, cut, python), (-1, -2, -1), strict=False):
        assert same_us(got, dpkt_times(path)[last]), (path, got)
    assert found == [
        {
            "capture": "acks_modes.pcap",
            "path": str(acks),
            "bytes": 233_919,
            "packets": 360,
            "status": "ok",
            "reason": None,
            "warnings": 0,
            "broker_conflicts": 0,
        },
        {
            "capture": "cut.pcap",
            "path": str(cut),
            "bytes": 233_819,
            "packets": 358,
            "status": "damaged",
            "reason": "last record cut short at offset 233755",
            "warnings": 1,
            "broker_conflicts": 0,
        },
        {
            "capture": "kafka_python.pcap",
            "path": str(python),
            "bytes": 131_687,
            "packets": 158,
            "status": "ok",
            "reason": None,
            "warnings": 0,
            "broker_conflicts": 0,
        },
        {
            "capture": "notes.pcap",
            "path": str(notes),
            "bytes": 14,
            "packets": None,
            "status": "failed",
            "reason": NOT_A_CAPTURE,
            "warnings": 0,
            "broker_conflicts": None,
        },
    ]
    # Independent checks: bytes are the files' sizes, packets what dpkt reads (the cut record is lost).
    assert [os.path.getsize(p) for p in (acks, cut, python)] == [233_919, 233_819, 131_687]
    # dpkt also yields the cut record (48 of its 66 bytes), which kwsniff does not count as a packet.
    assert [dpkt_packets(p) for p in (acks, cut, python)] == [360, 358 + 1, 158]
    # The failed input has no row anywhere else; the others are all there.
    requests = ds.dataset(out / "requests").to_table().column("capture").to_pylist()
    assert {c: requests.count(c) for c in sorted(set(requests))} == {
        "acks_modes.pcap": 103,
        "cut.pcap": 103,
        "kafka_python.pcap": 46,
    }


def test_strict_turns_a_failed_input_into_exit_3(tmp_path: Path, fleet: list[Path]) -> None:
    acks, python, _, notes = fleet
    proc = kwsniff("read", str(acks), str(notes), str(python), "--out", str(tmp_path / "t"), "-q", "--strict")
    assert proc.returncode == 3
    assert proc.stderr == (
        f"kwsniff: warning: notes.pcap: failed: {NOT_A_CAPTURE}\nkwsniff: strict: 1 of 3 inputs failed\n"
    )
    assert [r["status"] for r in captures_rows(tmp_path / "t")] == ["ok", "ok", "failed"]


def test_inputs_that_all_fail_are_an_error_and_write_nothing(tmp_path: Path, fleet: list[Path]) -> None:
    notes = fleet[3]
    other = tmp_path / "other.pcap"
    other.write_text("not a capture either\n")
    proc = kwsniff("read", str(notes), str(other), "--out", str(tmp_path / "t"))
    assert proc.returncode == 1
    assert proc.stderr == (
        f"kwsniff: warning: notes.pcap: failed: {NOT_A_CAPTURE}\n"
        "kwsniff: warning: other.pcap: failed: not a pcap or pcapng file (starts with b'not ')\n"
        "kwsniff: error: none of the 2 inputs could be read\n"
    )
    assert not (tmp_path / "t").exists()


def test_a_decoder_that_raises_fails_its_capture_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the decoder (simulated: a Session that raises at the 50th packet of one capture)
    costs that capture's rows, not the run; its row says which exception."""
    packet = Session.packet

    def crashing(self: Session, ts: int, linktype: int, data: bytes) -> None:
        if self.capture == "kafka_python.pcap" and self.stats.packets == 49:
            raise ValueError("injected decoder failure\nsecond line never shown")
        packet(self, ts, linktype, data)

    monkeypatch.setattr(Session, "packet", crashing)
    out = tmp_path / "t"
    result = CliRunner().invoke(main, ["read", str(ACKS), str(PYTHON), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        "kwsniff: warning: kafka_python.pcap: failed: ValueError: injected decoder failure\n"
    )
    rows = captures_rows(out)
    assert [(r["capture"], r["status"], r["reason"], r["packets"]) for r in rows] == [
        ("acks_modes.pcap", "ok", None, 360),
        ("kafka_python.pcap", "failed", "ValueError: injected decoder failure", None),
    ]
    assert set(ds.dataset(out / "connections").to_table().column("capture").to_pylist()) == {
        "acks_modes.pcap"
    }
    # Alone, the same failure is the one-line error and exit 1 a bad input always was.
    alone = CliRunner().invoke(main, ["read", str(PYTHON), "--out", str(tmp_path / "alone")])
    assert alone.exit_code == 1
    assert alone.stderr == f"kwsniff: error: {PYTHON}: ValueError: injected decoder failure\n"


def test_read_writes_empty_tables_that_every_reader_takes_with_their_columns(tmp_path: Path) -> None:
    """acks_modes.pcap has no consumer group and no error: `groups` and `errors` are 0-row files."""
    out = tmp_path / "t"
    assert CliRunner().invoke(main, ["read", str(ACKS), "--out", str(out), "-q"]).exit_code == 0
    for table in ("groups", "errors"):
        arrow = ds.dataset(out / table).to_table()
        assert (arrow.num_rows, arrow.schema) == (0, SCHEMAS[table])
        found = duckdb.sql(f"select * from read_parquet('{out / table}/*.parquet')")
        assert (found.fetchall(), found.columns) == ([], SCHEMAS[table].names)
