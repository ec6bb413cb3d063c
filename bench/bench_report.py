"""Time `kwsniff report` (DuckDB, the default) on the quick-start tables and on ~1 GB of tables.

    python bench/bench_report.py                          # quick start + 1 GB, medians of 3 runs
    python bench/bench_report.py --before HEAD~1 --gb 0.05 # same answers as a revision? both timed, alternating
    python bench/bench_report.py --gb 0.2 --spark         # smaller, and once on Spark (local[2])
    python bench/bench_report.py --gb 0.05 --runs 1 --per-section  # and the cost of each section
    python bench/bench_report.py --skip-big --long 100000 --before 5f8d8fb  # one busy partition
    python bench/bench_report.py --gb 0.05 --captures bench/captures/partitions.pcap  # busy captures

Three shapes. ``--gb``: many small captures (the repository's, copied). ``--gb`` with ``--captures``:
those captures' tables copied the same way (e.g. bench/captures/*.pcap: busy minutes, 310 M rows per
GB, most of them Fetch partitions). ``--long N``: one long capture of
one busy partition, N Produce batches of 10 records acknowledged 1 ms after sending (one every 10 ms),
each fetched 5 ms after its acknowledgement and a group commit every 100 batches: rows written by
DuckDB in the tables' own schema, with a connection per role and the quick start's rows around them.
Range joins on offsets (Produce batch against Fetch range, commit against Produce batch) meet many
rows per partition there.

The 1 GB are real tables replicated: the repository's captures (tests/data/captures, the quick
start) read once by `kwsniff read`, then written again and again by DuckDB as distinct captures
(`name@k`), each copy's times shifted by k minutes, until the Parquet files reach ``--gb`` on disk.
They are kept (bench/captures/report-tables-GBgb, -GBgb-NAMES with ``--captures``; `_built.json` marks
them complete) and reused.
Each run is a fresh `kwsniff report` process (Python and DuckDB start-up included), its text output
discarded. With ``--before REV`` every section's JSON rows must equal that revision's (rows sorted,
floats to 12 digits) before anything is timed. Targets (issue 18): ≤ 5 s on the quick start, ≤ 30 s
on 1 GB, on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
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


def kwsniff(*args: str, code: Path | None = None) -> float:
    """Wall seconds of one `kwsniff ARGS` process, run from ``code`` (a checkout) or this one."""
    return _run(args, code)[0]


def _run(args: tuple[str, ...], code: Path | None) -> tuple[float, str]:
    # Byte-code caching on, as in an installed kwsniff: without it every run compiles ~3 s of source.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(code or ROOT)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # Run from the checkout itself: `python -m` puts the working directory before PYTHONPATH.
    done = subprocess.run(
        [sys.executable, "-m", "kwsniff", *args], capture_output=True, text=True, env=env, cwd=code or ROOT
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    if done.returncode != 0:
        sys.exit(f"kwsniff {' '.join(args)} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - start, done.stdout


def canonical(report: str) -> dict[str, list[str]]:
    """A JSON report with each section's rows sorted (ties of a section's ORDER BY may come in any
    order) and floats to 12 significant digits (parallel sums of doubles differ in the last bits)."""

    def rounded(v: object) -> object:
        return float(f"{v:.12g}") if isinstance(v, float) else v

    return {
        name: sorted(json.dumps({k: rounded(v) for k, v in row.items()}, sort_keys=True) for row in rows)
        for name, rows in json.loads(report).items()
    }


def same_answers(tables: Path, before: Path) -> None:
    """Every section's JSON rows equal on this checkout and on ``before``; exits naming those that differ."""
    now = canonical(_run(("report", str(tables), "--format", "json"), None)[1])
    then = canonical(_run(("report", str(tables), "--format", "json"), before)[1])
    differ = [name for name in then if now.get(name) != then[name]]
    if differ or list(now) != list(then):
        sys.exit(f"{tables}: sections differ from the before-version: {differ or 'section list'}")
    print(f"  same JSON rows as before in all {len(now)} sections ({sum(map(len, now.values())):,} rows)")


