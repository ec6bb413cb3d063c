"""Start-up time of `kwsniff --help` and of `kwsniff read` of a one-packet capture, over bare Python.

    python bench/bench_startup.py                 # 11 rounds
    python bench/bench_startup.py --runs 21 --imports

Each round runs, one right after the other in fresh child processes (so all see the same load):
  python -c pass                                      (the floor: interpreter and site)
  python -c PYARROW_AS_READ                           (what writing Parquet costs at least: pyarrow
                                                       without numpy, and pyarrow._parquet)
  python -m kwsniff --help
  python -m kwsniff read ONE.pcap --out TMP --overwrite   (one packet; every default table written,
                                                       no summaries: `--summaries auto` skips them
                                                       on a run this small)
  python -m kwsniff read ... --summaries always       (the same with the report's summaries)
  python -c SUMMARIES_ONLY                            (the summaries alone: DuckDB's import and its
                                                       15 queries, on a copy of the one packet's tables)
kwsniff is this checkout's (its directory first on PYTHONPATH), bytecode compiled first as `pip
install` does. Printed: median and best wall time of each, and the median over bare Python (the
goal of issue 19: ≤ 0.1 s). With --imports, the modules `read` imports that cost most
(`python -X importtime`, cumulative, one run). A benchmark, not a test: it never fails on a timing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "tests" / "data" / "captures" / "kafka_python.pcap"
PCAP_HEADER_BYTES = 24
RECORD_HEADER = struct.Struct("<IIII")
# What `read` imports of pyarrow, as it imports it (kwsniff/entry.py, kwsniff/sinks/parquet.py).
PYARROW_AS_READ = (
    "from kwsniff.entry import _pyarrow_without_numpy; _pyarrow_without_numpy(); import pyarrow._parquet"
)

# What `read --summaries always` runs after decoding (kwsniff/commands/summarize.py), alone, on the
# tables in argv[1].
SUMMARIES_ONLY = (
    "import sys; from kwsniff.entry import _pyarrow_without_numpy; _pyarrow_without_numpy();"
    " from pathlib import Path; from kwsniff.commands.summarize import summarize;"
    " summarize(Path(sys.argv[1]), None, 'always')"
)


def one_packet_capture(path: Path) -> None:
    """The first packet of a test capture (a SYN), as a pcap of its own."""
    data = SOURCE.read_bytes()
    captured = RECORD_HEADER.unpack_from(data, PCAP_HEADER_BYTES)[2]
    path.write_bytes(data[: PCAP_HEADER_BYTES + RECORD_HEADER.size + captured])


def timed(command: list[str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system, from wait4: this child alone) of one run. On a
    shared machine CPU time moves less with the load than wall time does."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(command)}")
    return seconds, usage.ru_utime + usage.ru_stime


def import_costs(command: list[str], top: int) -> list[tuple[int, str]]:
    """(cumulative µs, module) of the top-level imports of one run, largest first."""
    done = subprocess.run(
        [command[0], "-X", "importtime", *command[1:]], capture_output=True, text=True, check=True
    )
    costs = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        if cumulative.strip().isdigit() and not name.startswith("  "):  # top level only
            costs.append((int(cumulative), name.strip()))
    return sorted(costs, reverse=True)[:top]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=11, help="rounds (default 11)")
    parser.add_argument("--imports", action="store_true", help="also list what `read` imports")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "kwsniff")], check=True)
    py = sys.executable
    pyarrow_dir = Path(importlib.util.find_spec("pyarrow").origin).parent  # type: ignore[union-attr, arg-type]
    if not (pyarrow_dir / "__pycache__").is_dir():
        print(f"warning: {pyarrow_dir} has no bytecode (PYTHONDONTWRITEBYTECODE?): every run compiles it")
    with tempfile.TemporaryDirectory(prefix="kwsniff-startup-") as tmp:
        capture = Path(tmp) / "one.pcap"
        one_packet_capture(capture)
        out = str(Path(tmp) / "out")
        subprocess.run(
            [py, "-m", "kwsniff", "read", str(capture), "--out", out, "-q", "--summaries", "never"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        tables = Path(tmp) / "tables"  # the tables `read` wrote (without summaries)
        shutil.copytree(out, tables)
        commands = {
            "python -c pass": [py, "-c", "pass"],
            "import pyarrow (as read)": [py, "-c", PYARROW_AS_READ],
            "kwsniff --help": [py, "-m", "kwsniff", "--help"],
            "kwsniff read (1 packet)": [
                py,
                "-m",
                "kwsniff",
                "read",
                str(capture),
                "--out",
                out,
                "--overwrite",
            ],
        }
        commands["read --summaries always"] = [*commands["kwsniff read (1 packet)"], "--summaries", "always"]
        summaries = "summaries alone (DuckDB)"
        commands[summaries] = [py, "-c", SUMMARIES_ONLY]
        times: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        load = os.getloadavg()
        for run in range(args.runs):
            stage = Path(tmp) / f"stage{run}"  # summaries are written into it: a fresh copy each round
            shutil.copytree(tables, stage)
            for name, command in commands.items():
                seconds, cpu_seconds = timed([*command, str(stage)] if name == summaries else command)
                times[name].append(seconds)
                cpu[name].append(cpu_seconds)
        end = os.getloadavg()
        load = (max(load[0], end[0]), max(load[1], end[1]), max(load[2], end[2]))
        bare = statistics.median(times["python -c pass"])
        bare_cpu = statistics.median(cpu["python -c pass"])
        print(
            f"{args.runs} rounds; load average (highest of start and end) {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
        )
        print(
            f"{'command':<26} {'wall median':>11} {'best':>6} {'over bare':>9} | {'CPU median':>10} {'over bare':>9}"
        )
        for name, values in times.items():
            median, cpu_median = statistics.median(values), statistics.median(cpu[name])
            print(
                f"{name:<26} {median:>11.3f} {min(values):>6.3f} {median - bare:>9.3f} |"
                f" {cpu_median:>10.3f} {cpu_median - bare_cpu:>9.3f}"
            )
        print(
            "seconds; `over bare`: minus `python -c pass` (issue 37's goal: ≤ 0.15 s for `read`);"
            " summaries alone include the interpreter's and pyarrow's start"
        )
        if args.imports:
            print("\n`kwsniff read` of one packet, top-level imports by cumulative time (one run):")
            for micros, module in import_costs(commands["kwsniff read (1 packet)"], 15):
                print(f"  {micros / 1000:>8.1f} ms  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
