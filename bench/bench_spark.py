"""Scaling of `kwsniff spark` with executor cores, over a fleet of captures and over one big capture
split by flow buckets; with `kwsniff read` (one process, one core) and tshark on the same input.

    python bench/bench_spark.py                       # defaults below; captures made if missing
    python bench/bench_spark.py --copies 52 --cores 1 --cores 2 --buckets 2 --buckets 4
    python bench/bench_spark.py --copies 0 --big-capture bench/captures/memory/many-2600mb.pcap

Fleet: ``--copies`` hard links with distinct names to one real capture (``--fleet-capture``,
default bench/captures/tailing-80mb.pcap, else bench_memory's bench-tailing capture of 80 MB, made
if missing), so every task is the same work and the figures show scheduling, not luck. Big: one
capture (``--big-capture``, default bench/captures/tailing-1280mb.pcap, else made the same way)
decoded by `kwsniff read`, by Spark on local[1] unsplit and on local[N] (each ``--cores`` over 1)
unsplit and with each of ``--buckets`` flow buckets: an index job over byte ranges, then one task per bucket
reading just its own records. ``--copies 0`` skips the fleet.

Every Spark run is a fresh process with its own JVM, timed whole and by stage (then the decode stage
is run once more in the same, now warm, session: what every capture after the first pays in a long
fleet run; not counted in the wall time): Spark's start (the
session and a first trivial Python job, which starts the JVM's code paths and the Python workers:
about 4 s paid once per session, not per capture), the decode stage (the index job, if any, and the
decode job up to the persisted Arrow chunks), and unpacking and writing the tables. tshark reads the fleet
capture once (it would take the copies' count times as long; printed as that product, said so) and
the big capture once. Speed-up = time on 1 core ÷ time on N cores; efficiency = speed-up ÷ N.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

from bench_read import broker_port  # noqa: E402

CAPTURES = BENCH / "captures"


def kwsniff(*args: str) -> list[str]:
    return [sys.executable, "-m", "kwsniff", *args]


def timed(command: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.perf_counter()
    subprocess.run(
        command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=3600
    )
    return time.perf_counter() - started


def child(master: str, buckets: int, out: str, inputs: list[str]) -> None:
    """One `kwsniff spark` run in this process, its stages timed: Spark's start, the decode stage
    (every capture × bucket task, up to the persisted chunks), and unpacking and writing the tables."""
    from kwsniff.spark.inputs import expand_inputs
    from kwsniff.spark.pipeline import decode, spark_session, write

    started = time.perf_counter()
    spark = spark_session(master)
    spark.sparkContext.setLogLevel("ERROR")
    cores = spark.sparkContext.defaultParallelism
    spark.range(cores, numPartitions=cores).mapInArrow(lambda batches: batches, "id long").collect()
    ready = time.perf_counter()
    decoded = decode(spark, expand_inputs(inputs), buckets=buckets)
    decoded_at = time.perf_counter()
    write(decoded, Path(out))
    done = time.perf_counter()
    # The same decode again in the now warm session (its JVM code paths compiled, its Python
    # workers started): what every capture after the first pays in a long fleet run.
    spark.catalog.clearCache()
    again = decode(spark, expand_inputs(inputs), buckets=buckets)
    warm = time.perf_counter() - done
    spark.stop()
    stages = {
        "start": ready - started,
        "decode": decoded_at - ready,
        "index": decoded.index_seconds,
        "write": done - decoded_at,
        "warm": warm,
        "warm_index": again.index_seconds,
    }
    print(json.dumps(stages))


def spark_run(master: str, buckets: int, out: Path, inputs: list[Path]) -> dict[str, float]:
    """Wall time of a fresh process, and its stages."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [sys.executable, __file__, "--child", master, str(buckets), str(out), *map(str, inputs)]
    started = time.perf_counter()
    done = subprocess.run(command, check=True, env=env, capture_output=True, text=True, timeout=3600)
    stages = json.loads(done.stdout.strip().splitlines()[-1])
    wall = time.perf_counter() - started - stages["warm"]  # the run itself, not the warm repeat
    return {"wall": wall, **stages}


def describe(run: dict[str, float]) -> str:
    index = f" of which index {run['index']:.1f}" if run["index"] else ""
    warm_index = f" of which index {run['warm_index']:.1f}" if run["warm_index"] else ""
    return (
        f"{run['wall']:.1f} s (Spark start {run['start']:.1f}, decode {run['decode']:.1f}{index},"
        f" write {run['write']:.1f}; decode again in the warm session {run['warm']:.1f}{warm_index})"
    )


def tshark(path: Path) -> float:
    port = broker_port(path)
    return timed(
        ["tshark", "-r", str(path), "-d", f"tcp.port=={port},kafka", "-T", "fields", "-e", "kafka.api_key"]
    )


def row_counts(out: Path) -> dict[str, int]:
    import pyarrow.dataset as ds

    return {
        t.name: ds.dataset(t, partitioning="hive").count_rows() for t in sorted(out.iterdir()) if t.is_dir()
    }


