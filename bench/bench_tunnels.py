"""Time `kwsniff read` of a capture wrapped in VXLAN against the same capture plain, with tshark on both.

    python bench/bench_tunnels.py                    # bench/captures/tailing.pcap if made, else built
    python bench/bench_tunnels.py some.pcap --runs 3

The plain capture is re-segmented to a 1500-byte MTU (TCP payloads cut to 1448 bytes; a capture made
at MTU 1500 is left as it is), then every frame is wrapped in Ethernet/IPv4/UDP 4789/VXLAN as a
Kubernetes node or a cloud traffic mirror delivers it (raw bytes: this is a benchmark, the tests
wrap with scapy). Without bench/captures/tailing.pcap the input is tests/data/captures/
produce_codecs.pcap repeated (client ports shifted) to --copies copies. Each round runs kwsniff on
plain, kwsniff on VXLAN, tshark on plain, tshark on VXLAN. Prints medians and the ratios
VXLAN ÷ plain speed for each tool (the target for kwsniff: at least 0.9). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_read import broker_port, kwsniff_command, run_measured  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT = REPO / "bench" / "captures" / "tailing.pcap"
FALLBACK = REPO / "tests" / "data" / "captures" / "produce_codecs.pcap"
MSS = 1448
PCAP_HEADER = struct.Struct("<IHHiIII")
RECORD = struct.Struct("<IIII")
OUTER = bytes.fromhex("0200000000020200000000010800")  # outer Ethernet: dst, src, IPv4


def records(path: Path) -> tuple[bytes, list[tuple[int, int, bytes]]]:
    data = path.read_bytes()
    header = data[: PCAP_HEADER.size]
    if PCAP_HEADER.unpack(header)[0] != 0xA1B2C3D4 or PCAP_HEADER.unpack(header)[6] != 1:
        raise SystemExit(f"{path}: needs a little-endian microsecond pcap of Ethernet frames")
    out, pos = [], PCAP_HEADER.size
    while pos + RECORD.size <= len(data):
        sec, usec, caplen, _ = RECORD.unpack_from(data, pos)
        pos += RECORD.size
        out.append((sec, usec, data[pos : pos + caplen]))
        pos += caplen
    return header, out


def resegment(frame: bytes, port_shift: int) -> list[bytes]:
    """An Ethernet/IPv4/TCP frame cut into MSS-byte segments; the client port moved by port_shift."""
    if frame[12:14] != b"\x08\x00" or frame[23] != 6:
        return [frame]
    ihl = (frame[14] & 0x0F) * 4
    tcp = 14 + ihl
    total = int.from_bytes(frame[16:18], "big")
    doff = (frame[tcp + 12] >> 4) * 4
    head, payload = bytearray(frame[: tcp + doff]), frame[tcp + doff : 14 + total]
    sport, dport = int.from_bytes(head[tcp : tcp + 2], "big"), int.from_bytes(head[tcp + 2 : tcp + 4], "big")
    if sport > dport:
        head[tcp : tcp + 2] = ((sport + port_shift) & 0xFFFF).to_bytes(2, "big")
    else:
        head[tcp + 2 : tcp + 4] = ((dport + port_shift) & 0xFFFF).to_bytes(2, "big")
    if len(payload) <= MSS:
        return [bytes(head) + payload]
    seq, ident, flags = (
        int.from_bytes(head[tcp + 4 : tcp + 8], "big"),
        int.from_bytes(head[18:20], "big"),
        head[tcp + 13],
    )
    pieces = []
    for n, at in enumerate(range(0, len(payload), MSS)):
        piece = payload[at : at + MSS]
        h = bytearray(head)
        h[16:18] = (ihl + doff + len(piece)).to_bytes(2, "big")
        h[18:20] = ((ident + n) & 0xFFFF).to_bytes(2, "big")
        h[tcp + 4 : tcp + 8] = ((seq + at) & 0xFFFFFFFF).to_bytes(4, "big")
        h[tcp + 13] = flags if at + MSS >= len(payload) else flags & ~0x09
        pieces.append(bytes(h) + piece)
    return pieces


def vxlan(frame: bytes, n: int) -> bytes:
    udp_len = 8 + 8 + len(frame)
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + udp_len,
        n & 0xFFFF,
        0,
        64,
        17,
        0,
        b"\xc0\x00\x02\x01",
        b"\xc0\x00\x02\x02",
    )
    udp = struct.pack("!HHHH", 49152 + n % 4096, 4789, udp_len, 0)
    return OUTER + ip + udp + b"\x08\x00\x00\x00\x00\x00\x2a\x00" + frame


def write(path: Path, header: bytes, frames: list[tuple[int, int, bytes]]) -> None:
    with open(path, "wb") as f:
        f.write(header[:16] + struct.pack("<I", 262144) + header[20:])
        for sec, usec, frame in frames:
            f.write(RECORD.pack(sec, usec, len(frame), len(frame)) + frame)


def build(source: Path, copies: int, tmp: Path) -> tuple[Path, Path]:
    header, recs = records(source)
    plain: list[tuple[int, int, bytes]] = []
    for copy in range(copies):
        for sec, usec, frame in recs:
            plain.extend((sec + copy * 3600, usec, piece) for piece in resegment(frame, copy * 7))
    wrapped = [(sec, usec, vxlan(frame, n)) for n, (sec, usec, frame) in enumerate(plain)]
    write(tmp / "plain.pcap", header, plain)
    write(tmp / "vxlan.pcap", header, wrapped)
    return tmp / "plain.pcap", tmp / "vxlan.pcap"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("capture", nargs="?", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--copies", type=int, default=20, help="copies of the fallback capture (default 20)")
    args = parser.parse_args()
    source = args.capture or (DEFAULT if DEFAULT.exists() else FALLBACK)
    copies = 1 if args.capture or source == DEFAULT else args.copies
    kw = kwsniff_command()
    with tempfile.TemporaryDirectory(prefix="kwsniff-bench-tunnels-") as tmp:
        plain, wrapped = build(source, copies, Path(tmp))
        port = broker_port(plain)
        times: dict[str, list[float]] = {k: [] for k in ("kw_plain", "kw_vxlan", "ts_plain", "ts_vxlan")}
        for _ in range(args.runs):
            for label, path in (("plain", plain), ("vxlan", wrapped)):
                out = Path(tmp) / f"tables-{label}"
                times[f"kw_{label}"].append(
                    run_measured([*kw, "read", str(path), "--out", str(out), "--overwrite", "-q"]).seconds
                )
            for label, path in (("plain", plain), ("vxlan", wrapped)):
                command = ["tshark", "-r", str(path), "-d", f"tcp.port=={port},kafka", "-T", "fields",
                           "-e", "kafka.api_key", "-e", "kafka.correlation_id"]  # fmt: skip
                times[f"ts_{label}"].append(run_measured(command).seconds)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"input: {source.name} x{copies}, MTU 1500: plain {plain.stat().st_size / 1e6:.1f} MB, "
              f"VXLAN {wrapped.stat().st_size / 1e6:.1f} MB; median of {args.runs} rounds")  # fmt: skip
        print(f"{'':<8} {'plain s':>8} {'VXLAN s':>8} {'VXLAN speed / plain':>20}")
        for tool, key in (("kwsniff", "kw"), ("tshark", "ts")):
            p, v = med[f"{key}_plain"], med[f"{key}_vxlan"]
            print(f"{tool:<8} {p:>8.2f} {v:>8.2f} {p / v:>20.2f}")
        print(f"tshark/kwsniff on VXLAN: {med['ts_vxlan'] / med['kw_vxlan']:.2f} (above 1: kwsniff faster)")


if __name__ == "__main__":
    main()
