"""The opt-in `records` table (`--records`): one row per record, checked record by record against what
the clients of the real captures produced and consumed (their .truth.json)."""

from __future__ import annotations

import hashlib
import json
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from kafka.record.util import calc_crc32c, encode_varint
from test_partitions_table import FETCH, RECORDS, run
from test_records_oracle import build_v2

from kwsniff.cli import main
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink
from kwsniff.sinks import parquet
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.tables.names import SUMMARIES

CAPTURES = Path(__file__).parent / "data" / "captures"
NAMES = ("acks_modes", "kafka_python", "legacy_msgset", "produce_codecs")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

Truth = dict[tuple[str, int, int], tuple[str | None, int | None, str | None, int]]


@pytest.fixture(scope="module")
def captures() -> dict[str, tuple[ListSink, dict[str, Any]]]:
    out = {}
    for name in NAMES:
        sink = ListSink()
        run_capture(CAPTURES / f"{name}.pcap", sink, SessionOptions(records=True, record_payloads=True))
        out[name] = sink, json.loads((CAPTURES / f"{name}.pcap.truth.json").read_text())
    return out


def truth_records(entries: list[list[Any]]) -> Truth:
    """[topic, partition, offset, key, value length, sha256(value)[:16], header count] by offset."""
    return {(t, p, o): (k, n, h, hc) for t, p, o, k, n, h, hc in entries if o is not None}


def our_records(rows: list[dict[str, Any]], api_name: str) -> Truth:
    out: Truth = {}
    for r in rows:
        if r["api_name"] == api_name and r["offset"] is not None:
            key = None if r["key"] is None else r["key"].decode()
            value = r["value"]
            digest = None if value is None else hashlib.sha256(value).hexdigest()[:16]
            size = None if r["value_size"] < 0 else r["value_size"]
            assert r["key_size"] == (-1 if key is None else len(key))
            out[r["topic"], r["partition"], r["offset"]] = (key, size, digest, r["header_count"])
    return out


@pytest.mark.parametrize("name", NAMES)
def test_produced_records_get_the_offsets_the_broker_acknowledged(
    captures: dict[str, tuple[ListSink, dict[str, Any]]], name: str
) -> None:
    sink, truth = captures[name]
    expected = truth_records(truth["produced"]["records"])
    assert (
        len(expected)
        == {"acks_modes": 600, "kafka_python": 400, "legacy_msgset": 20, "produce_codecs": 1500}[name]
    )
    ours = our_records(sink.tables["records"], "Produce")
    if name == "produce_codecs":
        # librdkafka's delivery reports carry no headers, so the truth's produced header counts are 0;
        # the consumed side (checked below) has them. Compare the rest here.
        ours = {k: (*v[:3], 0) for k, v in ours.items()}
    assert ours == expected


@pytest.mark.parametrize("name", ["kafka_python", "legacy_msgset", "produce_codecs"])
def test_fetched_records_are_the_records_the_consumer_read(
    captures: dict[str, tuple[ListSink, dict[str, Any]]], name: str
) -> None:
    sink, truth = captures[name]
    expected = truth_records(truth["consumed"]["records"])
    ours = our_records(sink.tables["records"], "Fetch")
    assert ours == expected
    # Per partition, the fetched offsets cover the range the consumer read.
    for topic, parts in truth["consumed"]["per_partition"].items():
        for p, v in parts.items():
            offsets = sorted(o for t, q, o in ours if (t, q) == (topic, int(p)))
            assert offsets == list(range(v["first_offset"], v["last_offset"] + 1))


def test_acks_0_records_are_written_without_an_offset(
    captures: dict[str, tuple[ListSink, dict[str, Any]]],
) -> None:
    sink, _ = captures["acks_modes"]
    acks0 = [r for r in sink.tables["records"] if r["topic"] == "acks-0"]
    assert (len(acks0), {r["offset"] for r in acks0}) == (200, {None})


