"""The Python API (docs/python-api.md): `kwsniff.read` gives the tables `kwsniff read` writes, byte
for byte; `Tables.write` commits a dataset like `read --out`; `kwsniff.report` answers what `kwsniff
report` answers; errors are exceptions of one family, and nothing prints.

The oracle of "the same tables" is the command itself run in a subprocess (this API's promise is to
be that command in-process); the values of those tables are held against tshark and the clients'
truth files elsewhere (docs/test-oracles.md). Counts here are checked against tshark's view too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dpkt
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import kwsniff

DATA = Path(__file__).parent / "data" / "captures"
CAPTURES = sorted(DATA.glob("*.pcap"))
QUICKSTART = Path(__file__).parent.parent / "sample_pcaps" / "quickstart.pcap"
# Wall-clock columns of the `captures` table: when this run decoded the input, and for how long.
WALL_CLOCK = ("started", "duration_ms")


def run_kwsniff(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", *map(str, args)], capture_output=True, text=True, timeout=300
    )


def dataset_files(out: Path) -> list[Path]:
    return sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())


@pytest.mark.parametrize("options", [{}, {"record_payloads": True}], ids=["tables", "record_payloads"])
def test_api_tables_are_the_commands_parquet_byte_for_byte(tmp_path: Path, options: dict) -> None:
    inputs = [*CAPTURES, QUICKSTART]
    flags = ["--record-payloads"] if options else []
    done = run_kwsniff("read", *inputs, "--out", tmp_path / "command", "-q", "--summaries", "always", *flags)
    assert done.returncode == 0, done.stderr
    tables = kwsniff.read(inputs, **options)
    assert tables.write(tmp_path / "api", summaries="always") == tmp_path / "api"

    command, api = tmp_path / "command", tmp_path / "api"
    files = dataset_files(command)
    assert dataset_files(api) == files
    tables_written = {f.parts[0] for f in files}
    expected = {"requests", "connections", "errors", "partitions", "groups", "captures"}
    assert expected | ({"records"} if options else set()) <= tables_written
    assert any(name.startswith("summary_") for name in tables_written)  # the report's summaries too
    for f in files:
        if f.parts[0] != "captures":  # its rows say when each run decoded the input
            assert (api / f).read_bytes() == (command / f).read_bytes(), f
    # The same tables in memory as in the command's files, input by input in input order.
    from kwsniff.sinks import output_name

    for table in tables:
        files_in_order = [command / table / f"{output_name(p)}.parquet" for p in inputs]
        expected_table = pa.concat_tables([pq.read_table(p) for p in files_in_order])
        got = tables[table]
        if table == "captures":
            expected_table, got = expected_table.drop_columns(WALL_CLOCK), got.drop_columns(WALL_CLOCK)
        assert got.equals(expected_table), table
    # Counted independently: every request tshark saw in each capture, and the packets dpkt reads.
    by_capture = tables.requests.group_by("capture").aggregate([("correlation_id", "count")]).to_pylist()
    counts = {r["capture"]: r["correlation_id_count"] for r in by_capture}
    for path in inputs:
        tshark = json.loads(Path(f"{path}.tshark.json").read_text())
        assert counts[path.name] == tshark["summary"]["total_requests"]
        with path.open("rb") as f:
            assert tables.summary[path.name]["packets"] == sum(1 for _ in dpkt.pcap.Reader(f))


def test_attribute_and_item_give_the_same_table_and_to_pandas_works() -> None:
    tables = kwsniff.read(DATA / "acks_modes.pcap")
    assert tables.requests is tables["requests"]
    assert list(tables) == ["requests", "connections", "errors", "partitions", "groups", "captures"]
    frame = tables.partitions.to_pandas()
    tshark = json.loads((DATA / "acks_modes.pcap.tshark.json").read_text())
    assert len(tables.requests.to_pandas()) == tshark["summary"]["total_requests"]
    assert list(frame.columns) == tables.partitions.column_names
    with pytest.raises(KeyError, match="no table 'records'"):
        tables["records"]  # opt-in: records=True or record_payloads=True


def test_summary_has_the_numbers_read_prints(tmp_path: Path) -> None:
    capture = DATA / "produce_codecs.pcap"
    done = run_kwsniff("read", capture, "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    summary = kwsniff.read(capture).summary["produce_codecs.pcap"]
    printed = done.stdout.splitlines()
    # The first line has the decoding time; the last names the command's --out.
    assert summary["lines"][1:] == printed[1:-1]
    assert printed[0].startswith(f"produce_codecs.pcap: {summary['packets']:,} packets, 1.4 MB in ")
    tshark = json.loads(Path(f"{capture}.tshark.json").read_text())["summary"]
    assert summary["requests"] == tshark["total_requests"] == 111
    assert summary["status"]["ok"] == tshark["paired"] == 110
    assert summary["status"]["unanswered"] == tshark["unanswered"] == 1
    assert summary["orphan_responses"] == tshark["orphan_responses"] == 0
    assert summary["packets"] == 407  # truth.json: tcpdump captured 407 packets
    assert summary["strict"] == []


def test_write_refuses_a_dataset_unless_overwrite(tmp_path: Path) -> None:
    tables = kwsniff.read(DATA / "acks_modes.pcap")
    tables.write(tmp_path / "out")
    with pytest.raises(kwsniff.OutputError, match="already holds a dataset"):
        tables.write(tmp_path / "out")
    other = kwsniff.read(DATA / "legacy_msgset.pcap")
    other.write(tmp_path / "out", overwrite=True)
    names = sorted(p.name for p in (tmp_path / "out" / "requests").iterdir())
    assert len(names) == 1 and names[0].startswith("legacy_msgset.pcap-")


def test_errors_are_one_family_never_system_exit_and_nothing_prints(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    not_a_capture = tmp_path / "notes.txt"
    not_a_capture.write_text("hello\n")
    cases = [
        (
            lambda: kwsniff.read(tmp_path / "missing.pcap"),
            kwsniff.InputError,
            1,
            "missing.pcap: no such file",
        ),
        (lambda: kwsniff.read(not_a_capture), kwsniff.InputError, 1, "notes.txt"),
        (lambda: kwsniff.read(QUICKSTART, memory_limit="lots"), kwsniff.UsageError, 2, "memory_limit='lots'"),
        (lambda: kwsniff.read(QUICKSTART, colour=True), kwsniff.UsageError, 2, "no option colour"),
        (lambda: kwsniff.read(QUICKSTART, broker_port=70000), kwsniff.UsageError, 2, "not a TCP port"),
        (lambda: kwsniff.report(tmp_path), kwsniff.ReportError, 1, "no requests, connections"),
        (lambda: kwsniff.report(tmp_path / "nope"), kwsniff.ReportError, 1, "not a directory"),
    ]
    for call, kind, code, text in cases:
        with pytest.raises(kind) as caught:
            call()
        assert isinstance(caught.value, kwsniff.KwsniffError)
        assert caught.value.exit_code == code
        assert text in str(caught.value)
    tables = kwsniff.read(QUICKSTART)
    with pytest.raises(kwsniff.UsageError, match="no section latncy"):
        kwsniff.report(tables, sections=["latncy"])
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_strict_raises_with_the_reasons_read_strict_gives(tmp_path: Path) -> None:
    cut = tmp_path / "cut.pcap"
    data = (DATA / "produce_codecs.pcap").read_bytes()
    cut.write_bytes(data[: len(data) - 100])  # the last packet cut short
    done = run_kwsniff("read", cut, "--out", tmp_path / "out", "--strict", "-q")
    assert done.returncode == 3
    strict_line = next(line for line in done.stderr.splitlines() if line.startswith("kwsniff: strict: "))
    with pytest.raises(kwsniff.StrictError) as caught:
        kwsniff.read(cut, strict=True)
    assert caught.value.exit_code == 3
    assert strict_line == "kwsniff: strict: " + "; ".join(caught.value.reasons)
    assert "1 capture file cut short" in caught.value.reasons[0]
    assert caught.value.tables.requests.num_rows > 0  # what was decoded is still there


def test_one_failed_input_fails_alone(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\x00" * 64)
    tables = kwsniff.read([bad, QUICKSTART])
    rows = tables.captures.drop_columns(WALL_CLOCK).to_pylist()
    assert [(r["capture"], r["status"]) for r in rows] == [("bad.pcap", "failed"), ("quickstart.pcap", "ok")]
    assert rows[0]["reason"] == "not a pcap or pcapng file (starts with b'\\x00\\x00\\x00\\x00')"
    assert tables.warnings == [f"bad.pcap: failed: {rows[0]['reason']}"]  # as `read` warns
    tshark = json.loads(Path(f"{QUICKSTART}.tshark.json").read_text())
    assert tables.requests.num_rows == tshark["summary"]["total_requests"]


def test_report_answers_what_the_report_command_answers(tmp_path: Path) -> None:
    tables = kwsniff.read(QUICKSTART)
    tables.write(tmp_path / "out")
    done = run_kwsniff("report", tmp_path / "out", "--format", "json")
    assert done.returncode == 0, done.stderr
    command = json.loads(done.stdout)
    from_tables = kwsniff.report(tables)
    from_dataset = kwsniff.report(tmp_path / "out")
    assert list(from_tables) == list(command)
    from kwsniff.sections.engines import rows_of
    from kwsniff.sections.output import as_json

    for name in command:
        assert from_tables[name].equals(from_dataset[name]), name
    # The command's JSON, made from the API's tables by the command's own JSON writer.
    assert json.loads(as_json({n: rows_of(t) for n, t in from_tables.items()})) == command
    assert sum(len(rows) for rows in command.values()) > 50


def test_report_latency_matches_pandas_over_the_requests_table() -> None:
    tables = kwsniff.read(QUICKSTART)
    latency = kwsniff.report(tables, sections=["latency"], client="qs-consumer-kafka-python")
    assert list(latency) == ["latency"]
    rows = latency["latency"].to_pylist()
    assert rows and {r["client_id"] for r in rows} == {"qs-consumer-kafka-python"}
    # The oracle: pandas over the requests table, as docs/report.md defines the section (long polls,
    # Fetch, ShareFetch and JoinGroup, are waits and have a section of their own).
    frame = tables.requests.to_pandas()
    frame = frame[(frame.client_id == "qs-consumer-kafka-python") & ~frame.api_key.isin([1, 78, 11])]
    counts = frame.groupby(["api_name", "api_version"]).size().to_dict()
    assert {(r["api_name"], r["api_version"]): r["requests"] for r in rows} == counts


def test_report_since_keeps_later_traffic_only() -> None:
    tables = kwsniff.read(QUICKSTART)
    ts = sorted(tables.requests.column("ts_request").to_pylist())
    middle = ts[len(ts) // 2]
    answer = kwsniff.report(tables, sections=["latency"], since=middle.replace(tzinfo=None))
    later = tables.requests.to_pandas()
    later = later[(later.ts_request >= middle) & ~later.api_key.isin([1, 78, 11])]
    assert sum(answer["latency"].column("requests").to_pylist()) == len(later)


def test_report_on_a_spark_session_equals_duckdb(spark: object, tmp_path: Path) -> None:
    tables = kwsniff.read(QUICKSTART)
    duck = kwsniff.report(tables, sections=["latency", "errors", "throughput"])
    on_spark = kwsniff.report(tables, sections=["latency", "errors", "throughput"], spark=spark)
    for name in duck:
        key = duck[name].column_names
        assert on_spark[name].select(key).to_pylist() == duck[name].to_pylist(), name
    assert duck["latency"].num_rows > 0


def test_import_kwsniff_loads_neither_pyarrow_nor_the_decoder() -> None:
    probe = (
        "import sys, kwsniff\n"
        "heavy = ('pyarrow', 'pandas', 'numpy', 'duckdb', 'click', 'kwsniff.pipeline', 'kwsniff.api')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
        "kwsniff.KwsniffError\n"  # the API's names load kwsniff.api, still without pyarrow
        "print(sorted(m for m in sys.modules if m.startswith(('pyarrow', 'pandas', 'numpy', 'duckdb'))))\n"
        "kwsniff.read\n"
        "print(sorted(m for m in sys.modules if m.startswith(('pyarrow', 'pandas', 'numpy', 'duckdb'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "[]", "[]"]


def test_report_is_a_function_whatever_was_imported_before() -> None:
    # The report's sections are the package kwsniff.sections: importing it (as `kwsniff report`
    # does) leaves the root's `report` the API's function, never a module (issue 46).
    probe = (
        "import kwsniff.sections.run, kwsniff.commands.report\n"
        "import kwsniff\n"
        "from kwsniff import report\n"
        "from kwsniff.api.reporting import report as api_report\n"
        "print(type(kwsniff.report).__name__, report is kwsniff.report is api_report, callable(kwsniff.sections))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["function", "True", "False"]


def test_the_public_names_are_these() -> None:
    assert sorted(kwsniff.__all__) == sorted(
        [
            "Batch",
            "InputError",
            "KwsniffError",
            "OutputError",
            "ReportError",
            "StrictError",
            "Tables",
            "UsageError",
            "__version__",
            "iter_read",
            "read",
            "report",
        ]
    )
    for name in ("InputError", "OutputError", "ReportError", "StrictError", "UsageError"):
        assert issubclass(getattr(kwsniff, name), kwsniff.KwsniffError)
    with pytest.raises(AttributeError):
        kwsniff.nothing  # noqa: B018


def test_iter_read_yields_the_batches_read_holds() -> None:
    got: dict[str, list[pa.RecordBatch]] = {}
    for item in kwsniff.iter_read(QUICKSTART, records=True):
        got.setdefault(item.table, []).append(item.batch)
    tables = kwsniff.read(QUICKSTART, records=True)
    assert set(got) == set(tables)
    for name, batches in got.items():
        table = pa.Table.from_batches(batches)
        if name == "captures":
            table, expected = table.drop_columns(WALL_CLOCK), tables[name].drop_columns(WALL_CLOCK)
        else:
            expected = tables[name]
        assert table.equals(expected), name


def test_read_takes_keylog_and_continuous_like_the_command(tmp_path: Path) -> None:
    pieces = tmp_path / "pieces"
    done = run_kwsniff("read", QUICKSTART, "--out", tmp_path / "one", "-q")
    assert done.returncode == 0
    # The same capture split in two pieces (kwsniff's own splitter is not the oracle: dpkt writes them).
    pieces.mkdir()
    with QUICKSTART.open("rb") as f:
        reader = dpkt.pcap.Reader(f)
        packets = list(reader)
        linktype = reader.datalink()
    half = len(packets) // 2
    for i, chunk in enumerate((packets[:half], packets[half:])):
        with (pieces / f"part{i}.pcap").open("wb") as out:
            writer = dpkt.pcap.Writer(out, snaplen=262144, linktype=linktype, nano=False)
            for ts, buf in chunk:
                writer.writepkt(buf, ts)
    series = kwsniff.read([pieces / "part1.pcap", pieces / "part0.pcap"], continuous=True)
    whole = pq.read_table(tmp_path / "one" / "requests")
    assert series.requests.num_rows == whole.num_rows
    assert sorted(series.requests.column("correlation_id").to_pylist()) == sorted(
        whole.column("correlation_id").to_pylist()
    )
    shutil.rmtree(pieces)


def test_iter_read_stays_within_its_budget_on_a_large_capture(tmp_path: Path) -> None:
    # 300 Produce exchanges of one gzip batch of 2,000 records (2.4 MB of records rows each, under the
    # 4 MiB records share): 100 KB on the wire, 600,000 rows of the records table, about 70 MiB of
    # Arrow batches. In a process of its own, iter_read under a
    # 16 MiB --memory-limit, then read() of the same capture, which holds every row: the peak
    # resident size (VmHWM: Linux carries ru_maxrss across fork and exec, so the child of a large
    # pytest would report the parent's size) grows by at most the budget under iter_read, and by
    # more than it under read(), so the measure can see what the budget saves.
    from kafkawire import Flow, write_pcap
    from memory_captures import produce_v3, produce_v3_response, record_count_bomb

    flow = Flow().handshake()
    bomb = record_count_bomb(2_000)
    for corr in range(1, 301):
        flow.send(0, produce_v3(corr, [bomb]), mss=60_000)
        flow.send(1, produce_v3_response(corr, 1))
    flow.close()
    big = write_pcap(tmp_path / "big.pcap", flow.packets)
    limit = 16 * 1024 * 1024
    script = f"""
