"""A snap length may leave a value unknown, never wrong (issue 44): every capture of the repository,
cut with `editcap -s N` from 60 to 600 bytes in steps of 4, against its full capture.

For every `requests`, `partitions` and `errors` row of a cut capture: the row is one the full capture
has (same connection endpoints, correlation id and API; same topic and partition), and each of its
non-null values is the full capture's. A count over a body the snap length cut is null. Every request
whose request and response headers were kept has its row, with the full capture's times.

Where the full capture's values come from: the exchanges, their times and which of their bytes each
snap length keeps from a dpkt reader of the FULL capture (tests/snaplen_oracle.py, no kwsniff code);
the values inside the bodies from kwsniff's reading of the full capture, which the first test holds
against that reader and against kio's decoding of every whole request and response.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import pkgutil
import struct
import subprocess
import uuid
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import snaplen_oracle
from test_snap_length import ALL_CAPTURES, broker_port, missing_reason, read, us
from test_status_reason import agrees

from kwsniff.protocol import parse_request_header, parse_response_header

SNAP_LENGTHS = range(60, 601, 4)
Endpoints = tuple[str, int, str, int]
# Columns that say what the cut did, or that number connections: not values of the exchange.
NOT_VALUES = {"capture", "conn_id", "status", "reason"}
# Counts over a body: unknown unless the whole body (its record batch headers, for record counts)
# was kept.
RESPONSE_COUNTS = ("error_count",)
RECORD_COUNTS = ("record_count", "record_bytes")


def keyed_tables(tables: dict[str, list[dict[str, Any]]]) -> dict[str, dict[Any, list[dict[str, Any]]]]:
    """Rows by the exchange they belong to, (endpoints, correlation id, api key), plus for partitions
    rows the topic (its id, else its name) and partition."""
    ends = {
        c["conn_id"]: (c["client_ip"], c["client_port"], c["broker_ip"], c["broker_port"])
        for c in tables["connections"]
    }
    out: dict[str, dict[Any, list[dict[str, Any]]]] = {"requests": {}, "partitions": {}, "errors": {}}
    for table in out:
        for row in tables[table]:
            key: tuple[Any, ...] = (ends[row["conn_id"]], row["correlation_id"], row["api_key"])
            if table == "partitions":
                key += (row.get("topic_id") or row.get("topic"), row.get("partition"))
            out[table].setdefault(key, []).append(row)
    out["connections"] = {ends[c["conn_id"]]: [c] for c in tables["connections"]}
    return out


def response_time(row: dict[str, Any]) -> int | None:
    return None if row["ts_response"] is None else us(row["ts_response"])


def exchange_key(ex: snaplen_oracle.Exchange) -> tuple[Endpoints, int, int]:
    return ex.conn, ex.correlation_id, ex.api_key


# -- kio's reading of the whole messages ------------------------------------------------------------------
def kio_message(ex: snaplen_oracle.Exchange, response: bool) -> Any:
    """kio's decoding of the exchange's whole request or response; None when kio lacks the version."""
    from kio.schema.index import api_key_map, schema_name_map
    from kio.serial import entity_reader
    from kio.static.constants import EntityType

    side = EntityType.response if response else EntityType.request
    path = schema_name_map[api_key_map[ex.api_key]].get(ex.api_version, {}).get(side)
    frame = ex.response.data[4:] if response and ex.response is not None else ex.request.data[4:]
    if path is None:
        return None
    if response:
        start = parse_response_header(frame, ex.api_key, ex.api_version)[1]
    else:
        start = parse_request_header(frame)[4]
    read_ = entity_reader(pkgutil.resolve_name(path))(memoryview(frame), start)
    return read_[0] if isinstance(read_, tuple) else read_


def plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    return int(value)


# kwsniff's requests column -> (from the response?, kio's field), where kio's message has that field.
KIO_FIELDS = {
    "acks": (False, "acks"),
    "max_wait_ms": (False, "max_wait"),
    "producer_id": (False, "producer_id"),
    "producer_epoch": (False, "producer_epoch"),
    "throttle_time_ms": (True, "throttle_time"),
    "error_code": (True, "error_code"),
    "producer_id_response": (True, "producer_id"),
    "producer_epoch_response": (True, "producer_epoch"),
}


def kio_values(ex: snaplen_oracle.Exchange) -> dict[str, Any] | None:
    """The requests columns kio's decoding of the whole exchange gives; None when kio lacks a side."""
    request = kio_message(ex, False)
    response = kio_message(ex, True) if ex.response is not None else None
    if request is None or (ex.response is not None and response is None):
        return None
    out = {}
    for column, (from_response, name) in KIO_FIELDS.items():
        message = response if from_response else request
        if message is not None and name in {f.name for f in dataclasses.fields(message)}:
            out[column] = plain(getattr(message, name))
    if ex.api_key == 1:  # Fetch: the request's replica id, or replica_state's from v15 (KIP-903)
        state = getattr(request, "replica_state", None)
        out["replica_id"] = plain(request.replica_id if hasattr(request, "replica_id") else state.replica_id)
    return out


