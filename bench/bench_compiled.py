"""`kwsniff read` with the compiled packet path against the pure-Python path, in the same run.

    python bench/bench_compiled.py bench/captures/mtu1500.pcap bench/captures/tailing.pcap --runs 3

Per capture, --runs rounds of `python -m kwsniff read CAPTURE --out TMPDIR --broker-port P -q`,
first as installed (kwsniff/pipeline/_fastpath.c), then with KWSNIFF_PURE_PYTHON=1, one right
after the other so both see the same load. Prints each child's CPU time (user + system, wait4)
and wall time, medians, the ratio pure ÷ compiled, and the load average. A benchmark, not a test.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_read import broker_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def run(capture: Path, port: int, pure: bool) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one `read` of the capture."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("KWSNIFF_PURE_PYTHON", None)
    if pure:
        env["KWSNIFF_PURE_PYTHON"] = "1"
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "kwsniff", "read", str(capture), "--out", out]
        started = time.perf_counter()
        child = subprocess.Popen(
            [*command, "--broker-port", str(port), "-q"], env=env, stderr=subprocess.DEVNULL
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"kwsniff read {capture} failed ({status})")
    return usage.ru_utime + usage.ru_stime, wall


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("captures", type=Path, nargs="+")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for capture in args.captures:
        port = broker_port(capture)
        times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        load = [os.getloadavg()[0]]
        for _ in range(args.runs):
            for pure in (False, True):
                times[pure].append(run(capture, port, pure))
            load.append(os.getloadavg()[0])
        cpu = {pure: statistics.median(t[0] for t in runs) for pure, runs in times.items()}
        wall = {pure: statistics.median(t[1] for t in runs) for pure, runs in times.items()}
        print(
            f"{capture.name}: CPU compiled {cpu[False]:.2f} s, pure {cpu[True]:.2f} s,"
            f" pure ÷ compiled {cpu[True] / cpu[False]:.2f}; wall {wall[False]:.2f} / {wall[True]:.2f} s;"
            f" load average {min(load):.1f}-{max(load):.1f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