import kwsniff
def peak():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]) * 1024
list(kwsniff.iter_read({str(QUICKSTART)!r}, records=True))  # decoders compiled, pyarrow loaded
base = peak()
arrow = rows = 0
for table, batch in kwsniff.iter_read({str(big)!r}, records=True, memory_limit={limit}):
    arrow += batch.nbytes
    rows += batch.num_rows if table == "records" else 0
streamed = peak()
held = kwsniff.read({str(big)!r}, records=True, memory_limit={limit})
print(base, streamed, peak(), arrow, rows, held.records.num_rows)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    base, streamed, holding, arrow, rows, held_rows = map(int, done.stdout.split())
    assert rows == held_rows == 300 * 2_000  # every record the capture holds
    assert arrow > 4 * limit  # holding the batches would not fit the budget
    assert streamed - base <= limit
    assert holding - base > limit


def test_options_are_the_commands_long_names(tmp_path: Path) -> None:
    # produce_codecs' broker listened on 19101 (truth.json); with auto-detection off, only the
    # ports given are Kafka, as with `read -p PORT --no-auto-detect`.
    capture = DATA / "produce_codecs.pcap"
    tshark = json.loads(Path(f"{capture}.tshark.json").read_text())
    assert kwsniff.read(capture, broker_port=19101, no_auto_detect=True).requests.num_rows == 111
    assert tshark["summary"]["total_requests"] == 111
    assert kwsniff.read(capture, broker_ports=[9092], no_auto_detect=True).requests.num_rows == 0
    done = run_kwsniff("read", capture, "-p", "9092", "--no-auto-detect", "--out", tmp_path / "out", "-q")
    assert done.returncode == 0 and pq.read_table(tmp_path / "out" / "requests").num_rows == 0
    tables = kwsniff.read(capture, max_frame_size="1MiB", memory_limit="256MiB", tunnel_port="vxlan=4790")
    assert tables.requests.num_rows == 111
    # A key log that cannot be read is an input error, exit status 1 for the command (docs/datasets.md).
    with pytest.raises(kwsniff.InputError, match="no-such-keylog.txt: No such file or directory"):
        kwsniff.read(capture, keylog=tmp_path / "no-such-keylog.txt")
    with pytest.raises(kwsniff.UsageError, match="tunnel_port="):
        kwsniff.read(capture, tunnel_port="gre=1")


