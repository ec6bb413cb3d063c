"""Delta commits on a real S3 server (SeaweedFS, tests/seaweed.py): one writer's commit time, and
several writer processes appending to one table at once.

    python bench/bench_delta_s3.py                          # 60 single commits; 4 x 6 and 8 x 10 writers
    python bench/bench_delta_s3.py --single 200 --writers 16x5

Each commit appends one `requests` file of 7 rows (tests/delta_writer.py). Printed: the single writer's
first commit and the median of all and of the last 10 (stage + commit, ms); for each WRITERSxCOMMITS,
the writers' exit codes, the table's version, its WRITE commits, its rows against those written, and
the wall time from the moment every writer had opened the table until the last finished. A benchmark,
not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from delta_writer import ROWS_PER_FILE, write_file  # noqa: E402
from deltalake import DeltaTable  # noqa: E402
from seaweed import SeaweedS3, seaweed_s3  # noqa: E402

from kwsniff.sinks.delta import DeltaTableWriter  # noqa: E402
from kwsniff.sinks.location import parse_location  # noqa: E402
from kwsniff.tables.schemas import SCHEMAS  # noqa: E402

WRITER = REPO / "tests" / "delta_writer.py"
TIMEOUT_S = 600.0


def single(server: SeaweedS3, spool: Path, commits: int) -> None:
    location = parse_location(server.uri("single"), server.storage_options())
    writer = DeltaTableWriter(location, "requests", SCHEMAS["requests"])
    times = []
    for n in range(commits):
        path = write_file(spool, f"single-{n}")
        start = time.perf_counter()
        writer.commit([writer.stage(path, date="2026-12-07", host="bench")])
        times.append(1000 * (time.perf_counter() - start))
    print(
        f"one writer, {commits} commits: first {times[0]:.1f} ms, median {statistics.median(times):.1f} ms, "
        f"median of the last 10 {statistics.median(times[-10:]):.1f} ms"
    )


def concurrent(server: SeaweedS3, base: Path, writers: int, commits: int) -> None:
    location = parse_location(server.uri(f"writers-{writers}x{commits}"), server.storage_options())
    DeltaTableWriter(location, "requests", SCHEMAS["requests"])
    go = base / f"go-{writers}x{commits}"
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}", **location.storage_options}
    argv = [sys.executable, str(WRITER), location.uri, "requests"]
    procs = [
        subprocess.Popen(
            [*argv, f"w{w}", str(commits), "1", "--go", str(go)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(writers)
    ]
    for proc in procs:  # every writer has opened the table
        assert proc.stdout is not None
        proc.stdout.readline()
    start = time.perf_counter()
    go.touch()
    errors = [proc.communicate(timeout=TIMEOUT_S)[1] for proc in procs]
    wall = time.perf_counter() - start
    table = DeltaTable(location.table_uri("requests"), storage_options=dict(location.storage_options))
    writes = sum(1 for entry in table.history() if entry["operation"] == "WRITE")
    rows = table.to_pyarrow_dataset().count_rows()
    print(
        f"{writers} writers x {commits} commits: exit {sorted({p.returncode for p in procs})}, "
        f"version {table.version()}, {writes} WRITE commits, {rows} rows of {writers * commits * ROWS_PER_FILE}, "
        f"{wall:.1f} s"
    )
    for error in (e for p, e in zip(procs, errors, strict=True) if p.returncode):
        print(error[-1000:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--single", type=int, default=60, help="the single writer's commits")
    parser.add_argument("--writers", nargs="*", default=["4x6", "8x10"], help="WRITERSxCOMMITS runs")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with (
        tempfile.TemporaryDirectory(prefix="kwsniff-bench-s3-") as tmp,
        seaweed_s3(Path(tmp) / "seaweed") as server,
    ):
        single(server, Path(tmp) / "spool", args.single)
        for shape in args.writers:
            writers, commits = (int(n) for n in shape.split("x"))
            concurrent(server, Path(tmp), writers, commits)
    print(f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
