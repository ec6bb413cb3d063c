"""Make a Kafka capture from real traffic: tansu on loopback, tcpdump, and a client workload.

    python tools/make_capture.py sample_pcaps/quickstart.pcap --workload quickstart
    python tools/make_capture.py bench/captures/large.pcap --workload bench-large --mb 300
    python tools/make_capture.py bench/captures/mtu1500.pcap --workload bench-mtu1500 --mb 100

bench-mtu1500 runs broker, tcpdump and clients inside a private network namespace whose loopback has
MTU 1500 and no segmentation offloads, so the capture holds packets of real-network size (needs root,
iproute2 and ethtool; install ethtool with `apt-get install ethtool`). The namespace is always removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import realparts  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_workloads  # noqa: E402

WORKLOADS = (
    "quickstart",
    "bench-large",
    "bench-mtu1500",
    "bench-tailing",
    "bench-aiokafka",
    "bench-many",
    "bench-smallbatch",
    "bench-partitions",
    "bench-java-partitions",
    "bench-rdpartitions",
)
DEFAULT_MB = {
    "quickstart": 0,
    "bench-large": 300,
    "bench-mtu1500": 100,
    "bench-tailing": 320,
    "bench-aiokafka": 320,
    "bench-many": 2600,
    "bench-smallbatch": 320,
    "bench-partitions": 300,
    "bench-java-partitions": 24,
    "bench-rdpartitions": 200,
}
# Workloads run inside a private namespace whose loopback has MTU 1500 (packets of network size).
MTU_WORKLOADS = ("bench-mtu1500", "bench-tailing", "bench-many", "bench-smallbatch")
BENCH_VALUE_SIZE = 100_000
# A Produce request carries about one batch per partition; 1 MB batches keep frames large.
BENCH_BATCH_BYTES = 1_000_000
MTU = 1500


def quickstart(bootstrap: str) -> dict[str, object]:
    """Small but representative: admin, three producers (none/gzip/zstd), two consumer groups.

    kafka-python cannot decompress zstd without the optional zstandard package, so the zstd topic is
    read by librdkafka and the other by kafka-python's group protocol.
    """
    realparts.create_topics(bootstrap, {"orders": 3, "events": 2})
    produced = {
        "orders/none": realparts.produce_with_confluent(
            bootstrap, "orders", 80, 300, compression="none", flush_each=False, client_id="qs-producer-none"
        ),
        "orders/gzip": realparts.produce_with_confluent(
            bootstrap, "orders", 60, 400, compression="gzip", flush_each=False, client_id="qs-producer-gzip"
        ),
        "events/zstd": realparts.produce_with_confluent(
            bootstrap, "events", 60, 400, compression="zstd", flush_each=False, client_id="qs-producer-zstd"
        ),
    }
    orders = produced["orders/none"] + produced["orders/gzip"]
    consumed = {
        "orders": realparts.consume_with_kafka_python(
            bootstrap,
            ["orders"],
            "quickstart-group",
            orders,
            timeout_s=60,
            idle_after_s=1.5,
            client_id="qs-consumer-kafka-python",
        ),
        "events": realparts.consume_with_confluent(
            bootstrap,
            ["events"],
            "quickstart-audit",
            produced["events/zstd"],
            timeout_s=60,
            client_id="qs-consumer-confluent",
        )[0],
    }
    topics = realparts.list_metadata(bootstrap)
    return {"produced": produced, "consumed": consumed, "topics": topics}


def bench(bootstrap: str, megabytes: int) -> dict[str, object]:
    """Large uncompressed Produce requests, then Fetch responses carrying the same bytes back."""
    # Produce and Fetch each carry the data once, so produce half the target capture size.
    records = max(1, megabytes * 1_000_000 // 2 // BENCH_VALUE_SIZE)
    realparts.create_topics(bootstrap, {"bench": 4})
    delivered = realparts.produce_with_confluent(
        bootstrap,
        "bench",
        records,
        BENCH_VALUE_SIZE,
        flush_each=False,
        linger_ms=20,
        batch_bytes=BENCH_BATCH_BYTES,
        client_id="bench-producer",
        timeout_s=600,
    )
    consumed, value_bytes = realparts.consume_with_confluent(
        bootstrap,
        ["bench"],
        "bench-group",
        delivered,
        timeout_s=600,
        fetch_max_bytes=BENCH_BATCH_BYTES,
        client_id="bench-consumer",
    )
    return {"produced": delivered, "consumed": consumed, "consumed_value_bytes": value_bytes}


def run_workload(name: str, bootstrap: str, megabytes: int) -> dict[str, object]:
    if name == "quickstart":
        return quickstart(bootstrap)
    if name == "bench-tailing":
        return bench_workloads.tailing(bootstrap, megabytes)
    if name == "bench-many":
        return bench_workloads.many(bootstrap, megabytes)
    if name == "bench-aiokafka":
        return bench_workloads.aiokafka_tailing(bootstrap, megabytes)
    if name == "bench-smallbatch":
        return bench_workloads.small_batches(bootstrap, megabytes)
    if name == "bench-partitions":
        return bench_workloads.many_partitions(bootstrap, megabytes)
    if name == "bench-java-partitions":
        return bench_workloads.java_partitions(bootstrap, megabytes)
    if name == "bench-rdpartitions":
        return bench_workloads.librdkafka_partitions(bootstrap, megabytes)
    return bench(bootstrap, megabytes)


def capture(out: Path, workload: str, megabytes: int, netns: str | None) -> dict[str, object]:
    """Broker and tcpdump around one workload; the workload runs in a child inside `netns` if given."""
    started = time.monotonic()
    with realparts.start_broker(netns=netns) as broker:
        with realparts.tcpdump_capture(out, broker.port, netns=netns) as stats:
            if netns is None:
                result = run_workload(workload, broker.bootstrap, megabytes)
            else:
                result = run_workload_in_netns(netns, workload, broker.bootstrap, megabytes)
        errors = [line for line in broker.log_text().splitlines() if "ERROR" in line]
    return {
        "workload": workload,
        "bootstrap": broker.bootstrap,
        "result": result,
        "tcpdump": {
            "captured": stats.captured,
            "received_by_filter": stats.received_by_filter,
            "dropped_by_kernel": stats.dropped_by_kernel,
        },
        "broker_error_lines": len(errors),
        "seconds": round(time.monotonic() - started, 1),
    }


def run_workload_in_netns(netns: str, workload: str, bootstrap: str, megabytes: int) -> dict[str, object]:
    command = [
        *realparts.netns_prefix(netns),
        sys.executable,
        str(Path(__file__).resolve()),
        "--run-workload",
        workload,
        "--bootstrap",
        bootstrap,
        "--mb",
        str(megabytes),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"workload in {netns} failed: {done.stderr.strip()[-2000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


NAMESPACE_TOOLS = ("ip", "ethtool", "tcpdump")
DEBIAN_PACKAGE = {"ip": "iproute2"}


class MissingTool(SystemExit):
    """A tool the namespace needs is not installed: one line, before anything is made."""


def require_tools(tools: tuple[str, ...] = NAMESPACE_TOOLS) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise MissingTool(
            f"{' and '.join(missing)} missing: install with `apt-get install "
            f"{' '.join(DEBIAN_PACKAGE.get(t, t) for t in missing)}` (tools/install-test-deps.sh does)"
        )


def create_mtu_namespace(name: str) -> None:
    """A private namespace whose loopback behaves like an Ethernet link: MTU 1500, no TSO/GSO/GRO,
    so every packet tcpdump sees is at most 1500 bytes of IP (1514 with the Ethernet header).

    Checks its tools first, and removes the namespace again if a step fails, so a failed start
    never leaves a namespace behind."""
    require_tools()
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True, timeout=10)
    try:
        subprocess.run(
            ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "mtu", str(MTU), "up"],
            check=True,
            capture_output=True,
            timeout=10,
        )
        subprocess.run(
            ["ip", "netns", "exec", name, "ethtool", "-K", "lo", "tso", "off", "gso", "off", "gro", "off"],
            check=True,
            capture_output=True,
            timeout=10,
        )
    except BaseException:
        delete_namespace(name)
        raise


def delete_namespace(name: str) -> None:
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=10)


def largest_frame(path: Path) -> int:
    out = subprocess.run(
        ["tshark", "-r", str(path), "-T", "fields", "-e", "frame.cap_len"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    return max((int(x) for x in out.stdout.split()), default=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", nargs="?", type=Path, help="pcap file to write")
    parser.add_argument("--workload", choices=WORKLOADS, default="quickstart")
    parser.add_argument("--mb", type=int, default=None, help="approximate capture size (bench workloads)")
    parser.add_argument("--run-workload", choices=WORKLOADS, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    megabytes = args.mb if args.mb is not None else DEFAULT_MB[args.run_workload or args.workload]

    if args.run_workload:  # child mode: the workload alone, inside a namespace; result as JSON
        print(json.dumps(run_workload(args.run_workload, args.bootstrap, megabytes)))
        return 0
    if args.out is None:
        parser.error("OUT.pcap is required")
    args.out.parent.mkdir(parents=True, exist_ok=True)

    netns = None
    if args.workload in MTU_WORKLOADS:
        netns = f"kwsniff-bench-{os.getpid()}"
        create_mtu_namespace(netns)
    try:
        summary = capture(args.out, args.workload, megabytes, netns)
    finally:
        if netns:
            delete_namespace(netns)
    if netns:
        summary["largest_frame"] = largest_frame(args.out)
    summary["bytes"] = args.out.stat().st_size
    summary["packets"] = realparts.pcap_packet_count(args.out)
    print(json.dumps(summary, sort_keys=True))
    if stats_dropped(summary):
        print(f"make_capture: tcpdump dropped packets, {args.out} is incomplete", file=sys.stderr)
        return 1
    return 0


def stats_dropped(summary: dict[str, object]) -> bool:
    tcpdump = summary["tcpdump"]
    return isinstance(tcpdump, dict) and int(tcpdump["dropped_by_kernel"]) > 0


if __name__ == "__main__":
    sys.exit(main())
