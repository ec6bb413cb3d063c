"""The report's per-capture summaries (kwsniff.sections.summaries): `read` and `spark` write them beside
the tables (`read` on runs of SUMMARIZE_MIN_ROWS rows or more, or with --summaries always), `report`
reads them instead of the rows for the captures they cover and computes the others' parts from their
rows, and the answers are the same as from the rows (on Spark too: tests/test_report_sections.py)."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from kwsniff.cli import main
from kwsniff.commands.summarize import summarize
from kwsniff.sections import summaries
from kwsniff.sections.catalog import PARTS, SECTIONS
from kwsniff.sections.dataset import DuckTables
from kwsniff.sections.engines import DuckEngine, Filters
from kwsniff.sections.output import sort_rows
from kwsniff.sections.run import answer, answer_top, keep
from kwsniff.sinks import output_name
from kwsniff.sinks.dataset import path_digest_of
from kwsniff.spark.pipeline import decode, write
from kwsniff.tables.names import DEFAULT_TABLES, SUMMARIES, TABLES

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "sample_pcaps/quickstart.pcap"
CAPTURES = sorted((ROOT / "tests/data/captures").glob("*.pcap")) + [QUICKSTART]
# The sections that read a part (catalog.PARTS; the others never do).
SUMMARIZED = [s for s in SECTIONS if "summary_" in s.sql]


def read(out: Path, *inputs: Path, append: bool = False, summaries: str = "always") -> Any:
    args = ["read", "-q", *map(str, inputs), "--out", str(out), "--summaries", summaries]
    done = CliRunner().invoke(main, args + (["--append"] if append else []))
    assert done.exit_code == 0, done.output
    return done


def without_summaries(tables: Path, to: Path) -> Path:
    """A copy of ``tables`` (hard links) without its summaries: the report computes from the rows."""
    shutil.copytree(
        tables, to, copy_function=os.link, ignore=lambda d, names: [n for n in names if n in SUMMARIES]
    )
    return to


def duck_answer(tables: Path, filters: Filters | None = None) -> tuple[bool, dict[str, list[dict[str, Any]]]]:
    filters = filters or Filters()
    with DuckEngine(tables, filters) as engine:
        return engine.summarized, answer(engine, filters)


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("summarized") / "tables"
    read(out, *CAPTURES)
    return out


@pytest.fixture(scope="module")
def from_rows(out: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    summarized, rows = duck_answer(without_summaries(out, tmp_path_factory.mktemp("rows") / "tables"))
    assert not summarized
    return rows


def test_read_writes_each_captures_summaries_beside_its_tables_under_the_same_name(out: Path) -> None:
    names = sorted(p.name for p in (out / "requests").iterdir())
    assert len(names) == len(CAPTURES)
    assert ("summary_captures", *PARTS) == SUMMARIES
    for part in SUMMARIES:
        assert sorted(p.name for p in (out / part).iterdir()) == names, part
    for name in names:
        marker = pq.read_table(out / "summary_captures" / name).to_pylist()
        captures = pq.read_table(out / "captures" / name).column("capture").to_pylist()
        assert marker == [{"capture": captures[0], "version": summaries.VERSION}]
        # Each part file holds its own capture's rows only.
        for part in PARTS:
            assert set(pq.read_table(out / part / name).column("capture").to_pylist()) <= set(captures)
    lag = pq.read_table(out / "summary_lag" / names[-1]).to_pylist()
    assert names[-1].startswith("quickstart") and {r["group_id"] for r in lag} == {"quickstart-group"}


def test_the_report_reads_the_summaries_and_answers_as_from_the_rows(out: Path, from_rows: dict) -> None:
    summarized, rows = duck_answer(out)
    assert summarized
    assert rows == from_rows
    # The fifteen sections of one capture's rows each, and `findings`, which reads several of them.
    assert len([s for s in SUMMARIZED if s.name != "findings"]) == 15
    assert [s.name for s in SUMMARIZED if not rows[s.name]] == [
        "reconciliation",
        "storms",
        "share_groups",
        "share_deliveries",
        "replication",  # no follower in the quick start (tests/test_replication.py has them)
        "upgrade_zookeeper",
        "misrouted",
    ]
    assert len(rows["lag"]) == 44 and len(rows["member_lag"]) == 25 and len(rows["upgrade"]) == 3


@pytest.mark.parametrize("sort_by", [None, "offset_lag", "requests"])
def test_a_cut_answer_read_from_the_summaries_is_the_first_rows_of_the_whole_and_its_count(
    out: Path, from_rows: dict, sort_by: str | None
) -> None:
    # A text report (or --top N) cuts each answer inside DuckDB; from the summaries it is not kept
    # first (engines.DuckEngine.top), and the rows and counts are those of the whole answer.
    filters = Filters(group="quickstart-group") if sort_by == "requests" else Filters()
    with DuckEngine(out, Filters()) as engine:
        cut = answer_top(engine, filters, SECTIONS, 2, sort_by)
    for name, rows in from_rows.items():
        whole = sort_rows(keep(rows, filters), sort_by)
        assert cut[name] == (whole[:2], len(whole)), name
    assert cut["lag"][1] == (9 if filters.group else 44) and cut["stopped"][1] > 2


def test_since_and_until_compute_from_the_rows(out: Path, from_rows: dict, tmp_path: Path) -> None:
    # A time window cuts rows out of a capture: its summary would be of rows the window drops.
    since = min(r["last_commit"] for r in from_rows["stopped"] if r["last_commit"]) - dt.timedelta(seconds=1)
    window = Filters(since=since.replace(tzinfo=None), until=dt.datetime(2100, 1, 1))
    summarized, rows = duck_answer(out, window)
    assert not summarized
    assert rows == duck_answer(without_summaries(out, tmp_path / "rows"), window)[1]
    assert rows["stopped"] and rows["inventory"] != from_rows["inventory"]


def from_rows_of(tables: Path) -> dict[str, list[dict[str, Any]]]:
    return duck_answer(tables)[1]


def test_a_capture_without_summaries_makes_the_report_compute_from_the_rows(
    out: Path, from_rows: dict, tmp_path: Path
) -> None:
    # Tables of a capture written without summaries (a live capture, an older kwsniff, a file added
    # by hand) among summarized ones: every part is computed from the rows, the new capture included.
    mixed = tmp_path / "mixed"
    shutil.copytree(out, mixed, copy_function=os.link)
    other = tmp_path / "other"
    read(other, QUICKSTART)
    for path in (other / "requests").iterdir():
        shutil.copy(path, mixed / "requests" / "added-by-hand.parquet")
    summarized, rows = duck_answer(mixed)
    assert not summarized
    assert rows == duck_answer(without_summaries(mixed, tmp_path / "rows"))[1]
    # Its requests are read: the latency section counts them (the inventory counts each request once
    # by its connection and correlation id, and the file repeats the quick start's).
    assert rows["latency"] != from_rows["latency"]


def test_a_table_file_newer_than_its_summaries_makes_the_report_compute_from_the_rows(
    out: Path, from_rows: dict, tmp_path: Path
) -> None:
    # A capture read again by a kwsniff that writes no summaries (one before they existed) replaces
    # its table files and leaves its old summaries, now older than them.
    again = tmp_path / "again"
    shutil.copytree(out, again)
    requests = sorted((again / "requests").iterdir())[-1]
    marker = os.stat(again / "summary_captures" / requests.name)
    os.utime(requests, ns=(marker.st_atime_ns, marker.st_mtime_ns + 1))
    summarized, rows = duck_answer(again)
    assert not summarized and rows == from_rows


def test_reading_a_capture_again_replaces_its_summaries(tmp_path: Path) -> None:
    out = tmp_path / "tables"
    read(out, CAPTURES[0], QUICKSTART)
    read(out, QUICKSTART, append=True)
    read(out, CAPTURES[1], append=True)
    markers = pq.read_table(out / "summary_captures").column("capture").to_pylist()
    assert sorted(markers) == sorted(p.name for p in (CAPTURES[0], CAPTURES[1], QUICKSTART))
    summarized, rows = duck_answer(out)
    assert summarized
    assert rows == duck_answer(without_summaries(out, tmp_path / "rows"))[1]
    once = tmp_path / "once"
    read(once, CAPTURES[0], CAPTURES[1], QUICKSTART)
    assert rows == from_rows_of(once)


def test_summaries_that_cannot_be_written_are_one_warning_and_the_tables_are_committed(
    from_rows: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = summaries.write

    def disk_full(stage: Path, *limits: Any) -> int:
        real(stage, *limits)  # every summary file written, then the failure
        raise duckdb.IOException("IO Error: Could not write file: No space left on device")

    monkeypatch.setattr(summaries, "write", disk_full)
    out = tmp_path / "tables"
    done = read(out, QUICKSTART)
    assert done.stderr.splitlines() == [
        "kwsniff: warning: summaries: not written (IO Error: Could not write file: No space left on device); "
        "`kwsniff report` computes those sections from the rows"
    ]
    assert sorted(p.name for p in out.iterdir()) == [
        "captures",
        "connections",
        "errors",
        "groups",
        "partitions",
        "requests",
    ]
    summarized, rows = duck_answer(out)
    assert not summarized
    assert rows["lag"] == [r for r in from_rows["lag"] if r["capture"] == "quickstart.pcap"] != []


def test_spark_writes_summaries_of_a_capture_split_into_flow_buckets_as_read_does(
    spark: Any, out: Path, tmp_path: Path
) -> None:
    decoded = decode(spark, [str(QUICKSTART)], buckets=2)
    assert decoded.split_into == {"quickstart.pcap": 2}
    fleet = tmp_path / "fleet"
    write(decoded, fleet, summarize=lambda stage: summarize(stage, 1 << 30, "always"))
    # Its tables are files of Spark's names (one per flow bucket), its summaries one of the capture's.
    assert [p.name for p in (fleet / "summary_lag").iterdir()] == [
        f"quickstart.pcap-{path_digest_of('quickstart.pcap')}.parquet"
    ]
    summarized, rows = duck_answer(fleet)
    assert summarized
    assert rows == duck_answer(without_summaries(fleet, tmp_path / "rows"))[1]
    single = tmp_path / "single"
    read(single, QUICKSTART)
    assert rows == from_rows_of(single)


def rows_in(tables: Path) -> int:
    """Every row of the dataset's tables (not its summaries), counted by pyarrow from the footers."""
    return sum(pq.ParquetFile(p).metadata.num_rows for t in TABLES for p in (tables / t).glob("*.parquet"))


