"""Bad input that used to crash or mislead (issue 22, items 5 and 6): each case ends in exact counts and
reasons, or one clear line, never a traceback."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner
from kafka.record.util import calc_crc32c, encode_varint
from kafkawire import Flow, request, response, write_pcap
from test_capture_pcapng import epb, idb, shb

from kwsniff.capture import open_capture
from kwsniff.cli import main
from kwsniff.kafka import Conversation, ConversationHandler
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "tests/data/captures"
QUICKSTART = ROOT / "sample_pcaps/quickstart.pcap"


def table(out: Path, name: str) -> list[dict[str, Any]]:
    return ds.dataset(out / name).to_table().to_pylist()


# -- item 5: timestamps no column can hold -----------------------------------------------------------
def test_pcapng_timestamps_past_year_9999_keep_every_request_and_warn_once(tmp_path: Path) -> None:
    """quickstart.pcap as pcapng, its packets from the 101st on sent through an interface whose
    if_tsoffset is 2^62 seconds: pyarrow used to raise OverflowError. Every request still decodes;
    those packets carry the last good time."""
    with open_capture(QUICKSTART) as reader:
        packets = [(ts, bytes(data)) for ts, _, data in reader.packets()]
    blob = shb() + idb(1) + idb(1, tsoffset=1 << 62)
    blob += b"".join(epb(0 if i < 100 else 1, ts, data) for i, (ts, data) in enumerate(packets))
    capture = tmp_path / "far_future.pcapng"
    capture.write_bytes(blob)
    done = CliRunner().invoke(main, ["read", str(capture), "--out", str(tmp_path / "t")])
    assert done.exit_code == 0, done.output
    assert done.stderr.splitlines()[-1] == (
        "kwsniff: warning: far_future.pcapng: 206 packets have timestamps outside the years 1-9999"
        " (interface if_tsresol or if_tsoffset damaged?): kept, with the time of the packet before"
    )
    requests = table(tmp_path / "t", "requests")
    assert (len(requests), {r["status"] for r in requests}) == (75, {"ok"})
    last_good = packets[99][0]
    assert max(r["ts_response"].timestamp() * 1e6 for r in requests) == last_good


def _batch(base_timestamp: int, deltas: list[int]) -> bytes:
    """A magic 2 batch of one-byte records with these timestamp deltas."""
    records = b""
    for i, delta in enumerate(deltas):
        fields = bytearray(b"\x00")
        for v in (delta, i, 1):
            encode_varint(v, fields.append)
        fields += b"k"
        encode_varint(1, fields.append)
        fields += b"v"
        encode_varint(0, fields.append)
        size = bytearray()
        encode_varint(len(fields), size.append)
        records += bytes(size + fields)
    after_crc = struct.pack(
        ">hiqqqhii", 0, len(deltas) - 1, base_timestamp, base_timestamp, -1, -1, -1, len(deltas)
    )
    after_crc += records
    return struct.pack(">qiiBI", 0, 9 + len(after_crc), 0, 2, calc_crc32c(after_crc)) + after_crc


def _produce_v3(corr: int, batch: bytes) -> bytes:
    # transactional id null, acks 1, timeout, topic "t" partition 0 with the batch
    body = struct.pack(">hhii", -1, 1, 1000, 1) + struct.pack(">h", 1) + b"t"
    body += struct.pack(">iii", 1, 0, len(batch)) + batch
    return request(0, 3, corr, body)


def _produce_v3_response(corr: int) -> bytes:
    # topic "t", partition 0, no error, base offset 40, log append time -1; throttle 0
    return response(corr, struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iihqqi", 1, 0, 0, 40, -1, 0))


def test_record_timestamps_past_year_9999_are_null_and_counted(tmp_path: Path) -> None:
    """baseTimestamp 2^62 ms used to raise OverflowError under --records. Now the records get no
    timestamp and the partition row says why; the sane batch's records keep theirs."""
    t0 = 1_700_000_000_000
    flow = Flow().handshake()
    flow.send(0, _produce_v3(1, _batch(1 << 62, [0, 5])), mss=9000)
    flow.send(1, _produce_v3_response(1))
    flow.send(0, _produce_v3(2, _batch(t0, [0, 7])), mss=9000)
    flow.send(1, _produce_v3_response(2))
    flow.close()
    capture = write_pcap(tmp_path / "far.pcap", flow.packets)
    done = CliRunner().invoke(main, ["read", str(capture), "--records", "--out", str(tmp_path / "t")])
    assert done.exit_code == 0, done.output
    records = table(tmp_path / "t", "records")
    assert [(r["correlation_id"], r["offset"], r["timestamp"]) for r in records] == [
        (1, 40, None),
        (1, 41, None),
        (2, 40, datetime.fromtimestamp(t0 / 1000, UTC)),
        (2, 41, datetime.fromtimestamp((t0 + 7) / 1000, UTC)),
    ]
    parts = table(tmp_path / "t", "partitions")
    assert [(p["correlation_id"], p["record_errors"], p["record_error"]) for p in parts] == [
        (1, 1, f"2 record timestamps after year 9999 (first {1 << 62} ms): left null at offset 0"),
        (2, 0, None),
    ]
    assert "  record damage: record_errors 1\n" in done.output


