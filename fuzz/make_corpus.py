"""Make the seed corpora under fuzz/corpus/<target>/ from the real captures in tests/data/captures.

    python fuzz/make_corpus.py

Seeds are named by content hash, so re-running adds nothing twice; each corpus stays small (frames and
record sets are capped in size and number per message kind).
"""

from __future__ import annotations

import gzip
import hashlib
import struct
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from segments import ACK, PSH, SYN, encode  # noqa: E402
from targets import MAX_LEN, decoder_input, snapcut_input  # noqa: E402

from kwsniff.capture import open_capture  # noqa: E402
from kwsniff.kafka import FrameSplitter  # noqa: E402
from kwsniff.net import parse_tcp  # noqa: E402
from kwsniff.protocol import (  # noqa: E402
    DecodeError,
    decode_request,
    decode_response,
    parse_request_header,
    parse_response_header,
)
from kwsniff.tcp import TcpReassembler  # noqa: E402

CAPTURES = sorted((ROOT / "tests" / "data" / "captures").glob("*.pcap"))
# The snapcut target's captures: these, the quick start's and two consumer groups (a KIP-848 group).
SNAPCUT_CAPTURES = [
    *CAPTURES,
    ROOT / "sample_pcaps" / "quickstart.pcap",
    ROOT / "tests" / "data" / "report" / "two_groups.pcap",
]
PER_KIND = 2  # frames kept per (api key, version, direction)
MAX_FRAME = 8192
MAX_RECORDS = 16384
SNAPCUT_BYTES = 32768  # a snapcut seed's size: ~200 records cut at 96 bytes


def save(target: str, data: bytes) -> None:
    if len(data) > MAX_LEN[target]:
        return
    out = HERE / "corpus" / target
    out.mkdir(parents=True, exist_ok=True)
    (out / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def capture_seeds(path: Path) -> None:
    raw = path.read_bytes()
    # The file header and the first records, cut at a record boundary; also cut mid-record.
    pos, n = 24, 0
    while pos + 16 <= len(raw) and n < 12:
        caplen = struct.unpack_from("<I", raw, pos + 8)[0]
        pos += 16 + caplen
        n += 1
    head = raw[:pos]
    save("capture", head)
    save("capture", head[:-7])
    save("capture", gzip.compress(head, mtime=0))
    save("capture", pcapng_of(head))


def snapcut_seeds(path: Path) -> None:
    """The capture already cut at a few snap lengths (as `editcap -s N` writes it: each record's
    first N bytes, its caplen N, its original length kept), as many records as fit the target's size;
    once on the pure-Python paths."""
    raw = path.read_bytes()
    for snaplen in (96, 192, 384):
        cut, pos = bytearray(raw[:24]), 24
        while pos + 16 <= len(raw):
            ts_sec, ts_frac, caplen, wire = struct.unpack_from("<IIII", raw, pos)
            kept = min(caplen, snaplen)
            if len(cut) + 16 + kept + 2 > SNAPCUT_BYTES:
                break
            cut += struct.pack("<IIII", ts_sec, ts_frac, kept, wire) + raw[pos + 16 : pos + 16 + kept]
            pos += 16 + caplen
        save("snapcut", snapcut_input(snaplen, bytes(cut)))
        if snaplen == 192:
            save("snapcut", snapcut_input(snaplen, bytes(cut), pure_rows=True, pure_packets=True))


def pcapng_of(pcap: bytes) -> bytes:
    """The same packets as a pcapng: SHB, an IDB with ns resolution, an unknown block, EPBs and an SPB."""
    linktype = struct.unpack_from("<I", pcap, 20)[0]

    def block(btype: int, body: bytes) -> bytes:
        body += b"\x00" * (-len(body) % 4)
        return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)

    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    tsresol = struct.pack("<HHB3x", 9, 1, 9) + struct.pack("<HH", 0, 0)
    out += block(1, struct.pack("<HHI", linktype, 0, 0) + tsresol)
    out += block(0x7777, b"unknown block")
    pos = 24
    while pos + 16 <= len(pcap):
        sec, usec, caplen, wirelen = struct.unpack_from("<IIII", pcap, pos)
        data = pcap[pos + 16 : pos + 16 + caplen]
        ns = (sec * 1_000_000 + usec) * 1000
        out += block(6, struct.pack("<IIIII", 0, ns >> 32, ns & 0xFFFFFFFF, caplen, wirelen) + data)
        pos += 16 + caplen
    out += block(3, struct.pack("<I", 4) + b"\x45\x00\x00\x04")
    return out


def frames_of(path: Path) -> dict[tuple[bytes, int, bytes, int], list[bytes]]:
    """Every complete frame (size prefix removed) per flow, in stream order."""
    frames: dict[tuple[bytes, int, bytes, int], list[bytes]] = defaultdict(list)
    flows: dict[tuple[bytes, int, bytes, int], TcpReassembler] = {}
    with open_capture(path) as reader:
        for _ts, linktype, data in reader.packets():
            p = parse_tcp(linktype, data)
            if isinstance(p, str):
                continue
            src, sport, dst, dport, seq, _ack, flags, payload, missing = p
            key = (src, sport, dst, dport)
            r = flows.get(key)
            if r is None:
                splitter = FrameSplitter(_collect(frames[key]), _ignore)
                r = flows[key] = TcpReassembler(splitter.data, _ignore)
            if flags & SYN:
                r.syn(seq)
                seq += 1
            if payload:
                r.segment(_ts, seq & 0xFFFFFFFF, bytes(payload), missing)
    return frames


