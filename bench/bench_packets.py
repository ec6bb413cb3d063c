"""CPU time per packet of the decode pipeline alone, on an in-memory copy of a capture.

    python bench/bench_packets.py bench/captures/smallbatch.pcap --runs 3

With --path-only the Kafka frames are dropped as the frame splitter cuts them (no pairing, decoding
or rows): what is left is the per-packet path itself (session, TCP parse, connection, reassembly,
framing), the part kwsniff/pipeline/_fastpath.c compiles.

Each round times the compiled packet path (kwsniff/pipeline/_fastpath.c) and the pure-Python one,
alternating, in this one process, and prints both and their ratio, with the load average.

Every packet of CAPTURE is read into memory first, then fed to a fresh `Session` each round
(session → TCP parse → connection → reassembly → framing → pairing → decoding → rows), the rows
going to a sink that drops them: no file reading, no Parquet. Prints CPU µs per packet (process
time, so less moved by a loaded machine than wall time), median and best over the rounds. The
broker port is the one most SYNs go to (as in bench_read.py). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's kwsniff

from bench_read import broker_port  # noqa: E402

from kwsniff.capture import open_capture  # noqa: E402
from kwsniff.pipeline.session import Session, SessionOptions, compiled  # noqa: E402


class DroppingSink:
    def add(self, table: str, row: dict[str, Any]) -> None:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("capture", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--path-only", action="store_true", help="drop frames once cut: the packet path alone"
    )
    args = parser.parse_args()
    if args.path_only:
        from kwsniff.kafka.pairing import Conversation

        def drop(self: Conversation, frame: object, ts_first: int, ts_last: int, offset: int) -> None:
            pass

        # Bound by each FrameSplitter when its Conversation is made, so patched before any is.
        Conversation._on_request_frame = drop  # type: ignore[method-assign]
        Conversation._on_response_frame = drop  # type: ignore[method-assign]
    port = broker_port(args.capture)
    with open_capture(args.capture) as reader:
        packets = [(ts, linktype, bytes(data)) for ts, linktype, data in reader.packets()]
    paths = ("compiled", "pure") if compiled() else ("pure",)
    seconds: dict[str, list[float]] = {path: [] for path in paths}
    handled = ""
    load = [os.getloadavg()[0]]
    for _ in range(args.runs):
        for path in paths:
            session = Session("bench", DroppingSink(), SessionOptions(broker_ports=frozenset({port})))
            if path == "pure":
                vars(session).pop("packet", None)  # the class's method: the pure-Python path
            feed = session.packet
            started = time.process_time()
            for ts, linktype, data in packets:
                feed(ts, linktype, data)
            session.finish()
            seconds[path].append(time.process_time() - started)
            if path == "compiled":
                fast, slow = feed.__self__.counts()  # type: ignore[attr-defined]
                handled = f" (compiled path: {fast:,} packets handled in C, {slow:,} handed to Python)"
        load.append(os.getloadavg()[0])
    per = {path: [s / len(packets) * 1e6 for s in secs] for path, secs in seconds.items()}
    print(
        f"{args.capture.name}: {len(packets):,} packets{handled}, load average {min(load):.1f}-{max(load):.1f}"
    )
    for path in paths:
        print(
            f"  {path:>8}: CPU per packet median {statistics.median(per[path]):.2f} µs,"
            f" best {min(per[path]):.2f} µs over {args.runs} rounds"
        )
    if len(paths) == 2:
        print(
            f"  pure ÷ compiled (medians): {statistics.median(per['pure']) / statistics.median(per['compiled']):.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
