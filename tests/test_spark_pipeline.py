"""`kwsniff spark` decodes the repository's captures into exactly the rows `kwsniff read` writes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner
from realparts import report_on_spark, run_kwsniff, run_python

from kwsniff.cli import main
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink
from kwsniff.sections.summaries import VERSION as SUMMARY_VERSION
from kwsniff.spark.inputs import expand_inputs
from kwsniff.spark.pipeline import LIGHT_JVM, decode, decode_conf, write
from kwsniff.spark.tasks import capture_date, flow_bucket
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.tables.schemas import SCHEMAS

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "tests/data/captures").glob("*.pcap")) + [ROOT / "sample_pcaps/quickstart.pcap"]
TABLES = (*(t for t in DEFAULT_TABLES if t != "captures"), "records")  # `captures`: test_spark_isolation
OPTIONS = SessionOptions(records=True)


def _key(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(repr(row[k]) for k in sorted(row))


def read_rows(
    options: SessionOptions = OPTIONS, tables: tuple[str, ...] = TABLES
) -> dict[str, list[dict[str, Any]]]:
    """What `kwsniff read --records` (or ``options``) writes, normalised through the tables' Arrow schemas."""
    import pyarrow as pa

    found: dict[str, list[dict[str, Any]]] = {t: [] for t in tables}
    for path in CAPTURES:
        sink = ListSink()
        run_capture(path, sink, options)
        for t in tables:
            found[t] += pa.Table.from_pylist(sink.tables[t], schema=SCHEMAS[t]).to_pylist()
    return {t: sorted(rows, key=_key) for t, rows in found.items()}