@cache
def full(pcap: Path) -> tuple[list[snaplen_oracle.Exchange], dict[str, dict[Any, list[dict[str, Any]]]]]:
    """The independent reader's exchanges of the whole capture, and kwsniff's rows of it."""
    return snaplen_oracle.exchanges(pcap, broker_port(pcap)), keyed_tables(read(pcap)[1])


@pytest.mark.parametrize("pcap", ALL_CAPTURES, ids=lambda p: p.name)
def test_the_full_captures_rows_are_what_dpkt_and_kio_read_in_the_whole_messages(pcap: Path) -> None:
    exchanges, rows = full(pcap)
    assert set(rows["requests"]) == {exchange_key(ex) for ex in exchanges}
    checked = Counter[str]()
    for ex in exchanges:
        (row,) = rows["requests"][exchange_key(ex)]
        assert (row["api_version"], row["client_id"], us(row["ts_request"]), row["latency_ms"]) == (
            ex.api_version,
            ex.client_id,
            ex.request.ts_last,
            ex.latency_ms,
        )
        assert response_time(row) == (ex.response.ts_first if ex.response is not None else None)
        assert row["request_bytes"] == ex.request.size
        assert row["response_bytes"] == (ex.response.size if ex.response is not None else None)
        values = kio_values(ex)
        if values is None:
            checked["kio lacks the version"] += 1
            continue
        for column, value in values.items():
            assert row[column] == value, (ex.api_key, ex.correlation_id, column)
            checked[column] += 1
    assert checked["error_code"] > 0 and checked["throttle_time_ms"] > 0
    assert sum(checked.values()) > len(exchanges)
    # Its partitions rows, unique per exchange, topic and partition.
    assert all(len(same) == 1 for same in rows["partitions"].values())
    produced = {
        (*exchange_key(ex), p.topic, p.partition): p.records
        for ex in exchanges
        if ex.api_key == 0 and ex.api_version >= 3
        for p in snaplen_oracle.produced_partitions(ex)
    }
    got = {
        k: same[0]["record_count"]
        for k, same in rows["partitions"].items()
        if k[2] == 0 and same[0]["api_version"] >= 3
    }
    assert got == produced


def test_a_partition_whose_index_the_cut_left_out_is_no_partition() -> None:
    # Metadata v0 response: its partitions start with their error code, then their index. Before,
    # a cut between the two gave a partition (and a partitions row) with a null index.
    from kafkawire import i16, i32, string

    from kwsniff.protocol.partial import decode_prefix

    partition = i16(0) + i32(3) + i32(1) + i32(1) + i32(1) + i32(1) + i32(1)
    body = i32(0) + i32(1) + i16(0) + string("t") + i32(1) + partition
    cut_at = len(body) - len(partition) + 2  # right after the partition's error code
    msg, whole = decode_prefix(3, 0, True, body[:cut_at])
    assert (msg["topics"][0]["name"], msg["topics"][0]["partitions"], whole) == ("t", [], False)
    msg, whole = decode_prefix(3, 0, True, body[: cut_at + 4])
    assert [p["partition_index"] for p in msg["topics"][0]["partitions"]] == [3]


