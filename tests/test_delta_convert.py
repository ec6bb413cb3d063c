"""`kwsniff convert OUT` (issue 47, goal 7; docs/delta.md): a directory dataset of an earlier kwsniff
becomes Delta tables in place, in one step, the same files and the same answers; a dataset that cannot
be converted is left exactly as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as pads
import pytest
from deltalake import DeltaTable

from kwsniff.tables.names import SUMMARIES

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "tests/data/captures").glob("*.pcap"))
TABLES = ("requests", "connections", "errors", "partitions", "groups", "captures")
TIMEOUT_S = 300


def kwsniff_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """{path under root: (inode, size)} of every file: what a failed conversion must leave alone."""
    out = {}
    for base, _, names in os.walk(root):
        for n in names:
            p = Path(base) / n
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_ino, st.st_size)
    return out


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    out = tmp_path / "tables"
    done = kwsniff_cli("read", "-q", *map(str, CAPTURES), "--out", str(out), "--summaries", "always")
    assert done.returncode == 0, done.stderr
    return out


def test_convert_makes_each_table_one_delta_commit_of_the_same_files_and_answers(dataset: Path) -> None:
    before = kwsniff_cli("report", str(dataset))
    rows = {t: pads.dataset(str(dataset / t), format="parquet").count_rows() for t in TABLES}
    inodes = {st[0] for p, st in tree(dataset).items() if p.endswith(".parquet")}
    done = kwsniff_cli("convert", str(dataset), "--host", "old-host")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        f"{dataset}: Delta tables now: requests ({len(CAPTURES)} files, {rows['requests']:,} rows)"
    )
    for table in TABLES:
        delta = DeltaTable(str(dataset / table))
        assert delta.version() == 1  # created, then every file in one commit
        data = delta.to_pyarrow_dataset().to_table(columns=["capture", "host"])
        assert data.num_rows == rows[table], table
        assert set(data.column("host").to_pylist()) == {"old-host"}
    # The same files (hard links: the same inodes), moved under date=/host=, no file left outside the log.
    after = tree(dataset)
    assert {st[0] for p, st in after.items() if p.endswith(".parquet")} == inodes
    assert all("/date=" in p or "/_delta_log/" in p for p in after if not p.startswith("summary_")), after
    assert not [p for p in dataset.parent.iterdir() if p.name != dataset.name]  # no staging left
    again = kwsniff_cli("report", str(dataset))
    assert again.returncode == before.returncode == 0
    assert again.stdout == before.stdout
    refused = kwsniff_cli("convert", str(dataset))
    assert (refused.returncode, refused.stdout) == (1, "")
    logged = [*TABLES, *(s for s in SUMMARIES if (dataset / s).is_dir())]
    assert len(logged) == len(TABLES) + len(SUMMARIES)  # --summaries always wrote every part
    assert (
        refused.stderr
        == f"kwsniff: error: {dataset}: {', '.join(logged)} are Delta tables already; nothing to convert\n"
    )


def test_a_dataset_that_cannot_be_converted_is_left_as_it_was(dataset: Path) -> None:
    (dataset / "partitions" / "zz-not-parquet.parquet").write_bytes(b"not a parquet file")
    before = tree(dataset)
    done = kwsniff_cli("convert", str(dataset))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"kwsniff: error: {dataset}: not converted (")
    assert done.stderr.endswith("the dataset is as it was\n") and done.stderr.count("\n") == 1
    assert tree(dataset) == before
    assert not [p for p in dataset.parent.iterdir() if p.name != dataset.name]


def test_convert_refuses_what_is_not_a_dataset(tmp_path: Path) -> None:
    missing = kwsniff_cli("convert", str(tmp_path / "none"))
    assert (missing.returncode, missing.stderr) == (
        1,
        f"kwsniff: error: {tmp_path / 'none'}: not a directory of kwsniff tables\n",
    )
    (tmp_path / "empty" / "requests").mkdir(parents=True)
    empty = kwsniff_cli("convert", str(tmp_path / "empty"))
    assert (empty.returncode, empty.stderr) == (
        1,
        f"kwsniff: error: {tmp_path / 'empty'}: no Parquet files of kwsniff tables to convert\n",
    )
