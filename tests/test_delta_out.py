"""`--out` as a URI (issue 47, goal 1; docs/delta.md): `read` and `Tables.write` write Delta tables to a
real S3 server (SeaweedFS, tests/seaweed.py) or to `file://` paths, and `report` reads them back from
the log. Every table holds exactly the rows a directory dataset of the same inputs holds, each row
partitioned by the capturing host and the UTC day; a URI kwsniff cannot write is one line before
anything is decoded, and never a local folder named after it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
import pytest
from deltalake import DeltaTable
from seaweed import SeaweedS3, seaweed_s3

import kwsniff
from kwsniff.sinks.delta import table_dataset, utc_day
from kwsniff.sinks.location import parse_location

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = [ROOT / "tests/data/captures/kafka_python.pcap", ROOT / "tests/data/captures/produce_codecs.pcap"]
TABLES = ("requests", "connections", "errors", "partitions", "groups", "captures")
# Columns that differ between two reads of the same input (when it was decoded, how long it took).
WALL_CLOCK = {"started", "duration_ms", "date", "host"}
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    with seaweed_s3(tmp_path_factory.mktemp("seaweed")) as server:
        yield server


def kwsniff_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
        cwd=cwd,
        check=False,
    )


def plain_rows(directory: Path, table: str) -> Counter[tuple[Any, ...]]:
    """The rows of a directory dataset's table, wall-clock columns left out, counted."""
    data = pads.dataset(str(directory / table), format="parquet").to_table()
    return _counted(data)


def delta_rows(uri: str, table: str, options: dict[str, str] | None = None) -> Counter[tuple[Any, ...]]:
    return _counted(table_dataset(parse_location(uri, options), table).to_table())


def _counted(data: Any) -> Counter[tuple[Any, ...]]:
    names = sorted(n for n in data.column_names if n not in WALL_CLOCK)
    columns = [data.column(n).to_pylist() for n in names]
    return Counter(tuple(map(repr, row)) for row in zip(*columns, strict=True))


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plain") / "tables"
    done = kwsniff_cli("read", "-q", *map(str, CAPTURES), "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def test_read_to_s3_writes_the_rows_of_a_directory_dataset_by_host_and_day(
    s3: SeaweedS3, plain: Path
) -> None:
    uri = s3.uri("read-host")
    done = kwsniff_cli("read", *map(str, CAPTURES), "--out", uri, "--host", "broker-7", env=s3.env())
    assert done.returncode == 0, done.stderr
    assert f"tables: {uri}/requests/ (" in done.stdout
    options = s3.storage_options()
    for table in TABLES:
        assert delta_rows(uri, table, options) == plain_rows(plain, table), table
    requests = table_dataset(parse_location(uri, options), "requests").to_table(
        columns=["capture", "ts_request", "host", "date"]
    )
    assert set(requests.column("host").to_pylist()) == {"broker-7"}
    # Each input's rows sit in the UTC day of its first request.
    first: dict[str, int] = {}
    for capture, ts in zip(
        requests.column("capture").to_pylist(), requests.column("ts_request").to_pylist(), strict=True
    ):
        if ts is not None:
            us = int(ts.timestamp() * 1_000_000)
            first[capture] = min(first.get(capture, us), us)
    days = Counter(
        zip(requests.column("capture").to_pylist(), requests.column("date").to_pylist(), strict=True)
    )
    assert {c for c, _ in days} == {p.name for p in CAPTURES}
    for (capture, day), _ in days.items():
        assert day == utc_day(first[capture]), (capture, day)
    # Every object is a table's: its log, or a data file under date=/host=.
    keys = s3.keys("read-host/")
    assert keys and all("/_delta_log/" in k or "/date=" in k for k in keys), keys[:5]


