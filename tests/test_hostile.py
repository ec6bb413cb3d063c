"""Hostile and damaged input (issue 5, item 4): each case runs through the whole pipeline, and ends with
exact counts and reasons, no exception, bounded memory.

The capture files are built here and committed under tests/data/hostile/ (a test checks they are what
the builders make), so other tests and people can run `kwsniff read` on them:

    python tests/test_hostile.py     # rewrite tests/data/hostile/*.pcap* from the builders
"""

from __future__ import annotations

import gzip
import struct
import subprocess
import sys
import textwrap
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafkawire import (
    ACK,
    BROKER,
    CLIENT,
    METADATA_V0_REQUEST,
    METADATA_V0_RESPONSE,
    PSH,
    Flow,
    request,
    response,
    tcp,
    uvarint,
)

from kwsniff.capture import open_capture
from kwsniff.cli import main
from kwsniff.kafka import Conversation, ConversationHandler
from kwsniff.pipeline.run import CaptureResult, run_capture
from kwsniff.pipeline.session import Session, SessionOptions
from kwsniff.records import summarize_records
from kwsniff.rows import ListSink

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS.parent / "fuzz"))
import targets  # noqa: E402  (fuzz/targets.py: delivered_bytes, the accounting the fuzzers check too)

HOSTILE = TESTS / "data" / "hostile"
CAPTURES = TESTS / "data" / "captures"
MB = 1 << 20
PEAK_LIMIT_MB = 500

LINKTYPE_IPV4 = 228
METADATA, PRODUCE, API_VERSIONS = 3, 0, 18


# -- building captures ---------------------------------------------------------------------------------
def pcap_bytes(
    packets: list[tuple[int, bytes]], snaplen: int = 262144, linktype: int = LINKTYPE_IPV4
) -> bytes:
    """A little-endian µs pcap; a packet given as (ts, data, wirelen) keeps its wire length."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, linktype)]
    for ts, data, *wire in packets:  # type: ignore[misc]
        wirelen = wire[0] if wire else len(data)
        out.append(struct.pack("<IIII", ts // 1_000_000, ts % 1_000_000, len(data), wirelen) + data)
    return b"".join(out)


def exchange_flow(client_bytes: bytes, broker_bytes: bytes, mss: int = 1460) -> Flow:
    """Handshake, the client's bytes, the broker's bytes, close."""
    flow = Flow().handshake()
    flow.send(0, client_bytes, mss=mss)
    flow.send(1, broker_bytes, mss=mss)
    flow.close()
    return flow


def metadata_request(corr: int) -> bytes:
    return request(METADATA, 0, corr, METADATA_V0_REQUEST)


def metadata_response(corr: int) -> bytes:
    return response(corr, METADATA_V0_RESPONSE)


JUNK = b"\xee" * 1000  # no byte of it can start a plausible frame size: the resync scan skips it whole


def oversize_prefix(junk: bytes = JUNK) -> bytes:
    """A request, a size prefix of 2^31 - 16 with junk after it, then another request."""
    client = metadata_request(1) + struct.pack(">i", 0x7FFFFFF0) + junk + metadata_request(2)
    return pcap_bytes(exchange_flow(client, metadata_response(1) + metadata_response(2)).packets)


def array_count_bomb() -> bytes:
    """A Metadata v0 request whose topics array claims 2^31 - 1 entries in a 4-byte body."""
    client = request(METADATA, 0, 1, struct.pack(">i", 0x7FFFFFFF)) + metadata_request(2)
    return pcap_bytes(exchange_flow(client, metadata_response(1) + metadata_response(2)).packets)


def string_length_bomb() -> bytes:
    """A Metadata v1 request whose one topic name claims 32767 bytes, and 3 are there."""
    body = struct.pack(">ih", 1, 0x7FFF) + b"abc"
    client = request(METADATA, 1, 1, body) + metadata_request(2)
    return pcap_bytes(exchange_flow(client, metadata_response(1) + metadata_response(2)).packets)


def flexible_request(api_key: int, version: int, corr: int, tagged: bytes, body: bytes) -> bytes:
    """A request with header v2: classic client id, then the header's tagged-field section."""
    payload = struct.pack(">hhih", api_key, version, corr, 1) + b"t" + tagged + body
    return struct.pack(">i", len(payload)) + payload