def ensure(path: Path, mb: int) -> Path:
    """``path``, or bench_memory's bench-tailing capture of ``mb`` MB (made if missing: real traffic)."""
    if path.exists():
        return path
    from bench_memory import capture_of_size

    return capture_of_size(mb, "bench-tailing")


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        master, buckets, out, *inputs = sys.argv[2:]
        child(master, int(buckets), out, inputs)
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--copies", type=int, default=52)
    parser.add_argument("--cores", type=int, action="append", help="local[N] of the fleet runs (repeatable)")
    parser.add_argument(
        "--buckets", type=int, action="append", help="flow buckets of the big runs (repeatable)"
    )
    parser.add_argument("--fleet-capture", type=Path, default=CAPTURES / "tailing-80mb.pcap")
    parser.add_argument("--big-capture", type=Path, default=CAPTURES / "tailing-1280mb.pcap")
    args = parser.parse_args()
    cores = args.cores or [1, 2]
    buckets = args.buckets or [2, 4]
    fleet_capture = ensure(args.fleet_capture, 80)
    big = ensure(args.big_capture, 1280)
    print(f"machine: {os.cpu_count()} cores (shared with other work while this runs)")
    with tempfile.TemporaryDirectory(prefix="kwsniff-bench-spark-") as tmp:
        work = Path(tmp)
        if args.copies:
            fleet_runs(work, fleet_capture, args.copies, cores)
        big_mb = big.stat().st_size / 1e6
        print(f"\nbig: {big.name}, {big_mb:,.0f} MB")
        ts_big = tshark(big)
        read_big = timed(kwsniff("read", "-q", str(big), "--out", str(work / "read-big")))
        print(f"  tshark: {ts_big:.1f} s;  kwsniff read: {read_big:.1f} s ({big_mb / read_big:.0f} MB/s)")
        expected = row_counts(work / "read-big")
        runs = [("local[1]", 1)]
        runs += [(f"local[{n}]", b) for n in cores if n > 1 for b in (1, *buckets)]
        first: dict[str, float] = {}
        for master, b in runs:
            out = work / f"big-{master}-{b}"
            run = spark_run(master, b, out, [big])
            first = first or run
            same = row_counts(out) == expected
            n = int(master[6:-1])
            wall_up, decode_up = first["wall"] / run["wall"], first["decode"] / run["decode"]
            warm_up = first["warm"] / run["warm"]
            print(
                f"  kwsniff spark {master} --flow-buckets {b}: {describe(run)}\n"
                f"    over local[1] unsplit: wall speed-up {wall_up:.2f}x (efficiency {wall_up / n:.0%}), "
                f"decode-stage speed-up {decode_up:.2f}x (efficiency {decode_up / n:.0%}), "
                f"warm {warm_up:.2f}x ({warm_up / n:.0%}); wall vs read {read_big / run['wall']:.2f}x, vs tshark {ts_big / run['wall']:.1f}x; "
                f"row counts equal read's: {same}",
                flush=True,
            )
            shutil.rmtree(out)


def fleet_runs(work: Path, fleet_capture: Path, copies: int, cores: list[int]) -> None:
    fleet = work / "fleet"
    fleet.mkdir()
    for i in range(copies):
        # Hard links: distinct names and resolved paths (read names its files by resolved path).
        os.link(fleet_capture, fleet / f"copy-{i:03d}.pcap")
    fleet_mb = copies * fleet_capture.stat().st_size / 1e6
    print(f"\nfleet: {copies} captures (hard links to {fleet_capture.name}), {fleet_mb:,.0f} MB")
    ts_one = tshark(fleet_capture)
    print(f"  tshark, one copy: {ts_one:.1f} s -> {copies} copies ≈ {ts_one * copies:.0f} s (product)")
    read_s = timed(kwsniff("read", "-q", *map(str, sorted(fleet.iterdir())), "--out", str(work / "read")))
    print(f"  kwsniff read, one process: {read_s:.1f} s ({fleet_mb / read_s:.0f} MB/s)")
    runs = {}
    for n in cores:
        out = work / f"spark-{n}"
        runs[n] = spark_run(f"local[{n}]", 1, out, [fleet])
        assert row_counts(out) == row_counts(work / "read"), "spark tables differ from read's"
        shutil.rmtree(out)
    base = runs[cores[0]]
    for n, run in runs.items():
        wall_up = base["wall"] / run["wall"] * cores[0]
        decode_up = base["decode"] / run["decode"] * cores[0]
        warm_up = base["warm"] / run["warm"] * cores[0]
        print(
            f"  kwsniff spark local[{n}]: {describe(run)}\n"
            f"    over local[{cores[0]}]: wall speed-up {wall_up:.2f}x (efficiency {wall_up / n:.0%}), "
            f"decode-stage speed-up {decode_up:.2f}x (efficiency {decode_up / n:.0%}), "
            f"warm {warm_up:.2f}x ({warm_up / n:.0%}); wall vs read {read_s / run['wall']:.2f}x, vs tshark {ts_one * copies / run['wall']:.1f}x"
        )


if __name__ == "__main__":
    main()
