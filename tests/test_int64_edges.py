"""Offsets at int64's edges (docs/tables.md "Values past int64"): every int64 the wire carries is
kept as written, and a column computed from two of them (a Produce's last offset, a Fetch batch's
last offset, a lag) that is past int64 is null and counted as the note "value past int64", never
wrapped and never a lost capture; the compiled walker (kwsniff/rows/_partfacts.c) and the pure-Python
path write the same bytes.

The captures are bytes the tests assemble: Produce v8 and Fetch v11 exchanges (Kafka's protocol
guide), their record batches built by kafka-python's batch builder (an independent writer) with the
base offset written over (it is outside the CRC).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafkawire import Flow, i16, i32, i64, request, response, string, write_pcap

import kwsniff
from kwsniff.records import counts_v2, summarize_records

MAX = 2**63 - 1
MIN = -(2**63)
PURE = {**os.environ, "KWSNIFF_PURE_PYTHON": "1"}
COMPILED = {k: v for k, v in os.environ.items() if k != "KWSNIFF_PURE_PYTHON"}
NOTE = "value past int64"


def batch(base_offset: int, count: int, timestamp: int = 1_700_000_000_000) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(count):
        builder.append(i, timestamp=timestamp + i, key=None, value=b"v%d" % i, headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


def produce_v8_request(topic: str, partitions: list[tuple[int, bytes]]) -> bytes:
    body = string(None) + i16(-1) + i32(30_000) + i32(1) + string(topic) + i32(len(partitions))
    for index, records in partitions:
        body += i32(index) + i32(len(records)) + records
    return body


def produce_v8_response(topic: str, partitions: list[tuple[int, int, int]]) -> bytes:
    """(partition, base_offset, log_start_offset), error 0, no append time."""
    body = i32(1) + string(topic) + i32(len(partitions))
    for index, base, log_start in partitions:
        body += i32(index) + i16(0) + i64(base) + i64(-1) + i64(log_start) + i32(0) + string(None)
    return body + i32(0)


def fetch_v11_request(topic: str, offsets: list[tuple[int, int]]) -> bytes:
    body = struct.pack(">iiiibii", -1, 500, 1, 52428800, 0, 0, -1) + i32(1) + string(topic)
    body += i32(len(offsets))
    for index, offset in offsets:
        body += struct.pack(">iiqqi", index, -1, offset, -1, 1048576)
    return body + i32(0) + string("")


def fetch_v11_response(topic: str, partitions: list[tuple[int, int, int, int, bytes]]) -> bytes:
    """(partition, high watermark, last stable offset, log start offset, records), error 0."""
    body = struct.pack(">ihii", 0, 0, 0, 1) + string(topic) + i32(len(partitions))
    for index, hwm, lso, log_start, records in partitions:
        body += struct.pack(">ihqqq", index, 0, hwm, lso, log_start) + i32(-1) + i32(-1)
        body += i32(len(records)) + records
    return body


def edges_capture(path: Path) -> Path:
    """One Produce and one Fetch at int64's edges."""
    flow = Flow().handshake()
    flow.send(0, request(0, 8, 1, produce_v8_request("edge", [(0, batch(0, 3)), (1, batch(0, 1))])))
    # Partition 0: base offset 2^63-1 with three records (the last two past int64); partition 1:
    # one record at 2^63-1 (its last offset is the base), log start -2^63.
    flow.send(1, response(1, produce_v8_response("edge", [(0, MAX, 0), (1, MAX, MIN)])))
    offsets = [(0, MIN), (1, -(2**62)), (2, 0), (3, -1), (4, MAX)]
    flow.send(0, request(1, 11, 2, fetch_v11_request("edge", offsets)))
    fetched = [
        # baseOffset 2^63-2, three records: lastOffsetDelta 2 puts the last one at 2^63.
        (0, MAX, MAX, MIN, batch(MAX - 1, 3)),
        (1, 2**62, 2**62, 0, b""),  # lag 2^62 - (-2^62) = 2^63
        (2, MAX, MAX, MAX, batch(MAX, 1)),  # lag 2^63-1, kept; the batch ends at 2^63-1 exactly
        (3, MAX, MIN, MIN, b""),  # lag 2^63-1 - (-1) = 2^63
        (4, MIN, MIN, MIN, batch(MIN, 1)),  # lag -2^63 - (2^63-1): past int64 below
    ]
    flow.send(1, response(2, fetch_v11_response("edge", fetched)))
    flow.close()
    return write_pcap(path, flow.packets)


