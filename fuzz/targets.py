"""What each fuzz target does with one input. Plain functions, no atheris, so tests can replay inputs.

The only allowed outcomes are a result or the project's own error (CaptureError, DecodeError); any
other exception, and any broken accounting invariant (AssertionError), is a finding.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from typing import Any

import int64_wire
import tls_wire
from segments import ACK, FIN, RST, SYN, ipv4_tcp, segments

from kwsniff.capture import CaptureError, open_capture_file
from kwsniff.kafka import Conversation, ConversationHandler
from kwsniff.net import parse_tcp
from kwsniff.pipeline.run import capture_result
from kwsniff.pipeline.session import Session, SessionOptions
from kwsniff.protocol import (
    DecodeError,
    decode_request,
    decode_request_view,
    decode_response,
    decode_response_view,
    parse_request_header,
    parse_response_header,
    schema_triples,
)
from kwsniff.records import counts_v2, summarize_records
from kwsniff.rows import ListSink
from kwsniff.rows import compiled as walker
from kwsniff.rows.extract import error_rows, request_summary, response_summary
from kwsniff.sinks.arrow import ArrowSink
from kwsniff.tables.schemas import SCHEMAS
from kwsniff.tcp import IMPLAUSIBLE_GAP, SNAPLEN, TcpReassembler
from kwsniff.tls import stream as tls_stream
from kwsniff.view.summary import accounting_line

LINKTYPE_IPV4 = 228
LINKTYPE_ETHERNET = 1
# An Ethernet header (zero MACs, IPv4): the session target's packets in the frames the compiled
# packet path (kwsniff/pipeline/_fastpath.c) handles.
ETHERNET_IPV4 = bytes(12) + b"\x08\x00"
# Records are decompressed up to this much per batch: enough for every real seed, small enough that a
# fuzzed bomb costs milliseconds, not the default 64 MiB.
RECORDS_CAP = 1 << 20


def capture(data: bytes) -> None:
    """(a) pcap/pcapng/gzip reader over a file object, every packet through the link/IP/TCP parser."""
    try:
        reader = open_capture_file(io.BytesIO(data), "fuzz.pcap")
    except CaptureError as exc:
        assert "\n" not in str(exc), "a CaptureError is one line"
        return
    count = 0
    for _ts, linktype, packet in reader.packets():
        count += 1
        parse_tcp(linktype, packet)
    assert reader.stats["records"] == count
    assert reader.truncated or not any("cut short" in w for w in reader.warnings)


class _Counting(ConversationHandler):
    def __init__(self) -> None:
        self.requests = 0
        self.outcomes = 0

    def request(self, req: object, body: memoryview | bytes) -> None:
        self.requests += 1

    def exchange(self, req: object, resp: object, status: str) -> None:
        self.outcomes += 1


def stream(data: bytes) -> None:
    """(b) two TcpReassemblers feeding a Conversation's two FrameSplitters; every byte accounted for."""
    handler = _Counting()
    conv = Conversation(handler, max_frame_size=1 << 20, synced=(True, True))
    splitters = (conv.client, conv.broker)
    fed = [0, 0]
    gaps = [0, 0]
    snaplen_gaps = [0, 0]
    sent = [0, 0]  # payload bytes and snaplen-cut bytes of every segment, per direction

    def wire(d: int) -> tuple[Callable[[int, memoryview | bytes], None], Callable[[int, int, str], None]]:
        def on_data(ts: int, chunk: memoryview | bytes) -> None:
            fed[d] += len(chunk)
            splitters[d].data(ts, bytes(chunk))

        def on_gap(ts: int, nbytes: int, reason: str) -> None:
            # A restart (a new SYN, or a jump no window explains) is a 0-byte gap: the splitter must
            # look for a frame boundary again, though no byte is known to be lost.
            assert nbytes > 0 or reason == IMPLAUSIBLE_GAP, f"gap of {nbytes} bytes ({reason})"
            gaps[d] += nbytes
            if reason == SNAPLEN:
                snaplen_gaps[d] += nbytes
            splitters[d].gap(ts, nbytes)

        return on_data, on_gap

    rs = [TcpReassembler(*wire(d), max_ooo_bytes=64 << 10, max_ooo_segments=64) for d in (0, 1)]
    ts = 0
    for d, ts, seq, ack, flags, payload, missing in segments(data):
        r = rs[d]
        if flags & SYN:
            r.syn(seq)
            seq = (seq + 1) & 0xFFFFFFFF
        if flags & ACK:
            rs[1 - d].peer_ack(ts, ack)
        if payload or missing:
            sent[d] += len(payload) + missing
            r.segment(ts, seq, payload, missing)
        if flags & FIN:
            r.fin(ts, (seq + len(payload) + missing) & 0xFFFFFFFF)
        if flags & RST:
            break
    for r in rs:
        r.flush(ts)
    conv.close(ts)
    for d in (0, 1):
        r, s = rs[d], splitters[d]
        assert r.bytes_delivered == fed[d], (d, r.bytes_delivered, fed[d])
        assert r.gap_bytes == gaps[d], (d, r.gap_bytes, gaps[d])
        assert r.buffered_bytes == 0, (d, r.buffered_bytes)
        assert sent[d] == fed[d] + r.bytes_duplicate + snaplen_gaps[d], (
            d,
            sent[d],
            fed[d],
            r.bytes_duplicate,
        )
        assert s.buffered == 0, (d, s.buffered)
        assert s.frame_bytes + s.skipped_bytes == fed[d], (d, s.frame_bytes, s.skipped_bytes, fed[d])
    assert handler.outcomes == conv.requests, (handler.outcomes, conv.requests)


