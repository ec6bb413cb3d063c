"""Does a commit's cost grow with the table's age? One small file per commit, on local disk, through
a Delta table (kwsniff/sinks/delta.py) and, as the peer in the same run, through today's dataset
commit (kwsniff/sinks/dataset.py: the whole OUT hard-linked into a staging directory and swapped).

    python bench/bench_delta_commits.py                       # 1,000 commits each, checkpoint every 100,
                                                              # the compacted run compacting every 60
    python bench/bench_delta_commits.py --commits 3000 --checkpoint-interval 50 --no-peer

Each commit writes one `requests` file of a few rows with kwsniff's ParquetSink (not timed), then
times staging it and committing it (Delta: DeltaTableWriter.stage + commit, the log entry included,
and the checkpoint every --checkpoint-interval commits that delta-rs's post-commit hook writes; peer:
Output.commit(again=True)). A third run compacts the Delta table (optimize.compact, then vacuum)
every --compact-every commits, untimed (kwsniff.sinks.delta_upkeep.compact_table on a fake clock of a
minute a commit, its "hour" --compact-every minutes long, then vacuum), as `capture` compacts each
finished hour. Printed at commit 1, 10, 100, 1000 (and the last): the median of the
commits in a window around it (the 9 before, it, and the 10 after, where there are), and the slowest
commit of the run with its number (a checkpoint's). A benchmark, not a test: it never fails on a
timing. The machine's load is printed with it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from deltalake import DeltaTable  # noqa: E402

from kwsniff.sinks.dataset import ExistingOutput, Output  # noqa: E402
from kwsniff.sinks.delta import TABLE_PROPERTIES, DeltaTableWriter  # noqa: E402
from kwsniff.sinks.delta_upkeep import compact_table, vacuum_table  # noqa: E402
from kwsniff.sinks.location import parse_location  # noqa: E402
from kwsniff.sinks.parquet import ParquetSink  # noqa: E402
from kwsniff.tables.schemas import SCHEMAS  # noqa: E402

ROWS = 5
FAKE_START_S = 1_796_601_600.0  # 2026-12-07T00:00:00Z
WINDOW = (9, 10)


def small_file(directory: Path, name: str) -> Path:
    with ParquetSink(directory, name, tables=("requests",)) as sink:
        for conn_id in range(ROWS):
            sink.add("requests", {"capture": name, "conn_id": conn_id, "api_key": 0})
    return sink.paths["requests"]


def delta_run(root: Path, commits: int, interval: int, compact_every: int) -> list[float]:
    location = parse_location(root / "delta")
    configuration = {**TABLE_PROPERTIES, "delta.checkpointInterval": str(interval)}
    # A fake clock, one minute a commit: compaction takes each finished hour's files by it.
    clock = [FAKE_START_S]
    writer = DeltaTableWriter(
        location, "requests", SCHEMAS["requests"], configuration, clock=lambda: clock[0]
    )
    spool = root / "spool"
    times = []
    for n in range(1, commits + 1):
        path = small_file(spool, f"period-{n}")
        start = time.perf_counter()
        writer.commit([writer.stage(path, date="2026-12-07", host="bench")])
        times.append(time.perf_counter() - start)
        clock[0] += 60
        if compact_every and n % compact_every == 0:  # not timed: a capture compacts between periods
            compact_table(location, "requests", now=clock[0], hour_s=60 * compact_every)
            vacuum_table(location, "requests", retention_hours=0)
            writer.delta.update_incremental()
    return times


def dataset_run(root: Path, commits: int) -> list[float]:
    out = root / "dataset"
    output = Output(out, ExistingOutput.APPEND)
    times = []
    try:
        for n in range(1, commits + 1):
            path = small_file(output.stage, f"period-{n}")
            assert path.exists()
            start = time.perf_counter()
            output.commit(again=True)
            times.append(time.perf_counter() - start)
    finally:
        output.close()
    return times


def at(times: list[float], n: int) -> float:
    before, after = WINDOW
    window = times[max(0, n - 1 - before) : n + after]
    return statistics.median(window)


def report(name: str, times: list[float], points: list[int]) -> None:
    cells = "  ".join(f"{1000 * at(times, n):8.2f}" for n in points)
    slowest = max(range(len(times)), key=times.__getitem__)
    print(f"{name:<28}{cells}   {1000 * times[slowest]:8.1f} ms at {slowest + 1}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--checkpoint-interval", type=int, default=100)
    parser.add_argument("--no-peer", action="store_true", help="skip today's dataset commit")
    parser.add_argument(
        "--compact-every", type=int, default=60, help="the compacted run's period; 0: no such run"
    )
    args = parser.parse_args()
    points = sorted({p for p in (1, 10, 100, 1000, args.commits) if p <= args.commits})
    interval = args.checkpoint_interval
    runs: list[tuple[str, Callable[[Path], list[float]]]] = [
        (f"delta (checkpoint /{interval})", lambda r: delta_run(r, args.commits, interval, 0))
    ]
    if args.compact_every:
        every = args.compact_every
        runs.append((f"delta, compacted /{every}", lambda r: delta_run(r, args.commits, interval, every)))
    if not args.no_peer:
        runs.append(("dataset (hard-link swap)", lambda r: dataset_run(r, args.commits)))
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.commits} commits of one {ROWS}-row file"
    )
    print(f"{'median ms around commit':<28}" + "  ".join(f"{p:>8}" for p in points) + "   slowest")
    for name, run in runs:
        with tempfile.TemporaryDirectory(prefix="kwsniff-bench-delta-") as tmp:
            times = run(Path(tmp))
            report(name, times, points)
            if name.startswith("delta"):
                files = len(DeltaTable(str(Path(tmp) / "delta" / "requests")).file_uris())
                print(f"{'':<28}{files} files in the table's last version")
            if name.startswith("delta ("):
                log = Path(tmp) / "delta" / "requests" / "_delta_log"
                checkpoints = sorted(p.name for p in log.glob("*.checkpoint.parquet"))
                print(
                    f"{'':<28}{len(checkpoints)} checkpoints, the last {checkpoints[-1] if checkpoints else None}"
                )
    print(f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
