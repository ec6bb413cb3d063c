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
connections, and 3 of them may land on one worker.) The capture is first copied with its clients
and its broker on two addresses of their own (tests/realparts.py split_loopback): a capture made on
loopback has one address at both ends, and `--unique-ip` would then turn every connection of every
loop after the first into two one-sided connections that never close and whose requests are never
answered (docs/performance.md). The machine's load (`uptime`) is printed: on a shared machine the
figures move with it.

Per run it also prints the CPU the sender used (tcpreplay's user+sys, in % of one core) and the
machine's softirq time over the replay (the veth delivers each frame to the packet sockets in the
sender's softirq), next to the CPU of `kwsniff capture` (all its workers): the three share the
machine's cores, which is why the 1 -> 2 workers gain cannot be shown with the sender on the same
2 cores.
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


def softirq_seconds() -> float:
    """The machine's time in softirq so far, every core (/proc/stat, in USER_HZ ticks)."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[7]) / os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> float:
    """User+sys CPU seconds so far of process ``pid`` and its living descendants (/proc)."""
    total = 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                total += sum(tree_cpu(int(child)) for child in f.read().split())
    except (FileNotFoundError, ProcessLookupError):
        pass  # it ended meanwhile
    return total


def one_run(
    net: realparts.ReplayNet, capture: Path, port: int, workers: int, pps: int, seconds: int, pps_multi: int
) -> dict:
    with tempfile.TemporaryDirectory(prefix="kwsniff-bench-live-") as tmp:
        out = Path(tmp) / "live"
        args = ["--out", str(out), "-p", str(port), "--workers", str(workers), "--rotate-seconds", "3600"]
        proc = realparts.start_kwsniff_capture(net, args, Path(tmp) / "capture.err")
        try:
            softirq, kwsniff_cpu = softirq_seconds(), tree_cpu(proc.pid)
            sent = realparts.tcpreplay(
                net,
                capture,
                pps=pps,
                loop=0,
                duration_s=seconds,
                unique_ip=True,
                pps_multi=pps_multi,
                timeout_s=seconds + 60,
            )
            softirq = softirq_seconds() - softirq
            time.sleep(SETTLE_S)
            kwsniff_cpu = tree_cpu(proc.pid) - kwsniff_cpu
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
    return {
        "sent": sent.packets,
        "sent_pps": sent.packets / sent.seconds,
        "sender_cpu": 100 * sent.cpu_s / sent.seconds,
        "softirq_cpu": 100 * softirq / sent.seconds,
        "kwsniff_cpu": 100 * kwsniff_cpu / (sent.seconds + SETTLE_S),
        "workers": dict(per_worker),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--capture", type=Path, default=CAPTURE, help="an MTU 1500 Kafka capture to replay")
    parser.add_argument("--seconds", type=int, default=60, help="replay time per rate")
    parser.add_argument("--pps", type=int, action="append", help="packet rates (repeatable)")
    parser.add_argument("--workers", type=int, action="append", help="worker counts [default: 1 and 2]")
    parser.add_argument(
        "--pps-multi", type=int, default=1, help="tcpreplay --pps-multi: packets sent per timed interval"
    )
    args = parser.parse_args()
    for tool in ("ip", "tcpreplay"):
        if shutil.which(tool) is None:
            print(f"bench_live: {tool} is needed", file=sys.stderr)
            return 2
    source = ensure_capture(args.capture)
    port = broker_port(source)
    work = Path(tempfile.mkdtemp(prefix="kwsniff-bench-live-"))
    try:
        capture = work / source.name
        realparts.split_loopback(source, capture, port)
        print(
            f"capture {source.name}: {realparts.pcap_packet_count(capture):,} packets, broker port {port},"
            " replayed with clients and broker on addresses of their own"
        )
        results = measure(capture, port, sorted(args.workers or [1, 2]), sorted(args.pps or RATES), args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary(results)
    return 0


def measure(capture: Path, port: int, counts: list[int], rates: list[int], args: argparse.Namespace) -> dict:
    """Every (workers, rate) run, each printed as it ends; returns them by (workers, rate)."""
    load = os.getloadavg()
    print(f"load before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    print(
        f"{'workers':>7} {'target pps':>10} {'sent pps':>9} {'sender':>6} {'softirq':>7} {'kwsniff':>7}"
        f" {'sent':>10} {'captured':>10}  per worker: captured: drops (kernel+queue)"
    )
    print(f"{'':>7} {'':>10} {'':>9} {'CPU % of one core':>22}")
    results = {}
    with realparts.replay_namespace("bench") as net:
        for workers in counts:
            for pps in rates:
                r = one_run(net, capture, port, workers, pps, args.seconds, args.pps_multi)
                ws = r["workers"]
                captured = sum(w["packets"] for w in ws.values())
                drops = {i: w["kernel_drops"] + w["queue_drops"] for i, w in sorted(ws.items())}
                shown = "  ".join(
                    f"w{i} {ws[i]['packets']:,}: {d:,} ({ws[i]['kernel_drops']:,}+{ws[i]['queue_drops']:,})"
                    for i, d in drops.items()
                )
                r["dropped"] = sum(drops.values())
                r["reached"] = r["sent_pps"] >= 0.9 * pps
                print(
                    f"{workers:>7} {pps:>10,} {r['sent_pps']:>9,.0f} {r['sender_cpu']:>6.0f}"
                    f" {r['softirq_cpu']:>7.0f} {r['kwsniff_cpu']:>7.0f} {r['sent']:>10,} {captured:>10,}  {shown}"
                    f"  total {r['dropped']:,} ({100 * r['dropped'] / max(1, r['sent']):.2f}%)"
                    + ("" if r["reached"] else "  [tcpreplay fell short of the target]"),
                    flush=True,
                )
                results[(workers, pps)] = r
    load = os.getloadavg()
    print(f"load after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return results


def summary(results: dict) -> None:
    """Rate against drops, one column per worker count; the highest rate each kept without drops."""
    counts = sorted({w for w, _ in results})
    rates = sorted({p for _, p in results})
    print("\nrate against drops (sent pps: dropped %):")
    print(f"{'target pps':>10}" + "".join(f"  {f'{w} worker(s)':>22}" for w in counts))
    for pps in rates:
        cells = []
        for w in counts:
            r = results.get((w, pps))
            cell = "" if r is None else f"{r['sent_pps']:,.0f}: {100 * r['dropped'] / max(1, r['sent']):.2f}%"
            cells.append(f"  {cell:>22}")
        print(f"{pps:>10,}" + "".join(cells))
    best = {
        w: max((r["sent_pps"] for (x, _), r in results.items() if x == w and r["dropped"] == 0), default=0.0)
        for w in counts
    }
    for w in counts:
        print(f"highest rate sent with zero drops, {w} worker(s): {best[w]:,.0f} pps")
    if best.get(1) and best.get(2):
        print(
            f"1 -> 2 workers gain: {best[2] / best[1]:.2f}x (goal {GOAL_GAIN}x); goal: zero drops at {GOAL_PPS:,} pps for 60 s"
        )
    if not all(r["reached"] for r in results.values()):
        print("tcpreplay could not send some rates: the machine, not kwsniff, limited those (see the load)")


if __name__ == "__main__":
    sys.exit(main())