def test_the_api_is_typed_for_its_users(tmp_path: Path) -> None:
    # mypy over a user's script: every name has its type (kwsniff.report the function), and a
    # wrong use is found. kwsniff ships py.typed (PEP 561).
    script = tmp_path / "use.py"
    script.write_text(
        "import pyarrow as pa\n"
        "import kwsniff\n"
        'tables: kwsniff.Tables = kwsniff.read("c.pcap", records=True)\n'
        "requests: pa.Table = tables.requests\n"
        'answers: dict[str, pa.Table] = kwsniff.report(tables, sections=["latency"])\n'
        'for item in kwsniff.iter_read("c.pcap"):\n'
        "    batch: pa.RecordBatch = item.batch\n"
        "try:\n"
        "    pass\n"
        "except kwsniff.KwsniffError as exc:\n"
        "    code: int = exc.exit_code\n"
        'wrong: int = kwsniff.read("c.pcap")\n'
    )
    repo = Path(__file__).resolve().parent.parent
    assert (repo / "kwsniff" / "py.typed").exists()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--ignore-missing-imports",
            "--follow-imports=silent",
            "--no-incremental",
            "use.py",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(repo)},
    )
    assert done.stdout.splitlines() == [
        'use.py:12: error: Incompatible types in assignment (expression has type "Tables", variable has type "int")  [assignment]',
        "Found 1 error in 1 file (checked 1 source file)",
    ]


