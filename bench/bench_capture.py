"""Live capture under load: the highest packet rate `kwsniff capture` keeps with zero drops, the drop
rate above it, and its RSS over the run (root: it makes a network namespace).

    python bench/bench_capture.py                          # 60 s per rate, 10..320 MB/s of Produce
    python bench/bench_capture.py --seconds 20 --rate 10 --rate 40

Inside a private namespace whose `lo` has MTU 1500 and TSO/GSO/GRO off (as tools/make_capture.py
does, so packets are Ethernet-sized), a tansu broker runs and, per rate, a confluent-kafka producer
paces 8 KB records at RATE MB/s for --seconds while `kwsniff capture lo` (this checkout) and, as the
reference seeing the same packets, `tcpdump -w /dev/null` run on the same interface. Per rate it
prints packets/s captured, kwsniff's kernel and queue drops (from its capture_stats table), tcpdump's
count and drops, and kwsniff's peak RSS (sampled from /proc every 0.5 s). The namespace is removed
afterwards, every process stopped by PID (also when interrupted or when a step fails); a missing tool
(ip, ethtool, tcpdump) is one line and exit status 2, before the namespace is made.

tansu keeps what it is sent in memory (its RSS grew to 7 GB in 11 minutes at 10 MB/s), so a
soak's length times its rate is bounded by the machine's RAM: 24 GB here allows about 30 minutes at
10 MB/s, or an hour at 4 MB/s.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import pyarrow.parquet as pq  # noqa: E402
from make_capture import MissingTool, create_mtu_namespace, delete_namespace, require_tools  # noqa: E402

from tests import realparts  # noqa: E402

DEFAULT_RATES_MB = (10, 40, 80, 160, 320)
VALUE_SIZE = 8192

PRODUCER = r"""
import sys, time
from confluent_kafka import Producer
bootstrap, topic, rate_mb, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 2, "enable.idempotence": False,
              "queue.buffering.max.kbytes": 262144})
value = bytes(range(256)) * 32
per_tick = rate_mb * 1e6 / len(value) / 100  # records per 10 ms
start = time.monotonic(); sent = 0.0; n = 0; acked = [0]
def done(err, msg):
    if err is None: acked[0] += 1
while time.monotonic() - start < seconds:
    sent += per_tick
    while n < sent:
        try:
            p.produce(topic, value, on_delivery=done); n += 1
        except BufferError:
            p.poll(0.01)
    p.poll(0)
    time.sleep(max(0.0, start + (n / per_tick) * 0.01 - time.monotonic()))
