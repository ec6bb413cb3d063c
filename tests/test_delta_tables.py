"""Delta tables (kwsniff/sinks/delta.py, docs/delta.md) on local disk and on a real S3 server
(SeaweedFS, tests/seaweed.py): one commit per set of files, many writers at once, a writer killed
between staging and committing, compaction and vacuum. Every row is checked to be there exactly once,
through deltalake's Arrow dataset and through DuckDB over it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from delta_writer import DATE, ROWS_PER_FILE, write_file
from deltalake import DeltaTable
from seaweed import SeaweedS3, seaweed_s3

from kwsniff.sinks.delta import DeltaTableWriter, table_dataset, utc_day
from kwsniff.sinks.delta_upkeep import vacuum_table
from kwsniff.sinks.location import Location, LocationError, parse_location
from kwsniff.tables.schemas import SCHEMAS

ROOT = Path(__file__).resolve().parent.parent
WRITER = Path(__file__).resolve().parent / "delta_writer.py"
PROCESS_TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    with seaweed_s3(tmp_path_factory.mktemp("seaweed")) as server:
        yield server


@pytest.fixture(params=["local", "s3"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    if request.param == "local":
        return parse_location(tmp_path / "out")
    server: SeaweedS3 = request.getfixturevalue("s3")
    return parse_location(server.uri(f"{request.node.name}-{os.getpid()}"), server.storage_options())


def rows_by_file(location: Location) -> Counter[tuple[str, int, str]]:
    """(capture, conn_id, host) of every row the table's current version holds, counted."""
    table = table_dataset(location, "requests").to_table(columns=["capture", "conn_id", "host"])
    return Counter(zip(*(table.column(n).to_pylist() for n in ("capture", "conn_id", "host")), strict=True))


def expected(captures: list[str], host: str) -> Counter[tuple[str, int, str]]:
    return Counter((c, conn_id, host) for c in captures for conn_id in range(ROWS_PER_FILE))


def duckdb_counts(location: Location) -> tuple[int, int]:
    dataset = table_dataset(location, "requests")
    rows = duckdb.from_arrow(dataset).aggregate("count(*), count(DISTINCT (capture, conn_id))").fetchall()
    return rows[0]


def writer_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}


def writer_argv(location: Location, writer: str, commits: int, files: int, *extra: str) -> list[str]:
    return [sys.executable, str(WRITER), location.uri, "requests", writer, str(commits), str(files), *extra]


def writer_process_env(location: Location) -> dict[str, str]:
    return {**writer_env(), **location.storage_options}


def test_one_commit_appends_every_file_and_readers_see_each_row_once(
    location: Location, tmp_path: Path
) -> None:
    writer = DeltaTableWriter(location, "requests", SCHEMAS["requests"])
    captures = [f"cap-{i}" for i in range(5)]
    paths = [write_file(tmp_path / "spool", c) for c in captures]
    version = writer.append_files((p, DATE, "broker-1") for p in paths)

    assert version == 1  # the create, then this one commit
    assert rows_by_file(location) == expected(captures, "broker-1")
    assert duckdb_counts(location) == (5 * ROWS_PER_FILE, 5 * ROWS_PER_FILE)
    history = DeltaTable(
        location.table_uri("requests"), storage_options=dict(location.storage_options)
    ).history()
    assert [h["operation"] for h in history] == ["WRITE", "CREATE TABLE"]
    assert [p.exists() for p in paths] == [False] * 5  # the files now belong to the table
    dates = table_dataset(location, "requests").to_table(columns=["date"]).column("date").unique().to_pylist()
    assert dates == [DATE]


def test_overwrite_replaces_every_file_in_one_commit(location: Location, tmp_path: Path) -> None:
    writer = DeltaTableWriter(location, "requests", SCHEMAS["requests"])
    writer.append_files([(write_file(tmp_path / "spool", "old"), DATE, "h")])
    staged = [
        writer.stage(write_file(tmp_path / "spool", c), date=DATE, host="h") for c in ("new-0", "new-1")
    ]
    assert writer.commit(staged, overwrite=True) == 2
    assert rows_by_file(location) == expected(["new-0", "new-1"], "h")