_TRIPLES = schema_triples()
_INDEX = {triple: i for i, triple in enumerate(_TRIPLES)}
_PREFIX = struct.Struct(">hhB")  # api key, api version, flags (bit 0: response)


def decoder_input(api_key: int, api_version: int, response: bool, frame: bytes) -> bytes:
    """A decoders-target input: which message, then a frame (header + body, no size prefix)."""
    return _PREFIX.pack(api_key, api_version, int(response)) + frame


def decoders(data: bytes) -> None:
    """(c) request/response header parsers, then the body decoders of a schema (api key, version)."""
    if len(data) < _PREFIX.size:
        return
    api_key, api_version, flags = _PREFIX.unpack_from(data)
    response = bool(flags & 1)
    direction = "response" if response else "request"
    if (api_key, api_version, direction) not in _INDEX:
        # Every input decodes something: map unknown pairs onto the schema set.
        api_key, api_version, direction = _TRIPLES[(api_key * 131 + api_version) % len(_TRIPLES)]
        response = direction == "response"
    frame = memoryview(data)[_PREFIX.size :]
    try:
        if response:
            _corr, hlen = parse_response_header(frame, api_key, api_version)
        else:
            _key, _version, _corr, _client_id, hlen = parse_request_header(frame)
    except DecodeError:
        hlen = 0  # still decode the bytes as a body: the header parser is not the only way in
    body = frame[hlen:]
    decode, decode_view = (
        (decode_response, decode_response_view) if response else (decode_request, decode_request_view)
    )
    try:
        whole = decode(api_key, api_version, body)
    except DecodeError as exc:
        assert 0 <= exc.offset <= len(body), (exc.offset, len(body))
        return
    assert decode_view(api_key, api_version, body).keys() == whole.keys()


_PLANNED = [
    t for t in _TRIPLES if t[0] in walker.FIRST_VERSION and walker.has_plan(t[0], t[1], t[2] == "response")
]