# -- issue 45, goal 4: every argument the command would refuse is one of kwsniff's errors ------------
LONG_PATH = "/tmp/" + "a" * 10 * 1024  # 10 KiB: the file system refuses the name (ENAMETOOLONG)


def api_call(name: str, tmp_path: Path) -> object:
    fifo = tmp_path / "map.fifo"
    if name.endswith("fifo") and not fifo.exists():
        os.mkfifo(fifo)
    calls = {
        "idle_timeout inf": lambda: kwsniff.read(QUICKSTART, idle_timeout=float("inf")),
        "idle_timeout nan": lambda: kwsniff.read(QUICKSTART, idle_timeout=float("nan")),
        "memory_limit True": lambda: kwsniff.read(QUICKSTART, memory_limit=True),
        "records 'no'": lambda: kwsniff.read(QUICKSTART, records="no"),
        "broker_port None": lambda: kwsniff.read(QUICKSTART, broker_port=[9092, None]),
        "broker_map /dev/zero": lambda: kwsniff.read(QUICKSTART, broker_map="/dev/zero"),
        "broker_map fifo": lambda: kwsniff.read(QUICKSTART, broker_map=fifo),
        "captures 5": lambda: kwsniff.read(5),  # type: ignore[arg-type]
        "report until 12345": lambda: kwsniff.report(tmp_path, until=12345),  # type: ignore[arg-type]
        "report memory_limit True": lambda: kwsniff.report(tmp_path, memory_limit=True),
        "report session_timeout_ms nan": lambda: kwsniff.report(tmp_path, session_timeout_ms=float("nan")),  # type: ignore[arg-type]
        "report topic 5": lambda: kwsniff.report(tmp_path, topic=5),  # type: ignore[arg-type]
        "read long path": lambda: kwsniff.read(LONG_PATH),
        "report long path": lambda: kwsniff.report(LONG_PATH),
        "write long path": lambda: kwsniff.read(QUICKSTART).write(LONG_PATH),
    }
    return calls[name]()


