"""Headers-only captures (`tcpdump -s N`): every request whose header was captured is paired and
timed as in the full capture, and what was cut says so.

Real client captures are cut with `editcap -F pcap -s N` (Wireshark's, an independent tool); the
expectation comes from the FULL capture's frames read by dpkt (tests/snaplen_oracle.py), never from
kwsniff's reading of the cut file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import snaplen_oracle
from snap_traffic import java_snap_traffic

from kwsniff.pipeline.run import CaptureResult, run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink
from kwsniff.view.summary import accounting_line

HERE = Path(__file__).resolve().parent
CAPTURES = HERE / "data" / "captures"
# The Kafka Java client (kafka-clients 3.9.1) producing binary values and reading them back, made by
# `python tools/snap_length_table.py --make-java-capture tests/data/snaplen/java_client.pcap`.
JAVA = HERE / "data" / "snaplen" / "java_client.pcap"
ALL_CAPTURES = [
    *sorted(CAPTURES.glob("*.pcap")),
    *sorted((HERE.parent / "sample_pcaps").glob("*.pcap")),
    JAVA,
]
SNAP_LENGTHS = (64, 96, 128, 160, 256, 512)


def broker_port(pcap: Path) -> int:
    sidecar = Path(f"{pcap}.tshark.json") if pcap != JAVA else Path(f"{pcap}.json")
    return int(json.loads(sidecar.read_text())["broker_port"])


def cut(pcap: Path, snaplen: int, tmp: Path) -> Path:
    out = tmp / f"{pcap.stem}.s{snaplen}.pcap"
    subprocess.run(["editcap", "-F", "pcap", "-s", str(snaplen), str(pcap), str(out)], check=True, timeout=60)
    return out


def read(pcap: Path) -> tuple[CaptureResult, dict[str, list[dict[str, Any]]]]:
    sink = ListSink()
    result = run_capture(pcap, sink, SessionOptions())
    return result, sink.tables


def by_exchange(tables: dict[str, list[dict[str, Any]]]) -> dict[tuple[int, int], dict[str, Any]]:
    """kwsniff's requests rows by (client port, correlation id)."""
    port = {c["conn_id"]: c["client_port"] for c in tables["connections"]}
    return {(port[r["conn_id"]], r["correlation_id"]): r for r in tables["requests"]}


def us(ts: Any) -> int:
    return ts if isinstance(ts, int) else round(ts.timestamp() * 1_000_000)


def expected_row(ex: snaplen_oracle.Exchange) -> dict[str, Any]:
    """What the full capture's frames say of one exchange, with the client id only where the snap
    length kept all of it."""
    return {
        "api_key": ex.api_key,
        "api_version": ex.api_version,
        "correlation_id": ex.correlation_id,
        "client_id": ex.client_id if ex.request.kept_prefix() >= ex.client_id_end() else None,
        "ts_request": ex.request.ts_last,
        "ts_response": ex.response.ts_first if ex.response else None,
        "latency_ms": ex.latency_ms,
    }


def got_row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "api_key": row["api_key"],
        "api_version": row["api_version"],
        "correlation_id": row["correlation_id"],
        "client_id": row["client_id"],
        "ts_request": us(row["ts_request"]),
        "ts_response": us(row["ts_response"]) if row["ts_response"] is not None else None,
        "latency_ms": row["latency_ms"],
    }


def kio_error_code(ex: snaplen_oracle.Exchange) -> int | None:
    """The top-level error code of the exchange's whole response, read by kio (another decoder)."""
    import pkgutil

    from kio.schema.index import api_key_map, schema_name_map
    from kio.serial import entity_reader
    from kio.static.constants import EntityType

    from kwsniff.protocol import parse_response_header

    assert ex.response is not None
    entity = pkgutil.resolve_name(
        schema_name_map[api_key_map[ex.api_key]][ex.api_version][EntityType.response]
    )
    frame = ex.response.data[4:]
    start = parse_response_header(frame, ex.api_key, ex.api_version)[1]
    read = entity_reader(entity)(memoryview(frame), start)
    code = getattr(read[0] if isinstance(read, tuple) else read, "error_code", None)
    return None if code is None else int(code.value)


def missing_reason(side: str, frame: snaplen_oracle.Frame) -> str:
    kept = sum(hi - lo for lo, hi in frame.kept)
    return f"{side}: not captured (snap length): {frame.size - kept:,} of {frame.size:,} bytes missing"