p.flush(30)
print(acked[0], n)
"""


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_rate(
    netns: str, broker: realparts.Broker, rate: float, seconds: float, work: Path
) -> dict[str, object]:
    out = work / f"tables-{rate:g}"
    prefix = realparts.netns_prefix(netns)
    topic = f"load-{rate:g}"
    realparts_run = [*prefix, sys.executable, "-c"]
    create = "import sys; sys.path.insert(0, sys.argv[1]); from tests.realparts import create_topics; create_topics(sys.argv[2], {sys.argv[3]: 4})"
    subprocess.run([*realparts_run, create, str(ROOT), broker.bootstrap, topic], check=True, timeout=60)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    err = work / f"capture-{rate:g}.err"
    with open(err, "wb") as err_file:
        capture = subprocess.Popen(
            [*prefix, sys.executable, "-m", "kwsniff", "capture", "lo", "--out", str(out)]
            + ["-p", str(broker.port), "--buffer-mb", "64", "--rotate-seconds", "30"]
            # One process, as its figures in bench/README.md; bench_live.py measures --workers.
            + ["--workers", "1"],
            stdout=subprocess.DEVNULL,
            stderr=err_file,
            env=env,
        )
    tcpdump = subprocess.Popen(
        [*prefix, "tcpdump", "-i", "lo", "-B", "65536", "-w", "/dev/null", f"tcp port {broker.port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    peak = 0
    samples = []
    producer: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + 15
        while b"capturing on" not in err.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # tcpdump listening too
        producer = subprocess.Popen(
            [*prefix, sys.executable, "-c", PRODUCER, broker.bootstrap, topic, str(rate), str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        started = time.monotonic()
        while producer.poll() is None and time.monotonic() - started < seconds + 120:
            kb = rss_kb(capture.pid)
            samples.append(kb)
            peak = max(peak, kb)
            time.sleep(0.5)
        acked = (producer.communicate(timeout=60)[0] or "0 0").split()
        time.sleep(1.0)
    finally:
        if producer is not None:  # interrupted mid-run: the producer too is stopped by PID
            realparts.stop_process(producer)  # type: ignore[arg-type]
        realparts.stop_process(capture, signal.SIGINT)
        realparts.stop_process(tcpdump, signal.SIGINT)
    tcpdump_err = tcpdump.stderr.read().decode() if tcpdump.stderr else ""
    ref = realparts.TcpdumpStats()
    realparts._parse_tcpdump_stats(tcpdump_err.splitlines(), ref)
    stats = [
        r for p in sorted((out / "capture_stats").glob("*.parquet")) for r in pq.read_table(p).to_pylist()
    ]
    packets = sum(r["packets"] for r in stats)
    kernel = sum(r["kernel_drops"] + r["if_drops"] for r in stats)
    queue = sum(r["queue_drops"] for r in stats)
    return {
        "rate_mb_s": rate,
        "seconds": seconds,
        "acked_records": int(acked[0]),
        "kwsniff_packets": packets,
        "kwsniff_packets_per_s": round(packets / seconds),
        "kwsniff_kernel_drops": kernel,
        "kwsniff_queue_drops": queue,
        "kwsniff_drop_rate": round((kernel + queue) / max(1, packets + kernel + queue), 4),
        "tcpdump_captured": ref.captured,
        "tcpdump_dropped": ref.dropped_by_kernel,
        # The same packets seen by both: 1.0 when kwsniff captured every packet tcpdump did.
        "kwsniff_over_tcpdump": round(packets / ref.captured, 4) if ref.captured > 0 else None,
        "peak_rss_mb": round(peak / 1024, 1),
        # RSS every 30 s of the run (samples are 0.5 s apart): flat when memory is bounded.
        "rss_every_30s_mb": [round(kb / 1024, 1) for kb in samples[::60]],
        "exit": capture.returncode,
        "stderr_tail": err.read_text(errors="replace").strip().splitlines()[-3:]
        if capture.returncode
        else [],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, action="append", help="Produce MB/s (repeatable)")
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    rates = args.rate or DEFAULT_RATES_MB
    netns = f"kwsniff-capbench-{os.getpid()}"
    try:
        require_tools()  # one line naming what is missing, before anything is made
    except MissingTool as missing:
        print(f"bench_capture: {missing}", file=sys.stderr)
        return 2
    results = []
    try:
        create_mtu_namespace(netns)  # inside the try: removed on every path out, a failed start too
        with (
            tempfile.TemporaryDirectory(prefix="kwsniff-capbench-") as work,
            realparts.start_broker(netns=netns) as broker,
        ):
            for rate in rates:
                result = run_rate(netns, broker, rate, args.seconds, Path(work))
                print(json.dumps(result), flush=True)
                results.append(result)
    except subprocess.CalledProcessError as failed:
        command = " ".join(map(str, failed.cmd))
        stderr = (failed.stderr or b"").decode(errors="replace").strip().splitlines()
        print(
            f"bench_capture: {command}: {stderr[-1] if stderr else f'exit {failed.returncode}'}",
            file=sys.stderr,
        )
        return 1
    finally:
        delete_namespace(netns)
    clean = [r for r in results if r["kwsniff_kernel_drops"] == 0 and r["kwsniff_queue_drops"] == 0]
    best = max(clean, key=lambda r: r["kwsniff_packets_per_s"], default=None)
    print(
        "highest rate with zero drops: "
        + (
            f"{best['kwsniff_packets_per_s']:,} packets/s ({best['rate_mb_s']} MB/s of Produce)"
            if best
            else "none"
        )
    )
    for r in results:
        if r not in clean:
            print(
                f"above it: {r['rate_mb_s']} MB/s: drop rate {r['kwsniff_drop_rate']:.2%} of {r['kwsniff_packets']:,} packets"
            )
    print(f"peak RSS over all runs: {max(r['peak_rss_mb'] for r in results)} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