def _collect(into: list[bytes]) -> Callable[[bytes | memoryview, int, int, int], None]:
    def on_frame(frame: bytes | memoryview, ts_first: int, ts_last: int, offset: int) -> None:
        into.append(bytes(frame))

    return on_frame


def _ignore(*_args: object) -> None:
    pass


def kafka_seeds(path: Path, seen: dict[tuple[int, int, str], int]) -> None:
    frames = frames_of(path)
    for (src, sport, dst, dport), requests in frames.items():
        if not requests or sport < dport:
            continue  # take each connection from its client side (clients use the higher ephemeral port)
        responses = frames.get((dst, dport, src, sport), [])
        pending = {}
        segs = encode(0, SYN, b"") + encode(1, SYN | ACK, b"")
        for frame in requests:
            try:
                key, version, corr, _cid, hlen = parse_request_header(frame)
            except DecodeError:
                continue
            pending[corr] = (key, version)
            keep(seen, (key, version, "request"), frame, False)
            records_seeds(decode_request, key, version, frame[hlen:])
        for frame in responses:
            corr = struct.unpack_from(">i", frame)[0]
            if corr in pending:
                key, version = pending[corr]
                keep(seen, (key, version, "response"), frame, True)
                _c, hlen = parse_response_header(frame, key, version)
                records_seeds(decode_response, key, version, frame[hlen:])
        # The first exchanges of the connection as a segment stream, both directions interleaved.
        for req, resp in list(zip(requests, responses, strict=False))[:4]:
            segs += encode(0, ACK | PSH, struct.pack(">i", len(req)) + req[:1400])
            segs += encode(1, ACK | PSH, struct.pack(">i", len(resp)) + resp[:1400])
        save("stream", segs)
        save("session", segs)
        save("fastpath", segs)


def keep(
    seen: dict[tuple[int, int, str], int], kind: tuple[int, int, str], frame: bytes, response: bool
) -> None:
    if seen[kind] >= PER_KIND or len(frame) > MAX_FRAME:
        return
    seen[kind] += 1
    save("decoders", decoder_input(kind[0], kind[1], response, frame))
    if kind[0] in (0, 1):  # Produce and Fetch: the compiled partition walker's seeds too
        save("partfacts", decoder_input(kind[0], kind[1], response, frame))


def records_seeds(decode: object, key: int, version: int, body: bytes) -> None:
    if key not in (0, 1):
        return
    try:
        msg = decode(key, version, body)  # type: ignore[operator]
    except DecodeError:
        return
    for value in walk_records(msg):
        if 0 < len(value) <= MAX_RECORDS:
            save("records", b"\x01" + bytes(value))


def walk_records(node: object) -> list[bytes]:
    found = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "records" and isinstance(v, (bytes, memoryview)):
                found.append(bytes(v))
            else:
                found += walk_records(v)
    elif isinstance(node, list):
        for item in node:
            found += walk_records(item)
    return found


def tls_seeds() -> None:
    """The tls target's seeds (tls_wire.py format): every suite, segment sizes from 1 byte to a record
    and more, and each operation: records, odd inner types and padding, KeyUpdate or a wrong sequence
    number, raw bytes, gaps, damage."""
    runs = [
        bytes([0, 0, 0, 20, 0, 200]),  # two records
        bytes([0, 3, 0, 7, 1, 22, 0, 0, 9, 2, 0, 40]),  # then a handshake record, a KeyUpdate, more
        bytes([0, 206, 0, 255, 0, 255, 0, 255, 0, 255, 0, 1]),  # 2.3 KB records in 1.4 KB segments
        bytes([0, 100, 1, 23, 3, 1, 21, 0, 0, 30]),  # padding after application data, an alert
        bytes([0, 100, 0, 50, 4, 3, 0, 50, 0, 50]),  # a gap before a record: resynchronise
        bytes([0, 100, 0, 50, 5, 9, 0, 50, 0, 50]),  # a damaged record: one failed tag
        bytes([0, 100, 0, 10, 3, 5, 23, 3, 3, 255, 255, 0, 10]),  # raw bytes that look like a header
        bytes([0, 100, 3, 3, 22, 3, 1, 0, 60]),  # raw bytes first: the stream is out of step
    ]
    for suite in range(6):
        for run in runs:
            save("tls", bytes([suite]) + run[1:])


def int64_seeds() -> None:
    """The int64 target's seeds (int64_wire.py format): every field at one edge (-2^63 ... 2^63-1,
    one byte per field), at alternating edges, and pseudo-random mixes of edges and raw values."""
    import random

    from int64_wire import EDGES

    for i in range(len(EDGES)):
        save("int64", bytes([i]) * 160)  # every field that edge, one-byte choices at their first value
    save("int64", bytes([10, 0] * 80))  # 2^63-1 and -2^63 in turn
    save("int64", bytes([10, 1, 9] * 60))
    mix = random.Random(45)
    for _ in range(8):
        save("int64", bytes(mix.choice((0, 1, 3, 4, 5, 6, 9, 10, 11, 21, 0xC0, 0xFF)) for _ in range(200)))


def main() -> None:
    seen: dict[tuple[int, int, str], int] = defaultdict(int)
    for path in CAPTURES:
        capture_seeds(path)
        kafka_seeds(path, seen)
    for path in SNAPCUT_CAPTURES:
        snapcut_seeds(path)
    tls_seeds()
    int64_seeds()
    for target in sorted((HERE / "corpus").iterdir()):
        files = list(target.iterdir())
        print(f"{target.name}: {len(files)} seeds, {sum(f.stat().st_size for f in files):,} bytes")


if __name__ == "__main__":
    main()