def partfacts(data: bytes) -> None:
    """(c') a Produce or Fetch body through the compiled partition walker (kwsniff/rows/_partfacts.c)
    and through the decoder and the Python summary: the walker answers what they answer, or nothing."""
    if len(data) < _PREFIX.size or not _PLANNED:
        return
    api_key, api_version, flags = _PREFIX.unpack_from(data)
    triple = (api_key, api_version, "response" if flags & 1 else "request")
    if triple not in _PLANNED:
        triple = _PLANNED[(api_key * 131 + api_version + (flags & 1)) % len(_PLANNED)]
    api_key, api_version, direction = triple
    frame = memoryview(data)[_PREFIX.size :]
    try:
        if direction == "response":
            hlen = parse_response_header(frame, api_key, api_version)[1]
        else:
            hlen = parse_request_header(frame)[4]
    except DecodeError:
        hlen = 0
    body = bytes(frame[hlen:])
    if direction == "response":
        fast = walker.response_info(api_key, api_version, body)
    else:
        fast = walker.request_info(api_key, api_version, body)
    try:
        decode = decode_response_view if direction == "response" else decode_request_view
        msg = decode(api_key, api_version, body)
    except DecodeError:
        assert fast is None, "the walker answered for a body the decoder rejects"
        return
    if fast is None:
        return
    if direction == "response":
        assert not error_rows(api_key, api_version, msg), "the walker answered for a body with errors"
        assert fast == response_summary(api_key, api_version, msg), "the walker and the Python path disagree"
    else:
        assert fast == request_summary(api_key, api_version, msg), "the walker and the Python path disagree"


def records(data: bytes) -> None:
    """(d) the record decoder with every record materialised; it must never raise."""
    flags = data[0] if data else 0
    summary = summarize_records(
        data[1:],
        want_records=True,
        want_payloads=bool(flags & 1),
        max_decompressed=RECORDS_CAP,
        max_depth=1 + (flags >> 1 & 3),
        check_crc=not flags & 8,
    )
    assert summary.records is not None
    assert summary.partial_bytes <= max(len(data) - 1, 0)
    # The tables' fast path (batch headers only) answers what the full reader answers, or declines.
    counts = counts_v2(data[1:])
    if counts is not None:
        full = summarize_records(data[1:], max_decompressed=RECORDS_CAP)
        assert not full.errors and not full.capped_batches, full.errors
        assert counts == (
            full.record_count,
            full.record_bytes,
            full.batch_count,
            full.compression,
            full.crc_errors,
            full.partial_bytes,
            full.control_batches,
            full.base_offset,
            full.last_offset,
        )


def session(data: bytes) -> None:
    """The whole core: the segments as IPv4 packets through a Session into rows; accounting must add up."""
    sink = ListSink()
    sess = Session("fuzz", sink)
    for d, ts, seq, ack, flags, payload, missing in segments(data):
        sess.packet(ts, LINKTYPE_IPV4, ipv4_tcp(d, seq, ack, flags, payload, missing))
    stats = sess.finish()
    # The session's own per-direction accounting check (stream = frames + gaps + skips + ...).
    assert stats.accounting_mismatches == 0, "connections whose bytes do not add up"
    for row in sink.tables["connections"]:
        # Every byte seen (after deduplication) was delivered into a frame, a skip or another counted
        # kind, or was cut by the snaplen (a gap); lost segments are gaps too but were never seen.
        seen = row["bytes_to_broker"] + row["bytes_to_client"] - row["duplicate_bytes"]
        delivered = delivered_bytes(row)
        assert delivered <= seen <= delivered + row["gap_bytes"], (seen, delivered, row)


def fastpath(data: bytes) -> None:
    """The session target's segments as Ethernet frames, through the compiled packet path and through
    the pure-Python one: the same rows and counters both ways (the pure path is the reference)."""
    frames = [
        (ts, ETHERNET_IPV4 + ipv4_tcp(d, seq, ack, flags, payload, missing))
        for d, ts, seq, ack, flags, payload, missing in segments(data)
    ]
    results = []
    for compiled in (True, False):
        sink = ListSink()
        sess = Session("fuzz", sink)
        if not compiled:
            vars(sess).pop("packet", None)  # the class's method: the pure path
        for ts, frame in frames:
            sess.packet(ts, LINKTYPE_ETHERNET, frame)
        results.append((sess.finish(), dict(sink.tables)))
    assert results[0] == results[1], "the compiled and the pure packet paths disagree"
    assert results[0][0].accounting_mismatches == 0, "connections whose bytes do not add up"