def read(capture: Path, out: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", "read", str(capture), "--out", str(out), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def files(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*.parquet"))
        if not str(p.relative_to(out)).startswith("captures/")
    }


def partitions(out: Path) -> dict[tuple[int, int], dict[str, object]]:
    rows = pq.read_table(out / "partitions").to_pylist()
    return {(r["api_key"], r["partition"]): r for r in rows}


def test_values_past_int64_are_null_and_counted_and_both_paths_agree(tmp_path: Path) -> None:
    capture = edges_capture(tmp_path / "edges.pcap")
    runs = {}
    for side, env in (("compiled", COMPILED), ("pure", PURE)):
        done = read(capture, tmp_path / side, env)
        assert done.returncode == 0, done.stderr
        # Produce 0: its last offset; Fetch 0: its batch's last offset and its lag; Fetch 1, 3, 4:
        # their lags.
        assert f"notes: {NOTE} (6)" in done.stdout
        runs[side] = files(tmp_path / side)
    assert runs["compiled"] == runs["pure"]
    rows = partitions(tmp_path / "compiled")
    produce0, produce1 = rows[(0, 0)], rows[(0, 1)]
    assert (produce0["base_offset"], produce0["first_offset"], produce0["last_offset"]) == (MAX, MAX, None)
    assert produce0["record_count"] == 3 and produce0["log_start_offset"] == 0
    assert (produce1["base_offset"], produce1["first_offset"], produce1["last_offset"]) == (MAX, MAX, MAX)
    assert produce1["log_start_offset"] == MIN
    fetched = {p: rows[(1, p)] for p in range(5)}
    kept = {
        p: (r["fetch_offset"], r["high_watermark"], r["last_stable_offset"], r["log_start_offset"])
        for p, r in fetched.items()
    }
    assert kept == {
        0: (MIN, MAX, MAX, MIN),
        1: (-(2**62), 2**62, 2**62, 0),
        2: (0, MAX, MAX, MAX),
        3: (-1, MAX, MIN, MIN),
        4: (MAX, MIN, MIN, MIN),
    }
    assert {p: r["lag"] for p, r in fetched.items()} == {0: None, 1: None, 2: MAX, 3: None, 4: None}
    assert {p: (r["first_offset"], r["last_offset"]) for p, r in fetched.items()} == {
        0: (MAX - 1, None),
        1: (None, None),
        2: (MAX, MAX),
        3: (None, None),
        4: (MIN, MIN),
    }
    assert fetched[0]["record_count"] == 3


def test_records_table_offsets_past_int64_are_null_and_counted(tmp_path: Path) -> None:
    capture = edges_capture(tmp_path / "edges.pcap")
    done = read(capture, tmp_path / "out", COMPILED, "--records")
    assert done.returncode == 0, done.stderr
    # Beside the six above: Produce partition 0's records 2 and 3 and Fetch partition 0's third.
    assert f"notes: {NOTE} (9)" in done.stdout
    records = pq.read_table(tmp_path / "out" / "records").to_pylist()
    offsets = {(r["api_key"], r["partition"]): [] for r in records}
    for r in records:
        offsets[(r["api_key"], r["partition"])].append(r["offset"])
    assert offsets == {
        (0, 0): [MAX, None, None],
        (0, 1): [MAX],
        (1, 0): [MAX - 1, MAX, None],
        (1, 2): [MAX],
        (1, 4): [MIN],
    }


