"""Time `kwsniff read` against tshark on the same captures, in the same run.

    python bench/bench_read.py                      # bench/captures/*.pcap (made if missing)
    python bench/bench_read.py some.pcap --runs 5

For each capture, --runs rounds of, one right after the other,
  python -m kwsniff read CAPTURE --out TMPDIR --broker-port P      (all tables written)
  tshark -r CAPTURE -d tcp.port==P,kafka -T fields -e kafka.api_key -e kafka.correlation_id > /dev/null
so both see the same machine load; wall time median and best over the rounds, the ratio tshark ÷
kwsniff of the medians (above 1: kwsniff faster), each child's CPU time and peak RSS (VmHWM from
/proc while it runs, so one run never hides another), and kwsniff's median CPU per `partitions`
row (µs: the cost where a Fetch names many partitions). After the rounds, one more (untimed) tshark
run counts the `kafka.partition_id` fields it dissected in Fetch messages, so a capture whose Fetch
bodies tshark does not read (tshark 4.0 reads no partition of a Fetch v17) shows as such. kwsniff is the one on this checkout (its parent directory first on PYTHONPATH), its
bytecode compiled first as `pip install` does. A benchmark, not a test: it prints numbers and ratios
and never fails on a timing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_bench_captures import CAPTURES, ensure_captures  # noqa: E402

PCAP_HEADER = struct.Struct("<IHHiIII")
RECORD_HEADER = struct.Struct("<IIII")
SYN_SCAN_PACKETS = 2000
CHILD_TIMEOUT_S = 600.0


HWM_POLL_S = 0.01


@dataclass
class Measurement:
    seconds: float
    peak_mb: float
    cpu_seconds: float = 0.0


def _watch_hwm(pid: int, done: threading.Event, peak_kb: list[int]) -> None:
    """VmHWM (the kernel's high-water mark of the process's RSS) from /proc/PID/status, read every
    HWM_POLL_S until the child exits: the last read is its peak but for the final few ms."""
    path = f"/proc/{pid}/status"
    while not done.is_set():
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak_kb[0] = max(peak_kb[0], int(line.split()[1]))
                        break
        except (OSError, ValueError):
            return
        done.wait(HWM_POLL_S)


def run_measured(command: list[str], timeout_s: float = CHILD_TIMEOUT_S) -> Measurement:
    """Run one child to completion, output discarded; wall time, CPU time (user + system) and its
    own peak RSS: VmHWM sampled while it runs, or wait4's ru_maxrss for that child (KiB on Linux),
    whichever is larger. A timer kills it after timeout_s."""
    with open(os.devnull, "wb") as sink, tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdout=sink, stderr=errors)
        killer = threading.Timer(timeout_s, proc.kill)
        killer.start()
        done, peak_kb = threading.Event(), [0]
        watcher = threading.Thread(target=_watch_hwm, args=(proc.pid, done, peak_kb), daemon=True)
        watcher.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
            done.set()
            watcher.join()
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if seconds >= timeout_s:
            raise SystemExit(f"timed out after {timeout_s:.0f} s: {' '.join(command)}")
        if proc.returncode != 0:
            errors.seek(0)
            message = errors.read().decode(errors="replace")[-2000:]
            raise SystemExit(f"failed ({proc.returncode}): {' '.join(command)}\n{message}")
    return Measurement(
        seconds=seconds,
        peak_mb=max(peak_kb[0], usage.ru_maxrss) / 1024,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
    )


def best_of(runs: int, command: list[str], timeout_s: float = CHILD_TIMEOUT_S) -> Measurement:
    results = [run_measured(command, timeout_s) for _ in range(runs)]
    return Measurement(seconds=min(r.seconds for r in results), peak_mb=max(r.peak_mb for r in results))


REPO = Path(__file__).resolve().parent.parent


def kwsniff_command() -> list[str]:
    """`python -m kwsniff` of this checkout, with bytecode compiled as an installed package has it
    (PYTHONDONTWRITEBYTECODE would otherwise make every run compile every module again)."""
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "kwsniff")], check=True)
    return [sys.executable, "-m", "kwsniff"]


def broker_port(path: Path) -> int:
    """The port most SYNs (without ACK) in the first packets go to; Ethernet/IPv4 captures only,
    which is what bench/make_bench_captures.py writes (Linux loopback uses Ethernet framing)."""
    ports: Counter[int] = Counter()
    with open(path, "rb") as f:
        magic = PCAP_HEADER.unpack(f.read(PCAP_HEADER.size))[0]
        if magic not in (0xA1B2C3D4, 0xA1B23C4D):
            raise SystemExit(f"{path}: not a little-endian classic pcap file")
        for _ in range(SYN_SCAN_PACKETS):
            header = f.read(RECORD_HEADER.size)
            if len(header) < RECORD_HEADER.size:
                break
            data = f.read(RECORD_HEADER.unpack(header)[2])
            if data[12:14] != b"\x08\x00" or data[23] != 6:  # IPv4, TCP
                continue
            tcp = 14 + (data[14] & 0x0F) * 4
            flags = data[tcp + 13]
            if flags & 0x12 == 0x02:  # SYN without ACK
                ports[int.from_bytes(data[tcp + 2 : tcp + 4], "big")] += 1
    if not ports:
        raise SystemExit(
            f"{path}: no SYN in the first {SYN_SCAN_PACKETS} packets; cannot tell the broker port"
        )
    return ports.most_common(1)[0][0]


def packet_count(path: Path) -> int:
    out = subprocess.run(
        ["capinfos", "-T", "-r", "-c", "-M", str(path)], capture_output=True, text=True, check=True
    )
    return int(out.stdout.split("\t")[-1])


def first_packet_capture(path: Path, out: Path) -> Path:
    """A copy of the capture's file header and first packet: what `read` costs before any row."""
    with open(path, "rb") as f:
        header = f.read(PCAP_HEADER.size)
        record = f.read(RECORD_HEADER.size)
        data = f.read(RECORD_HEADER.unpack(record)[2])
    out.write_bytes(header + record + data)
    return out