def size_of(directory: Path, summaries: bool = False) -> int:
    """Bytes of the tables' Parquet files under ``directory`` (of the summaries' with ``summaries``)."""
    return sum(
        p.stat().st_size
        for p in directory.rglob("*.parquet")
        if p.relative_to(directory).parts[0].startswith("summary_") == summaries
    )


def replicate(base: Path, out: Path, target_bytes: int) -> int:
    """Copies of ``base``'s tables under ``out`` until their files reach ``target_bytes``; the count.

    Copy k of a capture is the capture `name@k`, every timestamp shifted by k minutes. DuckDB
    writes them (a cross join with a range of k), up to COPIES_PER_FILE copies per file and table (fewer
    for large tables, so the last file overshoots ``target_bytes`` by at most a tenth)."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    per_file = max(1, min(COPIES_PER_FILE, target_bytes // (10 * size_of(base))))
    copies, chunk = 0, 0
    while size_of(out) < target_bytes:
        for table in sorted(t.name for t in base.iterdir() if t.is_dir()):
            source = f"read_parquet('{base / table}/**/*.parquet', union_by_name = true)"
            columns = con.sql(f"DESCRIBE SELECT * FROM {source}").fetchall()
            select = ", ".join(
                "capture || '@' || k AS capture"
                if name == "capture"
                else f'"{name}" + TO_MINUTES(k) AS "{name}"'
                if kind.startswith("TIMESTAMP")
                else f'"{name}"'
                for name, kind, *_ in columns
            )
            (out / table).mkdir(parents=True, exist_ok=True)
            con.execute(
                f"COPY (SELECT {select} FROM {source}, range({copies}, {copies + per_file}) AS c(k)) "
                f"TO '{out / table}/copies-{chunk:04d}.parquet' (FORMAT parquet)"
            )
        copies += per_file
        chunk += 1
    return copies


def long_partition(quick: Path, out: Path, batches: int) -> None:
    """The ``--long`` shape (see the module's text) under ``out``, from the quick start's tables."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")

    def schema(table: str) -> list[tuple[str, str]]:
        return [
            (r[0], r[1])
            for r in con.sql(f"DESCRIBE SELECT * FROM read_parquet('{quick}/{table}/*.parquet')").fetchall()
        ]

    def write(table: str, select: str) -> None:
        (out / table).mkdir(parents=True, exist_ok=True)
        con.execute(f"COPY ({select}) TO '{out / table}/{table}.parquet' (FORMAT parquet)")

    at = "TIMESTAMPTZ '2026-01-01 00:00:00+00' + TO_MICROSECONDS"
    roles = {  # api_key: (conn_id, first_offset, last_offset, high_watermark, committed, fetch_offset, ts_request µs, rows)
        0: (1, "i * 10", "i * 10 + 9", "NULL", "NULL", "NULL", "i * 10000", batches),
        1: (2, "i * 10", "i * 10 + 9", "i * 10 + 10", "NULL", "i * 10", "i * 10000 + 1500", batches),
        8: (3, "NULL", "NULL", "NULL", "i * 1000", "NULL", "i * 1000000 + 6000", batches // 100),
    }
    names = {0: "Produce", 1: "Fetch", 8: "OffsetCommit"}
    parts = []
    for api, (conn, first, last, hwm, committed, fetched, ts, rows) in roles.items():
        value = {
            "capture": "'long.pcap'", "conn_id": str(conn), "correlation_id": "i", "api_key": str(api),
            "api_name": f"'{names[api]}'", "api_version": "9", "topic": "'busy'", "partition": "0",
            "error_code": "0", "record_count": "10", "record_bytes": "1000", "first_offset": first,
            "last_offset": last, "high_watermark": hwm, "committed_offset": committed, "fetch_offset": fetched,
            "group_id": "'g'" if api == 8 else "NULL", "client_id": "'c'", "client_ip": "'127.0.0.1'",
            "ts_request": f"{at}({ts})", "ts_response": f"{at}({ts} + {3500 if api == 1 else 1000})",
            "latency_ms": "3.5" if api == 1 else "1.0",
        }  # fmt: skip
        columns = ", ".join(f'CAST({value.get(c, "NULL")} AS {t}) AS "{c}"' for c, t in schema("partitions"))
        parts.append(f"SELECT {columns} FROM range({rows}) AS r(i)")
    write("partitions", " UNION ALL ".join(parts))
    have = {c for c, _ in schema("partitions")}
    request = ", ".join(c if c in have else f"CAST(NULL AS {t}) AS {c}" for c, t in schema("requests"))
    write(
        "requests",
        f"SELECT {request} FROM '{out}/partitions/partitions.parquet' UNION ALL "
        f"SELECT * FROM read_parquet('{quick}/requests/*.parquet')",
    )
    write(
        "connections",
        f"SELECT q.* REPLACE ('long.pcap' AS capture, c.i AS conn_id, 'c' AS client_id) "
        f"FROM (SELECT * FROM read_parquet('{quick}/connections/*.parquet') LIMIT 1) AS q, range(1, 4) AS c(i) "
        f"UNION ALL SELECT * FROM read_parquet('{quick}/connections/*.parquet')",
    )
    for table in ("errors", "groups", "captures"):
        write(table, f"SELECT * FROM read_parquet('{quick}/{table}/*.parquet')")


def timed(runs: int, tables: Path, label: str, before: Path | None) -> None:
    """Median wall and CPU of ``runs`` reports, alternating with the before-version when given."""
    load = os.getloadavg()[0]
    wall: dict[str, list[float]] = {"now": [], "before": []}
    cpu: dict[str, list[float]] = {"now": [], "before": []}
    for _ in range(runs):
        for who, code in (("now", None), ("before", before)):
            if who == "before" and before is None:
                continue
            wall[who].append(kwsniff("report", str(tables), code=code))
            cpu[who].append(CPU[-1])
    for who in ("now", "before") if before else ("now",):
        print(
            f"{label} ({who}): wall median {statistics.median(wall[who]):.2f} s of "
            f"{[round(w, 2) for w in wall[who]]}, CPU median {statistics.median(cpu[who]):.2f} s of "
            f"{[round(c, 2) for c in cpu[who]]}"
        )
    if before:
        ratio = statistics.median(wall["before"]) / statistics.median(wall["now"])
        cpu_ratio = statistics.median(cpu["before"]) / statistics.median(cpu["now"])
        print(f"{label}: before/now {ratio:.1f}x wall, {cpu_ratio:.1f}x CPU")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"  load average 1 min: {load:.2f} before, {os.getloadavg()[0]:.2f} after; largest process so far {peak:,.0f} MB"
    )


