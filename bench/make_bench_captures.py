"""Make the benchmark captures in bench/captures/ if they are missing (they are not committed).

    python bench/make_bench_captures.py            # large.pcap, tailing.pcap, aiokafka.pcap
    python bench/make_bench_captures.py --force    # make them again

large.pcap (~300 MB): big uncompressed Produce requests and Fetch responses on loopback (MTU 65536),
so the cost is in bytes. tailing.pcap (~340 MB, ~234k packets): librdkafka and kafka-python
producers and tailing consumers in a private namespace with MTU 1500 and no offloads, so the cost is
per packet. aiokafka.pcap (~325 MB, ~9.5k packets, ~43k partition rows): five aiokafka producers,
one per codec, and a two-member group tailing 120 partitions, so the cost is per partition.
smallbatch.pcap (~350 MB, ~250k packets): as tailing.pcap with 1 KB records in batches of at most
16 KB. partitions.pcap (~210 MB, ~8.5k packets, ~92k partition rows): aiokafka again, 320
partitions tailed with fetches of at most 32 KB per partition, so every Fetch names ~160 partitions.
java_partitions.pcap (~1,280 partition rows per Fetch): the Kafka Java client (kafka-clients 3.9.1,
Fetch v17 naming topics by id), one consumer tailing 2 × 640 partitions while a producer spreads
1 KB records over them for about a minute (tools/bench_workloads.py, bench-java-partitions).
rdpartitions.pcap (~180 MB, ~62k packets, ~545k partition rows): four paced librdkafka producers and
one librdkafka consumer tailing 4 × 300 partitions, its ~430 Fetch v16 exchanges naming ~1,200 each.
Each takes one to three minutes to make (most of it tshark checking the largest frame). Needs
root, tcpdump, tshark, iproute2 and ethtool (see tools/make_capture.py, tools/bench_workloads.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
CAPTURES = BENCH / "captures"
MAKE_CAPTURE = BENCH.parent / "tools" / "make_capture.py"
# name -> (workload, approximate size in MB)
BENCH_CAPTURES = {
    "large.pcap": ("bench-large", 300),
    # The two shapes of issue 11, each ~320 MB: many small packets, and many partitions per Fetch.
    "tailing.pcap": ("bench-tailing", 320),
    "aiokafka.pcap": ("bench-aiokafka", 520),
    # The two shapes of issue 19: small batches at MTU 1500 (librdkafka + kafka-python), and aiokafka
    # Fetch v11 requests naming ~160 partitions each, most of them empty.
    "smallbatch.pcap": ("bench-smallbatch", 320),
    "partitions.pcap": ("bench-partitions", 300),
    # Issue 37's second many-partitions shape: the Java client, Fetch v17 (topic ids), one member
    # fetching 1,280 partitions in every request.
    "java_partitions.pcap": ("bench-java-partitions", 24),
    # Issue 37's second many-partitions shape: one librdkafka consumer, Fetch v16 (topic ids) naming
    # ~1,200 partitions.
    "rdpartitions.pcap": ("bench-rdpartitions", 200),
}


def make_capture(path: Path, workload: str, megabytes: int) -> None:
    """One capture via tools/make_capture.py; written under a temporary name so a failed run
    never leaves a half capture that a later run would take as made."""
    partial = path.with_suffix(".partial.pcap")
    command = [
        sys.executable,
        str(MAKE_CAPTURE),
        str(partial),
        "--workload",
        workload,
        "--mb",
        str(megabytes),
    ]
    print(f"making {path.name}: {' '.join(command[1:])}", flush=True)
    subprocess.run(command, check=True, timeout=3600)
    partial.rename(path)


def ensure_captures(force: bool = False) -> list[Path]:
    CAPTURES.mkdir(parents=True, exist_ok=True)
    made = []
    for name, (workload, megabytes) in BENCH_CAPTURES.items():
        path = CAPTURES / name
        if force or not path.exists():
            make_capture(path, workload, megabytes)
        made.append(path)
    return made


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--force", action="store_true", help="make the captures even if they exist")
    args = parser.parse_args()
    for path in ensure_captures(args.force):
        print(f"{path}: {path.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