def partition_rows(out: Path) -> int:
    """Rows of the `partitions` table `read` wrote under ``out``."""
    import pyarrow.parquet as pq  # only here: bench_memory and the other users of this module need none

    return sum(pq.read_metadata(p).num_rows for p in (out / "partitions").glob("*.parquet"))


def encode_floor(out: Path, rounds: int = 3) -> float:
    """CPU seconds (median of ``rounds``) that Arrow's Parquet writer takes to encode the tables
    `read` wrote under ``out`` again from Arrow columns already in memory, with read's writer options
    and row groups: the part of `read` no decoder can avoid without changing the tables. Each
    re-encoded file is checked to be the very bytes `read` wrote."""
    import pyarrow.parquet as pq

    from kwsniff.sinks.parquet import WRITER_OPTIONS

    tables = []
    for file in sorted(out.rglob("*.parquet")):
        parquet = pq.ParquetFile(file)
        groups = [parquet.read_row_group(i) for i in range(parquet.num_row_groups)]
        tables.append((file, parquet.schema_arrow, groups))
    times = []
    with tempfile.TemporaryDirectory(prefix="kwsniff-floor-") as tmp:
        again = Path(tmp) / "again.parquet"
        for _ in range(rounds):
            spent = 0.0
            for file, schema, groups in tables:
                start = time.process_time()
                with pq.ParquetWriter(str(again), schema, **WRITER_OPTIONS) as writer:
                    for group in groups:
                        writer.write_table(group, row_group_size=None)
                spent += time.process_time() - start
                if again.read_bytes() != file.read_bytes():
                    raise SystemExit(f"{file}: Arrow's re-encoding is not the bytes `read` wrote")
            times.append(spent)
    return statistics.median(times)