def test_a_tagged_field_the_cut_left_out_is_unknown_not_absent() -> None:
    # Fetch v15+ says who fetches in the replica_state tag (KIP-903), at the end of the request: a
    # follower's request cut before it is no consumer's (the absent tag's replica id -1).
    from kafkawire import i8, i32, i64, uvarint

    from kwsniff.protocol import decode_request
    from kwsniff.protocol.partial import decode_prefix
    from kwsniff.rows.extract import request_summary

    state = i32(2) + i64(5) + uvarint(0)
    body = i32(500) + i32(1) + i32(1 << 20) + i8(0) + i32(0) + i32(-1) + uvarint(1) + uvarint(1) + uvarint(1)
    body += uvarint(1) + uvarint(1) + uvarint(len(state)) + state  # one tag: replica_state
    whole = decode_request(1, 15, body)
    assert decode_prefix(1, 15, False, body) == (whole, True)
    assert request_summary(1, 15, whole)["fetcher"] == "follower"
    for n in range(len(body)):
        msg, _ = decode_prefix(1, 15, False, body[:n])
        assert msg["replica_state"] is None
        assert (request_summary(1, 15, msg)["replica_id"], request_summary(1, 15, msg)["fetcher"]) == (
            None,
            None,
        )


def test_a_request_whose_client_id_was_cut_has_no_body_facts(tmp_path: Path) -> None:
    # At 96 bytes a loopback packet keeps 30 bytes of payload: the client ids of these captures' Produce
    # and Fetch requests end after it. Before, the client id's bytes were read as the body: acks 6258,
    # max_wait_ms 761,491,310, replica id 1,601,907 (a follower, in a capture without one).
    facts = ("acks", "max_wait_ms", "replica_id", "fetcher", "producer_id", "producer_epoch", "record_count")
    header_cut = 0
    for pcap in ALL_CAPTURES:
        rows = keyed_tables(read(cut(pcap, 96, tmp_path))[1])["requests"]
        for ex in snaplen_oracle.exchanges(pcap, broker_port(pcap), 96):
            if ex.request.kept_prefix() < ex.client_id_end() and ex.api_key in (0, 1, 22):
                (row,) = rows[exchange_key(ex)]
                assert {c: row[c] for c in facts} == dict.fromkeys(facts), (pcap.name, exchange_key(ex))
                header_cut += 1
    assert header_cut > 100


def cut(pcap: Path, snaplen: int, tmp: Path) -> Path:
    out = tmp / f"{pcap.stem}.s{snaplen}.pcap"
    subprocess.run(["editcap", "-F", "pcap", "-s", str(snaplen), str(pcap), str(out)], check=True, timeout=60)
    return out