def test_the_python_api_returns_and_says_what_it_left_null(tmp_path: Path) -> None:
    capture = edges_capture(tmp_path / "edges.pcap")
    tables = kwsniff.read(capture)
    assert tables.summary[capture.name]["notes"] == {NOTE: 6}
    lags = dict(
        zip(
            tables.partitions["partition"].to_pylist(),
            tables.partitions["lag"].to_pylist(),
            strict=True,
        )
    )
    assert lags[2] == MAX and lags[1] is None


@pytest.mark.parametrize(
    ("base", "count", "last"),
    [(MAX - 1, 2, MAX), (MAX - 1, 3, None), (MIN, 1, MIN), (MAX, 1, MAX), (0, 2, 1)],
)
def test_a_batchs_last_offset_is_kept_or_none(base: int, count: int, last: int | None) -> None:
    data = batch(base, count)
    counts = counts_v2(data)
    assert counts is not None and counts[7:] == (base, last)
    summary = summarize_records(data, want_records=True)
    assert (summary.base_offset, summary.last_offset) == (base, last)
    assert summary.past_int64 == (last is None) + sum(base + i > MAX for i in range(count))
    assert summary.records is not None
    assert [r.offset for r in summary.records] == [
        base + i if base + i <= MAX else None for i in range(count)
    ]


def test_the_parquet_writer_leaves_an_out_of_range_int_null_not_the_row_group(tmp_path: Path) -> None:
    from kwsniff.sinks.parquet import ParquetSink

    rows = [
        {"capture": "c", "api_key": 1, "partition": 2**40, "lag": 2**63, "high_watermark": MAX},
        {"capture": "c", "api_key": 1, "partition": 7, "lag": MIN - 1, "high_watermark": MIN},
        {"capture": "c", "api_key": 1, "partition": 8, "lag": 5, "high_watermark": 5},
    ]
    with ParquetSink(tmp_path, "c", ("partitions",)) as sink:
        for row in rows:
            sink.add("partitions", row)
    assert sink.notes == {NOTE: 3}
    table = pq.read_table(tmp_path / "partitions").select(["partition", "lag", "high_watermark"])
    assert table.to_pylist() == [
        {"partition": None, "lag": None, "high_watermark": MAX},
        {"partition": 7, "lag": None, "high_watermark": MIN},
        {"partition": 8, "lag": 5, "high_watermark": 5},
    ]


def test_share_counts_over_the_whole_int64_range_are_null_and_counted(tmp_path: Path) -> None:
    from test_groups_wire import ORDERS
    from test_share_wire import ACCEPT, Timed, acquired, fetch

    from kwsniff.pipeline.run import run_capture
    from kwsniff.pipeline.session import SessionOptions
    from kwsniff.rows import ListSink

    a = Timed()
    a.at(0.5, "metadata", 12, {"topics": None}, {"topics": [{"name": "orders", "topic_id": ORDERS}]})
    # Acknowledged MIN..MAX (2^64 offsets) and acquired MIN..MAX and 0..MAX: counts past int64.
    acks = {0: [(MIN, MAX, [ACCEPT])], 1: [(0, 4, [ACCEPT])]}
    a.at(
        1.0, "share_fetch", 1, fetch("m1", acks), acquired({0: [(MIN, MAX, 1)], 1: [(0, MAX, 2), (0, 0, 2)]})
    )
    a.flow.close()
    sink = ListSink()
    result = run_capture(write_pcap(tmp_path / "share.pcap", a.flow.packets), sink, SessionOptions())
    rows = {r["partition"]: r for r in sink.tables["partitions"] if r["api_name"] == "ShareFetch"}
    columns = ("accepted_records", "acquired_records", "redelivered_records", "acquired_first_offset")
    assert {p: tuple(r[c] for c in columns) for p, r in rows.items()} == {
        0: (None, None, 0, MIN),
        1: (5, None, None, 0),
    }
    assert "_past_int64" not in rows[0]
    # Partition 0: accepted and acquired (request and response sides both); partition 1: acquired
    # and redelivered (2^63 + 1 each).
    assert result.notes == {NOTE: 4}