@pytest.mark.parametrize("snaplen", [96, 160, 256])
@pytest.mark.parametrize(
    "name", ["produce_codecs", "kafka_python", "acks_modes", "legacy_msgset", "java_client"]
)
def test_every_request_whose_header_was_kept_is_paired_and_timed_as_in_the_full_capture(
    name: str, snaplen: int, tmp_path: Path
) -> None:
    # The Java client's Produce requests span packets whose binary values hold plausible size
    # prefixes and correlation ids: a splitter that looks for the next frame after each cut misframes
    # the connection at 256 and 512 bytes (3 and 10 of its 36 requests wrong before the fix).
    full = JAVA if name == "java_client" else CAPTURES / f"{name}.pcap"
    check_against_full_capture(full, broker_port(full), cut(full, snaplen, tmp_path), snaplen)


def check_against_full_capture(
    full: Path, port: int, cut_pcap: Path, snaplen: int, times_from: Path | None = None
) -> None:
    """kwsniff's rows of ``cut_pcap`` against the dpkt reader of ``full`` cut at ``snaplen``."""
    exchanges = snaplen_oracle.exchanges(full, port, snaplen, times_from)
    wanted = [ex for ex in exchanges if snaplen_oracle.header_kept(ex)]
    assert len(wanted) == len(exchanges)  # every exchange of these captures, at these lengths
    _, tables = read(cut_pcap)
    rows = by_exchange(tables)
    # Every row is one of the full capture's exchanges: none is made of bytes read out of step.
    assert set(rows) == {(ex.conn[1], ex.correlation_id) for ex in exchanges}
    got = {(ex.conn[1], ex.correlation_id): got_row(rows[(ex.conn[1], ex.correlation_id)]) for ex in wanted}
    assert got == {(ex.conn[1], ex.correlation_id): expected_row(ex) for ex in wanted}
    # A top-level error code read from a cut response is the one kio reads in the whole response.
    cut_codes = 0
    for ex in wanted:
        code = rows[(ex.conn[1], ex.correlation_id)]["error_code"]
        if code is not None and ex.response is not None:
            assert code == kio_error_code(ex), (ex.api_key, ex.correlation_id)
            cut_codes += ex.response.kept_prefix() < ex.response.size
    assert cut_codes > 0  # 7 to 34 per capture and length: error codes read from cut responses
    # A row whose request or response the snap length cut names the cut and the bytes it left out.
    for ex in wanted:
        row = rows[(ex.conn[1], ex.correlation_id)]
        if ex.request.kept_prefix() < ex.request.size:
            assert (row["status"], row["reason"]) == ("decode_error", missing_reason("request", ex.request))
        elif ex.response is not None and ex.response.kept_prefix() < ex.response.size:
            assert (row["status"], row["reason"]) == ("decode_error", missing_reason("response", ex.response))
        else:  # the full capture has one Metadata request the client closed before its answer
            assert row["status"] == ("ok" if ex.response is not None else "unanswered")


def test_a_client_id_that_ends_exactly_where_the_snap_length_does_is_kept(tmp_path: Path) -> None:
    # At 96 bytes a loopback packet keeps 30 bytes of payload (14 Ethernet + 20 IPv4 + 32 TCP with
    # timestamps): rig-codecs-admin's 16-byte id ends at byte 30 of its requests.
    full = CAPTURES / "produce_codecs.pcap"
    admin = [
        ex
        for ex in snaplen_oracle.exchanges(full, broker_port(full), 96)
        if ex.client_id == "rig-codecs-admin"
    ]
    assert [ex.client_id_end() for ex in admin] == [30] * 6
    assert [ex.request.kept_prefix() for ex in admin] == [30] * 6
    assert all(ex.request.size > 30 for ex in admin)  # every one of them cut right after the id
    _, tables = read(cut(full, 96, tmp_path))
    rows = by_exchange(tables)
    assert [got_row(rows[(ex.conn[1], ex.correlation_id)]) for ex in admin] == [
        expected_row(ex) for ex in admin
    ]
    assert {rows[(ex.conn[1], ex.correlation_id)]["client_id"] for ex in admin} == {"rig-codecs-admin"}