def per_section(tables: Path, memory_limit: int | None = 4 << 30) -> None:
    """CPU and wall seconds of opening the tables (views, shared temp tables) and of each section,
    in this process, as a text report runs them (each answer kept in DuckDB, its first 20 rows out)."""
    sys.path.insert(0, str(ROOT))
    from kwsniff.sections.catalog import SECTIONS
    from kwsniff.sections.engines import DuckEngine, Filters
    from kwsniff.sections.run import answer_top

    def clocks() -> tuple[float, float]:
        return time.process_time(), time.perf_counter()

    cpu, wall = clocks()
    engine = DuckEngine(tables, Filters(), memory_limit)
    done = clocks()
    print(
        f"  {'(open: views and shared tables)':34} CPU {done[0] - cpu:6.2f} s, wall {done[1] - wall:6.2f} s"
    )
    for section in SECTIONS:
        cpu, wall = clocks()
        ((rows, total),) = answer_top(engine, Filters(), [section], 20).values()
        done = clocks()
        print(f"  {section.name:34} CPU {done[0] - cpu:6.2f} s, wall {done[1] - wall:6.2f} s, {total:,} rows")
    engine.close()


def summaries() -> tuple[str, ...]:
    """The summaries `read` writes beside the tables (kwsniff.tables.names.SUMMARIES)."""
    sys.path.insert(0, str(ROOT))
    from kwsniff.tables.names import SUMMARIES

    return SUMMARIES


def reusable(where: Path, gb: float, captures: list[Path]) -> bool:
    """Whether ``where`` holds complete tables of ``gb`` built from ``captures`` by a `read` that wrote
    the summaries this one writes (tables built before are built again)."""
    done = where / "_built.json"
    if not done.is_file():
        return False
    built = json.loads(done.read_text())
    return (
        built["gb"] == gb
        and built["captures"] == [str(c) for c in captures]
        and built.get("summaries") == list(summaries())
    )