def test_four_processes_appending_at_once_commit_every_append_once(s3: SeaweedS3, tmp_path: Path) -> None:
    location = parse_location(s3.uri("concurrent"), s3.storage_options())
    DeltaTableWriter(
        location, "requests", SCHEMAS["requests"]
    )  # version 0, so that no writer races to create
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            writer_argv(location, f"w{w}", 6, 2, "--go", str(go)),
            env=writer_process_env(location),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(4)
    ]
    go.touch()
    outputs = [proc.communicate(timeout=PROCESS_TIMEOUT_S) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 4, [err[-2000:] for _, err in outputs]

    delta = DeltaTable(location.table_uri("requests"), storage_options=dict(location.storage_options))
    assert delta.version() == 24
    assert Counter(h["operation"] for h in delta.history()) == {"WRITE": 24, "CREATE TABLE": 1}
    want: Counter[tuple[str, int, str]] = Counter()
    for w in range(4):
        want += expected([f"w{w}-{c}-{f}" for c in range(6) for f in range(2)], f"w{w}")
    assert rows_by_file(location) == want
    assert duckdb_counts(location) == (48 * ROWS_PER_FILE, 48 * ROWS_PER_FILE)


def test_writers_that_create_the_table_at_once_all_commit_to_one_table(
    location: Location, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            writer_argv(location, f"c{w}", 1, 1, "--go", str(go)),
            env=writer_process_env(location),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(3)
    ]
    go.touch()
    outputs = [proc.communicate(timeout=PROCESS_TIMEOUT_S) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 3, [err[-2000:] for _, err in outputs]

    delta = DeltaTable(location.table_uri("requests"), storage_options=dict(location.storage_options))
    assert Counter(h["operation"] for h in delta.history()) == {"WRITE": 3, "CREATE TABLE": 1}
    want: Counter[tuple[str, int, str]] = Counter()
    for w in range(3):
        want += expected([f"c{w}-0-0"], f"c{w}")
    assert rows_by_file(location) == want


def test_writer_killed_between_staging_and_commit_leaves_the_table_whole(
    location: Location, tmp_path: Path
) -> None:
    writer = DeltaTableWriter(location, "requests", SCHEMAS["requests"])
    writer.append_files([(write_file(tmp_path / "spool", "kept"), DATE, "h")])
    proc = subprocess.Popen(
        writer_argv(location, "killed", 1, 3, "--stage-and-wait"),
        env=writer_process_env(location),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[0] == "staged", line
        staged = line[1:]
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=PROCESS_TIMEOUT_S) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()

    assert len(staged) == 3
    fs, root = location.filesystem()
    table_root = f"{root}/requests"
    assert all(fs.get_file_info(f"{table_root}/{p}").is_file for p in staged)  # on storage, in no commit
    assert rows_by_file(location) == expected(["kept"], "h")
    assert duckdb_counts(location) == (ROWS_PER_FILE, ROWS_PER_FILE)

    removed = vacuum_table(location, "requests", retention_hours=0, full=True)
    assert sorted(Path(p).name for p in removed) == sorted(Path(p).name for p in staged)
    assert not any(fs.get_file_info(f"{table_root}/{p}").is_file for p in staged)
    assert rows_by_file(location) == expected(["kept"], "h")


def test_a_resumed_writer_finds_its_last_committed_app_version(location: Location, tmp_path: Path) -> None:
    writer = DeltaTableWriter(location, "requests", SCHEMAS["requests"])
    staged = [writer.stage(write_file(tmp_path / "spool", "a"), date=DATE, host="h")]
    writer.commit(staged, app_id="capture-h", app_version=41)
    again = DeltaTableWriter(location, "requests", SCHEMAS["requests"])
    assert again.app_version_of("capture-h") == 41
    assert again.app_version_of("capture-other") is None


def test_date_partition_is_the_utc_day() -> None:
    assert utc_day(0) == "1970-01-01"
    assert utc_day(1_796_662_470_183_734) == "2026-12-07"
    assert utc_day(86_400_000_000 - 1) == "1970-01-01"


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("gs://bucket/tables", "gs://bucket/tables: unknown scheme gs://"),
        ("s3:///tables", "s3:///tables: no bucket"),
        ("http://host/x", "http://host/x: unknown scheme http://"),
    ],
)
def test_a_uri_kwsniff_cannot_write_is_refused(out: str, message: str) -> None:
    with pytest.raises(LocationError) as raised:
        parse_location(out)
    assert str(raised.value).startswith(message)


def test_s3_options_come_from_the_aws_variables_and_explicit_options_win() -> None:
    environ = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "env-key", "HOME": "/x"}
    location = parse_location("s3a://bucket/a/b/", {"AWS_ACCESS_KEY_ID": "given"}, environ)
    assert location.uri == "s3://bucket/a/b"
    assert dict(location.storage_options) == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ACCESS_KEY_ID": "given",
        "AWS_ALLOW_HTTP": "true",
    }
    assert location.table_uri("requests") == "s3://bucket/a/b/requests"


def test_a_local_path_is_absolute_and_takes_no_storage_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_location("tables").uri == str(tmp_path / "tables")
    assert parse_location("tables").is_local
    with pytest.raises(LocationError):
        parse_location("tables", {"AWS_REGION": "x"})


def test_importing_the_delta_sink_does_not_load_deltalake() -> None:
    code = "import sys, kwsniff.sinks.delta, kwsniff.sinks.location; print('deltalake' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=writer_env(), capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "False", out.stderr
