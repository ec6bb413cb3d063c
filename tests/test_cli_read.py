"""`kwsniff read` end to end: Parquet tables, the summary, and bad input."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
from click.testing import CliRunner

from kwsniff.cli import main

CAPTURES = Path(__file__).parent / "data" / "captures"
SAMPLE = Path(__file__).parent.parent / "sample_pcaps" / "quickstart.pcap"


def kwsniff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", *args], capture_output=True, text=True, timeout=120
    )


def test_read_writes_every_table_as_a_parquet_dataset(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["read", str(CAPTURES / "acks_modes.pcap"), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    requests = ds.dataset(tmp_path / "requests").to_table()
    connections = ds.dataset(tmp_path / "connections").to_table()
    assert requests.num_rows == 103
    assert connections.num_rows == 10
    assert set(requests.column("status").to_pylist()) == {"ok"}
    assert str(requests.schema.field("ts_request").type) == "timestamp[us, tz=UTC]"
    assert sorted(set(requests.column("api_name").to_pylist())) == [
        "ApiVersions",
        "CreateTopics",
        "GetTelemetrySubscriptions",
        "InitProducerId",
        "Metadata",
        "Produce",
    ]
    assert (
        "requests 103: ok 103, no_response_expected 0, unanswered 0, response_cut 0, decode_error 0"
        in result.output
    )
    assert "connections 10 (Kafka 10)   frames 103 to broker, 103 to client" in result.output


def test_several_captures_in_one_run_share_the_datasets(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["read", str(CAPTURES / "acks_modes.pcap"), str(CAPTURES / "kafka_python.pcap"), "-o", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    table = ds.dataset(tmp_path / "requests").to_table()
    counts = {
        c: table.column("capture").to_pylist().count(c) for c in ("acks_modes.pcap", "kafka_python.pcap")
    }
    assert counts == {"acks_modes.pcap": 103, "kafka_python.pcap": 46}


def test_gzip_compressed_capture_reads_like_the_original(tmp_path: Path) -> None:
    gz = tmp_path / "c.pcap.gz"
    with open(CAPTURES / "kafka_python.pcap", "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    result = CliRunner().invoke(main, ["read", str(gz), "-o", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    assert ds.dataset(tmp_path / "t" / "requests").count_rows() == 46


def test_a_file_that_is_not_a_capture_is_one_line_and_exit_1(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.txt"
    bogus.write_text("hello, this is not a pcap\n")
    proc = kwsniff("read", str(bogus), "--out", str(tmp_path / "t"))
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("kwsniff: error: ") and "notes.txt" in proc.stderr
    assert not (tmp_path / "t").exists()


def test_missing_and_empty_files_are_clear_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    for path in (empty, tmp_path / "missing.pcap"):
        proc = kwsniff("read", str(path), "--out", str(tmp_path / "t"))
        assert proc.returncode == 1
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
        assert path.name in proc.stderr


def test_a_capture_cut_mid_record_gives_tables_a_warning_and_exit_0(tmp_path: Path) -> None:
    data = (CAPTURES / "acks_modes.pcap").read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[: len(data) - 100])
    proc = kwsniff("read", str(cut), "--out", str(tmp_path / "t"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "kwsniff: warning: cut.pcap: last record cut short at offset 233755\n"
    quiet = kwsniff("read", str(cut), "--out", str(tmp_path / "q"), "-q")
    assert (quiet.returncode, quiet.stdout) == (0, "")
    assert quiet.stderr == proc.stderr  # -q silences the summary, never a warning
    assert ds.dataset(tmp_path / "t" / "connections").count_rows() == 10


def test_sample_capture_decodes_without_decode_errors(tmp_path: Path) -> None:
    proc = kwsniff("read", str(SAMPLE), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    requests = ds.dataset(tmp_path / "requests").to_table()
    assert requests.num_rows == 75
    assert requests.column("status").to_pylist().count("ok") == 75
    # librdkafka's admin client sends 3 bytes after two Metadata v12 requests; a broker reads the
    # message and ignores them, so kwsniff decodes the message and notes the extra bytes.
    notes = [r for r in requests.to_pylist() if r["reason"]]
    assert [(r["api_name"], r["reason"]) for r in notes] == [
        ("Metadata", "request: 3 trailing bytes at offset 4"),
    ] * 2
    assert "notes: request: 3 trailing bytes (2)" in proc.stdout