def cached_tables(gb: float, where: Path, base: Path, captures: list[Path]) -> tuple[Path, int]:
    """The replicated tables of ``gb`` under ``where`` (built once, then reused: ~10 min per GB)."""
    done = where / "_built.json"
    if reusable(where, gb, captures):
        return where, json.loads(done.read_text())["copies"]
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    copies = replicate(base, where, int(gb * 1e9))
    done.write_text(
        json.dumps(
            {
                "gb": gb,
                "copies": copies,
                "captures": [str(c) for c in captures],
                "summaries": list(summaries()),
            }
        )
    )
    return where, copies


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gb", type=float, default=1.0, help="size of the replicated tables on disk")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--spark", action="store_true", help="also run once with --master local[2]")
    parser.add_argument(
        "--tables",
        type=Path,
        help="keep the replicated tables here [default: bench/captures/report-tables-GBgb]",
    )
    parser.add_argument(
        "--before",
        metavar="REV",
        help="git revision to compare with: same JSON rows required, timed alternately with this checkout",
    )
    parser.add_argument(
        "--captures",
        type=Path,
        nargs="+",
        metavar="PCAP",
        help="replicate these captures' tables for --gb [default: the repository's small captures]",
    )
    parser.add_argument("--skip-big", action="store_true", help="no --gb tables")
    parser.add_argument("--long", type=int, metavar="N", help="also the one-busy-partition shape, N batches")
    parser.add_argument(
        "--per-section", action="store_true", help="then once more in this process, timing each section"
    )
    args = parser.parse_args()
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory(prefix="kwsniff-bench-report-") as tmp:
        quick, base = Path(tmp) / "quick", Path(tmp) / "base"
        before = None
        if args.before:
            before = Path(tmp) / "before"
            before.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", args.before, "kwsniff"], capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
        kwsniff(
            "read",
            "-q",
            str(ROOT / "sample_pcaps/quickstart.pcap"),
            "--out",
            str(quick),
            "--summaries",
            "always",
        )
        if before:
            same_answers(quick, before)
        timed(args.runs, quick, "quick start (target 5 s)", before)
        if args.long:
            long = Path(tmp) / "long"
            long_partition(quick, long, args.long)
            print(
                f"one busy partition: {args.long:,} Produce batches, {args.long:,} fetches, {args.long // 100:,} commits"
            )
            if before:
                same_answers(long, before)
            timed(args.runs, long, f"one busy partition ({args.long:,} batches)", before)
        if args.skip_big:
            return
        captures = [c.resolve() for c in args.captures] if args.captures else CAPTURES
        shape = "" if captures == CAPTURES else "-" + "-".join(c.stem for c in captures)
        where = args.tables or ROOT / f"bench/captures/report-tables-{args.gb:g}gb{shape}"
        if not reusable(where, args.gb, captures):
            kwsniff("read", "-q", *map(str, captures), "--out", str(base), "--summaries", "always")
        big, copies = cached_tables(args.gb, where, base, captures)
        rows = sum(
            pq.ParquetFile(p).metadata.num_rows
            for p in big.rglob("*.parquet")
            if not p.relative_to(big).parts[0].startswith("summary_")
        )
        print(
            f"tables {big}: {size_of(big) / 1e9:.2f} GB, {copies:,} copies of {len(captures)} captures,"
            f" {rows:,} rows ({rows / (size_of(big) / 1e9):,.0f} rows per GB), and their summaries"
            f" {size_of(big, summaries=True) / 1e9:.2f} GB"
        )
        if before:
            same_answers(big, before)
        timed(args.runs, big, f"{args.gb:g} GB (target 30 s)", before)
        if args.per_section:
            print(f"{args.gb:g} GB per section (load {os.getloadavg()[0]:.2f}):")
            per_section(big)
        if args.spark:
            s = kwsniff("report", str(big), "--master", "local[2]")
            print(f"{args.gb:g} GB on spark local[2]: {s:.2f} s")


if __name__ == "__main__":
    main()
