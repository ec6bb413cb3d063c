"""`kwsniff` in a process of its own: `--help` and usage errors import nothing heavy (no pyarrow, numpy,
pandas or pyspark: every sub-command imports those lazily, when it runs), no import hook changes what
other code may import, and a run writes its tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_pcaps" / "quickstart.pcap"
HEAVY = ("numpy", "pandas", "pyarrow", "pyspark")


def _imported(args: list[str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kwsniff", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}


def test_help_imports_neither_numpy_nor_pandas_nor_pyarrow() -> None:
    done, imported = _imported(["--help"])
    assert done.returncode == 0 and "Commands:" in done.stdout, done.stderr[-2000:]
    assert "kwsniff.cli" in imported and "kwsniff.commands.read" in imported
    assert sorted(name for name in imported if name.split(".")[0] in HEAVY) == []


def test_every_sub_command_help_stays_light() -> None:
    for command in ("read", "show", "capture", "spark", "report"):
        done, imported = _imported([command, "--help"])
        assert done.returncode == 0 and f"kwsniff {command} [OPTIONS]" in done.stdout, (command, done.stdout)
        assert sorted(name for name in imported if name.split(".")[0] in HEAVY) == [], command


def test_command_line_writes_tables(tmp_path: Path) -> None:
    out = tmp_path / "tables"
    done, imported = _imported(["read", str(SAMPLE), "--out", str(out), "-q"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pyarrow" in imported and "kwsniff.sinks.parquet" in imported
    rows = {
        table: ds.dataset(out / table).count_rows() for table in ("requests", "connections", "partitions")
    }
    assert rows == {"requests": 75, "connections": 16, "partitions": 97}


def test_no_import_hook_is_installed() -> None:
    code = "import sys, kwsniff.entry, kwsniff.cli; print(len(sys.meta_path)); import numpy; print(numpy.__name__)"
    bare = subprocess.run(
        [sys.executable, "-c", "import sys; print(len(sys.meta_path))"], capture_output=True, text=True
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [bare.stdout.strip(), "numpy"]


def test_report_plots_without_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # PySpark present, matplotlib not (installed by hand, not with the extra): --plots cannot run.
    from click.testing import CliRunner

    from kwsniff.cli import main
    from kwsniff.commands import extras

    real = extras.importlib.util.find_spec
    monkeypatch.setattr(
        extras.importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a)
    )
    done = CliRunner().invoke(main, ["report", str(ROOT / "no-such-tables"), "--plots", "plots"])
    assert (done.exit_code, done.stdout) == (2, "")
    assert done.stderr == (
        "kwsniff: error: kwsniff report --plots needs the spark extra: "
        "pip install 'kwsniff[spark]' (missing: matplotlib)\n"
    )


def test_capture_help_says_its_default_filter_passes_only_broker_ports_and_tunnels() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kwsniff", "capture", "--help"], capture_output=True, text=True, timeout=60
    )
    text = " ".join(done.stdout.split())
    assert "The default --filter passes only these ports." in text
    assert (
        "[default: 'tcp port P or ...' for each --broker-port, plus tunnel carriers (the tunnel UDP "
        "ports, GRE, IP in IP, IP fragments, MPLS), so no other traffic is seen;" in text
    )
    assert "Other ports are detected" not in text
