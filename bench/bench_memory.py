"""Peak memory of `kwsniff read` against capture size: it should stay flat (DESIGN: bounded memory).

    python bench/bench_memory.py                    # bench-large captures of 50, 100, 200, 400 MB
    python bench/bench_memory.py --mb 100 --mb 800
    python bench/bench_memory.py --workload bench-aiokafka --mb 130 --mb 260 --mb 520 --mb 1040
    python bench/bench_memory.py --attacks            # the four attacks of issue 22 against --memory-limit
    python bench/bench_memory.py --attacks --memory-limit 256MiB --flows 300000

The captures are made with tools/make_capture.py (bench-large by default, or --workload: same kind
of traffic, only longer; --mb is the workload's size target) into bench/captures/memory/ if missing; each is read once and the child's peak RSS printed.
With --attacks, the captures of tests/memory_captures.py (a record-count bomb under --records, a
million single-packet flows, big one-way payloads under --record-payloads) are read once each with
--memory-limit, and 90 MiB frames are offered to the live queue faster than they are decoded; each
line prints the child's peak RSS against the budget and the base (peak RSS of reading a capture of
one exchange: the interpreter, pyarrow and the decoders, which the budget does not cover).

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

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))
MIB = 1024 * 1024

MEMORY_CAPTURES = CAPTURES / "memory"
DEFAULT_SIZES_MB = (50, 100, 200, 400)


def capture_of_size(megabytes: int, workload: str = "bench-large") -> Path:
    MEMORY_CAPTURES.mkdir(parents=True, exist_ok=True)
    name = "large" if workload == "bench-large" else workload.removeprefix("bench-")
    path = MEMORY_CAPTURES / f"{name}-{megabytes}mb.pcap"
    if not path.exists():
        make_capture(path, workload, megabytes)
    return path


def parse_size(text: str) -> int:
    from kwsniff.commands.options import BYTE_SIZE

    return BYTE_SIZE.convert(text, None, None)


# The live queue fed by a capture thread that reads batches of one 90 MiB frame each from a stub
# handle while nobody decodes: what the queue holds is all that grows.
LIVE_CHILD = """
import resource, sys
sys.path.insert(0, {tests!r})
from memory_captures import FramesHandle
from kwsniff.capture.live import LiveCapture
from kwsniff.memory import QUEUE, MemoryBudget
batches = {batches}
live = LiveCapture(FramesHandle(batches), queue_bytes=MemoryBudget({limit}).cap(QUEUE))
live.start()
packets = 90 * 1024 * 1024 // FramesHandle.PACKET
for _ in range(600):
    c = live.snapshot()
    if c.captured + c.queue_drops >= batches * packets:
        break
    live.join(0.1)
live.stop()
live.join(5)
c = live.snapshot()
print(c.captured, c.queue_drops, live.queue.peak)
"""


# Each capture is assembled in a child of its own: a child forked from a parent that held one
# would inherit its peak RSS (Linux keeps ru_maxrss across fork and exec).
CAPTURE_CHILD = """
import sys
sys.path.insert(0, {tests!r})
from kafkawire import write_pcap
import memory_captures as m
write_pcap(__import__("pathlib").Path({path!r}), list({call}))
"""


def attack_captures(tmp: Path, flows: int) -> list[tuple[str, Path, list[str]]]:
    import subprocess

    cases = [
        ("record-count bomb, 8M records, --records", "bomb", "m.bomb_capture(8_000_000)", ["--records"]),
        (f"{flows:,} single-packet flows", "flows", f"m.single_packet_flows({flows})", []),
        (
            "one-way Produce, 100 x 8 MiB, --record-payloads",
            "oneway",
            "m.one_way_produce(100, 4, 2 * 1024 * 1024)",
            ["--record-payloads"],
        ),
    ]
    made = []
    for label, name, call, extra in cases:
        path = tmp / f"{name}.pcap"
        child = CAPTURE_CHILD.format(tests=str(TESTS), path=str(path), call=call)
        subprocess.run([sys.executable, "-c", child], check=True)
        made.append((label, path, extra))
    return made


def run_attacks(limit: int, flows: int) -> None:
    import subprocess

    command = kwsniff_command()
    limit_arg = ["--memory-limit", str(limit)]
    print(f"{'case':<50} {'capture MB':>10} {'s':>7} {'peak RSS MB':>11} {'base MB':>8} {'budget MB':>9}")
    with tempfile.TemporaryDirectory(prefix="kwsniff-attacks-") as tmp_name:
        tmp = Path(tmp_name)
        small = tmp / "small.pcap"
        subprocess.run(
            [
                sys.executable,
                "-c",
                CAPTURE_CHILD.format(tests=str(TESTS), path=str(small), call="m.bomb_capture(10)"),
            ],
            check=True,
        )
        base = run_measured([*command, "read", str(small), "--out", str(tmp / "base"), "--records"]).peak_mb
        for label, path, extra in attack_captures(tmp, flows):
            out = tmp / "tables"
            measured = run_measured(
                [*command, "read", str(path), "--out", str(out), "--quiet", *limit_arg, *extra], 900
            )
            shutil.rmtree(out, ignore_errors=True)
            print(
                f"{label:<50} {path.stat().st_size / 1e6:>10.1f} {measured.seconds:>7.1f}"
                f" {measured.peak_mb:>11.1f} {base:>8.1f} {limit / MIB:>9.0f}",
                flush=True,
            )
            path.unlink()
        child = LIVE_CHILD.format(tests=str(TESTS), batches=20, limit=limit)
        measured = run_measured([sys.executable, "-c", child])
        done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
        queued, dropped, peak = done.stdout.split()
        print(
            f"{'live queue, 20 x 90 MiB frames, nothing decoded':<50}"
            f" {20 * 90 * MIB / 1e6:>10.1f} {measured.seconds:>7.1f} {measured.peak_mb:>11.1f}"
            f" {'-':>8} {limit / MIB:>9.0f}   queue peak {int(peak) / MIB:.0f} MiB,"
            f" {int(queued):,} packets queued, {int(dropped):,} dropped (counted)",
            flush=True,
        )


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
    parser.add_argument("--attacks", action="store_true", help="the four attacks of issue 22 instead")
    parser.add_argument("--memory-limit", default="1GiB", help="--memory-limit for --attacks")
    parser.add_argument("--flows", type=int, default=1_000_000, help="flows of the many-flows attack")
    args = parser.parse_args()
    if args.attacks:
        run_attacks(parse_size(args.memory_limit), args.flows)
        return 0
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
