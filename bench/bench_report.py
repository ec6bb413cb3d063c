"""Time `kwsniff report` (DuckDB, the default) on the quick-start tables and on ~1 GB of tables.

    python bench/bench_report.py                  # quick start + 1 GB, medians of 3 runs
    python bench/bench_report.py --gb 0.2 --spark # smaller, and once on Spark (local[2]) for the ratio

The 1 GB are real tables replicated: the repository's captures (tests/data/captures, the quick
start) read once by `kwsniff read`, then written again and again as distinct captures (`name@k`),
each copy's times shifted by a minute, until the Parquet files reach ``--gb`` on disk. Each run is a
fresh `kwsniff report` process (Python and DuckDB start-up included), its output discarded.
Targets (issue 18): ≤ 5 s on the quick start, ≤ 30 s on 1 GB, on a 2-core machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "tests/data/captures").glob("*.pcap")) + [ROOT / "sample_pcaps/quickstart.pcap"]
COPIES_PER_FILE = 400


CPU: list[float] = []  # CPU seconds (user + system) of each timed kwsniff process, in order


def kwsniff(*args: str) -> float:
    # Byte-code caching on, as in an installed kwsniff: without it every run compiles ~3 s of source.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kwsniff", *args], capture_output=True, text=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    if done.returncode != 0:
        sys.exit(f"kwsniff {' '.join(args)} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - start


def size_of(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*.parquet"))


def replicate(base: Path, out: Path, target_bytes: int) -> int:
    """Copies of ``base``'s tables under ``out`` until their files reach ``target_bytes``; the count."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    tables = {t.name: ds.dataset(t).to_table() for t in base.iterdir() if t.is_dir()}
    copies, chunk = 0, 0
    while size_of(out) < target_bytes:
        for name, table in tables.items():
            parts = []
            for k in range(copies, copies + COPIES_PER_FILE):
                shift = pa.scalar(dt.timedelta(minutes=k), pa.duration("us"))
                copy = table.set_column(
                    table.schema.get_field_index("capture"),
                    "capture",
                    pc.binary_join_element_wise(table["capture"], pa.scalar(f"@{k}"), ""),
                )
                for i, field in enumerate(copy.schema):
                    if pa.types.is_timestamp(field.type):
                        copy = copy.set_column(i, field, pc.add(copy[field.name], shift))
                parts.append(copy)
            (out / name).mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.concat_tables(parts), out / name / f"copies-{chunk:04d}.parquet")
        copies += COPIES_PER_FILE
        chunk += 1
    return copies


def median_of(runs: int, *args: str) -> tuple[float, list[float]]:
    times = [kwsniff(*args) for _ in range(runs)]
    print(f"  CPU seconds per run (machine shared, 2 cores): {[round(c, 2) for c in CPU[-runs:]]}")
    return statistics.median(times), times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gb", type=float, default=1.0, help="size of the replicated tables on disk")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--spark", action="store_true", help="also run once with --master local[2]")
    args = parser.parse_args()
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory(prefix="kwsniff-bench-report-") as tmp:
        quick, base, big = Path(tmp) / "quick", Path(tmp) / "base", Path(tmp) / "big"
        kwsniff("read", "-q", str(ROOT / "sample_pcaps/quickstart.pcap"), "--out", str(quick))
        kwsniff("read", "-q", *map(str, CAPTURES), "--out", str(base))
        t, runs = median_of(args.runs, "report", str(quick))
        print(f"quick start: median {t:.2f} s of {[round(r, 2) for r in runs]} (target 5 s)")
        copies = replicate(base, big, int(args.gb * 1e9))
        rows = sum(pq.ParquetFile(p).metadata.num_rows for p in big.rglob("*.parquet"))
        print(
            f"tables: {size_of(big) / 1e9:.2f} GB, {copies:,} copies of {len(CAPTURES)} captures, {rows:,} rows"
            f" ({rows / (size_of(big) / 1e9):,.0f} rows per GB)"
        )
        t, runs = median_of(args.runs, "report", str(big))
        print(f"{args.gb:g} GB on duckdb: median {t:.2f} s of {[round(r, 2) for r in runs]} (target 30 s)")
        if args.spark:
            s = kwsniff("report", str(big), "--master", "local[2]")
            print(f"{args.gb:g} GB on spark local[2]: {s:.2f} s, {s / t:.1f}x the DuckDB median")


if __name__ == "__main__":
    main()