def test_report_of_an_s3_table_equals_the_report_of_the_same_data_on_disk(s3: SeaweedS3, plain: Path) -> None:
    uri = s3.uri("report-same")
    assert kwsniff_cli("read", "-q", *map(str, CAPTURES), "--out", uri, env=s3.env()).returncode == 0
    on_disk = kwsniff_cli("report", str(plain))
    on_s3 = kwsniff_cli("report", uri, env=s3.env())
    assert on_disk.returncode == on_s3.returncode == 0, on_s3.stderr
    assert on_s3.stdout == on_disk.stdout
    assert "lag" in on_s3.stdout and len(on_s3.stdout.splitlines()) > 40
    as_json = kwsniff_cli("report", uri, "--format", "json", env=s3.env())
    assert as_json.stdout == kwsniff_cli("report", str(plain), "--format", "json").stdout


def test_tables_write_to_s3_and_the_api_report_read_it(s3: SeaweedS3, plain: Path) -> None:
    uri = s3.uri("api-write")
    tables = kwsniff.read([str(p) for p in CAPTURES])
    assert tables.write(uri, host="api-host", storage_options=s3.storage_options()) == uri
    for table in TABLES:
        assert delta_rows(uri, table, s3.storage_options()) == plain_rows(plain, table), table
    with pytest.raises(kwsniff.OutputError, match="already holds Delta tables"):
        tables.write(uri, storage_options=s3.storage_options())


def test_refused_credentials_are_one_line_before_anything_is_decoded(s3: SeaweedS3) -> None:
    env = {**s3.env(), "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    done = kwsniff_cli("read", str(CAPTURES[0]), "--out", s3.uri("refused"), env=env)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kwsniff: error: --out {s3.uri('refused')}: "), lines
    assert s3.keys("refused") == []
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("out", "extra", "message"),
    [
        (
            "gs://bucket/tables",
            (),
            "--out gs://bucket/tables: unknown scheme gs:// (kwsniff writes a path or s3://bucket/prefix)",
        ),
        ("s3:///tables", (), "--out s3:///tables: no bucket (expected s3://bucket/prefix)"),
        (
            "tables",
            ("--storage-option", "AWS_REGION=x"),
            "--storage-option applies to s3:// outputs, not the directory tables",
        ),
    ],
)
def test_an_out_kwsniff_cannot_write_is_one_line_and_no_folder(
    tmp_path: Path, out: str, extra: tuple[str, ...], message: str
) -> None:
    done = kwsniff_cli("read", str(CAPTURES[0]), "--out", out, *extra, cwd=tmp_path)
    assert (done.returncode, done.stderr, done.stdout) == (1, f"kwsniff: error: {message}\n", "")
    assert list(tmp_path.iterdir()) == []  # no `gs:` or `s3:` folder, no `tables`


def test_file_uri_tables_refuse_append_and_overwrite_as_a_directory_does(tmp_path: Path, plain: Path) -> None:
    uri = f"file://{tmp_path}/delta"
    one = [str(CAPTURES[0])]
    assert kwsniff_cli("read", "-q", *one, "--out", uri).returncode == 0
    again = kwsniff_cli("read", "-q", *one, "--out", uri)
    assert again.returncode == 1
    assert again.stderr.startswith(
        f"kwsniff: error: --out {tmp_path}/delta: already holds Delta tables (requests, "
    )
    assert kwsniff_cli("read", "-q", str(CAPTURES[1]), "--out", uri, "--append").returncode == 0
    for table in TABLES:
        assert delta_rows(uri, table) == plain_rows(plain, table), table
    # An input read again replaces its own rows, in one commit per table: each row once.
    versions = {t: DeltaTable(f"{tmp_path}/delta/{t}").version() for t in TABLES}
    assert kwsniff_cli("read", "-q", str(CAPTURES[1]), "--out", uri, "--append").returncode == 0
    for table in TABLES:
        assert delta_rows(uri, table) == plain_rows(plain, table), table
        assert DeltaTable(f"{tmp_path}/delta/{table}").version() == versions[table] + 1, table
    assert kwsniff_cli("read", "-q", *one, "--out", uri, "--overwrite").returncode == 0
    captures = table_dataset(parse_location(uri), "requests").to_table(columns=["capture"]).column("capture")
    assert set(captures.to_pylist()) == {CAPTURES[0].name}
    # The report reads the log's files, the same answer by path or by URI.
    assert kwsniff_cli("report", uri).stdout == kwsniff_cli("report", str(tmp_path / "delta")).stdout