def absurd_tagged_fields() -> bytes:
    """ApiVersions v3 requests: one whose header tag claims 2^28 bytes, one whose body tag does."""
    absurd = uvarint(1) + uvarint(0) + uvarint(1 << 28)  # one tagged field, tag 0, size 2^28
    body_ok = b"\x03kw" + b"\x021" + b"\x00"  # client_software_name "kw", version "1", no tags
    body_absurd = b"\x03kw" + b"\x021" + absurd
    client = (
        flexible_request(API_VERSIONS, 3, 1, absurd, body_ok)
        + flexible_request(API_VERSIONS, 3, 2, b"\x00", body_absurd)
        + flexible_request(API_VERSIONS, 3, 3, b"\x00", body_ok)
    )
    # ApiVersions responses use header v0 (KIP-511); v3 body: error, empty compact array, throttle, tags.
    answer = struct.pack(">hBiB", 0, 1, 0, 0)
    return pcap_bytes(exchange_flow(client, response(2, answer) + response(3, answer)).packets)


def legacy_message(offset: int, attributes: int, value: bytes) -> bytes:
    """A magic 1 message (null key); the CRC32 covers magic to the end."""
    body = struct.pack(">bbqi", 1, attributes, 0, -1) + struct.pack(">i", len(value)) + value
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body)) + body


GZIP = 1


def nested_gzip_wrappers(depth: int) -> bytes:
    """One record wrapped in ``depth`` gzip-compressed magic 1 messages, one inside the other."""
    data = legacy_message(0, 0, b"innermost")
    for _ in range(depth):
        data = legacy_message(0, GZIP, gzip.compress(data, mtime=0))
    return data