def test_idempotent_records_carry_producer_id_epoch_and_sequence(
    captures: dict[str, tuple[ListSink, dict[str, Any]]],
) -> None:
    sink, _ = captures["acks_modes"]
    for partition in (0, 1):
        rows = [
            r
            for r in sink.tables["records"]
            if (r["topic"], r["partition"]) == ("acks-all-idempotent", partition)
        ]
        assert {(r["producer_id"], r["producer_epoch"]) for r in rows} == {(1, 0)}
        assert sorted(r["sequence"] for r in rows) == list(range(100))
    plain = {(r["producer_id"], r["sequence"]) for r in sink.tables["records"] if r["topic"] == "acks-1"}
    assert plain == {(-1, -1)}


def test_every_codec_appears_in_the_records_table(
    captures: dict[str, tuple[ListSink, dict[str, Any]]],
) -> None:
    sink, _ = captures["produce_codecs"]
    seen = Counter((r["api_name"], r["topic"], r["compression"]) for r in sink.tables["records"])
    assert seen == {(api, f"codec-{c}", c): 300 for api in ("Produce", "Fetch") for c in CODECS}


def test_legacy_messages_keep_their_magics_timestamp_rules(
    captures: dict[str, tuple[ListSink, dict[str, Any]]],
) -> None:
    # Produce v2 carries a gzip-wrapped magic 1 message (create time), v1 a magic 0 one (no timestamp).
    sink, _ = captures["legacy_msgset"]
    legacy = [
        (
            r["api_version"],
            r["compression"],
            r["timestamp_type"],
            r["timestamp"] is None,
            r["offset"],
            r["key"],
        )
        for r in sink.tables["records"]
        if r["api_name"] == "Produce" and r["api_version"] < 3
    ]
    assert legacy == [
        (2, "gzip", "create", False, None, b"legacy"),
        (1, "none", "none", True, None, b"legacy"),
    ]


def test_payloads_are_left_out_unless_asked_for() -> None:
    sink = ListSink()
    run_capture(CAPTURES / "kafka_python.pcap", sink, SessionOptions(records=True))
    rows = sink.tables["records"]
    assert (len(rows), {(r["key"], r["value"]) for r in rows}) == (800, {(None, None)})
    assert sum(r["value_size"] for r in rows) == 2 * (68099 + 65625 + 66928 + 12394 + 11621)


def test_no_records_rows_without_the_option() -> None:
    sink = ListSink()
    run_capture(CAPTURES / "kafka_python.pcap", sink, SessionOptions())
    assert "records" not in sink.tables and len(sink.tables["partitions"]) == 85


def _control_batch(base_offset: int, producer_id: int) -> bytes:
    """A commit marker (KIP-98): control + transactional attributes, key version 0 type 1."""
    key, value = struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 5)
    fields = bytearray(b"\x00")
    for n in (0, 0, len(key)):
        encode_varint(n, fields.append)
    fields += key
    encode_varint(len(value), fields.append)
    fields += value
    encode_varint(0, fields.append)
    record = bytearray()
    encode_varint(len(fields), record.append)
    record += fields
    after_crc = struct.pack(">hiqqqhii", 0x30, 0, 1, 1, producer_id, 1, -1, 1) + record
    return struct.pack(">qiiBI", base_offset, 9 + len(after_crc), 0, 2, calc_crc32c(after_crc)) + after_crc


def test_transaction_markers_in_a_fetch_are_control_records() -> None:
    data = build_v2(RECORDS, first_offset=5, producer=(7, 1, 0), transactional=True) + _control_batch(8, 7)
    resp = {
        "responses": [
            {"topic": "orders", "partitions": [{"partition_index": 0, "high_watermark": 9, "records": data}]}
        ]
    }
    req = {"topics": [{"topic": "orders", "partitions": [{"partition": 0, "fetch_offset": 5}]}]}
    sink = run([(FETCH, 12, req, resp)], records=True)
    assert [
        (r["offset"], r["is_control"], r["producer_id"], r["sequence"]) for r in sink.tables["records"]
    ] == [
        (5, False, 7, 0),
        (6, False, 7, 1),
        (7, False, 7, 2),
        (8, True, 7, -1),
    ]
    (part,) = sink.tables["partitions"]
    assert (part["record_count"], part["batch_count"], part["control_batches"], part["last_offset"]) == (
        4,
        2,
        1,
        8,
    )