def bench_capture(path: Path, runs: int, timeout_s: float = CHILD_TIMEOUT_S) -> dict[str, float | int | str]:
    port = broker_port(path)
    kw_times, ts_times, kw_peak, ts_peak = [], [], 0.0, 0.0
    kw_cpu, ts_cpu, fixed_cpu = [], [], []
    rows = 0
    ts_command = ["tshark", "-r", str(path), "-d", f"tcp.port=={port},kafka", "-T", "fields",
                  "-e", "kafka.api_key", "-e", "kafka.correlation_id"]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="kwsniff-bench-") as tmp:
        out = Path(tmp) / "tables"
        kwsniff = kwsniff_command()
        kw_command = [*kwsniff, "read", str(path), "--out", str(out), "--broker-port", str(port)]
        one = first_packet_capture(path, Path(tmp) / "first-packet.pcap")
        one_out = Path(tmp) / "first-packet"
        one_command = [*kwsniff, "read", str(one), "--out", str(one_out), "--broker-port", str(port)]
        for _ in range(runs):
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(one_out, ignore_errors=True)
            kw = run_measured(kw_command, timeout_s)
            rows = partition_rows(out)
            fixed_cpu.append(run_measured(one_command, timeout_s).cpu_seconds)
            ts = run_measured(ts_command, timeout_s)
            kw_times.append(kw.seconds)
            ts_times.append(ts.seconds)
            kw_cpu.append(kw.cpu_seconds)
            ts_cpu.append(ts.cpu_seconds)
            kw_peak, ts_peak = max(kw_peak, kw.peak_mb), max(ts_peak, ts.peak_mb)
        # In a child of its own: the tables it holds would otherwise stay in this process's RSS, which
        # every later child inherits at fork and wait4's ru_maxrss then counts as that child's peak.
        floor_cpu = float(
            subprocess.run(
                [sys.executable, __file__, "--encode-floor", str(out)],
                capture_output=True, text=True, check=True, timeout=timeout_s,
            ).stdout
        )  # fmt: skip
    ts_partitions = tshark_partition_fields(path, port, timeout_s)
    size_mb = path.stat().st_size / 1e6
    packets = packet_count(path)
    kw_median, ts_median = statistics.median(kw_times), statistics.median(ts_times)
    return {
        "capture": path.name,
        "size_mb": size_mb,
        "packets": packets,
        "kw_s": kw_median,
        "kw_best_s": min(kw_times),
        "kw_mb_s": size_mb / kw_median,
        "kw_pkt_s": packets / kw_median,
        "kw_peak_mb": kw_peak,
        "ts_s": ts_median,
        "ts_best_s": min(ts_times),
        "ts_peak_mb": ts_peak,
        "ratio": ts_median / kw_median,
        "ratio_best": min(ts_times) / min(kw_times),
        "memory_ratio": kw_peak / ts_peak,
        "kw_cpu_s": statistics.median(kw_cpu),
        "ts_cpu_s": statistics.median(ts_cpu),
        "cpu_ratio": statistics.median(ts_cpu) / statistics.median(kw_cpu),
        "partition_rows": rows,
        "fixed_cpu_s": statistics.median(fixed_cpu),
        "ts_partition_fields": ts_partitions,
        "us_per_partition_row": statistics.median(kw_cpu) / rows * 1e6 if rows else 0.0,
        "floor_cpu_s": floor_cpu,
    }


def tshark_partition_fields(path: Path, port: int, timeout_s: float) -> int:
    """How many `kafka.partition_id` fields tshark dissects in the Fetch requests and responses of
    ``path``: 0 where it does not read the bodies most `partitions` rows come from."""
    out = subprocess.run(
        ["tshark", "-r", str(path), "-d", f"tcp.port=={port},kafka", "-Y", "kafka.api_key == 1",
         "-T", "fields", "-E", "aggregator=,", "-e", "kafka.partition_id"],
        capture_output=True, text=True, check=True, timeout=timeout_s,
    )  # fmt: skip
    return sum(len(line.split(",")) for line in out.stdout.splitlines() if line)


