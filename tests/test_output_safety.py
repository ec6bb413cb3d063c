"""`kwsniff read --out`: no input overwrites another, no run silently adds to or mixes with an old
dataset, no interrupted run leaves a partial Parquet file, and a bad --out fails before decoding."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from kwsniff.cli import main
from kwsniff.commands import read as read_command
from kwsniff.sinks import ParquetSink, output_name
from kwsniff.tables import DEFAULT_TABLES

CAPTURES = Path(__file__).parent / "data" / "captures"
ACKS = CAPTURES / "acks_modes.pcap"  # 103 requests, 10 connections
KP = CAPTURES / "kafka_python.pcap"  # 46 requests


def kwsniff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", *args], capture_output=True, text=True, timeout=120
    )


def request_count(out: Path) -> int:
    return ds.dataset(out / "requests").count_rows()


def files(out: Path, table: str = "requests") -> list[str]:
    return sorted(p.name for p in (out / table).iterdir())


def test_inputs_with_the_same_file_name_get_their_own_files(tmp_path: Path) -> None:
    for sub, src in (("a", ACKS), ("b", KP)):
        (tmp_path / sub).mkdir()
        shutil.copy(src, tmp_path / sub / "cap.pcap")
    out = tmp_path / "t"
    proc = kwsniff("read", str(tmp_path / "a" / "cap.pcap"), str(tmp_path / "b" / "cap.pcap"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert request_count(out) == 103 + 46
    names = files(out)
    assert len(names) == 2 and names[0] != names[1]
    assert all(n.startswith("cap.pcap-") and n.endswith(".parquet") for n in names)
    for table in DEFAULT_TABLES:
        assert len(files(out, table)) == 2
    # Same-named inputs of one run are told apart in the `capture` column by a hash of their path
    # (the one in their file names), so (capture, conn_id) stays unique: 103 requests from
    # a/cap.pcap, 46 from b/cap.pcap.
    captures = ds.dataset(out / "requests").to_table().column("capture").to_pylist()
    a = "cap.pcap-" + output_name(tmp_path / "a" / "cap.pcap").rsplit("-", 1)[1]
    b = "cap.pcap-" + output_name(tmp_path / "b" / "cap.pcap").rsplit("-", 1)[1]
    assert {c: captures.count(c) for c in set(captures)} == {a: 103, b: 46}
    conns = ds.dataset(out / "connections").to_table(columns=["capture", "conn_id"]).to_pylist()
    assert len({(r["capture"], r["conn_id"]) for r in conns}) == len(conns) == 10 + 7


def test_a_single_input_keeps_its_file_name_as_capture(tmp_path: Path) -> None:
    out = tmp_path / "t"
    proc = kwsniff("read", str(ACKS), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert set(ds.dataset(out / "requests").to_table().column("capture").to_pylist()) == {"acks_modes.pcap"}


def test_output_name_is_the_file_name_and_a_hash_of_the_resolved_path(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / "x y.pcap", tmp_path / "b" / "x y.pcap"
    assert output_name(a) == output_name(tmp_path / "a" / ".." / "a" / "x y.pcap")
    assert output_name(a) != output_name(b)
    assert output_name(a).startswith("x_y.pcap-") and len(output_name(a)) == len("x_y.pcap-") + 8


def test_an_existing_dataset_is_refused_before_decoding_and_left_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "t"
    assert kwsniff("read", str(ACKS), "-o", str(out)).returncode == 0
    before = {t: files(out, t) for t in DEFAULT_TABLES}
    proc = kwsniff("read", str(KP), "-o", str(out))
    assert proc.returncode == 1
    assert proc.stdout == ""  # nothing was decoded: no summary
    assert proc.stderr == (
        f"kwsniff: error: --out {out}: already holds a dataset ({len(DEFAULT_TABLES)} files in "
        f"{', '.join(DEFAULT_TABLES)}); use --overwrite to replace it or --append to add to it\n"
    )
    assert {t: files(out, t) for t in DEFAULT_TABLES} == before
    assert request_count(out) == 103


def test_overwrite_replaces_the_dataset(tmp_path: Path) -> None:
    out = tmp_path / "t"
    assert kwsniff("read", str(ACKS), "-o", str(out)).returncode == 0
    (out / "requests" / ".stale.parquet.tmp").write_bytes(b"left by a killed run")
    proc = kwsniff("read", str(KP), "-o", str(out), "--overwrite")
    assert proc.returncode == 0, proc.stderr
    assert request_count(out) == 46
    assert files(out) == [output_name(KP) + ".parquet"]


def test_append_adds_and_rereading_an_input_replaces_its_own_files(tmp_path: Path) -> None:
    out = tmp_path / "t"
    assert kwsniff("read", str(ACKS), "-o", str(out)).returncode == 0
    assert kwsniff("read", str(KP), "-o", str(out), "--append").returncode == 0
    assert request_count(out) == 103 + 46
    assert kwsniff("read", str(KP), "-o", str(out), "--append").returncode == 0
    assert request_count(out) == 103 + 46
    assert files(out) == sorted([output_name(ACKS) + ".parquet", output_name(KP) + ".parquet"])


def test_overwrite_and_append_together_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["read", str(KP), "-o", str(tmp_path / "t"), "--append", "--overwrite"])
    assert result.exit_code == 2
    assert "--overwrite and --append exclude each other" in result.output
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("kind", ["file", "below_a_file", "uncreatable"])
def test_a_bad_out_is_one_line_before_decoding(tmp_path: Path, kind: str) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    out = {"file": a_file, "below_a_file": a_file / "tables", "uncreatable": Path("/proc/kwsniff-out")}[kind]
    proc = kwsniff("read", str(ACKS), "-o", str(out))
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith(f"kwsniff: error: --out {out}: ") and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr
    expected = {
        "file": "exists and is not a directory",
        "below_a_file": "Not a directory",
        "uncreatable": "No such file or directory",
    }[kind]
    assert proc.stderr.rstrip("\n").endswith(expected)


def test_ctrl_c_during_a_read_leaves_only_the_complete_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "t"
    assert CliRunner().invoke(main, ["read", str(ACKS), "-o", str(out)]).exit_code == 0
    complete = {t: files(out, t) for t in DEFAULT_TABLES}
    real_run = read_command.run_capture

    def interrupted(path: Any, sink: ParquetSink, *args: Any, **kwargs: Any) -> Any:
        real_run(path, sink, *args, **kwargs)
        for table in sink.tables:  # some batches are on disk, as in a long read
            sink._flush(table)
        assert sink.temp_path("requests").stat().st_size > 0
        raise KeyboardInterrupt

    monkeypatch.setattr(read_command, "run_capture", interrupted)
    result = CliRunner().invoke(main, ["read", str(KP), "-o", str(out), "--append"])
    assert result.exit_code == 130 and "Aborted!" not in result.output  # 128 + SIGINT (docs/datasets.md)
    assert {t: files(out, t) for t in DEFAULT_TABLES} == complete  # no temporary file either
    assert request_count(out) == 103


def test_a_killed_writer_leaves_a_hidden_temporary_file_readers_skip(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path, "done")
    sink.add("requests", {"capture": "done", "conn_id": 1})
    sink.close()
    killed = ParquetSink(tmp_path, "killed")
    for n in range(3):
        killed.add("requests", {"capture": "killed", "conn_id": n})
    killed._flush("requests")  # on disk, never closed: what SIGKILL leaves
    assert sorted(p.name for p in (tmp_path / "requests").iterdir()) == [
        ".killed.parquet.tmp",
        "done.parquet",
    ]
    table = ds.dataset(tmp_path / "requests").to_table()
    assert table.column("capture").to_pylist() == ["done"]


def test_sink_abort_removes_its_files_and_close_renames_them(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), ParquetSink(tmp_path, "x") as sink:
        sink.add("requests", {"capture": "x", "conn_id": 1})
        sink._flush("requests")
        raise RuntimeError("disk full")
    assert sorted(p.name for p in (tmp_path / "requests").iterdir()) == []
    with ParquetSink(tmp_path, "x") as sink:
        sink.add("requests", {"capture": "x", "conn_id": 1})
    assert sink.paths["requests"] == tmp_path / "requests" / "x.parquet"
    assert sink.counts["requests"] == 1
    assert sorted(p.name for p in (tmp_path / "connections").iterdir()) == ["x.parquet"]


def test_an_out_through_a_symbolic_link_to_nothing_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    """Following the link made its target and the target's parents, wherever it pointed (issue 45)."""
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "elsewhere" / "deep" / "x")
    result = CliRunner().invoke(main, ["read", str(KP), "-o", str(link)], prog_name="kwsniff")
    assert result.exit_code == 1
    assert result.stderr == (
        f"kwsniff: error: --out {link}: {link} is a symbolic link to {tmp_path}/elsewhere/deep/x,"
        " which does not exist\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
