"""Compaction, retention, vacuum and log checkpoints of kwsniff's Delta tables
(kwsniff/sinks/delta_upkeep.py, `kwsniff compact`, `kwsniff retain`; docs/delta.md), on local disk and
on a real S3 server (SeaweedFS, tests/seaweed.py). The writers run on a fake clock, so the hours and
days of the files are the test's own; every row is checked to be there exactly once."""

from __future__ import annotations

import hashlib
import math
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from delta_writer import ROWS_PER_FILE, write_file
from deltalake import DeltaTable
from seaweed import SeaweedS3, seaweed_s3

from kwsniff.core.values import BadValue, duration
from kwsniff.sinks.delta import (
    TABLE_PROPERTIES,
    DeltaTableError,
    DeltaTableWriter,
    dataset_tables,
    table_dataset,
    utc_day,
)
from kwsniff.sinks.delta_upkeep import (
    compact_table,
    retain_table,
    stored_files,
    upkeep_table,
    vacuum_table,
)
from kwsniff.sinks.location import Location, parse_location
from kwsniff.tables.schemas import SCHEMAS

ROOT = Path(__file__).resolve().parent.parent
HOUR = 3600
DAY = 86_400
MIDNIGHT = 1_796_515_200.0  # 2026-12-06T00:00:00Z
PROCESS_TIMEOUT_S = 120.0


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


class FakeClock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def rows(location: Location) -> Counter[tuple[str, int, str, str]]:
    """(capture, conn_id, date, host) of every row the table's current version holds, counted."""
    names = ("capture", "conn_id", "date", "host")
    table = table_dataset(location, "requests").to_table(columns=list(names))
    return Counter(zip(*(table.column(n).to_pylist() for n in names), strict=True))


def digest(location: Location) -> str:
    """A digest of the table's rows (every column but the file-level ones), in a fixed order."""
    table = table_dataset(location, "requests").to_table()
    lines = sorted(repr(row) for row in table.to_pylist())
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def write_periods(
    writer: DeltaTableWriter, clock: FakeClock, tmp_path: Path, periods: int, date: str, host: str
) -> list[str]:
    """One file a minute from the clock's time on, each its own commit; returns the captures."""
    captures = []
    for _ in range(periods):
        capture = f"{host}-{int(clock.now)}"
        writer.append_files([(write_file(tmp_path / "spool", capture), date, host)])
        captures.append(capture)
        clock.now += 60
    return captures


def active_paths(location: Location) -> list[str]:
    delta = DeltaTable(location.table_uri("requests"), storage_options=dict(location.storage_options))
    return sorted(p.removeprefix(location.table_uri("requests") + "/") for p in delta.file_uris())


def test_each_finished_hour_becomes_one_file_per_host_with_the_same_rows(
    location: Location, tmp_path: Path
) -> None:
    clock = FakeClock(MIDNIGHT)
    writers = {
        host: DeltaTableWriter(location, "requests", SCHEMAS["requests"], clock=clock)
        for host in ("h1", "h2")
    }
    # 10:00 to 12:20 for two hosts: hours 10 and 11 are finished at 12:20, hour 12 is not.
    for minute in range(140):
        clock.now = MIDNIGHT + 10 * HOUR + 60 * minute
        for host, writer in writers.items():
            writer.append_files([(write_file(tmp_path / "spool", f"{host}-{minute}"), "2026-12-06", host)])
    before, before_digest = rows(location), digest(location)
    assert len(active_paths(location)) == 280

    clock.now = MIDNIGHT + 12 * HOUR + 20 * 60
    done = compact_table(location, "requests", now=clock.now)

    assert (done.hours, done.files_removed, done.files_added) == (4, 240, 4)
    assert done.rows == 240 * ROWS_PER_FILE
    assert len(active_paths(location)) == 4 + 2 * 20  # an hour's file per host, and hour 12's files
    assert rows(location) == before
    assert digest(location) == before_digest
    history = DeltaTable(
        location.table_uri("requests"), storage_options=dict(location.storage_options)
    ).history(1)
    assert history[0]["operation"] == "WRITE"

    again = compact_table(location, "requests", now=clock.now)
    assert (again.hours, again.files_removed, again.version) == (0, 0, None)