def test_cut_produce_requests_keep_the_time_of_their_last_byte_on_the_wire(tmp_path: Path) -> None:
    full = CAPTURES / "produce_codecs.pcap"
    produces = [
        ex
        for ex in snaplen_oracle.exchanges(full, broker_port(full), 96)
        if ex.api_key == 0 and ex.request.ts_first != ex.request.ts_last
    ]
    # A Produce request spread over several packets (loopback's 64 KiB MTU: one of the 65), each cut
    # to 30 bytes: the request time is its last packet's, of which the snap length kept 30 bytes.
    assert len(produces) == 1
    assert produces[0].request.kept == [(0, 30)] + [(lo, lo + 30) for lo, _ in produces[0].request.kept[1:]]
    assert len(produces[0].request.kept) > 1
    _, tables = read(cut(full, 96, tmp_path))
    rows = by_exchange(tables)
    for ex in produces:
        row = rows[(ex.conn[1], ex.correlation_id)]
        assert (us(row["ts_request"]), row["latency_ms"]) == (ex.request.ts_last, ex.latency_ms)


@pytest.mark.parametrize("snaplen", SNAP_LENGTHS)
def test_no_latency_is_ever_negative_whatever_the_snap_length(snaplen: int, tmp_path: Path) -> None:
    for full in ALL_CAPTURES:
        result, tables = read(cut(full, snaplen, tmp_path))
        latencies = [r["latency_ms"] for r in tables["requests"] if r["latency_ms"] is not None]
        assert all(ms >= 0 for ms in latencies), full.name
        assert result.stats.accounting_mismatches == 0, full.name


def test_the_accounting_line_counts_what_the_snap_length_left_out_apart_from_gaps(tmp_path: Path) -> None:
    full = CAPTURES / "kafka_python.pcap"
    port = broker_port(full)
    # Bytes on the wire the snap length did not keep, in both directions of every Kafka connection.
    missing = 0
    for key, segments in snaplen_oracle._segments(full, 96).items():
        if port in (key[1], key[3]):
            missing += sum(len(s.payload) - s.kept for s in segments)
    result, _ = read(cut(full, 96, tmp_path))
    line = accounting_line(result)
    assert f" + 0 gaps + {missing:,} not captured (snap length) + " in line
    assert line.endswith("✓")
    # The summary's decode errors name the cut: requests cut, then exchanges whose response was.
    exchanges = snaplen_oracle.exchanges(full, port, 96)
    requests_cut = sum(ex.request.kept_prefix() < ex.request.size for ex in exchanges)
    responses_cut = sum(
        ex.request.kept_prefix() == ex.request.size
        and ex.response is not None
        and ex.response.kept_prefix() < ex.response.size
        for ex in exchanges
    )
    assert dict(result.decode_errors) == {
        "request: not captured (snap length)": requests_cut,
        "response: not captured (snap length)": responses_cut,
    }


def test_a_tcpdump_snap_length_capture_of_the_java_client_is_read_as_its_full_capture_says(
    tmp_path: Path,
) -> None:
    # Real traffic: tansu and the Java client on loopback, one tcpdump at full length and two at
    # -s 96 and -s 256 beside it. Each tcpdump stamps packets itself, so the times expected of a cut
    # capture are its own packets' (the oracle checks both hold the same packets).
    port, pcaps = java_snap_traffic(tmp_path, records=12, snaplens=(96, 256))
    for snaplen in (96, 256):
        check_against_full_capture(pcaps[0], port, pcaps[snaplen], snaplen, times_from=pcaps[snaplen])


@pytest.mark.parametrize("snaplen", [256, 512])
def test_the_compiled_packet_path_reads_a_cut_capture_as_the_python_path_does(
    snaplen: int, tmp_path: Path
) -> None:
    # Cut packets go back to Python; whole packets in the middle of a cut frame stay compiled.
    import os
    import sys

    import pyarrow.parquet as pq

    pcap = cut(JAVA, snaplen, tmp_path)
    got = {}
    for side, pure in (("compiled", False), ("pure", True)):
        env = {k: v for k, v in os.environ.items() if k != "KWSNIFF_PURE_PYTHON"}
        if pure:
            env["KWSNIFF_PURE_PYTHON"] = "1"
        out = tmp_path / side
        cmd = [sys.executable, "-m", "kwsniff", "read", str(pcap), "--out", str(out), "-q"]
        subprocess.run(cmd, env=env, check=True, timeout=120, capture_output=True)
        got[side] = {t: pq.read_table(out / t).to_pylist() for t in ("requests", "connections", "partitions")}
    assert got["compiled"] == got["pure"]
    assert len(got["pure"]["requests"]) == 36


