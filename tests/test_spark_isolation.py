"""`kwsniff spark`: an input that fails (not a capture, or a decoder that raises inside its task) is a
warning and a `captures` row, never the job's end; the other captures' rows equal `kwsniff read`'s;
`--strict` exits 3; `-q` prints nothing of Spark's; empty tables are files every reader takes."""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner
from realparts import report_on_spark, run_kwsniff

from kwsniff.cli import main
from kwsniff.spark.pipeline import decode, write
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.tables.schemas import SCHEMAS

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "tests" / "data" / "captures"
ACKS = CAPTURES / "acks_modes.pcap"
PYTHON = CAPTURES / "kafka_python.pcap"
SAMPLE = ROOT / "sample_pcaps" / "quickstart.pcap"
ROW_TABLES = tuple(t for t in DEFAULT_TABLES if t != "captures")
NOT_A_CAPTURE = "not a pcap or pcapng file (starts with b'not ')"
# Loaded by every Python process of the run (driver and Spark's Python workers) through PYTHONPATH:
# the decoder raises at the 50th packet of crash.pcap, after its first rows were written to its
# task's Parquet files (a batch per row), so those files must not reach the dataset.
CRASH = """
from kwsniff.pipeline.session import Session
from kwsniff.sinks import parquet

parquet.BATCH_ROWS = 1
_packet = Session.packet


def packet(self, ts, linktype, data):
    if self.capture == "crash.pcap" and self.stats.packets == 49:
        raise ValueError("injected decoder failure")
    _packet(self, ts, linktype, data)


Session.packet = packet
"""


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: tuple(repr(r[k]) for k in sorted(r)))


def dataset_rows(out: Path, table: str) -> list[dict[str, Any]]:
    rows = ds.dataset(out / table, partitioning="hive").to_table().to_pylist()
    for row in rows:
        row.pop("date", None)
        if table == "captures":
            del row["started"], row["duration_ms"]
    return sorted(rows, key=lambda r: r["capture"]) if table == "captures" else _sorted(rows)


def read_out(tmp_path: Path, *captures: Path) -> Path:
    out = tmp_path / "read"
    result = CliRunner().invoke(main, ["read", *map(str, captures), "--out", str(out), "-q"])
    assert result.exit_code in (0, 1), result.output
    return out


@pytest.fixture
def fleet(tmp_path: Path) -> dict[str, Path]:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    cut = inputs / "cut.pcap"
    cut.write_bytes(ACKS.read_bytes()[:-100])
    notes = inputs / "notes.pcap"
    notes.write_text("not a capture\n")
    return {"acks": ACKS, "python": PYTHON, "cut": cut, "notes": notes}


@pytest.mark.parametrize(("buckets", "range_bytes"), [(1, None), (2, 1 << 16)])
def test_spark_captures_rows_and_tables_equal_reads_with_a_bad_and_a_cut_input(
    spark: Any, tmp_path: Path, fleet: dict[str, Path], buckets: int, range_bytes: int | None
) -> None:
    """Whole captures, and each split in two flow buckets indexed in 64 KiB ranges."""
    paths = [str(p) for p in fleet.values()]
    decoded = decode(spark, paths, buckets=buckets, range_bytes=range_bytes)
    assert decoded.failed() == [("notes.pcap", NOT_A_CAPTURE)]
    out = read_out(tmp_path, *fleet.values())
    got = sorted(
        (
            {k: v for k, v in row.items() if k not in ("date", "started", "duration_ms")}
            for row in decoded.captures
        ),
        key=lambda r: r["capture"],
    )
    for row in got:  # microseconds in the row, a timestamp in the table
        row["ended"] = None if row["ended"] is None else dt.datetime.fromtimestamp(row["ended"] / 1e6, dt.UTC)
    assert got == dataset_rows(out, "captures")
    assert [r["date"] for r in decoded.captures] == ["2026-11-22", "2026-11-22", "2026-11-22", None]
    write(decoded, tmp_path / "spark")
    for table in ROW_TABLES:
        assert _sorted(dataset_rows(tmp_path / "spark", table)) == dataset_rows(out, table), table
    assert decoded.rows == {
        "requests": 103 + 46 + 103,
        "connections": 10 + 7 + 10,
        "errors": 1,
        "partitions": 88 + 85 + 88,
        "groups": 4,
        "captures": 4,
    }


