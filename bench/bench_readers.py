"""Capture readers and parse_tcp against their peers, measured in the same run.

    python bench/bench_readers.py [CAPTURE] [--mb 100]

CAPTURE (default tests/data/captures/produce_codecs.pcap, large frames; try acks_modes.pcap for small
ones) is replicated in memory to about --mb megabytes so disk speed does not enter, and also converted to
pcapng and gzip. Prints packets/s and MB/s (of uncompressed capture) for dpkt and kwsniff on each, and
ns/packet for parse_tcp against dpkt's Ethernet/IP/TCP parsing. Timings only; nothing here fails.
"""

from __future__ import annotations

import argparse
import gzip
import io
import itertools
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import BinaryIO

import dpkt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from kwsniff.capture import open_capture_file
from kwsniff.net import parse_tcp

DEFAULT_CAPTURE = Path(__file__).resolve().parent.parent / "tests/data/captures/produce_codecs.pcap"


def replicate(blob: bytes, target: int) -> bytes:
    """A pcap of about target bytes: the file header once, then the records over and over."""
    if blob[:4] == b"\x0a\x0d\x0d\x0a":
        # pcapng: repeat the whole file; every copy is a fresh section with its own interfaces.
        return blob * max(1, target // len(blob))
    header, records = blob[:24], blob[24:]
    return header + records * max(1, target // len(records))


def best_of(runs: int, fn: Callable[[], int]) -> tuple[float, int]:
    best, count = float("inf"), 0
    for _ in range(runs):
        start = time.perf_counter()
        count = fn()
        best = min(best, time.perf_counter() - start)
    return best, count


def kwsniff_reader(blob: bytes) -> int:
    n = 0
    with open_capture_file(io.BytesIO(blob), "bench") as reader:
        for _ts, _lt, _data in reader.packets():
            n += 1
    return n


def dpkt_reader(blob: bytes) -> int:
    fileobj: BinaryIO | gzip.GzipFile = io.BytesIO(blob)
    if blob[:2] == b"\x1f\x8b":
        fileobj = gzip.GzipFile(fileobj=fileobj)
    head = fileobj.read(4)
    fileobj.seek(0)
    reader_class = dpkt.pcapng.Reader if head == b"\x0a\x0d\x0d\x0a" else dpkt.pcap.Reader
    n = 0
    for _ts, _data in reader_class(fileobj):
        n += 1
    return n


def to_pcapng(pcap_blob: bytes) -> bytes:
    """The same packets as a pcapng file (one interface, microsecond timestamps), written by dpkt."""
    reader = dpkt.pcap.Reader(io.BytesIO(pcap_blob))
    out = io.BytesIO()
    writer = dpkt.pcapng.Writer(out, snaplen=reader.snaplen, linktype=reader.datalink())
    for ts, data in reader:
        writer.writepkt(data, ts=ts)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("capture", nargs="?", type=Path, default=None)
    parser.add_argument(
        "--mb", type=float, default=100.0, help="replicate the capture in memory to this size"
    )
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    source = args.capture or DEFAULT_CAPTURE
    blob = replicate(source.read_bytes(), int(args.mb * 1e6))
    print(f"capture: {source.name} x{len(blob) // source.stat().st_size}, {len(blob) / 1e6:.1f} MB in memory")
    print(f"best of {args.runs} runs; 'x peer' is kwsniff's speed over the line above it")
    if blob[:4] == b"\x0a\x0d\x0d\x0a":
        pcap_blob, pcapng_blob = b"", blob
    else:
        pcap_blob, pcapng_blob = blob, to_pcapng(blob)
    gzip_blob = gzip.compress(blob, compresslevel=1)
    rows = [
        ("pcap", "dpkt.pcap.Reader", pcap_blob, dpkt_reader),
        ("pcap", "kwsniff", pcap_blob, kwsniff_reader),
        ("pcapng", "dpkt.pcapng.Reader", pcapng_blob, dpkt_reader),
        ("pcapng", "kwsniff", pcapng_blob, kwsniff_reader),
        ("gzip", "gzip.GzipFile+dpkt", gzip_blob, dpkt_reader),
        ("gzip", "kwsniff", gzip_blob, kwsniff_reader),
    ]
    peer = 0.0
    for fmt, name, data, read in rows:
        if not data:
            continue
        size = len(blob) if fmt == "gzip" else len(data)
        seconds, packets = best_of(args.runs, partial(read, data))
        ratio = f"{peer / seconds:.1f}x peer" if name == "kwsniff" else ""
        peer = seconds
        print(
            f"  {fmt:8}{name:20} {packets / seconds / 1e6:6.2f} M packets/s "
            f"{size / 1e6 / seconds:8.1f} MB/s  ({seconds:.3f} s) {ratio}"
        )

    # The frames of one copy, parsed over and over: in a real run each packet was just read, so its
    # header is in cache; parsing 100 MB of distinct frames would time memory latency instead.
    with open_capture_file(io.BytesIO(blob), "bench") as reader:
        one_copy = [(lt, data) for _ts, lt, data in itertools.islice(reader.packets(), 5000)]
    frames = one_copy * (200_000 // len(one_copy))

    def kwsniff_parse() -> int:
        n = 0
        for lt, data in frames:
            if type(parse_tcp(lt, data)) is not str:
                n += 1
        return n

    def dpkt_parse() -> int:
        n = 0
        for _lt, data in frames:
            ip = dpkt.ethernet.Ethernet(data).data
            if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP):
                n += 1
        return n

    def bare_loop() -> int:
        n = 0
        for _lt, _data in frames:
            n += 1
        return n

    loop_s, _ = best_of(args.runs, bare_loop)
    print(
        f"parse_tcp over {len(frames)} frames (loop overhead {loop_s / len(frames) * 1e9:.0f} ns/packet subtracted)"
    )
    for name, parse in (("dpkt", dpkt_parse), ("kwsniff", kwsniff_parse)):
        seconds, tcp = best_of(args.runs, parse)
        print(f"  {name:8} {(seconds - loop_s) / len(frames) * 1e9:7.0f} ns/packet  ({tcp} TCP)")


if __name__ == "__main__":
    main()
