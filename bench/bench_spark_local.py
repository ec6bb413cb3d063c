"""`kwsniff spark` in local mode against `kwsniff read` of the same fleet of captures, on one machine,
with tshark over the same fleet as the usual peer column; and the decode stage on 1 and 2 cores.

    python bench/bench_spark_local.py                           # every capture in bench/captures
    python bench/bench_spark_local.py --rounds 3 bench/captures/a.pcap bench/captures/b.pcap ...

The fleet: the captures given, else every ``*.pcap`` in bench/captures/ (not ``*.partial.pcap``) and
bench/captures/tls/plain.pcap: real traffic of different shapes (big batches, MTU 1500 tailing,
many partitions, small batches, plain and TLS proxy traffic). Each round runs, one after another
(alternating, so that a change in the machine's load hits every column alike):

- `kwsniff read FLEET -q` (one process: it reads its inputs one after another);
- `kwsniff spark FLEET -q --master local[2]`: the command as users run it;
- the same work (``--stage`` child: session, probe, decode, write) on local[1] and local[2] in a
  child process that times each stage: Spark's start (JVM and session), the probe job (which starts
  the Python workers), the decode job (every task decoding and writing its files) and the write
  (moving files into the dataset and committing it), each with the CPU its session's processes
  spent in it (JVM, driver, Python daemon and workers);
- tshark over each capture of the fleet (``-T fields -e kafka.api_key``, the broker port found
  from the SYNs), one after another.

Wall time and CPU (user + system of every process of the command's session, sampled: the JVM
and the Python workers included) are printed as medians of the rounds, with the load average before and
after. Decode-stage scaling = decode stage on local[1] ÷ on local[2].
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
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
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def kwsniff(*args: str) -> list[str]:
    return [sys.executable, "-m", "kwsniff", *args]


def session_cpu(session: int, seen: dict[int, float]) -> None:
    """Keeps in ``seen`` the CPU seconds of every process of ``session`` (its own session: the JVM
    and the Python workers are not children the command waits for, so RUSAGE_CHILDREN misses them)."""
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:  # field 6 of stat: the session id
            seen[int(entry)] = max(seen.get(int(entry), 0.0), (int(fields[11]) + int(fields[12])) / tick)


def measured(command: list[str]) -> tuple[float, float, str]:
    """(wall, CPU of every process of its session, stdout) of ``command``, in a session of its own;
    CPU is sampled every 0.2 s, so a process's last 0.2 s may be missed."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(
            command, env=ENV, stdout=out, stderr=subprocess.DEVNULL, start_new_session=True
        )
        seen: dict[int, float] = {}
        while proc.poll() is None:
            session_cpu(proc.pid, seen)
            time.sleep(0.2)
        wall = time.perf_counter() - started
        if proc.returncode:
            raise SystemExit(f"{command[:4]}: exit status {proc.returncode}")
        out.seek(0)
        return wall, sum(seen.values()), out.read()


def stage_child(master: str, out: str, inputs: list[str]) -> None:
    """What `kwsniff spark -q` does, each stage timed; prints the stages as JSON."""
    from kwsniff.sinks import ExistingOutput, Output
    from kwsniff.spark import executors
    from kwsniff.spark.pipeline import decode, decode_conf, spark_session, write

    session, seen = os.getsid(0), {}
    cpu = {}

    def mark(stage: str) -> float:
        session_cpu(session, seen)
        cpu[stage] = sum(seen.values())
        return time.perf_counter()

    started = mark("started")
    output = Output(Path(out), ExistingOutput.REFUSE)
    spool = output.spool()
    spark = spark_session(master, conf=decode_conf(master, {}), quiet=True)
    ready = mark("start")
    assert executors.probe(spark) is None
    probed = mark("probe")
    decoded = decode(spark, inputs, spool=spool.path)
    decoded_at = mark("decode")
    write(decoded, output)
    written = mark("write")
    spark.stop()
    spool.drop()
    output.close()
    stopped = time.perf_counter()
    stages = {
        "start": ready - started,
        "probe": probed - ready,
        "decode": decoded_at - probed,
        "write": written - decoded_at,
        "stop": stopped - written,
    }
    names = list(cpu)
    stages.update({f"{b} cpu": cpu[b] - cpu[a] for a, b in itertools.pairwise(names)})
    print(json.dumps(stages))


def tshark_fleet(fleet: list[Path]) -> tuple[float, float]:
    wall = cpu = 0.0
    for path in fleet:
        port = broker_port(path)
        w, c, _ = measured(
            [
                "tshark",
                "-r",
                str(path),
                "-d",
                f"tcp.port=={port},kafka",
                "-T",
                "fields",
                "-e",
                "kafka.api_key",
            ]
        )
        wall, cpu = wall + w, cpu + c
    return wall, cpu