@pytest.mark.parametrize("snaplen", [96, 128, 160, 256, 512])
def test_produce_partitions_and_record_counts_come_as_far_as_the_kept_bytes_go(
    snaplen: int, tmp_path: Path
) -> None:
    # Each Produce request's partitions, read by hand from the full frame: a partition is named when
    # its index was kept, and counted (from its batch headers) when every batch header was kept;
    # otherwise its record_count is null, never 0.
    expected: dict[tuple[int, int, str, int], int | None] = {}
    in_full: set[tuple[int, int, str, int]] = set()  # every partition of the whole requests
    cut_counts: dict[tuple[int, int], int | None] = {}
    for name in ("produce_codecs", "acks_modes"):
        full = CAPTURES / f"{name}.pcap"
        for ex in snaplen_oracle.exchanges(full, broker_port(full), snaplen):
            if ex.api_key != 0:
                continue
            kept = ex.request.kept_prefix()
            parts = snaplen_oracle.produced_partitions(ex)
            for part in parts:
                in_full.add((ex.conn[1], ex.correlation_id, part.topic, part.partition))
                if part.index_end <= kept:
                    whole = part.headers_end <= kept
                    expected[(ex.conn[1], ex.correlation_id, part.topic, part.partition)] = (
                        part.records if whole else None
                    )
            all_counted = all(p.headers_end <= kept for p in parts)
            cut_counts[(ex.conn[1], ex.correlation_id)] = (
                sum(p.records or 0 for p in parts) if all_counted else None
            )
    got: dict[tuple[int, int, str, int], int | None] = {}
    got_counts: dict[tuple[int, int], int | None] = {}
    for name in ("produce_codecs", "acks_modes"):
        _, tables = read(cut(CAPTURES / f"{name}.pcap", snaplen, tmp_path))
        port = {c["conn_id"]: c["client_port"] for c in tables["connections"]}
        for p in tables["partitions"]:
            if p["api_key"] == 0:
                got[(port[p["conn_id"]], p["correlation_id"], p["topic"], p["partition"])] = p.get(
                    "record_count"
                )
        for r in tables["requests"]:
            if r["api_key"] == 0:
                got_counts[(port[r["conn_id"]], r["correlation_id"])] = r["record_count"]
    # Partitions named only by the response (a request cut before them) are the response's, and
    # every one is a partition the whole request named.
    assert set(got) <= in_full
    assert {k: v for k, v in got.items() if k in expected} == expected
    assert got_counts == cut_counts
    named, counted = len(expected), sum(v is not None for v in expected.values())
    assert (named, counted) == {96: (0, 0), 128: (49, 0), 160: (125, 0), 256: (125, 125), 512: (125, 125)}[
        snaplen
    ]


def test_reading_as_far_as_the_bytes_go_reads_a_whole_body_as_the_decoder_does() -> None:
    # Every request and response of the real client captures, whole: the prefix reader gives the
    # compiled decoder's message, and says it read everything.
    from kwsniff.protocol import (
        DecodeError,
        decode_request,
        decode_response,
        parse_request_header,
        parse_response_header,
    )
    from kwsniff.protocol.partial import decode_prefix

    def same(api_key: int, api_version: int, response: bool, body: bytes) -> int:
        decode = decode_response if response else decode_request
        try:
            whole = decode(api_key, api_version, body)
        except DecodeError:  # e.g. trailing bytes after the message: not the prefix reader's case
            return 0
        assert decode_prefix(api_key, api_version, response, body) == (whole, True)
        return 1

    checked = 0
    for full in ALL_CAPTURES:
        for ex in snaplen_oracle.exchanges(full, broker_port(full)):
            frame = ex.request.data[4:]
            checked += same(ex.api_key, ex.api_version, False, frame[parse_request_header(frame)[4] :])
            if ex.response is not None:
                frame = ex.response.data[4:]
                hlen = parse_response_header(frame, ex.api_key, ex.api_version)[1]
                checked += same(ex.api_key, ex.api_version, True, frame[hlen:])
    assert checked > 700  # of 429 requests and their responses


