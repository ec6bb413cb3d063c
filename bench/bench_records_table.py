"""Time `kwsniff read` with and without the `records` table, against tshark, in the same run.

    python bench/bench_records_table.py                 # bench/captures/*.pcap (made if missing)
    python bench/bench_records_table.py some.pcap --runs 5

For each capture, best of --runs wall time and peak RSS (per child, wait4) of
  kwsniff read CAPTURE --out TMPDIR --broker-port P                        (counts from batch headers)
  kwsniff read CAPTURE --out TMPDIR --broker-port P --records               (+ one row per record)
  kwsniff read CAPTURE --out TMPDIR --broker-port P --record-payloads       (+ keys and values)
  tshark -r CAPTURE -d tcp.port==P,kafka -T fields -e kafka.api_key -e kafka.correlation_id
A benchmark, not a test: it prints numbers and ratios and never fails on a timing.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.dataset as ds

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_read import (  # noqa: E402
    Measurement,
    bench_main,
    best_of,
    broker_port,
    kwsniff_command,
    run_measured,
)

MODES = {"counts": [], "records": ["--records"], "payloads": ["--record-payloads"]}


@dataclass
class Result:
    capture: str
    size_mb: float
    record_rows: int = 0
    times: dict[str, Measurement] = field(default_factory=dict)  # mode or "tshark" -> best run


def bench_capture(path: Path, runs: int, timeout_s: float) -> Result:
    port = broker_port(path)
    result = Result(path.name, path.stat().st_size / 1e6)
    with tempfile.TemporaryDirectory(prefix="kwsniff-bench-") as tmp:
        out = Path(tmp) / "tables"
        for mode, extra in MODES.items():
            command = [
                *kwsniff_command(),
                "read",
                str(path),
                "--out",
                str(out),
                "--broker-port",
                str(port),
                *extra,
            ]
            best = Measurement(float("inf"), 0.0)
            for _ in range(runs):
                shutil.rmtree(out, ignore_errors=True)
                one = run_measured(command, timeout_s)
                best = Measurement(min(best.seconds, one.seconds), max(best.peak_mb, one.peak_mb))
            result.times[mode] = best
            if mode == "records":
                result.record_rows = ds.dataset(out / "records").count_rows()
    ts_command = ["tshark", "-r", str(path), "-d", f"tcp.port=={port},kafka", "-T", "fields",
                  "-e", "kafka.api_key", "-e", "kafka.correlation_id"]  # fmt: skip
    result.times["tshark"] = best_of(runs, ts_command, timeout_s)
    return result


def print_table(rows: list[Result], runs: int) -> None:
    print(
        f"best of {runs} runs; seconds (peak MB); ratio = tshark time / kwsniff time (above 1: kwsniff faster)"
    )
    head = (
        f"{'capture':<14} {'MB':>6} {'records':>9} | {'counts':>14} {'--records':>14} {'--record-payloads':>18}"
        f" | {'tshark':>14} | {'ratio counts':>12} {'records':>8} {'payloads':>9}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        cell = {k: f"{v.seconds:.2f} ({v.peak_mb:.0f})" for k, v in r.times.items()}
        ratio = {k: r.times["tshark"].seconds / r.times[k].seconds for k in MODES}
        print(
            f"{r.capture:<14} {r.size_mb:>6.1f} {r.record_rows:>9,} | {cell['counts']:>14}"
            f" {cell['records']:>14} {cell['payloads']:>18} | {cell['tshark']:>14} |"
            f" {ratio['counts']:>12.2f} {ratio['records']:>8.2f} {ratio['payloads']:>9.2f}"
        )


def main() -> int:
    return bench_main(__doc__, bench_capture, print_table)


if __name__ == "__main__":
    sys.exit(main())
