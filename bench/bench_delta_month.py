"""A month of one-minute periods into a Delta table, on local disk, with hourly compaction and daily
retention of 7 days, on a fake clock: does a commit stay as cheap at period 43,200 as at period 1,
and do the files and bytes on disk stay bounded?

    python bench/bench_delta_month.py                     # 43,200 periods (a month) of `requests`
    python bench/bench_delta_month.py --periods 10000     # the first week
    python bench/bench_delta_month.py --tables requests,connections,capture_stats
    python bench/bench_delta_month.py --dir /tmp/month     # stopped (timeout 600)? the same again goes on

Each period copies one small file per table, written once with kwsniff's ParquetSink (not timed), then times
staging and committing it (DeltaTableWriter.stage + commit: the log entry, and the checkpoint and
log cleanup delta-rs runs after every 100th commit). Every 60 periods (a fake hour) each table's
finished hour is compacted into one file (kwsniff.sinks.delta_upkeep.compact_table) and the replaced
files vacuumed; every 1,440 (a fake day) the days older than 7 days are removed (retain_table). Both
are timed apart from the commits.

A subset of the tables has the same per-commit cost: each Delta table has its own log, so a commit
to one never reads another's, and a capture's period costs the sum of its tables' commits. The
default replays `requests` alone; --tables replays more, one commit per table per period.

The fake clock starts at a UTC midnight 35 days before now and advances a minute a period: the files'
hours and days, compaction and retention follow it. Two things delta-rs does on the real clock are
scaled down instead: the log entries a checkpoint covers are removed once older than
--log-retention-s real seconds (a capture keeps them an hour: 60 periods; at this bench's pace of
15 to 30 periods a second the default 5 s keeps about as many, and the log column shows how many),
and the bench vacuums without a grace (a capture keeps a replaced file an hour more: up to 60 more
small files per table and host than printed here).

Printed at period 1, 1,000, 10,000 and 43,200 (those reached, the last, and every --every periods;
the rows come as the run goes, so a run stopped early has printed what it reached): the median commit time
of the 20 periods around it, the table's data files and log files on disk, the bytes of both, the
files in the table's current version, this process's resident memory and the machine's load average. A benchmark, not a test: it
never fails on a timing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kwsniff.sinks.delta import TABLE_PROPERTIES, DeltaTableWriter, table_dataset, utc_day  # noqa: E402
from kwsniff.sinks.delta_upkeep import compact_table, retain_table, vacuum_table  # noqa: E402
from kwsniff.sinks.location import Location, parse_location  # noqa: E402
from kwsniff.sinks.parquet import ParquetSink  # noqa: E402
from kwsniff.tables.schemas import SCHEMAS  # noqa: E402

ROWS = 5
PERIOD_S = 60
HOUR_PERIODS = 60
DAY_PERIODS = 1440
RETAIN_S = 7 * 86_400
MONTH = 43_200
POINTS = (1, 1000, 10_000, MONTH)
WINDOW = (10, 10)
HOST = "bench"


def small_file(spool: Path, table: str, name: str) -> Path:
    with ParquetSink(spool, name, tables=(table,)) as sink:
        for conn_id in range(ROWS):
            sink.add(table, {"capture": name, "conn_id": conn_id})
    return sink.paths[table]


def period_file(template: Path, spool: Path, n: int) -> Path:
    """A copy of the table's template file, as a period's file: the same bytes every period, so the
    bench's time goes to the commits, not to writing Parquet."""
    target = spool / f"{template.stem}-{n}.parquet"
    shutil.copyfile(template, target)
    return target


def on_disk(root: Path) -> tuple[int, int, int, int]:
    """Data files, log files, data bytes, log bytes under a table's directory."""
    data = log = data_bytes = log_bytes = 0
    for directory, _, names in os.walk(root):
        in_log = "_delta_log" in Path(directory).parts
        for name in names:
            size = os.stat(os.path.join(directory, name)).st_size
            if in_log:
                log, log_bytes = log + 1, log_bytes + size
            else:
                data, data_bytes = data + 1, data_bytes + size
    return data, log, data_bytes, log_bytes