@pytest.mark.parametrize("seed", range(3))
def test_reading_a_prefix_of_any_bytes_gives_a_message_or_a_decode_error(seed: int) -> None:
    import random

    from kwsniff.protocol import DecodeError
    from kwsniff.protocol.decode import schema_triples
    from kwsniff.protocol.partial import decode_prefix

    rng = random.Random(seed)
    for key, version, direction in schema_triples():
        body = rng.randbytes(rng.randrange(0, 96))
        try:
            msg, _ = decode_prefix(key, version, direction == "response", body)
        except DecodeError:
            continue
        assert isinstance(msg, dict)


def test_show_says_how_much_of_a_cut_records_field_was_captured(tmp_path: Path) -> None:
    full = CAPTURES / "produce_codecs.pcap"
    pcap = cut(full, 256, tmp_path)
    first = next(ex for ex in snaplen_oracle.exchanges(full, broker_port(full), 256) if ex.api_key == 0)
    part = snaplen_oracle.produced_partitions(first)[0]
    kept = first.request.kept_prefix() - part.records_start
    assert 0 < kept < part.records_size
    done = subprocess.run(
        [sys.executable, "-m", "kwsniff", "show", "--json", str(pcap)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    shown = [json.loads(line) for line in done.stdout.splitlines()]
    (row,) = [
        r
        for r in shown
        if r["correlation_id"] == first.correlation_id
        and r["api_key"] == 0
        and r["client"].endswith(f":{first.conn[1]}")
    ]
    records = row["request"]["topic_data"][0]["partition_data"][0]["records"]
    assert records == {
        "bytes": part.records_size,
        "captured": kept,
        "hex": first.request.data[part.records_start : part.records_start + 32].hex(),
    }


def kio_fetch_partitions(ex: snaplen_oracle.Exchange) -> dict[tuple[str, int], int | None] | None:
    """(topic id or name, partition) -> records in its batches (magic 2 headers, walked by hand) of a
    whole Fetch response read by kio; None when kio does not know the version."""
    import pkgutil

    from kio.schema.index import api_key_map, schema_name_map
    from kio.serial import entity_reader
    from kio.static.constants import EntityType

    from kwsniff.protocol import parse_response_header

    assert ex.response is not None
    path = schema_name_map[api_key_map[1]].get(ex.api_version, {}).get(EntityType.response)
    if path is None:
        return None
    frame = ex.response.data[4:]
    start = parse_response_header(frame, ex.api_key, ex.api_version)[1]
    read = entity_reader(pkgutil.resolve_name(path))(memoryview(frame), start)
    message = read[0] if isinstance(read, tuple) else read
    out: dict[tuple[str, int], int | None] = {}
    for topic in message.responses:
        name = str(topic.topic_id) if hasattr(topic, "topic_id") else str(topic.topic)
        for part in topic.partitions:
            data, pos, count = part.records or b"", 0, 0
            while pos < len(data):
                if data[pos + 16] != 2:
                    count = None
                    break
                count += int.from_bytes(data[pos + 57 : pos + 61], "big", signed=True)
                pos += 12 + int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
            out[(name, int(part.partition_index))] = count
    return out


@pytest.mark.parametrize("snaplen", [128, 256, 512])
def test_fetch_partitions_of_cut_responses_are_those_of_the_whole_response(
    snaplen: int, tmp_path: Path
) -> None:
    # What a cut Fetch response gives is right: every partition it names is in the whole response
    # (kio's reading), and every record count it gives is the whole response's.
    named = counted = 0
    for full in (CAPTURES / "produce_codecs.pcap", CAPTURES / "kafka_python.pcap", JAVA):
        cut_fetches = {
            (ex.conn[1], ex.correlation_id): ex
            for ex in snaplen_oracle.exchanges(full, broker_port(full), snaplen)
            if ex.api_key == 1 and ex.response is not None and ex.response.kept_prefix() < ex.response.size
        }
        _, tables = read(cut(full, snaplen, tmp_path))
        port = {c["conn_id"]: c["client_port"] for c in tables["connections"]}
        for p in tables["partitions"]:
            ex = cut_fetches.get((port[p["conn_id"]], p["correlation_id"]))
            if ex is None or p.get("record_count") is None and p.get("high_watermark") is None:
                continue  # not a cut response, or a partition named by the request only
            whole = kio_fetch_partitions(ex)
            if whole is None:
                continue
            key = (p.get("topic_id") or p.get("topic"), p["partition"])
            assert key in whole
            named += 1
            if p.get("record_count") is not None:
                assert p["record_count"] == whole[key]
                counted += 1
    assert (named, counted) == {128: (6, 0), 256: (9, 5), 512: (15, 11)}[snaplen]