class _ValuesSink(ListSink):
    """A ListSink that also takes `partitions` rows as values in schema order, as the Parquet sink
    does: the row builder then merges Produce and Fetch rows with the compiled merge_rows."""

    names = {"partitions": tuple(SCHEMAS["partitions"].names)}

    def columns(self, table: str) -> tuple[str, ...]:
        return self.names[table]

    def add_values(self, table: str, values: tuple[Any, ...]) -> None:
        self.add(table, dict(zip(self.names[table], values, strict=True)))

    def add_many_values(self, table: str, many: list[tuple[Any, ...]]) -> None:
        for values in many:
            self.add_values(table, values)


# Each int column's range (timestamps are int64 µs), per table: what the Parquet writer takes.
_INT_RANGES = {
    table: [
        (f.name, 1 << (f.type.bit_width - 1)) for f in schema if str(f.type).startswith(("int", "timestamp"))
    ]
    for table, schema in SCHEMAS.items()
}


def _in_range(tables: dict[str, list[dict[str, Any]]]) -> None:
    for table, rows in tables.items():
        for name, half in _INT_RANGES[table]:
            for row in rows:
                v = row.get(name)
                assert v is None or -half <= v < half, f"{table}.{name} = {v}: past its column"


def int64(data: bytes) -> None:
    """One Produce and one Fetch exchange whose offset fields sit at int64's edges (int64_wire.py),
    through the compiled walker and merge and through the pure-Python path (the reference), and with
    --records: the same rows and notes both ways, and no int past its column anywhere."""
    packets = int64_wire.packets(data)
    results = []
    for mode in ("compiled", "pure", "records"):
        sink = _ValuesSink() if mode == "compiled" else ListSink()
        sess = Session("fuzz", sink, SessionOptions(records=mode == "records"))
        if mode == "pure":
            sess.rows.compiled = False
        assert (sess.rows.partition_values is not None) == (mode == "compiled" and walker.AVAILABLE)
        for ts, packet in packets:
            sess.packet(ts, LINKTYPE_IPV4, packet)
        sess.finish()
        # Rows as the tables hold them: every column of the schema, and nothing else.
        tables = {
            t: [{c: row.get(c) for c in SCHEMAS[t].names} for row in rows] for t, rows in sink.tables.items()
        }
        _in_range(tables)
        results.append((tables, dict(sess.rows.notes), dict(sess.rows.status)))
    assert results[0] == results[1], "the compiled and the pure-Python paths disagree"
    assert results[1][2] == {"ok": 2}, results[1][2]


_SNAPLEN = struct.Struct(">H")  # bit 15: pure-Python rows; bit 14: pure packet path; the rest: length


def snapcut_input(snaplen: int, capture: bytes, pure_rows: bool = False, pure_packets: bool = False) -> bytes:
    """A snapcut-target input: how to cut (a snap length from 40 to 1,063 bytes), then a capture file."""
    assert 40 <= snaplen < 40 + 1024
    return _SNAPLEN.pack(pure_rows << 15 | pure_packets << 14 | (snaplen - 40)) + capture