def row_counts(out: Path) -> dict[str, int]:
    import pyarrow.dataset as ds

    return {
        t.name: ds.dataset(t, partitioning="hive").count_rows()
        for t in sorted(out.iterdir())
        if t.is_dir() and t.name != "captures"
    }


def default_fleet() -> list[Path]:
    found = sorted(p for p in CAPTURES.glob("*.pcap") if not p.name.endswith(".partial.pcap"))
    plain = CAPTURES / "tls" / "plain.pcap"
    return found + ([plain] if plain.exists() else [])


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    if sys.argv[1:2] == ["--stage"]:
        master, out, *inputs = sys.argv[2:]
        stage_child(master, out, inputs)
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("captures", nargs="*", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--tshark-rounds", type=int, default=None, help="tshark in the first N rounds only (the slowest)"
    )
    args = parser.parse_args()
    fleet = args.captures or default_fleet()
    total = sum(p.stat().st_size for p in fleet)
    print(f"machine: {os.cpu_count()} cores, shared with other work; load before: {load()}")
    print(f"fleet: {len(fleet)} captures, {total / 1e9:.2f} GB")
    for p in fleet:
        print(f"  {p.name}: {p.stat().st_size / 1e6:,.0f} MB")
    columns: dict[str, list[tuple[float, float]]] = {}
    stages: dict[str, list[dict[str, float]]] = {"local[1]": [], "local[2]": []}
    names = [str(p) for p in fleet]
    with tempfile.TemporaryDirectory(prefix="kwsniff-bench-spark-local-") as tmp:
        work = Path(tmp)
        for n in range(args.rounds):
            print(f"round {n + 1} (load {load()})", flush=True)
            read_out, spark_out = work / "read", work / "spark"
            w, c, _ = measured(kwsniff("read", "-q", *names, "--out", str(read_out)))
            columns.setdefault("kwsniff read", []).append((w, c))
            w, c, _ = measured(
                kwsniff("spark", "-q", *names, "--out", str(spark_out), "--master", "local[2]")
            )
            columns.setdefault("kwsniff spark local[2]", []).append((w, c))
            if n == 0:
                same = row_counts(spark_out) == row_counts(read_out)
                print(f"  spark's row counts equal read's: {same}", flush=True)
            shutil.rmtree(read_out)
            shutil.rmtree(spark_out)
            for master in stages:
                out = work / f"stage-{master}"
                w, c, stdout = measured([sys.executable, __file__, "--stage", master, str(out), *names])
                stages[master].append({**json.loads(stdout.strip().splitlines()[-1]), "wall": w, "cpu": c})
                print(
                    f"  stages {master}: "
                    + json.dumps({k: round(v, 1) for k, v in stages[master][-1].items()})
                )
                shutil.rmtree(out)
            if args.tshark_rounds is None or n < args.tshark_rounds:
                columns.setdefault("tshark (each capture)", []).append(tshark_fleet(fleet))
            for name, runs in columns.items():
                print(f"  {name}: {runs[-1][0]:.1f} s wall, {runs[-1][1]:.1f} s CPU", flush=True)
    print(f"\nmedians of {args.rounds} rounds (load after: {load()}); fleet {total / 1e9:.2f} GB")
    read_wall = median([w for w, _ in columns["kwsniff read"]])
    for name, runs in columns.items():
        wall, cpu = median([w for w, _ in runs]), median([c for _, c in runs])
        print(
            f"  {name:<24} {wall:7.1f} s wall {cpu:7.1f} s CPU  {total / 1e6 / wall:6.0f} MB/s"
            f"  read wall / this wall {read_wall / wall:.2f}x"
        )
    spark_wall = median([w for w, _ in columns["kwsniff spark local[2]"]])
    verdict = "spark finishes first" if spark_wall < read_wall else "read finishes first"
    print(
        f"\n  goal (issue 19.5): spark local[2] {spark_wall:.1f} s wall vs read {read_wall:.1f} s wall:"
        f" spark / read = {spark_wall / read_wall:.2f} ({verdict})"
    )
    print("\n  stages of the same work (child process), medians; CPU of the session's processes by stage:")
    keys = (
        "start",
        "probe",
        "decode",
        "write",
        "stop",
        "wall",
        "start cpu",
        "probe cpu",
        "decode cpu",
        "cpu",
    )
    print("  " + " ".join(f"{k:>10}" for k in ("", *keys)))
    for master, runs in stages.items():
        print("  " + f"{master:>10} " + " ".join(f"{median([r[k] for r in runs]):10.1f}" for k in keys))
    one = median([r["decode"] for r in stages["local[1]"]])
    two = median([r["decode"] for r in stages["local[2]"]])
    print(f"\n  decode-stage scaling local[1] -> local[2]: {one:.1f} s -> {two:.1f} s = {one / two:.2f}x")


if __name__ == "__main__":
    main()
