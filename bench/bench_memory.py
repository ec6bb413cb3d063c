"""Peak memory of `kwsniff read` against capture size: it should stay flat (DESIGN: bounded memory).

    python bench/bench_memory.py                    # bench-large captures of 50, 100, 200, 400 MB
    python bench/bench_memory.py --mb 100 --mb 800
    python bench/bench_memory.py --workload bench-aiokafka --mb 130 --mb 260 --mb 520 --mb 1040

The captures are made with tools/make_capture.py (bench-large by default, or --workload: same kind
of traffic, only longer; --mb is the workload's size target) into bench/captures/memory/ if missing; each is read once and the child's peak RSS printed.
Real captures of different lengths are used rather than a capture concatenated with itself, because a
concatenation repeats the same TCP connections with the same sequence numbers and would be read as
retransmissions.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_read import broker_port, kwsniff_command, packet_count, run_measured  # noqa: E402
from make_bench_captures import CAPTURES, make_capture  # noqa: E402

MEMORY_CAPTURES = CAPTURES / "memory"
DEFAULT_SIZES_MB = (50, 100, 200, 400)


def capture_of_size(megabytes: int, workload: str = "bench-large") -> Path:
    MEMORY_CAPTURES.mkdir(parents=True, exist_ok=True)
    name = "large" if workload == "bench-large" else workload.removeprefix("bench-")
    path = MEMORY_CAPTURES / f"{name}-{megabytes}mb.pcap"
    if not path.exists():
        make_capture(path, workload, megabytes)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, action="append", help="capture size in MB (repeatable)")
    parser.add_argument(
        "--workload",
        default="bench-large",
        choices=("bench-large", "bench-tailing", "bench-aiokafka", "bench-many"),
        help="traffic of the captures (tools/make_capture.py workloads)",
    )
    args = parser.parse_args()
    sizes = sorted(args.mb or DEFAULT_SIZES_MB)
    print(f"{'capture':<22} {'MB':>7} {'packets':>9} {'kwsniff s':>9} {'peak RSS MB':>12}")
    for megabytes in sizes:
        path = capture_of_size(megabytes, args.workload)
        port = broker_port(path)
        with tempfile.TemporaryDirectory(prefix="kwsniff-mem-") as tmp:
            out = Path(tmp) / "tables"
            measured = run_measured([*kwsniff_command(), "read", str(path), "--out", str(out),
                                     "--broker-port", str(port)])  # fmt: skip
            shutil.rmtree(out, ignore_errors=True)
        print(
            f"{path.name:<22} {path.stat().st_size / 1e6:>7.1f} {packet_count(path):>9,}"
            f" {measured.seconds:>9.2f} {measured.peak_mb:>12.1f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