@pytest.mark.parametrize(
    ("call", "kind", "text"),
    [
        ("idle_timeout inf", kwsniff.UsageError, "idle_timeout=inf: Invalid value for '--idle-timeout': inf is not in the range 0<=x<=1000000000.0"),
        ("idle_timeout nan", kwsniff.UsageError, "idle_timeout=nan: Invalid value for '--idle-timeout': nan is not a finite number"),
        ("memory_limit True", kwsniff.UsageError, "memory_limit=True: Invalid value for '--memory-limit': True is not a size"),
        ("records 'no'", kwsniff.UsageError, "read: records='no': a flag, True or False"),
        ("broker_port None", kwsniff.UsageError, "read: broker_port=[9092, None]: None is not a value"),
        ("broker_map /dev/zero", kwsniff.UsageError, "/dev/zero: a device or socket, not a regular file"),
        ("broker_map fifo", kwsniff.UsageError, "map.fifo: a pipe, not a regular file"),
        ("captures 5", kwsniff.UsageError, "read: 5 is not a path or a list of paths"),
        ("report until 12345", kwsniff.UsageError, "report: until=12345 is not a datetime or an ISO 8601 time"),
        ("report memory_limit True", kwsniff.UsageError, "report: memory_limit=True: Invalid value for '--memory-limit': True is not a size"),
        ("report session_timeout_ms nan", kwsniff.UsageError, "session_timeout_ms=nan: Invalid value for '--session-timeout-ms'"),
        ("report topic 5", kwsniff.UsageError, "report: topic=5 is not a string"),
        ("read long path", kwsniff.InputError, f"{LONG_PATH[:200]}...: cannot open (File name too long)"),
        ("report long path", kwsniff.ReportError, f"{LONG_PATH[:200]}: File name too long"),
        ("write long path", kwsniff.OutputError, f"--out {LONG_PATH[:200]}...: File name too long"),
    ],
)  # fmt: skip
def test_an_argument_the_command_would_refuse_is_a_kwsniff_error(
    tmp_path: Path, call: str, kind: type[kwsniff.KwsniffError], text: str
) -> None:
    """Each raised MemoryError, OverflowError, ValueError, AttributeError or OSError, blocked for ever,
    or was silently taken (`memory_limit=True` as one byte, `records="no"` as True)."""
    with pytest.raises(kind) as caught:
        api_call(call, tmp_path)
    assert text in str(caught.value)
    assert len(str(caught.value)) < 600  # one line, not the 10 KiB name
    if kind is kwsniff.UsageError:
        assert isinstance(caught.value, ValueError)  # caught the usual way too
        assert caught.value.exit_code == 2