def test_write_options_refuse_the_same_values_in_the_command_and_the_api(tmp_path: Path) -> None:
    done = kwsniff_cli("read", str(CAPTURES[0]), "--out", f"file://{tmp_path}/x", "--host", " spaced")
    assert done.returncode == 2
    command_says = done.stderr.strip().splitlines()[-1]
    tables = kwsniff.read(str(CAPTURES[0]))
    with pytest.raises(kwsniff.UsageError) as raised:
        tables.write(f"file://{tmp_path}/x", host=" spaced")
    assert "Invalid value for '--host': ' spaced' is not a host name" in command_says
    assert "Invalid value for " + str(raised.value).split("Invalid value for ")[1] in command_says
    with pytest.raises(kwsniff.UsageError, match="storage_option=.*is not KEY=VALUE"):
        tables.write(f"file://{tmp_path}/x", storage_options={"": "v"})
    assert not os.path.exists(tmp_path / "x")


def test_spark_to_s3_commits_the_rows_read_writes(s3: SeaweedS3, plain: Path) -> None:
    """`spark --out s3://...`: each executor's task uploads its files into the tables' storage and
    the driver commits them, each table in one log entry; the tables hold the rows `read` writes for
    the same inputs."""
    uri = s3.uri("spark-out")
    done = kwsniff_cli(
        "spark",
        *map(str, CAPTURES),
        "--out",
        uri,
        "--master",
        "local[2]",
        "--host",
        "spark-host",
        "-q",
        env=s3.env(),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    options = s3.storage_options()
    for table in ("requests", "partitions", "errors", "groups", "captures"):
        got, want = delta_rows(uri, table, options), plain_rows(plain, table)
        if table == "captures":  # spark's captures rows say where its input was and how it ran
            assert len(got) == len(want) == len(CAPTURES)
            continue
        assert got == want, table
    hosts = table_dataset(parse_location(uri, options), "requests").to_table(columns=["host"]).column("host")
    assert set(hosts.to_pylist()) == {"spark-host"}
    assert s3.keys("spark-out/") and not any("_kwsniff" in k or "stage" in k for k in s3.keys("spark-out/"))
    # The decoded tables' files are the tasks' uploads (one per capture with rows), committed at once:
    # version 0 made the table, version 1 added them.
    for table in ("requests", "partitions"):
        delta = DeltaTable(f"{uri}/{table}", storage_options=options)
        names = [Path(p).name for p in delta.file_uris()]
        assert delta.version() == 1, table
        assert sorted(n.split("-task-")[0] for n in names) == sorted(c.name for c in CAPTURES), names


def test_spark_to_s3_decodes_each_capture_in_one_task_and_refuses_flow_buckets(s3: SeaweedS3) -> None:
    done = kwsniff_cli(
        "spark", str(CAPTURES[0]), "--out", s3.uri("spark-buckets"), "--flow-buckets", "2", env=s3.env()
    )
    assert done.returncode == 2
    assert (
        f"--out {s3.uri('spark-buckets')}: each capture is decoded in one task: no --flow-buckets"
        in done.stderr
    )
    assert "Traceback" not in done.stderr


def test_a_live_outputs_upkeep_runs_at_the_first_commit_after_each_hour_not_an_hour_after_its_start(
    tmp_path: Path,
) -> None:
    """A capture started at 10:59:30 compacts the hour 10:00-11:00 at its first commit after 11:00
    (not at 11:59:30, which left up to two hours of period files between compactions), and the next
    upkeep is at the first commit after 12:00."""
    from kwsniff.sinks import ExistingOutput, ParquetSink
    from kwsniff.sinks.delta_output import DeltaOutput

    hour = 3600 * (int(time.time()) // 3600)
    clock = [hour - 30.0]  # 30 s before the hour
    location = parse_location(tmp_path / "live")
    output = DeltaOutput(location, ExistingOutput.REFUSE, "h", upkeep_s=3600, clock=lambda: clock[0])

    def period(seq: int) -> None:
        start_us = int(clock[0] * 1_000_000)
        with ParquetSink(output.stage, f"cap-{seq:06d}", ("capture_stats",)) as sink:
            sink.add(
                "capture_stats",
                {"capture": "cap", "period_start": start_us, "period_end": start_us + 10_000_000, "packets": seq,
                 "bytes": 0, "kernel_drops": 0, "if_drops": 0, "queue_drops": 0, "worker": 0},
            )  # fmt: skip
        output.commit(again=True)

    upkeeps = []
    for seq, at in enumerate((-30, -20, -10, 5, 15, 1800, 3599, 3601), 1):
        clock[0] = hour + at
        period(seq)
        upkeeps.append(output.upkeeps)
    output.close()
    assert upkeeps == [0, 0, 0, 1, 1, 1, 1, 2]
    # The first upkeep compacted the three files of the hour before, the second the four of the hour
    # after; the file staged after 12:00 waits for its hour to end.
    dataset = table_dataset(location, "capture_stats")
    names = sorted(Path(f).name.rsplit("-", 1)[0] for f in dataset.files)
    before, after = (time.strftime("%Y-%m-%d-h%H", time.gmtime(hour + d)) for d in (-30, 5))
    assert names == sorted([f"compacted-{before}", f"compacted-{after}", "cap-000008"])
    assert dataset.count_rows() == 8


def test_a_live_outputs_hourly_upkeep_compacts_its_hours_and_drops_days_past_retain(tmp_path: Path) -> None:
    """`capture --retain 7d` (kwsniff.sinks.delta_output.DeltaOutput with upkeep): an hour after the
    last upkeep, the next commit compacts this host's finished hours and removes its days older than
    the retention, on a clock the test moves."""
    from kwsniff.sinks import ExistingOutput, ParquetSink
    from kwsniff.sinks.delta_output import DeltaOutput

    clock = [time.time()]
    location = parse_location(tmp_path / "live")
    output = DeltaOutput(
        location, ExistingOutput.REFUSE, "h", upkeep_s=3600, retain_s=7 * 86_400, clock=lambda: clock[0]
    )
    now_us = int(clock[0] * 1_000_000)
    old_us = now_us - 10 * 86_400 * 1_000_000

    def period(seq: int, start_us: int) -> None:
        with ParquetSink(output.stage, f"cap-{seq:06d}", ("capture_stats",)) as sink:
            sink.add(
                "capture_stats",
                {"capture": "cap", "period_start": start_us, "period_end": start_us + 60_000_000, "packets": seq,
                 "bytes": 0, "kernel_drops": 0, "if_drops": 0, "queue_drops": 0, "worker": 0},
            )  # fmt: skip
        output.commit(again=True)

    for seq, start in enumerate((old_us, now_us, now_us), 1):
        period(seq, start)
    stats = table_dataset(location, "capture_stats")
    assert (output.upkeeps, stats.count_rows(), len(stats.files)) == (0, 3, 3)
    clock[0] += 2 * 3600  # the hour the files were staged in is over, and an upkeep is due
    period(4, now_us)
    output.close()
    stats = table_dataset(location, "capture_stats")
    rows = stats.to_table(columns=["packets", "date"]).to_pylist()
    assert output.upkeeps == 1
    assert sorted(r["packets"] for r in rows) == [2, 3, 4]  # the day ten days back is gone
    assert {r["date"] for r in rows} == {utc_day(now_us)}
    # this hour's three files compacted into one; the fourth, staged two hours on, waits for its hour
    assert sorted(Path(f).name.split("-")[0] for f in stats.files) == ["cap", "compacted"]