def test_a_file_staged_late_into_a_compacted_hour_joins_its_file(location: Location, tmp_path: Path) -> None:
    clock = FakeClock(MIDNIGHT + 3 * HOUR)
    writer = DeltaTableWriter(location, "requests", SCHEMAS["requests"], clock=clock)
    write_periods(writer, clock, tmp_path, 30, "2026-12-06", "h")
    assert compact_table(location, "requests", now=MIDNIGHT + 4 * HOUR).files_added == 1
    clock.now = MIDNIGHT + 3 * HOUR + 59 * 60  # a writer whose period ended in hour 3, staged late
    write_periods(writer, clock, tmp_path, 1, "2026-12-06", "h")
    before = rows(location)

    done = compact_table(location, "requests", now=MIDNIGHT + 5 * HOUR)

    assert (done.hours, done.files_removed, done.files_added) == (1, 2, 1)
    assert len(active_paths(location)) == 1
    assert rows(location) == before
    assert sum(before.values()) == 31 * ROWS_PER_FILE


def test_after_compaction_and_vacuum_a_reader_sees_each_row_once_and_the_old_files_are_gone(
    location: Location, tmp_path: Path
) -> None:
    # On the real clock, so that the table's hour of grace before a vacuum holds.
    clock = FakeClock(math.floor(time.time() / HOUR) * HOUR - 2 * HOUR)
    writer = DeltaTableWriter(location, "requests", SCHEMAS["requests"], clock=clock)
    write_periods(writer, clock, tmp_path, 90, utc_day(int(clock.now * 1e6)), "h")
    assert len(stored_files(location, "requests")) == 90

    done = compact_table(location, "requests")
    assert (done.hours, done.files_removed, done.files_added) == (2, 90, 2)
    # Within the grace the replaced files stay on storage, out of the table: a reader lists the log.
    assert len(stored_files(location, "requests")) == 92
    assert vacuum_table(location, "requests") == []
    dataset = table_dataset(location, "requests")
    assert len(dataset.files) == 2
    count, distinct = (
        duckdb.from_arrow(dataset).aggregate("count(*), count(DISTINCT (capture, conn_id))").fetchall()[0]
    )
    assert count == distinct == 90 * ROWS_PER_FILE

    deleted = vacuum_table(location, "requests", retention_hours=0)
    assert len(deleted) == 90
    assert stored_files(location, "requests") == active_paths(location)
    assert len(stored_files(location, "requests")) == 2
    assert sum(rows(location).values()) == 90 * ROWS_PER_FILE


def test_a_compaction_that_lost_to_another_changes_nothing(location: Location, tmp_path: Path) -> None:
    clock = FakeClock(MIDNIGHT)
    writer = DeltaTableWriter(location, "requests", SCHEMAS["requests"], clock=clock)
    write_periods(writer, clock, tmp_path, 5, "2026-12-06", "h")
    stale = DeltaTableWriter(location, "requests", None)  # a second compactor's view, read now
    compact_table(location, "requests", now=MIDNIGHT + 2 * HOUR)
    before = rows(location)
    assert sum(before.values()) == 5 * ROWS_PER_FILE

    from kwsniff.sinks.delta_upkeep import _active_files, _commit_while_active

    old = _active_files(stale.delta)
    with pytest.raises(DeltaTableError, match="another compaction or retention removed 5 of the files"):
        _commit_while_active(stale, [], [f.removed(0, data_change=False) for f in old])
    assert rows(location) == before


