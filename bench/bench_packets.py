"""CPU time per packet of the decode pipeline alone, on an in-memory copy of a capture.

    python bench/bench_packets.py bench/captures/smallbatch.pcap --runs 3

Every packet of CAPTURE is read into memory first, then fed to a fresh `Session` each round
(session → TCP parse → connection → reassembly → framing → pairing → decoding → rows), the rows
going to a sink that drops them: no file reading, no Parquet. Prints CPU µs per packet (process
time, so less moved by a loaded machine than wall time), median and best over the rounds. The
broker port is the one most SYNs go to (as in bench_read.py). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's kwsniff

from bench_read import broker_port  # noqa: E402

from kwsniff.capture import open_capture  # noqa: E402
from kwsniff.pipeline.session import Session, SessionOptions  # noqa: E402


class DroppingSink:
    def add(self, table: str, row: dict[str, Any]) -> None:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("capture", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    port = broker_port(args.capture)
    with open_capture(args.capture) as reader:
        packets = [(ts, linktype, bytes(data)) for ts, linktype, data in reader.packets()]
    seconds = []
    for _ in range(args.runs):
        session = Session("bench", DroppingSink(), SessionOptions(broker_ports=frozenset({port})))
        feed = session.packet
        started = time.process_time()
        for ts, linktype, data in packets:
            feed(ts, linktype, data)
        session.finish()
        seconds.append(time.process_time() - started)
    per = [s / len(packets) * 1e6 for s in seconds]
    print(
        f"{args.capture.name}: {len(packets):,} packets, CPU per packet median {statistics.median(per):.2f} µs,"
        f" best {min(per):.2f} µs over {args.runs} rounds"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