def test_read_writes_the_records_table_only_with_records(tmp_path: Path) -> None:
    capture = str(CAPTURES / "produce_codecs.pcap")
    runner = CliRunner()
    plain = ["read", capture, "--out", str(tmp_path / "plain"), "--summaries", "always"]
    assert runner.invoke(main, plain).exit_code == 0
    assert sorted(p.name for p in (tmp_path / "plain").iterdir()) == sorted(DEFAULT_TABLES + SUMMARIES)
    result = runner.invoke(main, ["read", capture, "--out", str(tmp_path / "rec"), "--record-payloads"])
    assert result.exit_code == 0, result.output
    table = ds.dataset(tmp_path / "rec" / "records").to_table()
    assert table.num_rows == 3000
    assert table.filter(ds.field("value").is_null()).num_rows == 2 * 5 * 6  # every 50th value is null
    assert str(table.schema.field("timestamp").type) == "timestamp[us, tz=UTC]"


def test_records_are_written_in_bounded_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(parquet.BATCH_ROWS_BY_TABLE, "records", 1000)
    sink = parquet.ParquetSink(tmp_path, "codecs", (*DEFAULT_TABLES, "records"))
    run_capture(CAPTURES / "produce_codecs.pcap", sink, SessionOptions(records=True))
    sink.close()
    assert pq.ParquetFile(tmp_path / "records" / "codecs.parquet").num_row_groups == 3


def test_record_payloads_bound_a_batch_by_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bound = 100_000
    monkeypatch.setattr(parquet, "BATCH_PAYLOAD_BYTES", bound)
    sink = parquet.ParquetSink(tmp_path, "codecs", (*DEFAULT_TABLES, "records"))
    run_capture(CAPTURES / "produce_codecs.pcap", sink, SessionOptions(record_payloads=True))
    sink.close()
    f = pq.ParquetFile(tmp_path / "records" / "codecs.parquet")
    groups = [f.read_row_group(i, columns=["key", "value"]).to_pylist() for i in range(f.num_row_groups)]
    assert f.num_row_groups > 20
    for rows in groups[:-1]:
        sizes = [len(r["key"] or b"") + len(r["value"]) for r in rows if r["value"] is not None]
        # Written as soon as the payloads held reach the bound, not one record later.
        assert sum(sizes) >= bound > sum(sizes) - sizes[-1]


def test_each_record_row_carries_what_the_client_built() -> None:
    """Records built by kafka-python's batch builder (KIP-82 headers, KIP-32 create time), produced with
    acks=-1 and answered with base offset 40: every per-record column, from what was built."""
    built = [(1_700_000_000_000 + i, b"k%d" % i, b"v" * (i + 1), [("h", b"x")] * i) for i in range(3)]
    batch = build_v2(built, producer=(7, 2, 11))
    produce = {
        "acks": -1,
        "topic_data": [{"name": "orders", "partition_data": [{"index": 5, "records": batch}]}],
    }
    answer = {"responses": [{"name": "orders", "partition_responses": [{"index": 5, "base_offset": 40}]}]}
    sink = run([(0, 9, produce, answer)], records=True, record_payloads=True)
    rows = sink.tables["records"]
    assert [
        (r["topic"], r["partition"], r["offset"], r["timestamp"], r["timestamp_type"], r["compression"])
        for r in rows
    ] == [("orders", 5, 40 + i, (1_700_000_000_000 + i) * 1000, "create", "none") for i in range(3)]
    assert [(r["key"], r["key_size"], r["value"], r["value_size"], r["header_count"]) for r in rows] == [
        (b"k%d" % i, 2, b"v" * (i + 1), i + 1, i) for i in range(3)
    ]
    assert [(r["producer_id"], r["producer_epoch"], r["sequence"], r["is_control"]) for r in rows] == [
        (7, 2, 11 + i, False) for i in range(3)
    ]
    assert {
        (r["conn_id"], r["correlation_id"], r["api_key"], r["api_name"], r["api_version"]) for r in rows
    } == {(1, 1, 0, "Produce", 9)}
    assert {(r["capture"], r["topic_id"]) for r in rows} == {("t.pcap", None)}
