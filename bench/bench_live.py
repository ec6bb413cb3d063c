"""Live capture across cores: kernel drops against packet rate for `kwsniff capture --workers 1` and
`--workers 2`, fed by `tcpreplay` (root: it makes a network namespace).

    python bench/bench_live.py                                 # 60 s per rate (the issue's goal)
    python bench/bench_live.py --seconds 10 --pps 50000 --pps 150000

A real MTU 1500 Kafka capture (bench/captures/live-tailing.pcap: librdkafka and kafka-python
producers and tailing consumers, made by tools/make_capture.py if missing, or --capture) is loaded
into memory by tcpreplay and replayed, looped, at each --pps for --seconds into one end of a veth
pair in a namespace of its own, while `kwsniff capture` (this checkout) captures on the other end.
The load costs little CPU: tcpreplay sends prepared frames, and nothing in the namespace answers
them. Per workers and rate it prints what tcpreplay sent, what kwsniff captured, and the drops of
each worker (kernel: PACKET_STATISTICS through libpcap; queue: decoding fell behind), from the
run's capture_stats table. Then the highest rate each kept with zero drops, and the 1 -> 2 gain.

The replay loops the capture with `--unique-ip`: each loop's addresses differ, so each loop's
connections are new ones, as a broker's many clients would be, and the fanout group's steering
(by addresses and ports) can spread them. (Without it every loop repeats the capture's 4 busy
connections, and 3 of them may land on one worker.) The machine's load (`uptime`) is printed: on a
shared machine the figures move with it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow.dataset as ds  # noqa: E402

from tests import realparts  # noqa: E402

CAPTURE = ROOT / "bench" / "captures" / "live-tailing.pcap"
CAPTURE_MB = 40
RATES = (25_000, 50_000, 75_000, 100_000, 150_000, 200_000)
SETTLE_S = 2.0  # after the replay, for the workers to read and decode what the kernel holds
GOAL_PPS = 150_000
GOAL_GAIN = 1.7


def ensure_capture(path: Path) -> Path:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial.pcap")
        command = [sys.executable, str(ROOT / "tools" / "make_capture.py"), str(partial)]
        subprocess.run(
            command + ["--workload", "bench-tailing", "--mb", str(CAPTURE_MB)], check=True, timeout=1800
        )
        partial.rename(path)
    return path


def broker_port(path: Path) -> int:
    """The capture's broker port: the destination port of its first TCP SYN without ACK."""
    import dpkt

    with path.open("rb") as f:
        for _ts, frame in dpkt.pcap.Reader(f):
            ip = dpkt.ethernet.Ethernet(frame).data
            tcp = getattr(ip, "data", None)
            if (
                isinstance(tcp, dpkt.tcp.TCP)
                and tcp.flags & dpkt.tcp.TH_SYN
                and not tcp.flags & dpkt.tcp.TH_ACK
            ):
                return int(tcp.dport)
    raise SystemExit(f"bench_live: {path}: no TCP connection opens in it")


def one_run(net: realparts.ReplayNet, capture: Path, port: int, workers: int, pps: int, seconds: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="kwsniff-bench-live-") as tmp:
        out = Path(tmp) / "live"
        args = ["--out", str(out), "-p", str(port), "--workers", str(workers), "--rotate-seconds", "3600"]
        proc = realparts.start_kwsniff_capture(net, args, Path(tmp) / "capture.err")
        try:
            sent = realparts.tcpreplay(
                net, capture, pps=pps, loop=0, duration_s=seconds, unique_ip=True, timeout_s=seconds + 60
            )
            time.sleep(SETTLE_S)
        finally:
            code = realparts.stop_process(proc, timeout_s=realparts.CAPTURE_STOP_TIMEOUT_S)  # type: ignore[arg-type]
        if code != 0:
            raise SystemExit(
                f"bench_live: kwsniff capture exited {code}: {(Path(tmp) / 'capture.err').read_text()}"
            )
        per_worker: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for row in ds.dataset(out / "capture_stats").to_table().to_pylist():
            for key in ("packets", "kernel_drops", "queue_drops"):
                per_worker[row["worker"]][key] += row[key]
    return {"sent": sent.packets, "sent_pps": sent.packets / sent.seconds, "workers": dict(per_worker)}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--capture", type=Path, default=CAPTURE, help="an MTU 1500 Kafka capture to replay")
    parser.add_argument("--seconds", type=int, default=60, help="replay time per rate")
    parser.add_argument("--pps", type=int, action="append", help="packet rates (repeatable)")
    parser.add_argument("--workers", type=int, action="append", help="worker counts [default: 1 and 2]")
    args = parser.parse_args()
    for tool in ("ip", "tcpreplay"):
        if shutil.which(tool) is None:
            print(f"bench_live: {tool} is needed", file=sys.stderr)
            return 2
    capture = ensure_capture(args.capture)
    port = broker_port(capture)
    rates = sorted(args.pps or RATES)
    counts = sorted(args.workers or [1, 2])
    print(f"capture {capture.name}: {realparts.pcap_packet_count(capture):,} packets, broker port {port}")
    print(
        f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} on {os.cpu_count()} cores"
    )
    print(
        f"{'workers':>7} {'target pps':>10} {'sent pps':>9} {'sent':>10} {'captured':>10}"
        "  per worker: captured: drops (kernel+queue)"
    )
    best: dict[int, float] = {}  # workers -> highest rate achieved with zero drops
    short = False  # a rate tcpreplay could not reach
    with realparts.replay_namespace("bench") as net:
        for workers in counts:
            for pps in rates:
                r = one_run(net, capture, port, workers, pps, args.seconds)
                ws = r["workers"]
                captured = sum(w["packets"] for w in ws.values())
                drops = {i: w["kernel_drops"] + w["queue_drops"] for i, w in sorted(ws.items())}
                shown = "  ".join(
                    f"w{i} {ws[i]['packets']:,}: {d:,} ({ws[i]['kernel_drops']:,}+{ws[i]['queue_drops']:,})"
                    for i, d in drops.items()
                )
                total = sum(drops.values())
                reached = r["sent_pps"] >= 0.9 * pps
                short = short or not reached
                print(
                    f"{workers:>7} {pps:>10,} {r['sent_pps']:>9,.0f} {r['sent']:>10,} {captured:>10,}  {shown}"
                    f"  total {total:,} ({100 * total / max(1, r['sent']):.2f}%)"
                    + ("" if reached else "  [tcpreplay fell short of the target]"),
                    flush=True,
                )
                if total == 0:
                    best[workers] = max(best.get(workers, 0.0), r["sent_pps"])
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    for workers in counts:
        print(f"highest rate sent with zero drops, {workers} worker(s): {best.get(workers, 0.0):,.0f} pps")
    if 1 in best and 2 in best:
        gain = best[2] / best[1]
        print(
            f"1 -> 2 workers gain: {gain:.2f}x (goal {GOAL_GAIN}x); goal: zero drops at {GOAL_PPS:,} pps for 60 s"
        )
    if short:
        print("tcpreplay could not send some rates: the machine, not kwsniff, limited those (see the load)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