def test_a_capture_that_crashes_its_task_fails_alone_and_strict_exits_3(
    tmp_path: Path, fleet: dict[str, Path]
) -> None:
    crash = fleet["notes"].parent / "crash.pcap"
    shutil.copy(SAMPLE, crash)
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(CRASH)
    out = tmp_path / "spark"
    inputs = [str(p) for p in (fleet["acks"], fleet["python"], crash, fleet["notes"])]
    env = {**os.environ, "PYTHONPATH": f"{inject}:{ROOT}"}
    cmd = [sys.executable, "-m", "kwsniff", "spark", *inputs, "--out", str(out), "--master", "local[2]"]
    done = subprocess.run([*cmd, "-q", "--strict"], capture_output=True, text=True, timeout=900, env=env)
    # -q: not one line of Spark's or the JVM's, only kwsniff's own warnings.
    assert (done.returncode, done.stdout) == (3, "")
    assert done.stderr == (
        "kwsniff: warning: crash.pcap: failed: ValueError: injected decoder failure\n"
        f"kwsniff: warning: notes.pcap: failed: {NOT_A_CAPTURE}\n"
        "kwsniff: strict: 2 of 4 inputs failed, 0 damaged\n"
    )
    found = dataset_rows(out, "captures")
    ended = {row["capture"]: row.pop("ended") for row in found}
    assert found == [
        {
            "capture": "acks_modes.pcap",
            "path": str(ACKS),
            "bytes": 233_919,
            "packets": 360,
            "status": "ok",
            "reason": None,
            "warnings": 0,
            "broker_conflicts": 0,
        },
        {
            "capture": "crash.pcap",
            "path": str(crash),
            "bytes": SAMPLE.stat().st_size,
            "packets": None,
            "status": "failed",
            "reason": "ValueError: injected decoder failure",
            "warnings": 0,
            "broker_conflicts": None,
        },
        {
            "capture": "kafka_python.pcap",
            "path": str(PYTHON),
            "bytes": 131_687,
            "packets": 158,
            "status": "ok",
            "reason": None,
            "warnings": 0,
            "broker_conflicts": 0,
        },
        {
            "capture": "notes.pcap",
            "path": str(fleet["notes"]),
            "bytes": 14,
            "packets": None,
            "status": "failed",
            "reason": NOT_A_CAPTURE,
            "warnings": 0,
            "broker_conflicts": None,
        },
    ]
    # The good captures' rows are exactly `kwsniff read`'s; nothing of crash.pcap is left.
    read = read_out(tmp_path, ACKS, PYTHON)
    assert ended == {
        **{r["capture"]: r["ended"] for r in dataset_rows(read, "captures")},
        "crash.pcap": None,
        "notes.pcap": None,
    }
    for table in ROW_TABLES:
        assert dataset_rows(out, table) == dataset_rows(read, table), table


def test_spark_writes_empty_tables_every_reader_takes(
    spark: Any, tmp_path: Path, fleet: dict[str, Path]
) -> None:
    """acks_modes.pcap (whole and cut) has no group and no error: `groups` and `errors` are empty, yet
    written with their schema. The cut file's warning is passed on as `read` prints it; a bad input
    beside them fails alone (exit 0 without --strict), counted apart from the captures decoded."""
    out = tmp_path / "spark"
    inputs = [str(p) for p in (ACKS, fleet["cut"], fleet["notes"])]
    done = run_kwsniff("spark", *inputs, "--out", str(out), "--master", "local[1]", timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = r"2 captures \(1 damaged\) on local\[1\] in [0-9.]+ s, 1 failed"
    assert re.fullmatch(summary, done.stdout.splitlines()[0])
    assert f"{out / 'errors'}/ (0 rows), {out / 'partitions'}/ (176 rows)" in done.stdout
    ours = [line for line in done.stderr.splitlines() if line.startswith("kwsniff:")]
    assert ours == [
        "kwsniff: warning: cut.pcap: last record cut short at offset 233755",
        f"kwsniff: warning: notes.pcap: failed: {NOT_A_CAPTURE}",
    ]
    read = read_out(tmp_path, ACKS)
    assert [(r["capture"], r["status"]) for r in dataset_rows(out, "captures")] == [
        ("acks_modes.pcap", "ok"),
        ("cut.pcap", "damaged"),
        ("notes.pcap", "failed"),
    ]
    for table in ("groups", "errors"):
        arrow = ds.dataset(out / table, partitioning="hive").to_table()
        assert (arrow.num_rows, arrow.schema) == (0, SCHEMAS[table])
        assert ds.dataset(read / table).to_table().schema == SCHEMAS[table]
        found = duckdb.sql(
            f"select * from read_parquet('{out / table}/**/*.parquet', hive_partitioning=true)"
        )
        assert (found.fetchall(), found.columns) == ([], SCHEMAS[table].names)
        df = spark.read.parquet(str(out / table))
        assert (df.count(), df.columns) == (0, SCHEMAS[table].names)
        assert spark.read.parquet(str(read / table)).columns == SCHEMAS[table].names
    # One section on Spark is enough to show it reads them.
    done = report_on_spark(out, ["rebalances"], timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "\nRebalances (0 rows)\n" in done.stdout
