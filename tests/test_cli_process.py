"""`kwsniff` in a process of its own refuses the pyarrow extras it never uses (numpy, pandas) and
writes the same tables: the import hook of kwsniff.entry is what `python -m kwsniff` and the console
script run, while the tests that call kwsniff.cli.main in-process keep numpy and pandas."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_pcaps" / "quickstart.pcap"


def test_command_line_writes_tables_without_numpy_or_pandas(tmp_path: Path) -> None:
    out = tmp_path / "tables"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kwsniff", "read", str(SAMPLE), "--out", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "pyarrow" in imported and "kwsniff.sinks.parquet" in imported
    # -X importtime lists a refused import too, but a real numpy or pandas import brings submodules.
    assert not {name for name in imported if name.startswith(("numpy.", "pandas."))}
    rows = {
        table: ds.dataset(out / table).count_rows() for table in ("requests", "connections", "partitions")
    }
    assert rows == {"requests": 75, "connections": 16, "partitions": 97}


def test_library_users_keep_numpy() -> None:
    code = "import kwsniff.cli, pyarrow, numpy; print(numpy.__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "numpy", done.stderr