def rss_mib() -> float:
    """This process's resident memory (VmRSS): the writers' table state must not grow with the log."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def fake_start() -> float:
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=35)
    return midnight.timestamp()


class Month:
    def __init__(self, root: Path, tables: list[str], log_retention_s: int) -> None:
        self.root = root
        self.location: Location = parse_location(root / "tables")
        self.state = root / "state.json"
        # A run stopped early (--dir) goes on from the period after its last one, on its clock.
        state = (
            json.loads(self.state.read_text())
            if self.state.exists()
            else {"period": 0, "clock": fake_start()}
        )
        self.done: int = state["period"]
        self.clock: float = state["clock"]
        configuration = {
            **TABLE_PROPERTIES,
            "delta.logRetentionDuration": f"interval {log_retention_s} seconds",
        }
        self.writers = {
            t: DeltaTableWriter(self.location, t, SCHEMAS[t], configuration, clock=lambda: self.clock)
            for t in tables
        }
        self.spool = root / "spool"
        self.spool.mkdir(exist_ok=True)
        self.templates = {t: small_file(root / "templates", t, f"period-{uuid.uuid4().hex}") for t in tables}
        self.commit_s: dict[int, float] = {}
        self.upkeep_s: dict[str, list[float]] = {"compact": [], "retain": []}

    def period(self, n: int) -> None:
        day = utc_day(int(self.clock * 1_000_000))
        spent = 0.0
        for table, writer in self.writers.items():
            path = period_file(self.templates[table], self.spool, n)
            start = time.perf_counter()
            writer.commit([writer.stage(path, date=day, host=HOST)])
            spent += time.perf_counter() - start
        self.commit_s[n] = spent
        self.clock += PERIOD_S
        if n % HOUR_PERIODS == 0:
            start = time.perf_counter()
            for table in self.writers:
                compact_table(self.location, table, now=self.clock)
                vacuum_table(self.location, table, retention_hours=0)
            self.upkeep_s["compact"].append(time.perf_counter() - start)
        if n % DAY_PERIODS == 0:
            start = time.perf_counter()
            for table in self.writers:
                retain_table(self.location, table, RETAIN_S, now=self.clock, vacuum_retention_hours=0)
            self.upkeep_s["retain"].append(time.perf_counter() - start)
        self.done = n
        self.state.write_text(json.dumps({"period": n, "clock": self.clock}))

    def disk(self) -> tuple[int, int, int, int, int, float]:
        """Data files, log files, their bytes, the current version's files, the load: now."""
        totals = [0, 0, 0, 0]
        active = 0
        for table in self.writers:
            for i, value in enumerate(on_disk(self.root / "tables" / table)):
                totals[i] += value
            active += len(table_dataset(self.location, table).files)
        data, log, data_bytes, log_bytes = totals
        return data, log, data_bytes, log_bytes, active, os.getloadavg()[0]

    def row(self, n: int, disk: tuple[int, int, int, int, int, float]) -> str:
        before, after = WINDOW
        window = [self.commit_s[m] for m in range(n - before, n + after + 1) if m in self.commit_s]
        data, log, data_bytes, log_bytes, active, load = disk
        return (
            f"{n:>7} {1000 * statistics.median(window):9.2f} {data:>8} {log:>7} {data_bytes / 1e6:9.2f} "
            f"{log_bytes / 1e6:8.2f} {active:>7} {rss_mib():8.1f} {load:6.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--periods", type=int, default=MONTH, help="one-minute periods (a month: 43200)")
    parser.add_argument("--tables", default="requests", help="comma-separated kwsniff tables")
    parser.add_argument("--every", type=int, default=0, help="also print every this many periods")
    parser.add_argument(
        "--dir",
        type=Path,
        help="keep the tables here, and go on from a run stopped early (default: a temporary one)",
    )
    parser.add_argument("--log-retention-s", type=int, default=5, help="real seconds a log entry is kept")
    args = parser.parse_args()
    tables = [t for t in args.tables.split(",") if t]
    unknown = sorted(set(tables) - set(SCHEMAS))
    if unknown:
        parser.error(f"unknown tables {unknown}")
    extra = set(range(args.every, args.periods, args.every)) if args.every > 0 else set()
    points = sorted({p for p in POINTS if p <= args.periods} | {args.periods} | extra)
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.periods} periods of one "
        f"{ROWS}-row file per table into {', '.join(tables)}; compaction hourly, retention of 7 days daily"
    )
    print(
        f"{'period':>7} {'commit ms':>9} {'files':>8} {'log':>7} {'data MB':>9} {'log MB':>8} {'active':>7} {'rss MiB':>8} {'load':>6}"
    )
    wall = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if args.dir is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kwsniff-bench-month-")))
        else:
            root = args.dir
            root.mkdir(parents=True, exist_ok=True)
        month = Month(root, tables, args.log_retention_s)
        if month.done:
            print(f"going on after period {month.done} in {root}")
        pending = [p for p in points if p > month.done]
        disks = {}
        for n in range(month.done + 1, args.periods + 1):
            month.period(n)
            if n in points:
                disks[n] = month.disk()
            # a point's window takes the 10 periods after it: print once they are done
            while pending and (n >= pending[0] + WINDOW[1] or n == args.periods):
                point = pending.pop(0)
                print(month.row(point, disks[point]), flush=True)
        for name, spent in month.upkeep_s.items():
            if spent:
                print(
                    f"{name}: {len(spent)} runs, median {1000 * statistics.median(spent):.1f} ms, "
                    f"slowest {1000 * max(spent):.1f} ms"
                )
    print(f"{time.perf_counter() - wall:.0f} s in all; load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
