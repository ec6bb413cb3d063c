"""Options declared once (issue 46, goal 2): every field of kwsniff.core.options.ReadOptions is an
option of `kwsniff read` and a keyword of `kwsniff.read`, and for each the command and the API give
the same tables for a good value and the same message for a bad one. The cases are keyed by field,
and the first test fails when a field has none: a new option cannot be forgotten."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import kwsniff
from kwsniff.cli import main
from kwsniff.core.options import WRITE_OPTIONS, ReadOptions, ReportOptions, specs

CAPTURE = Path(__file__).parent / "data" / "captures" / "kafka_python.pcap"  # 46 requests on port 19103
# Columns of `captures` that say when and how long the run took: never equal between two runs.
WALL_CLOCK = {"started", "duration_ms"}


def files(tmp: Path) -> dict[str, Path]:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "keys.txt").write_text("# no secrets\n")
    (tmp / "map.txt").write_text("127.0.0.1:19103 7\n")
    (tmp / "bad-map.txt").write_text("not a line\n")
    return {"keys": tmp / "keys.txt", "map": tmp / "map.txt", "bad-map": tmp / "bad-map.txt"}


# field: (a good value, a bad value or None for a flag, which takes no value on the command line).
# Values are given as the command line gives them (text), to both doors.
CASES: dict[str, tuple[Any, Any]] = {
    "broker_port": ("19103", "70000"),
    "keylog": ("keys", "no-such-keylog.txt"),
    "fragment_memory": ("1MiB", "0"),
    "tunnel_port": ("vxlan=4790", "gre=1"),
    "vxlan_port": ("4790", "0"),
    "geneve_port": ("6082", "http"),
    "memory_limit": ("512MiB", "lots"),
    "broker_map": ("map", "bad-map"),
    "no_auto_detect": (True, None),
    "max_frame_size": ("1MiB", "0"),
    "records": (True, None),
    "record_payloads": (True, None),
    "max_decompressed": ("1MiB", "-5"),
    "idle_timeout": ("10", "nan"),
    "strict": (True, None),
    "continuous": (True, None),
    "summaries": ("always", "sometimes"),
}
API_FIELDS = [f.name for f, _ in specs(ReadOptions) if f.name not in WRITE_OPTIONS]


def test_every_option_of_read_has_a_case_here() -> None:
    assert sorted(CASES) == sorted(API_FIELDS)
    # The output's options are Tables.write's in the API, and no keyword of read().
    assert set(WRITE_OPTIONS) == {f.name for f, _ in specs(ReadOptions)} - set(API_FIELDS)
    for name in WRITE_OPTIONS:
        with pytest.raises(kwsniff.UsageError, match=f"no option {name} "):
            kwsniff.read(CAPTURE, **{name: True})


def as_given(value: Any, paths: dict[str, Path], tmp: Path) -> Any:
    if isinstance(value, str) and value in paths:
        return str(paths[value])
    if isinstance(value, str) and value.endswith(".txt"):
        return str(tmp / value)
    return value


def command_line(name: str, value: Any) -> list[str]:
    spec = dict((f.name, s) for f, s in specs(ReadOptions))[name]
    return [spec.flag] if value is True else [spec.flag, str(value)]


def rows(table: pa.Table) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k not in WALL_CLOCK} for row in table.to_pylist()]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_good_value_gives_the_same_tables_from_the_command_and_the_api(tmp_path: Path, name: str) -> None:
    paths = files(tmp_path)
    value = as_given(CASES[name][0], paths, tmp_path)
    out = tmp_path / "out"
    done = CliRunner().invoke(main, ["read", str(CAPTURE), "-o", str(out), "-q", *command_line(name, value)])
    try:
        tables = kwsniff.read(CAPTURE, **{name: value})
    except kwsniff.StrictError as exc:  # --strict: exit 3 with the tables written, StrictError with them
        assert done.exit_code == 3 and isinstance(exc.tables, kwsniff.Tables)
        tables = exc.tables
    else:
        assert done.exit_code == 0, done.output
    assert sorted(tables) == sorted(p.name for p in out.iterdir() if not p.name.startswith("summary_"))
    for table in tables:
        assert rows(pq.read_table(out / table)) == rows(tables[table]), table
    assert tables["requests"].num_rows == (0 if name == "no_auto_detect" else 46)


@pytest.mark.parametrize("name", sorted(n for n, (_, bad) in CASES.items() if bad is not None))
def test_a_bad_value_gives_the_same_message_from_the_command_and_the_api(tmp_path: Path, name: str) -> None:
    paths = files(tmp_path)
    value = as_given(CASES[name][1], paths, tmp_path)
    done = CliRunner().invoke(
        main,
        ["read", str(CAPTURE), "-o", str(tmp_path / "out"), *command_line(name, value)],
        prog_name="kwsniff",
    )
    with pytest.raises(kwsniff.KwsniffError) as caught:
        kwsniff.read(CAPTURE, **{name: value})
    said = done.stderr.strip().removeprefix("kwsniff: error: ").split(" (see 'kwsniff read --help')")[0]
    assert done.exit_code == caught.value.exit_code
    assert said and said in str(caught.value)
    if caught.value.exit_code == 2:  # the option refused the value: both name the option the same way
        # The command drops a final period before its " (see 'kwsniff read --help')" (kwsniff.cli).
        assert str(caught.value).rstrip(".") == f"read: {name}={value!r}: {said}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", [f.name for f, _ in specs(ReportOptions)])
def test_report_options_refuse_the_same_values_with_the_same_words(tmp_path: Path, name: str) -> None:
    spec = dict((f.name, s) for f, s in specs(ReportOptions))[name]
    done = CliRunner().invoke(main, ["report", str(tmp_path), spec.flag, "0"], prog_name="kwsniff")
    with pytest.raises(kwsniff.UsageError) as caught:
        kwsniff.report(tmp_path, **{name: "0"})
    said = done.stderr.strip().removeprefix("kwsniff: error: ").split(" (see 'kwsniff report --help')")[0]
    assert done.exit_code == 2
    assert str(caught.value).rstrip(".") == f"report: {name}='0': {said}"


def test_every_field_says_its_default_unit_and_help() -> None:
    for kind in (ReadOptions, ReportOptions):
        for f, spec in specs(kind):
            assert spec.help and spec.flag == "--" + f.name.replace("_", "-")
            assert spec.is_flag or spec.unit or spec.check.__class__.__name__ == "Choice", f.name
            assert f.default is not dataclasses.MISSING


def test_the_api_runs_without_click(tmp_path: Path) -> None:
    """The API's keywords are checked by the options' fields, not by a click.Context around the
    command (issue 46): reading, writing and reporting never import click."""
    script = (
        "import sys, kwsniff\n"
        f"tables = kwsniff.read({str(CAPTURE)!r}, memory_limit='512MiB', broker_port=19103)\n"
        f"kwsniff.report(tables.write({str(tmp_path / 'out')!r}), sections=['latency'])\n"
        "try:\n"
        "    kwsniff.read('x.pcap', max_frame_size='0')\n"
        "except kwsniff.UsageError as exc:\n"
        "    print(exc)\n"
        "print(sorted(m for m in sys.modules if m == 'click' or m.startswith(('click.', 'kwsniff.commands'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.stdout.splitlines() == [
        "read: max_frame_size='0': Invalid value for '--max-frame-size': '0' must be more than 0 bytes",
        "[]",
    ], done.stderr
