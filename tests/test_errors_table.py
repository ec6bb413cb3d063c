"""Error codes in the tables: `requests.throttle_time_ms` and top-level `error_code/error_name`, the
`errors` table (one row per non-zero error code anywhere in a response, with its path and context),
and `connections.client_software_name/version` from ApiVersions v3+ (KIP-511).

Real captures go through `kwsniff read` into Parquet; hand-built exchanges (bytes laid out field by
field from the Kafka JSON specs) cover nested paths, error messages and each kind of context.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from kafkawire import LINKTYPE_RAW_IPV4, Flow, i8, i16, i32, i64, request, response, string, write_pcap

from kwsniff.cli import main
from kwsniff.pipeline.session import Session
from kwsniff.rows import ListSink
from kwsniff.sinks import output_name

CAPTURES = Path(__file__).parent / "data" / "captures"
PRODUCE_PATH = "responses[].partition_responses[].error_code"


def read_tables(tmp_path: Path, capture: str) -> dict[str, list[dict[str, Any]]]:
    out = tmp_path / "tables"
    result = CliRunner().invoke(main, ["read", str(CAPTURES / capture), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    return {
        table: pq.read_table(out / table / f"{output_name(CAPTURES / capture)}.parquet").to_pylist()
        for table in ("requests", "errors", "connections")
    }


def only(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    found = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(found) == 1, found
    return found[0]


ERROR_CONTEXT = ("path", "error_code", "error_name", "retriable", "error_message", "topic", "partition")


def error_facts(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[k] for k in (*ERROR_CONTEXT, "group_id", "resource_name"))


# -- real captures ---------------------------------------------------------------------------------
def test_join_group_member_id_required_is_an_error_row_with_the_requests_group(tmp_path: Path) -> None:
    tables = read_tables(tmp_path, "kafka_python.pcap")
    # KIP-394: the first JoinGroup of a new member is refused with MEMBER_ID_REQUIRED and a member id.
    assert [
        (e["conn_id"], e["correlation_id"], e["api_name"], e["api_version"]) for e in tables["errors"]
    ] == [(7, 2, "JoinGroup", 7)]
    assert error_facts(tables["errors"][0]) == (
        "error_code",
        79,
        "MEMBER_ID_REQUIRED",
        False,
        None,
        None,
        None,
        "rig-kp-group",
        None,
    )
    first = only(tables["requests"], conn_id=7, correlation_id=2)
    second = only(tables["requests"], conn_id=7, correlation_id=3)
    assert (first["throttle_time_ms"], first["error_code"], first["error_name"]) == (
        0,
        79,
        "MEMBER_ID_REQUIRED",
    )
    assert (second["throttle_time_ms"], second["error_code"], second["error_name"]) == (0, 0, "NONE")


def test_throttle_time_and_top_level_error_code_follow_each_response_version(tmp_path: Path) -> None:
    tables = read_tables(tmp_path, "legacy_msgset.pcap")

    def filled(conn_id: int, corr: int) -> tuple[Any, ...]:
        r = only(tables["requests"], conn_id=conn_id, correlation_id=corr)
        return (r["api_name"], r["api_version"], r["throttle_time_ms"], r["error_code"], r["error_name"])

    # ApiVersions has a top-level error code in every version, a throttle time from v1; Metadata v0
    # has neither; Produce has a throttle time from v1 and its error codes per partition only.
    assert filled(5, 1) == ("ApiVersions", 0, None, 0, "NONE")
    assert filled(1, 1) == ("ApiVersions", 3, 0, 0, "NONE")
    assert filled(7, 1) == ("Metadata", 0, None, None, None)
    assert filled(3, 2) == ("Metadata", 12, 0, None, None)
    assert filled(8, 1) == ("Produce", 1, 0, None, None)
    assert filled(10, 3) == ("Fetch", 3, 0, None, None)  # Fetch has a top-level error code from v7


def test_legacy_produce_rejections_are_one_row_per_partition(tmp_path: Path) -> None:
    tables = read_tables(tmp_path, "legacy_msgset.pcap")
    # tansu cannot parse magic 0/1 message sets and refuses them per partition (truth.json notes).
    rows = sorted(tables["errors"], key=lambda e: e["api_version"])
    assert [(e["conn_id"], e["correlation_id"], e["api_version"]) for e in rows] == [(8, 1, 1), (6, 2, 2)]
    for e in rows:
        assert error_facts(e) == (
            PRODUCE_PATH,
            59,
            "UNKNOWN_PRODUCER_ID",
            False,
            None,
            "legacy-t",
            0,
            None,
            None,
        )


def test_api_versions_v3_names_the_client_software(tmp_path: Path) -> None:
    tables = read_tables(tmp_path, "acks_modes.pcap")
    # confluent-kafka's Python wrapper names itself, with the librdkafka it is built on (KIP-511).
    assert {(c["client_software_name"], c["client_software_version"]) for c in tables["connections"]} == {
        ("confluent-kafka-python", "2.16.1-rdkafka-2.16.0")
    }
    assert len(tables["connections"]) == 10


def test_clients_speaking_api_versions_v0_have_no_software_name(tmp_path: Path) -> None:
    tables = read_tables(tmp_path, "legacy_msgset.pcap")
    software = {c["conn_id"]: c["client_software_name"] for c in tables["connections"]}
    # Connections 1-4 are librdkafka (ApiVersions v3); 5-10 kafka-python forced to 0.9/0.10 (v0).
    assert software == {1: "confluent-kafka-python", 2: "confluent-kafka-python", 3: "confluent-kafka-python",
                        4: "confluent-kafka-python", 5: None, 6: None, 7: None, 8: None, 9: None, 10: None}  # fmt: skip


# -- hand-built exchanges --------------------------------------------------------------------------


def array(items: list[bytes]) -> bytes:
    return i32(len(items)) + b"".join(items)


def exchanges(*pairs: tuple[bytes, bytes]) -> dict[str, list[dict[str, Any]]]:
    flow = Flow().handshake()
    for req, resp in pairs:
        flow.send(0, req)
        flow.send(1, resp)
    flow.close()
    sink = ListSink()
    session = Session("hand", sink)
    for ts, packet in flow.packets:
        session.packet(ts, LINKTYPE_RAW_IPV4, packet)
    session.finish()
    return sink.tables


def produce_v8() -> tuple[bytes, bytes]:
    partitions = [i32(3) + i32(-1), i32(4) + i32(-1)]  # index, null records
    body = string(None) + i16(-1) + i32(1000) + array([string("orders") + array(partitions)])
    refused = (
        i32(3) + i16(6) + i64(-1) + i64(-1) + i64(-1)  # index, NOT_LEADER_OR_FOLLOWER, offsets
        + array([i32(0) + string("batch 0 not written")])  # record_errors: no code of their own
        + string("leader moved to broker 2")
    )  # fmt: skip
    accepted = i32(4) + i16(0) + i64(10) + i64(-1) + i64(0) + array([]) + string(None)
    answer = array([string("orders") + array([refused, accepted])]) + i32(0)
    return request(0, 8, 11, body), response(11, answer)


def describe_configs_v1() -> tuple[bytes, bytes]:
    body = array([i8(2) + string("orders") + i32(-1)]) + b"\x00"  # topic resource, all keys
    denied = i16(29) + string("not authorized") + i8(2) + string("orders") + array([])
    fine = i16(0) + string(None) + i8(4) + string("1") + array([])
    return request(32, 1, 12, body), response(12, i32(250) + array([denied, fine]))


def heartbeat_v1() -> tuple[bytes, bytes]:
    body = string("payments") + i32(5) + string("m-1")
    return request(12, 1, 13, body), response(13, i32(0) + i16(27))


def test_partition_error_has_topic_partition_and_message() -> None:
    tables = exchanges(produce_v8())
    assert [error_facts(e) for e in tables["errors"]] == [
        (PRODUCE_PATH, 6, "NOT_LEADER_OR_FOLLOWER", True, "leader moved to broker 2", "orders", 3, None, None)
    ]
    req = tables["requests"][0]
    assert (req["status"], req["throttle_time_ms"], req["error_code"], req["reason"]) == ("ok", 0, None, None)


def test_resource_error_has_resource_name_and_throttle_time_is_kept() -> None:
    tables = exchanges(describe_configs_v1())
    assert [error_facts(e) for e in tables["errors"]] == [
        ("results[].error_code", 29, "TOPIC_AUTHORIZATION_FAILED", False, "not authorized", None, None, None,
         "orders")
    ]  # fmt: skip
    assert tables["requests"][0]["throttle_time_ms"] == 250


def test_group_error_takes_the_group_id_from_the_request() -> None:
    tables = exchanges(heartbeat_v1())
    assert [error_facts(e) for e in tables["errors"]] == [
        ("error_code", 27, "REBALANCE_IN_PROGRESS", False, None, None, None, "payments", None)
    ]
    req = tables["requests"][0]
    assert (req["api_name"], req["error_code"], req["error_name"]) == (
        "Heartbeat",
        27,
        "REBALANCE_IN_PROGRESS",
    )


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0)])
def test_error_rows_carry_their_exchange_ids(order: tuple[int, int, int]) -> None:
    built = [produce_v8(), describe_configs_v1(), heartbeat_v1()]
    tables = exchanges(*(built[i] for i in order))
    ids = {
        (e["correlation_id"], e["api_key"], e["api_name"], e["api_version"], e["conn_id"], e["capture"])
        for e in tables["errors"]
    }
    assert ids == {
        (11, 0, "Produce", 8, 1, "hand"),
        (12, 32, "DescribeConfigs", 1, 1, "hand"),
        (13, 12, "Heartbeat", 1, 1, "hand"),
    }


def produce_v8_refused(codes: list[int]) -> tuple[bytes, bytes]:
    """A Produce v8 of partitions 0..n-1 of `orders`, answered with ``codes`` per partition."""
    body = string(None) + i16(-1) + i32(1000)
    body += array([string("orders") + array([i32(p) + i32(-1) for p in range(len(codes))])])
    answers = [i32(p) + i16(code) + i64(-1) + i64(-1) + i64(-1) + array([]) + string(None)
               for p, code in enumerate(codes)]  # fmt: skip
    return request(0, 8, 21, body), response(21, array([string("orders") + array(answers)]) + i32(0))


@pytest.mark.parametrize(
    ("codes", "summary"),
    [
        # UNKNOWN_PRODUCER_ID (59) on one partition: the request row says so, not only `errors`.
        ([0, 59, 0], (None, None, 1, 59, "UNKNOWN_PRODUCER_ID")),
        # Two partitions refused: counted both, the first in the response's order named.
        ([6, 0, 59], (None, None, 2, 6, "NOT_LEADER_OR_FOLLOWER")),
        ([0, 0], (None, None, 0, None, None)),
    ],
)
def test_requests_count_and_name_errors_below_the_top_level(
    tmp_path: Path, codes: list[int], summary: tuple[Any, ...]
) -> None:
    flow = Flow().handshake()
    for req, resp in (produce_v8_refused(codes), heartbeat_v1()):
        flow.send(0, req)
        flow.send(1, resp)
    flow.close()
    pcap = write_pcap(tmp_path / "refused.pcap", flow.packets)
    out = tmp_path / "tables"
    result = CliRunner().invoke(main, ["read", str(pcap), "--out", str(out), "--broker-port", "9092", "-q"])
    assert result.exit_code == 0, result.output
    rows = pq.read_table(out / "requests" / f"{output_name(pcap)}.parquet").to_pylist()
    columns = ("error_code", "error_name", "error_count", "first_error_code", "first_error_name")
    produce, heartbeat = (tuple(r[c] for c in columns) for r in sorted(rows, key=lambda r: r["api_key"]))
    assert produce == summary
    # A top-level error counts too, and stays in error_code/error_name as before.
    assert heartbeat == (27, "REBALANCE_IN_PROGRESS", 1, 27, "REBALANCE_IN_PROGRESS")
    errors = pq.read_table(out / "errors" / f"{output_name(pcap)}.parquet").to_pylist()
    assert len(errors) == summary[2] + 1