def test_retain_removes_exactly_the_days_before_the_cutoff(location: Location, tmp_path: Path) -> None:
    # On the real clock, so that the table's hour of grace before a vacuum holds.
    now = time.time()
    clock = FakeClock(now)
    writer = DeltaTableWriter(location, "requests", SCHEMAS["requests"], clock=clock)
    days = []
    for ago in range(9, -1, -1):  # ten days, two files each
        clock.now = now - ago * DAY - 600
        days.append(utc_day(int(clock.now * 1e6)))
        write_periods(writer, clock, tmp_path, 2, days[-1], "h")
    before = rows(location)

    done = retain_table(location, "requests", 7 * DAY, now=now)

    # The cutoff falls inside the day 7 days ago: that day is kept, the two before it are removed.
    assert done.first_kept_day == utc_day(int((now - 7 * DAY) * 1e6)) == days[2]
    assert (done.files_removed, done.rows_removed) == (4, 4 * ROWS_PER_FILE)
    assert rows(location) == Counter({k: n for k, n in before.items() if k[2] >= days[2]})
    assert sorted({k[2] for k in rows(location)}) == days[2:]
    assert done.files_deleted == 0  # within the grace: still on storage, out of the table
    assert len(stored_files(location, "requests")) == 20

    again = retain_table(location, "requests", 7 * DAY, now=now, vacuum_retention_hours=0)
    assert (again.files_removed, again.version, again.files_deleted) == (0, None, 4)
    assert stored_files(location, "requests") == active_paths(location)
    assert len(active_paths(location)) == 16


def test_a_captures_upkeep_compacts_and_retains_its_own_host_only(location: Location, tmp_path: Path) -> None:
    # Half past an hour: each host's three one-minute periods 2 hours before fall in one hour.
    now = time.time() // HOUR * HOUR - HOUR / 2
    clock = FakeClock(now)
    writer = DeltaTableWriter(location, "requests", SCHEMAS["requests"], clock=clock)
    for host in ("h1", "h2"):
        for ago in (10 * DAY, 2 * HOUR):  # a day past the retention, and a finished hour
            clock.now = now - ago
            write_periods(writer, clock, tmp_path, 3, utc_day(int(clock.now * 1e6)), host)
    before = rows(location)

    done = upkeep_table(location, "requests", host="h1", retain_s=7 * DAY, now=now)

    # h1: the old day's 3 files compacted into one, then that day removed; the hour's 3 into one.
    assert (done.compaction.hours, done.compaction.files_removed, done.compaction.files_added) == (2, 6, 2)
    assert done.retention is not None
    assert (done.retention.files_removed, done.retention.rows_removed) == (1, 3 * ROWS_PER_FILE)
    old_day = utc_day(int((now - 10 * DAY) * 1e6))
    assert rows(location) == Counter({k: n for k, n in before.items() if k[3] == "h2" or k[2] != old_day})
    files_by_host = Counter(path.split("/")[1] for path in active_paths(location))
    assert files_by_host == {"host=h1": 1, "host=h2": 6}


def test_a_writer_appends_after_another_removed_old_days_since_its_version(
    location: Location, tmp_path: Path
) -> None:
    now = time.time()
    clock = FakeClock(now - 10 * DAY)
    writer = DeltaTableWriter(location, "requests", SCHEMAS["requests"], clock=clock)
    old = write_periods(writer, clock, tmp_path, 2, utc_day(int(clock.now * 1e6)), "h")
    clock.now = now
    retain_table(location, "requests", 7 * DAY, now=now)  # another writer's commit of data removes

    new = write_periods(writer, clock, tmp_path, 1, utc_day(int(now * 1e6)), "h")

    captures = Counter(c for c, _, _, _ in rows(location))
    assert captures == Counter({new[0]: ROWS_PER_FILE})
    assert not set(old) & set(captures)


def test_tables_are_created_with_kwsniffs_checkpoint_and_retention_properties(location: Location) -> None:
    writer = DeltaTableWriter(location, "requests", SCHEMAS["requests"])
    assert writer.delta.metadata().configuration == TABLE_PROPERTIES
    assert dataset_tables(location) == ["requests"]