def first_packet_days() -> dict[str, str]:
    from datetime import UTC, datetime

    from kwsniff.capture import open_capture

    days = {}
    for path in CAPTURES:
        with open_capture(path) as reader:
            ts = next(iter(reader.packets()))[0]
        days[path.name] = datetime.fromtimestamp(ts // 1_000_000, UTC).strftime("%Y-%m-%d")
    return days


def spark_rows(out: Path) -> dict[str, list[dict[str, Any]]]:
    days = first_packet_days()
    found = {}
    for t in TABLES:
        table = ds.dataset(out / t, partitioning="hive").to_table() if (out / t).exists() else None
        rows = [] if table is None else table.to_pylist()
        for row in rows:
            # The partition column is the UTC day of the capture's first packet.
            assert row.pop("date") == days[row["capture"]]
        found[t] = sorted(rows, key=_key)
    return found


@pytest.fixture(scope="module")
def expected() -> dict[str, list[dict[str, Any]]]:
    return read_rows()


@pytest.mark.parametrize(("buckets", "range_bytes"), [(1, 1 << 27), (3, 1 << 27), (3, 1 << 16)])
def test_spark_tables_equal_read_tables(
    spark: Any, tmp_path: Path, expected: dict, buckets: int, range_bytes: int
) -> None:
    """Unsplit; split by flow bucket, each capture indexed in one range; and in ranges of 64 KiB."""
    paths = [str(p) for p in CAPTURES]
    decoded = decode(spark, paths, buckets=buckets, options=OPTIONS, tables=TABLES, range_bytes=range_bytes)
    assert decoded.notes == []
    write(decoded, tmp_path)
    counts = decoded.rows
    days = first_packet_days()
    got = spark_rows(tmp_path)
    assert counts == {t: len(expected[t]) for t in TABLES}
    assert counts["requests"] > 300 and counts["records"] > 0
    for t in TABLES:
        assert got[t] == expected[t], t
        # DuckDB reads the same datasets, partition column included.
        n = duckdb.sql(
            f"select count(*), count(distinct date) from read_parquet('{tmp_path / t}/*/*.parquet', hive_partitioning=true)"
        ).fetchall()[0]
        assert n == (len(expected[t]), len({days[r["capture"]] for r in expected[t]}))


@pytest.mark.parametrize("buckets", [1, 3])
def test_without_records_spark_writes_the_compiled_partitions_rows_as_read_does(
    spark: Any, tmp_path: Path, buckets: int
) -> None:
    """Without --records, Produce and Fetch `partitions` rows come from the compiled walker as values
    in schema order (kwsniff/rows/compiled.py) into each task's Parquet writer (TaskSink.add_values),
    in flow buckets with their conn_ids made capture-wide: the same rows as read's."""
    tables = tuple(t for t in DEFAULT_TABLES if t != "captures")
    expected = read_rows(SessionOptions(), tables)
    decoded = decode(
        spark, [str(p) for p in CAPTURES], buckets=buckets, options=SessionOptions(), tables=tables
    )
    assert decoded.notes == []
    write(decoded, tmp_path)
    for t in tables:
        rows = ds.dataset(tmp_path / t, partitioning="hive").to_table().drop_columns(["date"]).to_pylist()
        assert sorted(rows, key=_key) == expected[t], t
    assert len(expected["partitions"]) == 475


def test_a_task_sink_keeps_rows_given_as_values_as_it_keeps_row_dicts(tmp_path: Path) -> None:
    from kwsniff.spark.tasks import TaskSink

    columns = SCHEMAS["partitions"].names
    rows = [
        {
            **dict.fromkeys(columns),
            "conn_id": 1,
            "topic": "t",
            "topic_id": "AAAAAAAAAAAAAAAAAAAAAA",
            "partition": 0,
        },
        {
            **dict.fromkeys(columns),
            "conn_id": 2,
            "topic": None,
            "topic_id": "BBBBBBBBBBBBBBBBBBBBBB",
            "partition": 5,
        },
    ]
    sinks = {}
    for way in ("dicts", "values"):
        sink = TaskSink(str(tmp_path / way), ("partitions",), conn_ids={1: 100, 2: 7})
        assert sink.columns("partitions") == tuple(columns)
        if way == "dicts":
            for row in rows:
                sink.add("partitions", dict(row))
        else:
            sink.add_values("partitions", tuple(rows[0][c] for c in columns))
            sink.add_many_values("partitions", [tuple(rows[1][c] for c in columns)])
        assert sink.close() == {"partitions": 2}
        sinks[way] = sink
    got = {way: ds.dataset(tmp_path / way / "partitions").to_table().to_pylist() for way in sinks}
    assert got["values"] == got["dicts"]
    assert [(r["conn_id"], r["partition"]) for r in got["values"]] == [(100, 0), (7, 5)]
    assert sinks["values"].topic_names == sinks["dicts"].topic_names == {"AAAAAAAAAAAAAAAAAAAAAA": "t"}


def test_flow_bucket_keeps_both_directions_together() -> None:
    from kwsniff.capture import open_capture

    with open_capture(CAPTURES[0]) as reader:
        packets = list(reader.packets())
    seen: dict[frozenset, set[int]] = {}
    from kwsniff.net import parse_tcp

    for _ts, linktype, data in packets:
        p = parse_tcp(linktype, data)
        key = frozenset({(p[0], p[1]), (p[2], p[3])})  # type: ignore[index]
        seen.setdefault(key, set()).add(flow_bucket(linktype, data, 3))
    assert len(seen) > 3 and all(len(b) == 1 for b in seen.values())
    assert len({b for bs in seen.values() for b in bs}) > 1


def test_capture_date_is_the_utc_day() -> None:
    assert capture_date(1_763_596_799_999_999) == "2025-11-19"
    assert capture_date(1_763_596_800_000_000) == "2025-11-20"


def test_inputs_expand_files_dirs_and_globs(tmp_path: Path) -> None:
    found = expand_inputs([str(ROOT / "tests/data/captures"), str(ROOT / "sample_pcaps/*.pcap")])
    assert [Path(p).name for p in found] == [p.name for p in CAPTURES]
    assert expand_inputs([f"file://{CAPTURES[0]}", str(CAPTURES[0])]) == [str(CAPTURES[0])]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["/nonexistent/*.pcap"], "/nonexistent/*.pcap: no such file, directory or matching capture"),
        (["nosuch://nn/caps"], "nosuch://nn/caps: Unrecognized filesystem type in URI: nosuch://nn/caps"),
    ],
)
def test_bad_inputs_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["spark", *args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert result.output.startswith(f"kwsniff: error: {message}")
    assert result.output.count("\n") == 1


def test_command_lines_spark_then_report(tmp_path: Path) -> None:
    """`kwsniff spark` and `kwsniff report` as processes of their own (their own Spark, pandas allowed)."""
    out, plots = tmp_path / "fleet", tmp_path / "plots"
    sample = str(ROOT / "sample_pcaps/quickstart.pcap")
    spark_args = ["spark", sample, "--out", str(out), "--master", "local[1]"]
    done = run_kwsniff(*spark_args, "--flow-buckets", "2", "--range-size", "16KiB")
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.fullmatch(
        r"1 captures on local\[1\] in [0-9.]+ s; quickstart.pcap split into 2 flow buckets",
        done.stdout.splitlines()[0],
    )
    assert f"{out / 'requests'}/ (75 rows), {out / 'connections'}/ (16 rows)" in done.stdout
    assert {t: ds.dataset(out / t, partitioning="hive").count_rows() for t in ("requests", "groups")} == {
        "requests": 75,
        "groups": 12,
    }
    # The report's summaries of the capture, written by the driver beside the tables.
    assert ds.dataset(out / "summary_captures").to_table().to_pylist() == [
        {"capture": "quickstart.pcap", "version": SUMMARY_VERSION}
    ]
    assert ds.dataset(out / "summary_lag").count_rows() == 9
    again = run_kwsniff(*spark_args)
    assert again.returncode == 1
    assert again.stderr.endswith(
        f"already holds {', '.join(DEFAULT_TABLES)}; use --overwrite to replace them\n"
    )
    # The sections the text and the four plots below are drawn from.
    sections = ["rebalances", "lag", "throughput", "produce_latency", "latency"]
    done = report_on_spark(out, sections, "--plots", str(plots))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "\nRebalances (2 rows)\n" in done.stdout
    assert "quickstart-group  0           1        range" in done.stdout
    assert sorted(p.name for p in plots.iterdir()) == [
        "lag_seconds.png",
        "latency_by_api.png",
        "produce_latency.png",
        "throughput.png",
    ]


def test_an_input_that_is_not_a_capture_fails_alone(spark: Any, tmp_path: Path) -> None:
    bad = tmp_path / "notes.pcap"
    bad.write_text("not a capture")
    decoded = decode(spark, [str(bad), str(CAPTURES[-1])], buckets=2)
    assert decoded.failed() == [("notes.pcap", "not a pcap or pcapng file (starts with b'not ')")]
    assert decoded.notes == []
    assert decoded.rows["requests"] == 75  # the good capture is decoded all the same


def test_inputs_of_one_file_name_are_named_by_path(spark: Any, tmp_path: Path) -> None:
    import shutil

    paths = []
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        paths.append(str(shutil.copy(CAPTURES[-1], tmp_path / d / "cap.pcap")))
    decoded = decode(spark, paths, buckets=2)
    write(decoded, tmp_path / "out")
    conns = ds.dataset(tmp_path / "out" / "connections", partitioning="hive").to_table().to_pylist()
    assert sorted(Counter(r["capture"] for r in conns).items()) == [(paths[0], 16), (paths[1], 16)]
    assert sorted(r["conn_id"] for r in conns if r["capture"] == paths[1]) == list(range(1, 17))


def test_a_capture_that_cannot_be_indexed_is_read_whole_by_each_bucket(spark: Any, tmp_path: Path) -> None:
    import gzip

    gz = tmp_path / "quickstart.pcap.gz"
    gz.write_bytes(gzip.compress(CAPTURES[-1].read_bytes()))
    decoded = decode(spark, [str(gz)], buckets=2, range_bytes=4096)
    assert decoded.notes == [
        (str(gz), "not indexed by byte range (gzip-compressed): each flow bucket task reads the whole file")
    ]
    assert decoded.failed() == [] and decoded.rows["requests"] == 75


def test_spark_workers_run_the_drivers_interpreter() -> None:
    """In a virtual environment the first `python3` on PATH is another interpreter, maybe one without
    kwsniff; kwsniff's session makes the workers run the driver's own (here: the tests')."""
    code = (
        "import sys; from kwsniff.spark.pipeline import spark_session; s = spark_session('local[1]'); "
        "print(s.sparkContext.parallelize([0], 1).map(lambda _: __import__('sys').executable).collect()[0]); "
        "s.stop()"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == sys.executable


def test_local_mode_gets_the_light_jvm_and_kwsniffs_daemon_unless_set() -> None:
    assert decode_conf("local[2]", {}) == {
        "spark.driver.extraJavaOptions": LIGHT_JVM,
        "spark.python.daemon.module": "kwsniff.spark.daemon",
        "spark.executorEnv.PYTHONSAFEPATH": "1",
    }
    mine = {
        "spark.python.daemon.module": "pyspark.daemon",
        "spark.driver.extraJavaOptions": "-Xmx2g",
        "spark.executorEnv.PYTHONSAFEPATH": "",
    }
    assert decode_conf("local[*]", mine) == mine
    assert decode_conf("spark://head:7077", {}) == {}


def test_the_daemon_preloads_without_starting_a_thread() -> None:
    """A fork copies only the forking thread: what the daemon imports before it forks starts none."""
    code = (
        "import os, sys; from kwsniff.spark import daemon; daemon.preload(); "
        "print(len(os.listdir('/proc/self/task')), all(m in sys.modules for m in daemon.PRELOADED), "
        "'pyarrow' in sys.modules)"
    )
    assert run_python(code, timeout=120) == ["1 True False"]


def test_local_workers_are_forked_by_kwsniffs_daemon_and_never_import_pandas() -> None:
    """`kwsniff spark`'s session in local mode: the workers come from kwsniff.spark.daemon, and a
    task (status rows built with pyarrow) does not make them import pandas (1-2 s of CPU each)."""
    code = (
        "import sys, pyarrow as pa\n"
        "from kwsniff.spark.pipeline import decode_conf, one_task_each, spark_session\n"
        "s = spark_session('local[1]', conf=decode_conf('local[1]', {}), quiet=True)\n"
        "def work(_):\n"
        "    import os, sys\n"
        "    parent = open(f'/proc/{os.getppid()}/cmdline').read().split(chr(0))\n"
        "    yield pa.RecordBatch.from_pylist([{'status': parent[2]}, {'status': str('pandas' in sys.modules)}])\n"
        "schema = pa.schema([('status', pa.string())])\n"
        "print(*one_task_each(s, [0], work, schema).toArrow().column('status').to_pylist())\n"
        "s.stop()\n"
    )
    assert run_python(code, timeout=300)[-1] == "kwsniff.spark.daemon False"