def wrong_values(row: dict[str, Any], whole: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {
        c: (v, whole.get(c))
        for c, v in row.items()
        if c not in NOT_VALUES and v is not None and v != whole.get(c)
    }


def fetched_records_v0_3(ex: snaplen_oracle.Exchange) -> list[bytes]:
    """Each partition's records field of a whole Fetch response v0-3 (FetchResponse.json: kio reads
    v4 on), read by hand: [topic: string, [partition: int32, error: int16, high watermark: int64,
    records: int32-length bytes]], after the throttle time from v1."""
    assert ex.response is not None
    data, pos = ex.response.data, 8 + (4 if ex.api_version >= 1 else 0)
    out = []
    (topics,) = struct.unpack_from(">i", data, pos)
    pos += 4
    for _ in range(topics):
        pos += 2 + struct.unpack_from(">h", data, pos)[0]
        (parts,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(parts):
            pos += 4 + 2 + 8
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            out.append(data[pos : pos + max(n, 0)])
            pos += max(n, 0)
    assert pos == len(data)
    return out


def last_batch_header_end(ex: snaplen_oracle.Exchange) -> int | None:
    """Frame offset just past the last record batch header of a Produce request or Fetch response
    (0 without records); None where this reader cannot tell."""
    if ex.api_key == 0 and ex.api_version >= 3:
        return max((p.headers_end for p in snaplen_oracle.produced_partitions(ex) if p.records), default=0)
    if ex.api_key != 1 or ex.response is None:
        return None
    every = fetched_records_v0_3(ex) if ex.api_version <= 3 else None
    if every is None:
        message = kio_message(ex, True)
        if message is None:
            return None
        every = [bytes(part.records or b"") for topic in message.responses for part in topic.partitions]
    end, data, pos = 0, ex.response.data, 0
    for records in every:
        if not records:
            continue
        pos = data.index(records, pos)  # the fields come in order: each one's bytes after the last
        batch = 0
        while batch + 61 <= len(records):
            end = pos + batch + 61
            batch += 12 + struct.unpack_from(">i", records, batch + 8)[0]
        pos += len(records)
    return end


@dataclasses.dataclass
class Tally:
    rows: int = 0  # requests and partitions rows compared
    values: int = 0  # non-null values compared
    nulls: int = 0  # values the full capture has that the cut one leaves null
    recoverable: int = 0
    recovered: int = 0


def compare(pcap: Path, snaplen: int, tmp: Path) -> Tally:
    """Assert what the module's docstring says of ``pcap`` cut at ``snaplen``; what was compared."""
    exchanges, whole = full(pcap)
    at_n = {exchange_key(ex): ex for ex in snaplen_oracle.exchanges(pcap, broker_port(pcap), snaplen)}
    rows = keyed_tables(read(cut(pcap, snaplen, tmp))[1])
    tally = Tally()
    where = f"{pcap.name} cut at {snaplen}"
    for table in ("requests", "partitions", "errors"):
        for key, same in rows[table].items():
            for row in same:
                if table == "errors":
                    # An error the cut response shows is one of the whole response's.
                    assert any(not wrong_values(row, w) for w in whole["errors"].get(key, [])), (where, row)
                    continue
                assert key in whole[table], (where, table, "a row the full capture does not have", key)
                assert len(same) == 1, (where, table, key)
                (full_row,) = whole[table][key]
                assert not wrong_values(row, full_row), (where, table, key, wrong_values(row, full_row))
                if table == "partitions":
                    assert row.get("partition") is not None and (row.get("topic") or row.get("topic_id"))
                tally.rows += 1
                tally.values += sum(v is not None for c, v in row.items() if c not in NOT_VALUES)
                tally.nulls += sum(
                    row.get(c) is None and v is not None for c, v in full_row.items() if c not in NOT_VALUES
                )
    for key, (conn,) in rows["connections"].items():
        # The client id a connection row names is the full capture's (its first request's).
        assert conn.get("client_id") in (None, whole["connections"][key][0].get("client_id")), (where, key)
    for key, (row,) in rows["requests"].items():
        ex = at_n[key]
        assert agrees(row["status"], row["reason"]), (where, key, row["status"], row["reason"])
        if ex.response is not None and ex.response.kept_prefix() < ex.response.size:
            assert all(row[c] is None for c in RESPONSE_COUNTS), (where, key, "a count over a cut response")
        side = ex.response if ex.api_key == 1 else ex.request
        if side is not None and side.kept_prefix() < side.size and row["record_count"] is not None:
            headers_end = last_batch_header_end(ex)
            assert headers_end is not None and side.kept_prefix() >= headers_end, (where, key)
    for key, ex in at_n.items():
        if not snaplen_oracle.header_kept(ex):
            continue
        tally.recoverable += 1
        (row,) = rows["requests"][key]
        assert (us(row["ts_request"]), row["latency_ms"]) == (ex.request.ts_last, ex.latency_ms), (where, key)
        assert response_time(row) == (ex.response.ts_first if ex.response is not None else None), (where, key)
        if ex.request.kept_prefix() < ex.request.size:
            assert (row["status"], row["reason"]) == ("decode_error", missing_reason("request", ex.request))
        elif ex.response is not None and ex.response.kept_prefix() < ex.response.size:
            assert (row["status"], row["reason"]) == ("decode_error", missing_reason("response", ex.response))
        else:
            (full_row,) = whole["requests"][key]
            assert (row["status"], row["reason"]) == (full_row["status"], full_row["reason"])
        tally.recovered += 1
    return tally


@pytest.mark.parametrize("pcap", ALL_CAPTURES, ids=lambda p: p.name)
def test_a_cut_capture_shows_the_full_captures_values_or_null_and_every_recoverable_request(
    pcap: Path, tmp_path: Path
) -> None:
    total = Tally()
    for snaplen in SNAP_LENGTHS:
        got = compare(pcap, snaplen, tmp_path)
        for field in dataclasses.fields(Tally):
            setattr(total, field.name, getattr(total, field.name) + getattr(got, field.name))
    # Every request of these captures is recoverable from 96 bytes on (loopback: 66 header bytes).
    assert total.recovered == total.recoverable >= len(full(pcap)[0]) * len(range(96, 601, 4))
    assert total.values > 0 and total.nulls > 0