def gzip_zeros(size: int) -> bytes:
    """gzip of ``size`` zero bytes built from one repeated full-flush step: cheap at any size."""
    step = MB
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = compressor.compress(bytes(step)) + compressor.flush(zlib.Z_FULL_FLUSH)
    repeat = compressor.compress(bytes(step)) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(bytes(step))
    for _ in range(size // step - 1):
        crc = zlib.crc32(bytes(step), crc)
    return first + repeat * (size // step - 1) + b"\x03\x00" + struct.pack("<II", crc, size & 0xFFFFFFFF)


BOMB_SIZE = 256 * MB  # four times the pipeline's 64 MiB decompression cap


def produce_v2(corr: int, records: bytes) -> bytes:
    """A Produce v2 request (message sets of magic 0/1 are valid up to v2) to topic "t" partition 0."""
    body = struct.pack(">hiih", 1, 1000, 1, 1) + b"t" + struct.pack(">iii", 1, 0, len(records)) + records
    return request(PRODUCE, 2, corr, body)


def produce_v2_response(corr: int) -> bytes:
    # topic "t", partition 0, error 0, base offset 0, log append time -1; throttle 0
    body = struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iihqq", 1, 0, 0, 0, -1) + struct.pack(">i", 0)
    return response(corr, body)


def produce_with(records: bytes) -> bytes:
    client = produce_v2(1, records)
    return pcap_bytes(exchange_flow(client, produce_v2_response(1), mss=65000).packets)


def decompression_bomb() -> bytes:
    return produce_with(legacy_message(0, GZIP, gzip_zeros(BOMB_SIZE)))


def nested_message_sets() -> bytes:
    return produce_with(nested_gzip_wrappers(8))


def ip_fragments() -> bytes:
    """A working exchange plus three IPv4 fragments (more-fragments set, then two with offsets)."""
    flow = exchange_flow(metadata_request(1), metadata_response(1))
    packet = tcp(CLIENT, BROKER, 77, 0, ACK | PSH, b"x" * 40)
    fragments = []
    for flags_offset in (0x2000, 0x2000 | 3, 6):  # MF; MF + offset 24; last fragment, offset 48
        fragments.append(packet[:6] + struct.pack(">H", flags_offset) + packet[8:])
    ts = flow.packets[-1][0]
    return pcap_bytes(flow.packets + [(ts + i + 1, frag) for i, frag in enumerate(fragments)])


def bad_tcp_offsets() -> bytes:
    """A working exchange plus TCP headers claiming 8 bytes (offset 2) and 60 bytes in a 20-byte segment."""
    flow = exchange_flow(metadata_request(1), metadata_response(1))
    packet = tcp(CLIENT, BROKER, 77, 0, ACK | PSH)
    short = packet[:32] + bytes([2 << 4]) + packet[33:]
    beyond = packet[:32] + bytes([15 << 4]) + packet[33:]
    ts = flow.packets[-1][0]
    return pcap_bytes(flow.packets + [(ts + 1, short), (ts + 2, beyond)])


def timestamps_backwards() -> bytes:
    """Two exchanges whose packets' clock steps back twice: the second response predates its request."""
    flow = Flow().handshake()
    flow.send(0, metadata_request(1))
    flow.send(1, metadata_response(1), dt=-50_000)  # answered 50 ms "before" it was asked
    flow.send(0, metadata_request(2), dt=100_000)
    flow.send(1, metadata_response(2), dt=-200)
    flow.close()
    return pcap_bytes(flow.packets)


def pcapng_block(btype: int, body: bytes) -> bytes:
    body += b"\x00" * (-len(body) % 4)
    return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def pcapng_unknown_blocks() -> bytes:
    """A pcapng of a working exchange with three blocks of types no spec defines among its packets."""
    flow = exchange_flow(metadata_request(1), metadata_response(1))
    out = pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += pcapng_block(1, struct.pack("<HHI", LINKTYPE_IPV4, 0, 0))
    for i, (ts, data) in enumerate(flow.packets):
        out += pcapng_block(
            6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(data), len(data)) + data
        )
        if i in (0, 3, 5):
            out += pcapng_block(0x7ABC0000 + i, b"vendor junk")
    return out


def cut_mid_record() -> bytes:
    """Two exchanges, the file cut 10 bytes into the captured data of its last record."""
    flow = exchange_flow(metadata_request(1) + metadata_request(2), metadata_response(1))
    whole = pcap_bytes(flow.packets)
    last = len(flow.packets[-1][1])
    return whole[: len(whole) - last + 10]


def snaplen_96(name: str = "kafka_python.pcap") -> bytes:
    """A real capture as `tcpdump -s 96` would have written it: every record cut to 96 captured bytes."""
    raw = (CAPTURES / name).read_bytes()
    head = bytearray(raw[:24])
    struct.pack_into("<I", head, 16, 96)  # the file header's snaplen
    out = [bytes(head)]
    pos = 24
    while pos < len(raw):
        sec, usec, caplen, wirelen = struct.unpack_from("<IIII", raw, pos)
        keep = min(caplen, 96)
        out.append(struct.pack("<IIII", sec, usec, keep, wirelen) + raw[pos + 16 : pos + 16 + keep])
        pos += 16 + caplen
    return b"".join(out)


BUILDERS: dict[str, Callable[[], bytes]] = {
    "oversize_prefix.pcap": oversize_prefix,
    "array_count_bomb.pcap": array_count_bomb,
    "string_length_bomb.pcap": string_length_bomb,
    "absurd_tagged_fields.pcap": absurd_tagged_fields,
    "nested_message_sets.pcap": nested_message_sets,
    "decompression_bomb.pcap": decompression_bomb,
    "ip_fragments.pcap": ip_fragments,
    "bad_tcp_offsets.pcap": bad_tcp_offsets,
    "timestamps_backwards.pcap": timestamps_backwards,
    "unknown_blocks.pcapng": pcapng_unknown_blocks,
    "cut_mid_record.pcap": cut_mid_record,
    "snaplen96_kafka_python.pcap": snaplen_96,
}


# -- running -------------------------------------------------------------------------------------------
def read(name: str) -> tuple[CaptureResult, dict[str, list[dict[str, Any]]]]:
    sink = ListSink()
    result = run_capture(HOSTILE / name, sink, SessionOptions())
    return result, sink.tables


def statuses(tables: dict[str, list[dict[str, Any]]]) -> list[tuple[int, str, str | None]]:
    return [(r["correlation_id"], r["status"], r["reason"]) for r in tables["requests"]]


def only_connection(tables: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    (conn,) = tables["connections"]
    return conn


# -- the committed files are what the builders make ------------------------------------------------------
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_committed_hostile_capture_is_what_its_builder_makes(name: str) -> None:
    assert (HOSTILE / name).read_bytes() == BUILDERS[name]()


# -- item 4, case by case --------------------------------------------------------------------------------
def test_size_prefix_near_2_31_is_skipped_as_oversize_and_the_next_request_decodes() -> None:
    result, tables = read("oversize_prefix.pcap")
    assert statuses(tables) == [(1, "ok", None), (2, "ok", None)]
    conn = only_connection(tables)
    # The 4 size bytes and the 1000 junk bytes after them, in one skip run; one resync.
    assert (conn["skipped_bytes"], conn["resyncs"], conn["frames_to_broker"]) == (1004, 1, 2)
    assert (conn["gaps"], conn["decode_errors"], conn["undecodable_frames"]) == (0, 0, 0)


def test_oversize_skip_is_reported_with_its_reason_and_offset() -> None:
    skips: list[tuple[int, int, str]] = []
    conv = Conversation(ConversationHandler())
    conv.on_skip = lambda d, n, offset, reason: skips.append((n, offset, reason))
    first = metadata_request(1)
    conv.client.data(0, first + struct.pack(">i", 0x7FFFFFF0) + JUNK + metadata_request(2))
    assert skips == [(1004, len(first), "oversize")]
    assert (conv.client.oversize, conv.client.frames, conv.requests) == (1, 2, 2)


def test_array_count_larger_than_the_body_is_a_decode_error_with_offset() -> None:
    result, tables = read("array_count_bomb.pcap")
    assert statuses(tables) == [
        (1, "decode_error", "request: array count 2147483647 exceeds body at topics (offset 4)"),
        (2, "ok", None),
    ]
    assert result.decode_errors == Counter({"request": 1})
    assert only_connection(tables)["decode_errors"] == 1


def test_string_length_larger_than_the_body_is_a_decode_error_with_offset() -> None:
    result, tables = read("string_length_bomb.pcap")
    assert statuses(tables) == [
        (1, "decode_error", "request: length 32767 exceeds body at topics[0].name (offset 6)"),
        (2, "ok", None),
    ]


def test_tagged_fields_with_absurd_sizes_are_counted_not_allocated() -> None:
    result, tables = read("absurd_tagged_fields.pcap")
    conn = only_connection(tables)
    # The header's tag makes request 1 unreadable (its frame is counted, never paired); the body's tag
    # makes request 2 a decode error with the offset of the size; request 3 is fine.
    assert (conn["undecodable_frames"], conn["frames_to_broker"]) == (1, 3)
    assert result.decode_errors == Counter({"request header": 1, "request": 1})
    assert statuses(tables) == [
        (
            2,
            "decode_error",
            "request: tagged field size 268435456 exceeds body at _tagged_fields (offset 12)",
        ),
        (3, "ok", None),
    ]


def test_message_sets_nested_deeper_than_the_cap_are_counted_as_an_error() -> None:
    records = nested_gzip_wrappers(8)
    summary = summarize_records(records)
    assert summary.errors == ["compressed messages nested deeper than 4 at offset 0"]
    assert (summary.record_count, summary.batch_count, summary.compression) == (0, 1, "gzip")
    result, tables = read("nested_message_sets.pcap")
    assert statuses(tables) == [(1, "ok", None)]
    (part,) = tables["partitions"]
    assert (part["topic"], part["partition"], part["record_count"], part["batch_count"]) == ("t", 0, 0, 1)


def test_message_sets_nested_within_the_cap_are_read_through() -> None:
    summary = summarize_records(nested_gzip_wrappers(4), want_records=True)
    assert (summary.record_count, summary.errors) == (1, [])
    assert summary.records is not None
    assert [r.value_size for r in summary.records] == [len(b"innermost")]


def test_decompression_bomb_in_a_produce_is_capped_and_counted() -> None:
    records = legacy_message(0, GZIP, gzip_zeros(BOMB_SIZE))
    summary = summarize_records(records, max_decompressed=64 * MB)
    assert (summary.capped_batches, summary.record_count, summary.batch_count) == (1, 0, 1)
    result, tables = read("decompression_bomb.pcap")
    assert statuses(tables) == [(1, "ok", None)]
    (part,) = tables["partitions"]
    assert (part["record_count"], part["batch_count"], part["compression"]) == (0, 1, "gzip")
    assert (part["capped_batches"], part["crc_errors"], part["record_errors"]) == (1, 0, 0)
    assert part["record_bytes"] == len(records)


def test_snaplen_96_capture_counts_every_cut_as_a_snaplen_gap() -> None:
    data = (HOSTILE / "snaplen96_kafka_python.pcap").read_bytes()
    cut_records, cut_bytes = 0, 0
    pos = 24
    while pos < len(data):
        _s, _u, caplen, wirelen = struct.unpack_from("<IIII", data, pos)
        if wirelen > caplen:
            cut_records += 1
            cut_bytes += wirelen - caplen
        pos += 16 + caplen
    result, tables = read("snaplen96_kafka_python.pcap")
    conns = tables["connections"]
    # Every cut packet carried payload past the 96 captured bytes: one gap each, of exactly the cut bytes.
    assert sum(c["gaps"] for c in conns) == cut_records == 89
    assert sum(c["gap_bytes"] for c in conns) == cut_bytes
    assert result.truncated is False
    # Every request is still there, named, paired and timed as in the full capture: a frame whose
    # size prefix was captured is counted even when the snaplen cut its body (or its response's).
    sink = ListSink()
    run_capture(CAPTURES / "kafka_python.pcap", sink, SessionOptions())

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (
            r["conn_id"],
            r["correlation_id"],
            r["api_key"],
            r["api_version"],
            r["client_id"],
            r["latency_ms"],
        )

    assert sorted(map(key, tables["requests"])) == sorted(map(key, sink.tables["requests"]))
    assert len(tables["requests"]) == 46
    # Each reason names the cut and how many bytes of the frame it left out.
    reasons = Counter((r["status"], r["reason"].rsplit(": ", 1)[0]) for r in tables["requests"])
    assert reasons == Counter(
        {
            ("decode_error", "request: not captured (snap length)"): 43,
            ("decode_error", "response: not captured (snap length)"): 3,
        }
    )
    assert all(r["reason"].endswith(" bytes missing") for r in tables["requests"])
    # The size prefixes keep every frame's boundaries across the cuts: no resync, every frame counted.
    assert sum(c["resyncs"] for c in conns) == 0
    assert sum(c["frames_to_broker"] + c["frames_to_client"] for c in conns) == 46 + 46


def test_ip_fragments_are_counted_and_skipped() -> None:
    result, tables = read("ip_fragments.pcap")
    assert result.stats.skipped_packets == {"ip_fragment": 3}
    assert statuses(tables) == [(1, "ok", None)]


def test_tcp_headers_with_bad_data_offsets_are_counted_and_skipped() -> None:
    result, tables = read("bad_tcp_offsets.pcap")
    assert result.stats.skipped_packets == {"bad_tcp_offset": 2}
    assert statuses(tables) == [(1, "ok", None)]


def test_timestamps_going_backwards_are_kept_in_order_and_counted() -> None:
    result, tables = read("timestamps_backwards.pcap")
    assert result.warnings == ["timestamps go backwards 2 times (packets kept in capture order)"]
    # Pairing follows the stream, not the clock: latencies are what the capture's clock says.
    assert [(r["correlation_id"], r["status"], r["latency_ms"]) for r in tables["requests"]] == [
        (1, "ok", -50.0),
        (2, "ok", -0.2),
    ]
    with open_capture(HOSTILE / "timestamps_backwards.pcap") as reader:
        list(reader.packets())
    assert reader.stats == {"records": 10, "ts_backwards": 2}


def test_pcapng_blocks_of_unknown_types_are_skipped_and_counted() -> None:
    result, tables = read("unknown_blocks.pcapng")
    assert result.warnings == ["3 blocks of unknown type skipped"]
    assert statuses(tables) == [(1, "ok", None)]
    with open_capture(HOSTILE / "unknown_blocks.pcapng") as reader:
        assert len(list(reader.packets())) == 8
    assert reader.stats["unknown_block_types"] == 3


def test_capture_cut_mid_record_decodes_what_is_there_warns_and_exits_0(tmp_path: Path) -> None:
    result, tables = read("cut_mid_record.pcap")
    assert result.truncated is True
    cut_at = len(BUILDERS["cut_mid_record.pcap"]()) - 16 - 10
    assert result.warnings == [f"last record cut short at offset {cut_at}"]
    assert statuses(tables) == [(1, "ok", None), (2, "unanswered", None)]
    from click.testing import CliRunner

    run = CliRunner().invoke(main, ["read", str(HOSTILE / "cut_mid_record.pcap"), "--out", str(tmp_path)])
    assert run.exit_code == 0
    assert run.stderr == f"kwsniff: warning: cut_mid_record.pcap: last record cut short at offset {cut_at}\n"
    assert (tmp_path / "requests").is_dir()


# -- bounded memory, measured in a child process ----------------------------------------------------------
PEAK_SCRIPT = textwrap.dedent(
    """
    import sys
    from kwsniff.rows import ListSink
    from kwsniff.pipeline.run import run_capture
    from kwsniff.pipeline.session import SessionOptions
    sink = ListSink()
    result = run_capture(sys.argv[1], sink, SessionOptions())
    statuses = sorted(r["status"] for r in sink.tables["requests"])
    # VmHWM, not ru_maxrss, which Linux keeps across fork and exec (the pytest parent's size).
    hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]
    print(int(hwm) // 1024, ",".join(statuses))
    """
)


def peak_mb(path: Path) -> tuple[int, str]:
    out = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout.split()
    return int(out[0]), out[1] if len(out) > 1 else ""


def test_decompression_bomb_peak_memory_stays_under_500_mb() -> None:
    peak, status = peak_mb(HOSTILE / "decompression_bomb.pcap")
    assert status == "ok"
    assert peak < PEAK_LIMIT_MB, f"peak RSS {peak} MB for a {BOMB_SIZE // MB} MiB bomb"


def test_huge_size_prefix_peak_memory_stays_under_500_mb(tmp_path: Path) -> None:
    # 16 MiB of junk after the size: the resync scan keeps at most 1 MiB of it at a time.
    path = tmp_path / "oversize_16mb.pcap"
    path.write_bytes(oversize_prefix(b"\xee" * (16 * MB)))
    peak, status = peak_mb(path)
    assert status == "ok,ok"
    assert peak < PEAK_LIMIT_MB


def test_array_count_bomb_peak_memory_stays_under_500_mb(tmp_path: Path) -> None:
    # A Metadata v1 request of 2 MiB that claims 2^31 - 1 topics: checked against the body, never allocated.
    path = tmp_path / "array_bomb.pcap"
    body = struct.pack(">i", 0x7FFFFFFF) + b"\x00\x01x" * (700_000)
    client = request(METADATA, 1, 1, body) + metadata_request(2)
    path.write_bytes(pcap_bytes(exchange_flow(client, metadata_response(1) + metadata_response(2)).packets))
    peak, status = peak_mb(path)
    assert status == "decode_error,ok"
    assert peak < PEAK_LIMIT_MB


# -- property: any bytes as a TCP stream --------------------------------------------------------------
frames = st.one_of(
    st.builds(
        request,
        st.integers(0, 80),
        st.integers(0, 16),
        st.integers(-5, 5),
        st.binary(max_size=40),
    ),
    st.builds(response, st.integers(-5, 5), st.binary(max_size=40)),
    st.binary(max_size=60),
    st.builds(
        lambda n, b: struct.pack(">i", n) + b, st.integers(-(2**31), 2**31 - 1), st.binary(max_size=20)
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    client=st.lists(frames, max_size=8).map(b"".join),
    broker=st.lists(frames, max_size=8).map(b"".join),
    opening=st.booleans(),
    mss=st.integers(1, 200),
)
def test_any_bytes_on_a_kafka_connection_never_raise_and_are_all_accounted(
    client: bytes, broker: bytes, opening: bool, mss: int
) -> None:
    if opening:  # start like a real client, so detection says Kafka and the splitters do the work
        client = metadata_request(99) + client
    flow = Flow().handshake()
    flow.send(0, client, mss=mss)
    flow.send(1, broker, mss=mss)
    flow.close()
    sink = ListSink()
    session = Session("prop", sink)
    for ts, data in flow.packets:
        session.packet(ts, LINKTYPE_IPV4, data)
    stats = session.finish()
    assert stats.accounting_mismatches == 0
    conn = only_connection(sink.tables)
    delivered = targets.delivered_bytes(conn)
    assert (conn["gaps"], conn["duplicate_bytes"]) == (0, 0)
    assert delivered == conn["bytes_to_broker"] + conn["bytes_to_client"] == len(client) + len(broker)


if __name__ == "__main__":
    HOSTILE.mkdir(parents=True, exist_ok=True)
    for file_name, build in BUILDERS.items():
        (HOSTILE / file_name).write_bytes(build())
        print(file_name, (HOSTILE / file_name).stat().st_size)