def test_report_memory_limit_is_a_size_as_the_command_takes_it(tmp_path: Path) -> None:
    """`memory_limit='1B'` reached DuckDB as `1BB` (its ParserException); it is one byte, as
    `report --memory-limit 1B` takes it, in which DuckDB runs out of memory: a ReportError."""
    tables = kwsniff.read(QUICKSTART)
    with pytest.raises(kwsniff.ReportError, match="DuckDB ran out of memory or spill space"):
        kwsniff.report(tables, memory_limit="1B")
    assert kwsniff.report(tables, memory_limit="512MiB", sections=["latency"])["latency"].num_rows > 0


def test_read_of_a_pipe_nobody_writes_to_is_an_input_error_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "capture.fifo"
    os.mkfifo(fifo)
    code = f"import kwsniff\ntry:\n    kwsniff.read({str(fifo)!r})\nexcept kwsniff.InputError as exc:\n    print(exc)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "capture.fifo: a pipe nobody writes to (a stream goes to standard input: `-`)\n"


@pytest.mark.parametrize("inside", [False, True])
def test_write_to_a_dangling_symlink_creates_nothing_outside_out(tmp_path: Path, inside: bool) -> None:
    """`Tables.write` to a link whose target does not exist used to create the target (and its
    parents), wherever the link points."""
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "elsewhere" / "deep" / "x")
    out = link / "tables" if inside else link
    with pytest.raises(kwsniff.OutputError) as caught:
        kwsniff.read(QUICKSTART).write(out)
    assert str(caught.value) == (
        f"--out {out}: {link} is a symbolic link to {tmp_path}/elsewhere/deep/x, which does not exist"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_report_filter_naming_nothing_the_tables_hold_raises_as_the_command_says(tmp_path: Path) -> None:
    tables = kwsniff.read(QUICKSTART)
    tables.write(tmp_path / "out")
    done = run_kwsniff("report", tmp_path / "out", "--group", "billing")
    assert done.returncode == 1
    with pytest.raises(kwsniff.ReportError) as raised:
        kwsniff.report(tables, group="billing")
    said = "the tables hold no such group; they hold 2: quickstart-audit, quickstart-group"
    assert done.stderr == f"kwsniff: error: --group billing: {said}\n"
    assert str(raised.value) == f"report: group='billing': {said}"
    assert kwsniff.report(tables, group="quickstart-group", sections=["lag"])["lag"].num_rows > 0