def test_live_lags_past_int64_are_unknown() -> None:
    from test_metrics_lag import commit
    from test_metrics_lag import fetch as fetched
    from test_replication import follower_fetch

    from kwsniff.view.lag import LagTracker
    from kwsniff.view.replication import ReplicationTracker

    lag = LagTracker(max_partitions=10)
    lag.row(fetched(MIN, 10))
    lag.row(commit(5, 20))  # committed 5 over a watermark of -2^63: -2^63 - 5 is past int64
    assert lag.lags[("g", "t", 0)].offset_lag is None
    lag.row(fetched(MAX, 30))
    assert lag.lags[("g", "t", 0)].offset_lag == MAX - 5
    tracker = ReplicationTracker(max_partitions=10)
    tracker.row(follower_fetch(-1, MAX, 10))  # a follower at -1 under a watermark of 2^63-1
    assert tracker.fetches[(2, "t", 0)].lag_records is None


def offset_commit_v2_request(group: str, topic: str, partition: int, offset: int) -> bytes:
    body = string(group) + i32(1) + string("m") + i64(-1) + i32(1) + string(topic)
    return body + i32(1) + i32(partition) + i64(offset) + string(None)


def offset_commit_v2_response(topic: str, partition: int) -> bytes:
    return i32(1) + string(topic) + i32(1) + i32(partition) + i16(0)


def lagging_capture(path: Path) -> Path:
    """Lags past int64 for the report: a group committing 5 on a partition whose watermark is -2^63,
    a follower at -1 under 2^63-1, a Produce acknowledged at 2^63-1 (its next offset is past int64)."""
    flow = Flow().handshake()
    flow.send(0, request(0, 8, 1, produce_v8_request("edge", [(0, batch(0, 1))])))
    flow.send(1, response(1, produce_v8_response("edge", [(0, MAX, 0)])))
    flow.send(0, request(1, 11, 2, fetch_v11_request("edge", [(0, 0)])))
    flow.send(1, response(2, fetch_v11_response("edge", [(0, MIN, MIN, MIN, b"")])))
    flow.send(0, request(8, 2, 3, offset_commit_v2_request("g", "edge", 0, 5)))
    flow.send(1, response(3, offset_commit_v2_response("edge", 0)))
    follower = fetch_v11_request("edge", [(1, -1)])
    follower = struct.pack(">i", 1) + follower[4:]  # replica id 1: a follower's fetch
    flow.send(0, request(1, 11, 4, follower))
    flow.send(1, response(4, fetch_v11_response("edge", [(1, MAX, MAX, 0, b"")])))
    flow.close()
    return write_pcap(path, flow.packets)


def test_the_reports_lag_arithmetic_past_int64_is_null_not_an_error(tmp_path: Path) -> None:
    capture = lagging_capture(tmp_path / "lag.pcap")
    done = read(capture, tmp_path / "out", COMPILED)
    assert done.returncode == 0, done.stderr
    answers = kwsniff.report(tmp_path / "out", sections=["lag", "stopped", "replication"])
    lag = answers["lag"].to_pylist()
    assert [(r["committed_offset"], r["high_watermark"], r["offset_lag"]) for r in lag] == [(5, MIN, None)]
    stopped = answers["stopped"].to_pylist()
    assert [(r["high_watermark"], r["offset_lag"]) for r in stopped] == [(MIN, None)]
    replication = answers["replication"].to_pylist()
    assert [(r["fetch_offset"], r["high_watermark"], r["lag_records"]) for r in replication] == [
        (-1, MAX, None)
    ]