def snapcut(data: bytes) -> None:
    """A capture cut at a snap length as `editcap -s N` cuts it (every packet's first N bytes), through
    the whole core into the Parquet writer's rows, on the compiled or the pure-Python paths: nothing
    raises, no exchange fails to decode (issue 44), every byte is accounted for."""
    if len(data) < _SNAPLEN.size:
        return
    (how,) = _SNAPLEN.unpack_from(data)
    snaplen = 40 + (how & 1023)
    try:
        reader = open_capture_file(io.BytesIO(data[_SNAPLEN.size :]), "fuzz.pcap")
    except CaptureError:
        return
    sink = ArrowSink("fuzz")
    sess = Session("fuzz", sink)
    if how & 0x8000:
        sess.rows.compiled, sess.rows.partition_values = False, None  # the Python path's rows
    if how & 0x4000:
        vars(sess).pop("packet", None)  # the class's method: the pure packet path
    for ts, linktype, packet in reader.packets():
        sess.packet(ts, linktype, packet[:snaplen])
    stats = sess.finish()
    sink.close()
    result = capture_result(
        sess, stats, name="fuzz", path="fuzz.pcap", file_bytes=len(data), seconds=0, truncated=False
    )
    assert not sess.rows.failed_exchanges, dict(sess.rows.failed_exchanges)
    assert stats.accounting_mismatches == 0, "connections whose bytes do not add up"
    assert accounting_line(result).endswith("✓"), accounting_line(result)


def delivered_bytes(row: dict[str, Any]) -> int:
    """Stream bytes of a `connections` row that were delivered in order: framed, skipped or set aside."""
    total: int = row["frame_bytes_to_broker"] + row["frame_bytes_to_client"]
    for kind in ("skipped", "sasl", "encrypted", "not_kafka"):
        per_direction = [row.get(f"{kind}_bytes_{d}") for d in ("to_broker", "to_client")]
        total += sum(per_direction) if None not in per_direction else row.get(f"{kind}_bytes", 0)  # type: ignore[arg-type]
    return total


def tls(data: bytes) -> None:
    """One TLS connection's client bytes (tls_wire.py format), cut into segments, through the compiled
    TLS feeder and record loop (kwsniff/tls/_records.c) and through the pure-Python stream on
    cryptography: the same plaintext, counters and state both ways, and every byte fed is overhead,
    decrypted or undecryptable."""
    suite, piece, client, gaps = tls_wire.wire(data)
    results = []
    saved = tls_stream.Opener, tls_stream.Feeder
    try:
        for compiled in (True, False):
            tls_stream.Opener, tls_stream.Feeder = saved if compiled else (None, None)
            plain = bytearray()
            stream = tls_wire.keyed_stream(suite, lambda d, ts, chunk, plain=plain: plain.extend(chunk))
            side = stream.dirs[0]
            assert (side.protection.opener is not None) == (compiled and saved[0] is not None)
            feed = stream.feeders[0]
            at = 0
            for offset, lost in [*gaps, (len(client), 0)]:
                while at < offset:
                    feed(at, client[at : min(offset, at + piece)])
                    at = min(offset, at + piece)
                if lost:
                    stream.gap(0, at, lost)
            stream.finish()
            counters = (side.overhead, side.decrypted, side.undecryptable, side.records, side.failed)
            assert side.overhead + side.decrypted + side.undecryptable == len(client), counters
            assert side.decrypted == len(plain), (side.decrypted, len(plain))
            results.append((bytes(plain), counters, side.lost_gaps, stream.state))
    finally:
        tls_stream.Opener, tls_stream.Feeder = saved
    assert results[0] == results[1], "the compiled and the pure-Python TLS paths disagree"


TARGETS: dict[str, Callable[[bytes], None]] = {
    "capture": capture,
    "stream": stream,
    "decoders": decoders,
    "partfacts": partfacts,
    "records": records,
    "session": session,
    "fastpath": fastpath,
    "tls": tls,
    "int64": int64,
    "snapcut": snapcut,
}
# libFuzzer's -max_len per target: large enough for the seeds, small enough to stay fast.
MAX_LEN = {
    "capture": 65536,
    "stream": 65536,
    "decoders": 16384,
    "partfacts": 65536,
    "records": 65536,
    "session": 65536,
    "fastpath": 65536,
    "tls": 4096,
    "int64": 1024,
    "snapcut": 65536,
}