def test_old_log_entries_go_at_a_checkpoint_and_a_writer_behind_them_still_commits(tmp_path: Path) -> None:
    location = parse_location(tmp_path / "out")
    configuration = {**TABLE_PROPERTIES, "delta.checkpointInterval": "5"}
    behind = DeltaTableWriter(location, "requests", SCHEMAS["requests"], configuration)
    behind.append_files([(write_file(tmp_path / "spool", "behind-0"), "2026-12-06", "b")])
    ahead = DeltaTableWriter(location, "requests", SCHEMAS["requests"], configuration)
    log = tmp_path / "out" / "requests" / "_delta_log"
    for n in range(12):
        ahead.append_files([(write_file(tmp_path / "spool", f"ahead-{n}"), "2026-12-06", "a")])
        # The entries so far are two hours old, past the table's hour of log retention.
        for entry in log.glob("*.json"):
            os.utime(entry, (entry.stat().st_mtime - 2 * HOUR,) * 2)
    entries = sorted(p.name for p in log.iterdir())
    # Checkpoints at versions 4 and 9 (every 5th); at the second, the entries before the first went.
    assert entries[:2] == ["00000000000000000004.checkpoint.parquet", "00000000000000000004.json"]
    assert entries[-2:] == ["00000000000000000013.json", "_last_checkpoint"]
    assert behind.delta.version() == 1

    assert behind.append_files([(write_file(tmp_path / "spool", "behind-1"), "2026-12-06", "b")]) == 14
    captures = Counter(c for c, _, _, _ in rows(location))
    assert captures == Counter(
        {c: ROWS_PER_FILE for c in ["behind-0", "behind-1"] + [f"ahead-{n}" for n in range(12)]}
    )


def kwsniff_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {**(env or os.environ), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
    )


def test_compact_and_retain_commands_work_on_every_table_under_out(tmp_path: Path) -> None:
    location = parse_location(tmp_path / "out")
    clock = FakeClock(MIDNIGHT - 30 * DAY)  # an old month: its hours are finished, its days past 7
    writer = DeltaTableWriter(location, "requests", SCHEMAS["requests"], clock=clock)
    write_periods(writer, clock, tmp_path, 3, "2026-11-06", "h")
    before = rows(location)

    compacted = kwsniff_cli("compact", str(tmp_path / "out"))
    assert compacted.returncode == 0, compacted.stderr
    assert compacted.stdout == "requests: 3 files of 1 hours into 1 (21 rows); 0 replaced files deleted\n"
    assert rows(location) == before
    assert len(active_paths(location)) == 1

    retained = kwsniff_cli("retain", str(tmp_path / "out"), "--older-than", "7d")
    assert retained.returncode == 0, retained.stderr
    assert retained.stdout.startswith("requests: 1 files (21 rows) of the days before ")
    assert rows(location) == Counter()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compact", "gs://bucket/tables"], "gs://bucket/tables: unknown scheme gs://"),
        (["retain", "s3:///tables", "--older-than", "7d"], "s3:///tables: no bucket"),
        (["compact", "{tmp}/nothing"], "{tmp}/nothing: no Delta tables there"),
        (["compact", "{tmp}", "--table", "requests"], "{tmp}: no Delta table requests there"),
        (
            ["retain", "{tmp}", "--older-than", "soon"],
            "Invalid value for '--older-than': 'soon' is not a duration",
        ),
        (["compact", "{tmp}", "--storage-option", "no-equals"], "Invalid value for '--storage-option'"),
    ],
)
def test_a_bad_out_is_one_error_line(tmp_path: Path, args: list[str], message: str) -> None:
    done = kwsniff_cli(*(a.format(tmp=tmp_path) for a in args))
    assert done.returncode in (1, 2)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"kwsniff: error: {message.format(tmp=tmp_path)}")


def test_refused_credentials_on_s3_are_one_error_line(s3: SeaweedS3, tmp_path: Path) -> None:
    location = parse_location(s3.uri("refused"), s3.storage_options())
    DeltaTableWriter(location, "requests", SCHEMAS["requests"])
    env = {**s3.env(), "AWS_SECRET_ACCESS_KEY": "not-the-secret"}

    done = kwsniff_cli("compact", s3.uri("refused"), env=env)

    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kwsniff: error: {s3.uri('refused')}: "), done.stderr
    assert kwsniff_cli("compact", s3.uri("refused"), env=s3.env()).returncode == 0


def test_a_duration_takes_a_unit() -> None:
    assert [duration(v) for v in ("7d", "12h", "30m", "90s", "2w", "1.5h", 60)] == [
        7 * DAY,
        12 * HOUR,
        1800.0,
        90.0,
        14 * DAY,
        5400.0,
        60.0,
    ]
    for bad in ("0d", "7 days", "-1h", "", True):
        with pytest.raises(BadValue):
            duration(bad)