def test_the_summaries_take_one_duckdb_thread_a_million_staged_rows(
    out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with DuckTables(out, Filters()) as engine:
        ((cores,),) = engine.con.execute("SELECT current_setting('threads')").fetchall()
        assert summaries.ROWS_PER_THREAD == 1_000_000
        assert summaries._threads(engine) == 1  # the test captures' 922 rows
        monkeypatch.setattr(summaries, "ROWS_PER_THREAD", 461)
        assert summaries._threads(engine) == min(cores, 2)
        monkeypatch.setattr(summaries, "ROWS_PER_THREAD", 1)
        assert summaries._threads(engine) == cores


def test_duckdb_draws_no_progress_bar_into_the_output(
    out: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # DuckDB draws it on stdout (a pipe too) under a statement running past progress_bar_time, 2 s by
    # default: into `read`'s output while it summarizes a large run, and into `report`'s JSON. Here
    # past 1 ms (setting the time turns the bar on: set before the engine's own settings).
    connect = duckdb.connect

    def eager(*args: Any, **kwargs: Any) -> Any:
        con = connect(*args, **kwargs)
        con.execute("SET progress_bar_time = 1")
        return con

    monkeypatch.setattr(duckdb, "connect", eager)
    with DuckTables(out, Filters()) as engine:
        ((total,),) = engine.con.execute("SELECT SUM(range) FROM range(50000000)").fetchall()
    assert total == 1_249_999_975_000_000
    assert capfd.readouterr().out == ""


def test_auto_writes_summaries_for_runs_of_at_least_the_minimum_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    never = tmp_path / "never"
    read(never, *CAPTURES, summaries="never")
    rows = rows_in(never)
    assert rows == 922  # 357 requests, 475 partitions, 58 connections, 6 errors, 21 groups, 5 captures
    assert sorted(p.name for p in never.iterdir()) == sorted(DEFAULT_TABLES)
    for minimum, written in ((rows, True), (rows + 1, False)):
        monkeypatch.setattr("kwsniff.core.output.SUMMARIZE_MIN_ROWS", minimum)
        out = tmp_path / f"auto-{minimum}"
        read(out, *CAPTURES, summaries="auto")
        assert sorted(p.name for p in out.iterdir()) == sorted(
            DEFAULT_TABLES + (SUMMARIES if written else ())
        ), minimum
    # The default is auto, and the repository's captures are far below its minimum.
    default = tmp_path / "default"
    assert CliRunner().invoke(main, ["read", "-q", str(QUICKSTART), "--out", str(default)]).exit_code == 0
    assert not any(p.name in SUMMARIES for p in default.iterdir())
    # A small run added to a dataset that has summaries writes its own (the dataset stays read from
    # its summaries), and one added to a dataset of many captures does too.
    summarized = tmp_path / f"auto-{rows}"
    read(summarized, QUICKSTART, append=True, summaries="auto")
    assert duck_answer(summarized)[0]
    monkeypatch.setattr("kwsniff.core.output.SUMMARIZE_MIN_CAPTURES", 2)
    few = tmp_path / "few"
    read(few, QUICKSTART, summaries="never")
    for adding, written in ((CAPTURES[0], False), (CAPTURES[1], True)):  # to 1 capture, then to 2
        read(few, adding, append=True, summaries="auto")
        assert (few / "summary_lag" / f"{output_name(adding)}.parquet").exists() is written


def test_captures_without_summaries_have_their_parts_computed_beside_the_others_summaries(
    out: Path, from_rows: dict, tmp_path: Path
) -> None:
    # A summarized dataset, and a capture appended without summaries: the report reads the
    # summaries of the first and computes the parts of the second from its rows.
    mixed = tmp_path / "mixed"
    read(mixed, *CAPTURES[:-1])
    read(mixed, QUICKSTART, append=True, summaries="never")
    assert not (mixed / "summary_lag" / f"{output_name(QUICKSTART)}.parquet").exists()
    summarized, rows = duck_answer(mixed)
    assert not summarized  # not every part is read from the summaries alone
    assert rows == from_rows
    # The summarized captures' parts are read from their files: one changed by hand shows.
    lagging = sorted({r["capture"] for r in rows["lag"]} - {QUICKSTART.name})
    assert lagging == ["kafka_python.pcap", "produce_codecs.pcap"]
    lag = mixed / "summary_lag" / f"{output_name(ROOT / 'tests/data/captures' / lagging[0])}.parquet"
    table = pq.read_table(lag)
    changed = table.set_column(
        table.schema.get_field_index("group_id"),
        "group_id",
        pa.array(["changed"] * table.num_rows, pa.string()),
    )
    os.unlink(lag)  # a hard link of the module's dataset
    pq.write_table(changed, lag)
    os.utime(mixed / "summary_captures" / lag.name)  # not older than its tables
    groups = {(r["capture"], r["group_id"]) for r in duck_answer(mixed)[1]["lag"]}
    assert {g for c, g in groups if c == lagging[0]} == {"changed"}
    assert {c for c, g in groups if g != "changed"} == {lagging[1], QUICKSTART.name}


def test_a_capture_read_again_without_summaries_leaves_none_of_its_old_ones(tmp_path: Path) -> None:
    out = tmp_path / "tables"
    read(out, CAPTURES[0], QUICKSTART)
    read(out, QUICKSTART, append=True, summaries="never")
    name = f"{output_name(QUICKSTART)}.parquet"
    for part in SUMMARIES:
        assert sorted(p.name for p in (out / part).iterdir()) == [f"{output_name(CAPTURES[0])}.parquet"], part
    summarized, rows = duck_answer(out)
    assert not summarized
    assert rows == duck_answer(without_summaries(out, tmp_path / "rows"))[1]
    assert (out / "requests" / name).exists()