def print_table(rows: list[dict[str, float | int | str]], runs: int) -> None:
    head = (
        f"{'capture':<16} {'MB':>6} {'packets':>8} | {'kwsniff s':>9} {'best':>5} {'MB/s':>6} {'peak MB':>7}"
        f" | {'tshark s':>8} {'best':>5} {'peak MB':>7} | {'tshark/kwsniff':>14} {'best':>5}"
        f" | {'memory':>6} | {'kw CPU s':>8} {'ts CPU s':>8} {'ratio':>5} | {'part rows':>9} {'µs/row':>6} {'ts Fetch parts':>14}"
    )
    load = os.getloadavg()
    print(
        f"median and best of {runs} rounds (kwsniff then tshark each round); peak = the child's VmHWM;"
        f" load average now {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['capture']:<16} {r['size_mb']:>6.1f} {r['packets']:>8,} | {r['kw_s']:>9.2f}"
            f" {r['kw_best_s']:>5.2f} {r['kw_mb_s']:>6.1f} {r['kw_peak_mb']:>7.1f} | {r['ts_s']:>8.2f}"
            f" {r['ts_best_s']:>5.2f} {r['ts_peak_mb']:>7.1f} | {r['ratio']:>14.2f} {r['ratio_best']:>5.2f}"
            f" | {r['memory_ratio']:>6.2f} | {r['kw_cpu_s']:>8.2f} {r['ts_cpu_s']:>8.2f} {r['cpu_ratio']:>5.2f}"
            f" | {r['partition_rows']:>9,} {r['us_per_partition_row']:>6.1f} {r['ts_partition_fields']:>14,}"
        )
    print(
        "tshark/kwsniff: ratio of the medians (best: of the best times); memory: kwsniff peak ÷ tshark peak;"
        " CPU: median user + system seconds of each child and their ratio (moves less with the load);"
        " part rows: kwsniff's `partitions` rows, µs/row: its median CPU ÷ those rows; ts Fetch parts: the"
        " partition fields tshark dissected in Fetch requests and responses (0: it read none of their bodies)"
    )
    print(
        "per `partitions` row, kwsniff's median CPU: all of it, and over a `read` of the capture's first packet"
    )
    for r in rows:
        count = int(r.get("partition_rows", 0))
        if count:
            all_us = float(r["kw_cpu_s"]) / count * 1e6
            over_us = (float(r["kw_cpu_s"]) - float(r["fixed_cpu_s"])) / count * 1e6
            print(
                f"{r['capture']:<16} {count:>9,} rows | {all_us:6.1f} µs all | {over_us:6.1f} µs over"
                f" {float(r['fixed_cpu_s']):.2f} s for one packet"
            )
    print(
        "the floor: CPU no decoder writing these tables avoids, the one-packet `read` (start-up) plus"
        " Arrow's Parquet encoding of the very bytes `read` wrote (from columns already in memory);"
        " ceiling = tshark CPU ÷ that floor, the highest CPU ratio any reader of this capture writing"
        " these tables could show; over the floor = kwsniff's median CPU ÷ the floor (issue 50's goal: <= 1.5x)"
    )
    for r in rows:
        fixed, encode, ts_cpu = float(r["fixed_cpu_s"]), float(r["floor_cpu_s"]), float(r["ts_cpu_s"])
        print(
            f"{r['capture']:<16} start-up {fixed:5.2f} s + encoding {encode:5.2f} s = {fixed + encode:5.2f} s"
            f" | 3x tshark needs <= {ts_cpu / 3:5.2f} s | ceiling {ts_cpu / (fixed + encode):5.2f}x"
            f" | kwsniff {float(r['cpu_ratio']):5.2f}x"
            f" | over the floor {float(r['kw_cpu_s']) / (fixed + encode):5.2f}x"
        )


def bench_main(
    description: str | None, bench: Callable[[Path, int, float], Any], table: Callable[[list, int], None]
) -> int:
    """The command line both read benchmarks share: captures (default: the bench captures, made if
    missing), best of --runs, then the table."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("captures", nargs="*", type=Path)
    parser.add_argument("--runs", type=int, default=3, help="rounds per capture (default 3)")
    parser.add_argument(
        "--timeout", type=float, default=CHILD_TIMEOUT_S, help="seconds allowed per child run"
    )
    args = parser.parse_args()
    captures = args.captures
    if not captures:
        ensure_captures()
        captures = sorted(p for p in CAPTURES.glob("*.pcap") if not p.name.endswith(".partial.pcap"))
    rows = []
    for path in captures:
        rows.append(bench(path, args.runs, args.timeout))
        print(f"measured {path.name}", file=sys.stderr, flush=True)
    table(rows, args.runs)
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--encode-floor"]:  # bench_capture's child: the encoding floor of one output
        print(encode_floor(Path(sys.argv[2])))
        return 0
    return bench_main(__doc__, bench_capture, print_table)


if __name__ == "__main__":
    sys.exit(main())