def test_the_compiled_walker_and_merge_leave_sums_past_int64_to_the_python_path() -> None:
    from kwsniff.rows import compiled
    from kwsniff.tables.schemas import SCHEMAS

    assert compiled.AVAILABLE
    ends_at_max = compiled.response_info(
        1, 11, fetch_v11_response("edge", [(0, MAX, MAX, 0, batch(MAX - 1, 2))])
    )
    assert ends_at_max is not None
    assert ends_at_max["partitions"][(None, "edge", 0)]["last_offset"] == MAX
    # baseOffset 2^63-2 + lastOffsetDelta 2: the walker gives up before adding.
    assert (
        compiled.response_info(1, 11, fetch_v11_response("edge", [(0, MAX, MAX, 0, batch(MAX - 1, 3))]))
        is None
    )
    columns = SCHEMAS["partitions"].names
    index = {c: i for i, c in enumerate(columns)}
    base = (None,) * len(columns)
    key = (None, "edge", 0)
    facts = {"topic": "edge", "partition": 0}

    def merged(position: int, hwm: int) -> list[tuple[object, ...] | None]:
        request = {key: {**facts, "fetch_offset": position}}
        response = {key: {**facts, "high_watermark": hwm, "error_code": 0}}
        return compiled.merge_rows(index, base, {}, request, response, 1, {})

    (row,) = merged(0, MAX)
    assert row is not None and row[index["lag"]] == MAX
    assert merged(-1, MAX) == [None]  # 2^63: the Python path leaves it null and counts it
    assert merged(MAX, MIN) == [None]
    produce = {key: {**facts, "record_count": 2}}
    answered = {key: {**facts, "base_offset": MAX, "error_code": 0}}
    assert compiled.merge_rows(index, base, {}, produce, answered, 0, {}) == [None]


def test_metadata_log_records_past_int64_keep_their_rows_with_a_null_offset() -> None:
    from test_kraft import partition_change_record, record_batch

    from kwsniff.rows.metadata_log import metadata_log_rows
    from kwsniff.rows.partitions import COUNTS_ONLY, PAST_INT64_KEY

    # Three ISR changes of one partition from 2^63-1 on: the second and third are past int64.
    values = [partition_change_record(0, isr, None) for isr in ([1, 2, 3], [1, 2], [1])]
    msg = {"responses": [{"partitions": [{"records": record_batch(MAX, values)}]}]}
    info: dict[str, object] = {}
    metadata_log_rows(msg, info, COUNTS_ONLY)
    parts = info["partitions"]
    assert isinstance(parts, dict)
    rows = [(r["offset"], r["isr"], r.get(PAST_INT64_KEY)) for r in parts.values()]
    assert rows == [(MAX, "1,2,3", None), (None, "1,2", 1), (None, "1", 1)]


def gapped_fetch_capture(path: Path) -> Path:
    """A Produce of three records acknowledged at offset 0, and a Fetch answered with that batch and
    one at 2^62 (as a compacted log, or a hostile broker, may have it): one Fetch row spanning
    0..2^62, four quadrillion offset buckets of 1,024."""
    flow = Flow().handshake()
    flow.send(0, request(0, 8, 1, produce_v8_request("edge", [(0, batch(0, 3))])))
    flow.send(1, response(1, produce_v8_response("edge", [(0, 0, 0)])))
    flow.send(0, request(1, 11, 2, fetch_v11_request("edge", [(0, 0)])))
    records = batch(0, 3, timestamp=1_700_000_000_010) + batch(2**62, 1)
    flow.send(1, response(2, fetch_v11_response("edge", [(0, 2**62 + 1, 2**62 + 1, 0, records)])))
    flow.close()
    return write_pcap(path, flow.packets)


def test_a_fetch_spanning_an_offset_range_near_int64_does_not_stall_the_report(tmp_path: Path) -> None:
    # The range joins on offsets go through one row per offset bucket a batch's range touches
    # (sections' sql.offset_buckets): before, this one Fetch row asked DuckDB for 2^52 of them.
    done = read(gapped_fetch_capture(tmp_path / "gap.pcap"), tmp_path / "out", COMPILED)
    assert done.returncode == 0, done.stderr
    fetch = partitions(tmp_path / "out")[(1, 0)]
    assert (fetch["first_offset"], fetch["last_offset"]) == (0, 2**62)
    report = subprocess.run(
        [sys.executable, "-m", "kwsniff", "report", str(tmp_path / "out"), "--format", "json"]
        + ["--section", "produce_to_consume", "--section", "lag"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr
    import json

    answers = json.loads(report.stdout)
    # The Produce batch at offset 0 lies in the Fetch row's first buckets: still matched.
    assert [(r["topic"], r["batches"]) for r in answers["produce_to_consume"]] == [("edge", 1)]
