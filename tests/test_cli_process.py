"""`kwsniff` in a process of its own: `--help` and usage errors import nothing heavy (no pyarrow, numpy,
pandas or pyspark: every sub-command imports those lazily, when it runs), no import hook changes what
other code may import, and a run writes its tables."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from realparts import run_python

from kwsniff.tables.names import SUMMARIES

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
    assert "kwsniff.cli" in imported
    assert sorted(name for name in imported if name.split(".")[0] in HEAVY) == []
    # The sub-commands (and the decoder under them) load only when one runs.
    assert (
        sorted(name for name in imported if name.startswith(("kwsniff.commands", "kwsniff.pipeline"))) == []
    )
    assert [line.split()[0] for line in done.stdout.split("Commands:")[1].splitlines() if line] == [
        "capture",
        "compact",
        "convert",
        "read",
        "report",
        "retain",
        "show",
        "spark",
    ]


def test_help_lists_each_command_with_the_start_of_its_own_help() -> None:
    import click

    from kwsniff.cli import COMMANDS, main

    context = click.Context(main)
    for name, (_, line) in COMMANDS.items():
        command = main.get_command(context, name)
        assert command is not None and command.help is not None
        assert " ".join(command.help.split()).startswith(line.removesuffix("...")), name


def test_every_sub_command_help_stays_light() -> None:
    for command in ("read", "show", "capture", "spark", "report", "compact", "retain"):
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
        "kwsniff: error: kwsniff report --plots needs the report extra: "
        "pip install 'kwsniff[report]' (missing: matplotlib)\n"
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


# Prints, when the process ends, which of these packages it loaded (sys.modules: an attempt refused
# by kwsniff's import guards is not a load) and whether the meta path is as kwsniff found it.
_WATCH = (
    "import atexit, sys; n = len(sys.meta_path); atexit.register(lambda: print('LOADED', "
    "sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'pandas', 'crc32c', 'cryptography'}), "
    "len(sys.meta_path) == n, file=sys.stderr))"
)


def _read_in_process(prelude: str, args: list[str]) -> tuple[list[str], bool]:
    code = f"{prelude}; {_WATCH}; sys.argv = ['kwsniff', 'read', *{args!r}]; from kwsniff.entry import run; run()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in done.stderr.splitlines() if x.startswith("LOADED "))
    loaded, hooks_restored = line[len("LOADED ") :].rsplit(" ", 1)
    return eval(loaded), hooks_restored == "True"  # a list literal printed above


def _table_bytes(out: Path) -> dict[str, bytes]:
    # `captures` holds the run's own timings; every other table is a pure function of the input.
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.glob("*/*.parquet"))
        if p.parent.name != "captures"
    }


def test_read_loads_neither_numpy_nor_pandas_and_writes_the_same_bytes(tmp_path: Path) -> None:
    """`kwsniff read` in its own process writes Parquet with pyarrow imported without numpy (and so
    never imports pandas); the files are the very bytes pyarrow writes with numpy and pandas loaded."""
    captures = [str(p) for p in sorted((ROOT / "tests" / "data" / "captures").glob("*.pcap"))]
    alone, with_numpy = tmp_path / "alone", tmp_path / "with-numpy"
    loaded, restored = _read_in_process(
        "pass", [*captures, "--out", str(alone), "-q", "--summaries", "always"]
    )
    # Record batches are checked by the compiled walker's own CRC32C (kwsniff/rows/_partfacts.c, on
    # x86-64's crc32 instruction), which the Python record readers take too: the crc32c package is
    # loaded only where there is none.
    package = [] if platform.machine() in ("x86_64", "AMD64") else ["crc32c"]
    assert loaded == package and restored
    loaded, restored = _read_in_process(
        "import numpy, pandas", [*captures, "--out", str(with_numpy), "-q", "--summaries", "always"]
    )
    assert loaded == sorted([*package, "numpy", "pandas"]) and restored
    written = _table_bytes(alone)
    # requests, connections, errors, partitions, groups, and the report's summaries
    assert len(written) == (5 + len(SUMMARIES)) * len(captures)
    assert written == _table_bytes(with_numpy)


def test_read_of_one_packet_loads_no_record_or_tls_library(tmp_path: Path) -> None:
    """crc32c (whose import scans every installed distribution) and cryptography load only when a
    run meets a record batch or a TLS connection."""
    one = tmp_path / "one.pcap"
    data = (ROOT / "tests" / "data" / "captures" / "kafka_python.pcap").read_bytes()
    one.write_bytes(data[: 24 + 16 + int.from_bytes(data[32:36], "little")])  # header, first packet
    loaded, restored = _read_in_process("pass", [str(one), "--out", str(tmp_path / "t"), "-q"])
    assert loaded == [] and restored
    assert ds.dataset(tmp_path / "t" / "connections").count_rows() == 1


def test_arrow_without_pandas_leaves_pandas_conversions_working() -> None:
    """With numpy loaded, pyarrow's first conversion would import pandas; arrow_without_pandas answers
    "no pandas" for that question only: to_pandas and from_pandas still work afterwards."""
    code = (
        "import sys, numpy, pyarrow as pa; from kwsniff.sinks import arrow_without_pandas; "
        "arrow_without_pandas(); pa.array([1, None], pa.int64()); print('pandas' in sys.modules); "
        "t = pa.table({'a': [1, 2]}); df = t.to_pandas(); print(list(df['a']), "
        "pa.Table.from_pandas(df).column('a').to_pylist())"
    )
    assert run_python(code) == ["False", "[1, 2] [1, 2]"]


# Records each mallopt(3) call the process makes through ctypes (the real one is made after).
_MALLOPT_WATCH = (
    "import ctypes, sys; real = ctypes.CDLL; calls = []\n"
    "class Libc:\n"
    "    def __init__(self, name): self.lib = real(name)\n"
    "    def mallopt(self, param, value): calls.append((param, value)); return self.lib.mallopt(param, value)\n"
    "ctypes.CDLL = Libc\n"
    "import atexit; atexit.register(lambda: print('MALLOPT', calls, file=sys.stderr))\n"
)


def _mallopt_calls(args: list[str]) -> list[tuple[int, int]]:
    code = f"{_MALLOPT_WATCH}sys.argv = ['kwsniff', *{args!r}]\nfrom kwsniff.entry import run\nrun()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in done.stderr.splitlines() if x.startswith("MALLOPT "))
    return eval(line[len("MALLOPT ") :])  # a list literal printed above


def test_read_lets_malloc_reuse_freed_blocks_and_help_does_not(tmp_path: Path) -> None:
    """`read` and `capture` fix glibc's mmap threshold (M_MMAP_THRESHOLD, -3) at 32 MiB and its trim
    threshold (M_TRIM_THRESHOLD, -1) at 64 MiB before anything is read; `--help` leaves malloc be."""
    one = tmp_path / "one.pcap"
    data = (ROOT / "tests" / "data" / "captures" / "kafka_python.pcap").read_bytes()
    one.write_bytes(data[: 24 + 16 + int.from_bytes(data[32:36], "little")])
    assert _mallopt_calls(["read", str(one), "--out", str(tmp_path / "t"), "-q"]) == [
        (-3, 32 << 20),
        (-1, 64 << 20),
    ]
    assert (tmp_path / "t" / "requests").is_dir()
    assert _mallopt_calls(["read", "--help"]) == []
    assert _mallopt_calls(["--help"]) == []