# -- item 6: a damaged size prefix in the middle of a stream ----------------------------------------
def frame_prefixes(blob: bytes, port_from: int, port_to: int) -> list[int]:
    """File offsets of every frame's size prefix in one direction of an Ethernet/IPv4 pcap whose
    stream has no loss or retransmission (the repository's loopback captures)."""
    where: list[int] = []
    stream = bytearray()
    pos = 24
    while pos + 16 <= len(blob):
        caplen = struct.unpack_from("<I", blob, pos + 8)[0]
        ip = pos + 16 + 14
        if blob[ip - 2 : ip] == b"\x08\x00" and blob[ip + 9] == 6:
            tcp = ip + (blob[ip] & 15) * 4
            start, end = tcp + (blob[tcp + 12] >> 4) * 4, ip + struct.unpack_from(">H", blob, ip + 2)[0]
            if struct.unpack_from(">HH", blob, tcp) == (port_from, port_to):
                where.extend(range(start, end))
                stream += blob[start:end]
        pos += 16 + caplen
    offsets, at = [], 0
    while at + 4 <= len(stream):
        offsets.append(where[at])
        at += 4 + struct.unpack_from(">i", stream, at)[0]
    return offsets


def decoded(capture: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    sink = ListSink()
    run_capture(capture, sink, SessionOptions())
    return sink.tables["requests"], sink.tables["connections"]


@pytest.mark.parametrize("byte", [1, 2, 3])
@pytest.mark.parametrize("direction", ["request", "response"])
def test_a_flipped_size_byte_mid_stream_loses_that_frame_only(
    tmp_path: Path, direction: str, byte: int
) -> None:
    """produce_codecs.pcap with one byte of the 9th frame's size prefix flipped on the consumer's
    connection (port 45982 to the broker's 19101). ListOffsets request 9 is 67 bytes; flipped it reads
    as 16,711,747, 65,347 or 188: the splitter used to wait for those bytes and lose up to 18 later
    requests. Now the evidence (the broker answering request 10, whole frames chained inside the
    claimed bytes, or no frame start where the claimed frame ends) shows the size is wrong: that
    frame's bytes are skipped and every other exchange pairs as it did, at the same times."""
    original = CAPTURES / "produce_codecs.pcap"
    blob = bytearray(original.read_bytes())
    ports = (45982, 19101) if direction == "request" else (19101, 45982)
    prefix = frame_prefixes(bytes(blob), *ports)[8]
    size = struct.unpack_from(">i", blob, prefix)[0]
    assert size == (67 if direction == "request" else 51)
    blob[prefix + byte] ^= 0xFF
    damaged = tmp_path / "damaged.pcap"
    damaged.write_bytes(blob)
    before, before_conns = decoded(original)
    after, after_conns = decoded(damaged)

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (
            r["conn_id"],
            r["correlation_id"],
            r["api_name"],
            r["status"],
            r["ts_request"],
            r["ts_response"],
        )

    (lost,) = [r for r in before if r["conn_id"] == 15 and r["correlation_id"] == 9]
    assert (lost["api_name"], lost["status"]) == ("ListOffsets", "ok")
    if direction == "request":
        # The request is gone, its answer an orphan.
        assert [key(r) for r in after] == [key(r) for r in before if r is not lost]
    else:
        # The request stays, unanswered (its row written when the connection closes).
        assert sorted(map(key, after)) == sorted(
            key(r) if r is not lost else (15, 9, "ListOffsets", "unanswered", r["ts_request"], None)
            for r in before
        )
    (conn,) = [c for c in after_conns if c["conn_id"] == 15]
    skipped = (4 + size, 0) if direction == "request" else (0, 4 + size)
    assert (conn["skipped_bytes_to_broker"], conn["skipped_bytes_to_client"], conn["resyncs"]) == (
        *skipped,
        1,
    )
    assert conn["orphan_responses"] == (1 if direction == "request" else 0)
    assert sum(c["skipped_bytes"] for c in after_conns) == 4 + size
    assert sum(c["skipped_bytes"] for c in before_conns) == 0


def test_a_damaged_size_is_skipped_with_its_reason_at_the_end_of_the_stream() -> None:
    """No answer proves it (the broker's side was not captured): when the stream ends inside the
    claimed frame, a chain of whole frames in its bytes does, and they are replayed with their times."""
    skips: list[tuple[int, int, str]] = []
    conv = Conversation(ConversationHandler())
    conv.on_skip = lambda d, n, offset, reason: skips.append((n, offset, reason))
    first, second, third = (request(3, 0, corr, struct.pack(">i", 0)) for corr in (1, 2, 3))
    damaged = struct.pack(">i", 0x10000 + len(second) - 4) + second[4:]
    conv.client.data(10, first + damaged)
    conv.client.data(20, third)
    conv.client.data(30, request(3, 0, 4, struct.pack(">i", 0))[:12])  # the capture ends inside it
    conv.close(40)
    assert skips == [(len(second), len(first), "damaged_size")]
    assert (conv.client.damaged_sizes, conv.client.frames, conv.client.cut_frames) == (1, 2, 1)
    assert conv.client.frame_bytes == len(first + third) + 12


# -- item 7: gaps only as large as sequence numbers can prove -----------------------------------------
def _metadata(corr: int, topics: int = 0) -> tuple[bytes, bytes]:
    """A Metadata v0 request asking for ``topics`` topics of 1000-letter names, and its empty answer."""
    body = struct.pack(">i", topics) + b"".join(struct.pack(">h", 1000) + b"t" * 1000 for _ in range(topics))
    return request(3, 0, corr, body), response(corr, struct.pack(">ii", 0, 0))


def _reused_port_capture(path: Path, *, syn_seen: bool) -> Path:
    """A connection that loses one 1460-byte segment (the broker's ACK proves it was sent), then
    loses its FIN, and a new connection on the same ports with ISNs 2^31 away, with or without
    its handshake in the capture (kernel drops)."""
    old = Flow(isn_c=1000, isn_b=5000).handshake()
    ask, answer = _metadata(1, topics=3)  # 3,025 bytes: segments of 1460, 1460, 105
    old.send(0, ask)
    old.send(1, answer)
    del old.packets[4]  # the request's second segment
    new = Flow(isn_c=1000 + (1 << 31) - 7, isn_b=5000 + (1 << 31) + 9)
    new.ts = old.ts + 1_000_000
    if syn_seen:
        new.handshake()
    else:
        new.seq = {0: new.seq[0] + 1, 1: new.seq[1] + 1}  # after a handshake the capture lost
    for corr in (2, 3):
        ask, answer = _metadata(corr)
        new.send(0, ask)
        new.send(1, answer)
    new.close()
    return write_pcap(path, old.packets + new.packets)


def test_port_reuse_after_drops_gives_only_the_gap_bytes_acknowledgements_prove(tmp_path: Path) -> None:
    """The gap of 2^31 to the new ISNs used to be summed as 4,294,965,717 gap bytes (and the last
    request left unanswered). Now it restarts the stream, once per direction, and is counted."""
    for syn_seen in (True, False):
        capture = _reused_port_capture(tmp_path / f"reuse_{syn_seen}.pcap", syn_seen=syn_seen)
        requests, connections = decoded(capture)
        (conn,) = connections
        assert (conn["gaps"], conn["gap_bytes"], conn["gap_bytes_to_broker"]) == (1, 1460, 1460)
        assert conn["implausible_gaps"] == 2
        assert [(r["correlation_id"], r["status"], r["reason"]) for r in requests] == [
            (1, "decode_error", "request: cut by a gap after 1460 of 3025 bytes"),
            (2, "ok", None),
            (3, "ok", None),
        ]
        # The cut request's bytes around the hole; the rest is framed, and it all adds up.
        assert (conn["skipped_bytes_to_broker"], conn["frame_bytes_to_broker"]) == (1460 + 105, 2 * 19)
        assert conn["stream_bytes_to_broker"] == 3025 + 2 * 19
        assert (conn["orphan_responses"], conn["skipped_bytes_to_client"]) == (0, 0)


def test_strict_read_fails_on_implausible_gaps(tmp_path: Path) -> None:
    capture = _reused_port_capture(tmp_path / "reuse.pcap", syn_seen=False)
    done = CliRunner().invoke(main, ["read", str(capture), "--strict", "--out", str(tmp_path / "t")])
    assert (done.exit_code, done.stderr) == (
        3,
        "kwsniff: strict: reuse.pcap: 1 requests with status decode_error; 1,565 bytes skipped by the frame"
        " splitter; 1,460 bytes of Kafka connections the capture lost (gaps); 2 sequence number jumps past"
        " any TCP window (implausible gaps)\n",
    )


# -- issue 45, goal 4: a file an option names, and a capture, never hang or fill memory --------------
def kwsniff_process(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The command in its own process: a door that hangs fails the test by its timeout, not the run."""
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", *map(str, args)], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("kind", "what"),
    [
        ("device", "a device or socket, not a regular file"),
        ("fifo", "a pipe, not a regular file"),
        ("directory", "a directory, not a regular file"),
        ("large", "4,194,305 bytes, more than 4,194,304"),
    ],
)
@pytest.mark.parametrize("command", ["read", "show"])
def test_a_broker_map_that_is_not_a_small_regular_file_is_refused_at_once(
    tmp_path: Path, command: str, kind: str, what: str
) -> None:
    """`--broker-map /dev/zero` read until a MemoryError at 1.87 GB; a FIFO with no writer blocked
    for ever."""
    path = {"device": Path("/dev/zero"), "directory": tmp_path}.get(kind, tmp_path / f"map.{kind}")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "large":
        with path.open("wb") as f:
            f.truncate(4 * 1024 * 1024 + 1)  # sparse: its size is the point, not its bytes
    out = ["-o", tmp_path / "t"] if command == "read" else []
    done = kwsniff_process(command, QUICKSTART, *out, "--broker-map", path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        f"kwsniff: error: Invalid value for '--broker-map': {path}: {what} (see 'python -m kwsniff {command} --help')\n"
    )


@pytest.mark.parametrize("command", ["read", "show"])
def test_a_capture_that_is_a_pipe_nobody_writes_to_is_one_line_not_a_hang(
    tmp_path: Path, command: str
) -> None:
    fifo = tmp_path / "capture.fifo"
    os.mkfifo(fifo)
    out = ["-o", tmp_path / "t"] if command == "read" else []
    done = kwsniff_process(command, fifo, *out)
    assert done.returncode == 1
    assert done.stdout == ""
    assert (
        done.stderr
        == f"kwsniff: error: {fifo}: a pipe nobody writes to (a stream goes to standard input: `-`)\n"
    )
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("command", ["read", "show"])
def test_a_capture_that_is_a_device_is_one_line(tmp_path: Path, command: str) -> None:
    out = ["-o", tmp_path / "t"] if command == "read" else []
    done = kwsniff_process(command, "/dev/zero", *out)
    assert done.returncode == 1
    assert done.stderr == "kwsniff: error: /dev/zero: a device or socket, not a capture file\n"


def test_a_capture_pipe_with_a_writer_is_read_as_its_file(tmp_path: Path) -> None:
    """A named pipe something writes a capture into (`mkfifo p; tcpdump -w p`, `<(zcat x.pcap.gz)`)
    is a stream: read once, as it fills, to the same exchanges as the file."""
    fifo = tmp_path / "capture.fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with fifo.open("wb") as f:  # opens once the reader has
            f.write(QUICKSTART.read_bytes())

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    from_pipe = kwsniff_process("show", fifo, "--json")
    writer.join(10)
    from_file = kwsniff_process("show", QUICKSTART, "--json")
    assert from_pipe.returncode == from_file.returncode == 0, from_pipe.stderr
    assert from_pipe.stdout == from_file.stdout.replace(
        '"capture": "quickstart.pcap"', '"capture": "capture.fifo"'
    )
    assert len(from_file.stdout.splitlines()) == 75
