"""The `groups` table: one row per JoinGroup/SyncGroup/Heartbeat/LeaveGroup exchange."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
from click.testing import CliRunner
from test_partitions_table import run

from kwsniff.cli import main
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "sample_pcaps/quickstart.pcap"


def _rows() -> list[dict]:
    sink = ListSink()
    run_capture(QUICKSTART, sink, SessionOptions())
    return sink.tables["groups"]


def test_one_row_per_group_exchange_as_tshark_counts_them() -> None:
    tshark = json.loads(QUICKSTART.with_name("quickstart.pcap.tshark.json").read_text())
    expected = Counter()
    for kv, n in tshark["summary"]["by_key_version"].items():
        key, version = map(int, kv.split("/"))
        if key in (11, 12, 13, 14):
            expected[(key, version)] += n["paired"]
    rows = _rows()
    assert Counter((r["api_key"], r["api_version"]) for r in rows) == expected
    assert len(rows) == 12


def test_group_facts_of_the_kafka_python_consumer() -> None:
    rows = [r for r in _rows() if r["group_id"] == "quickstart-group"]
    assert [(r["api_name"], r["error_name"], r["generation_id"]) for r in rows] == [
        ("JoinGroup", "MEMBER_ID_REQUIRED", -1),
        ("JoinGroup", "NONE", 0),
        ("SyncGroup", "NONE", 0),
        ("Heartbeat", "NONE", 0),
        ("Heartbeat", "NONE", 0),
        ("Heartbeat", "NONE", 0),
        ("LeaveGroup", "NONE", None),
    ]
    member = rows[1]["member_id"]
    assert member.startswith("qs-consumer-kafka-python-")
    assert {r["member_id"] for r in rows} == {member}  # assigned by the first JoinGroup response
    join = rows[1]
    assert (join["protocol_type"], join["protocol_name"], join["leader_id"], join["members"]) == (
        "consumer",
        "range",
        member,
        1,
    )
    # Unanswered by a protocol choice, the first JoinGroup keeps what the member offered.
    assert rows[0]["protocol_name"] == "range,roundrobin"
    assert rows[2]["members"] == 1  # the leader's SyncGroup carries one assignment
    assert all(r["latency_ms"] == (r["ts_response"] - r["ts_request"]) / 1000 for r in rows)


def test_read_writes_the_groups_table(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["read", "-q", str(QUICKSTART), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    table = pq.read_table(next((tmp_path / "groups").glob("*.parquet")))
    assert table.num_rows == 12
    assert sorted(set(table.column("group_id").to_pylist())) == ["quickstart-audit", "quickstart-group"]


def test_group_rows_match_tsharks_exchanges_per_connection() -> None:
    """Each row's connection, correlation id, API and times against tshark's PDUs of the same stream:
    ts_request is the frame completing the request, ts_response the frame the response starts in."""
    tshark = json.loads(QUICKSTART.with_name("quickstart.pcap.tshark.json").read_text())
    sink = ListSink()
    run_capture(QUICKSTART, sink, SessionOptions())
    by_endpoints = {(s["client"], s["broker"]): s["stream"] for s in tshark["streams"]}
    stream_of = {
        c["conn_id"]: by_endpoints[
            (f"{c['client_ip']}:{c['client_port']}", f"{c['broker_ip']}:{c['broker_port']}")
        ]
        for c in sink.tables["connections"]
    }
    requests = {
        (r["stream"], r["correlation_id"]): r for r in tshark["requests"] if r["api_key"] in (11, 12, 13, 14)
    }
    responses = {(r["stream"], r["correlation_id"]): r for r in tshark["responses"]}
    names = {11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup"}
    rows = sink.tables["groups"]
    assert len(rows) == len(requests) == 12
    for row in rows:
        key = (stream_of[row["conn_id"]], row["correlation_id"])
        request, response = requests.pop(key), responses[key]
        assert (row["api_key"], row["api_name"], row["api_version"]) == (
            request["api_key"],
            names[request["api_key"]],
            request["api_version"],
        )
        assert row["ts_request"] == round(request["frame_time_epoch"] * 1_000_000)
        assert row["ts_response"] == round(response["first_frame_time_epoch"] * 1_000_000)
        latency_us = round(response["first_frame_time_epoch"] * 1_000_000) - round(
            request["frame_time_epoch"] * 1_000_000
        )
        assert row["latency_ms"] == latency_us / 1000
        assert row["capture"] == "quickstart.pcap"
    # kafka-python's consumers are dynamic members (no group.instance.id, KIP-345).
    assert {r["group_instance_id"] for r in rows} == {None}


def test_static_members_carry_their_group_instance_id() -> None:
    """KIP-345 static membership, hand-built: JoinGroup v5 and SyncGroup/Heartbeat v3 carry the
    member's group.instance.id; a LeaveGroup v3 names the members leaving (two here)."""
    member = "static-member-1"
    join = (
        11,
        5,
        {"group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 30_000, "member_id": "",
         "group_instance_id": "instance-a", "protocol_type": "consumer",
         "protocols": [{"name": "range", "metadata": b""}]},
        {"throttle_time_ms": 0, "error_code": 0, "generation_id": 3, "protocol_name": "range",
         "leader": member, "member_id": member,
         "members": [{"member_id": member, "group_instance_id": "instance-a", "metadata": b""}]},
    )  # fmt: skip
    sync = (
        14,
        3,
        {"group_id": "g", "generation_id": 3, "member_id": member, "group_instance_id": "instance-a",
         "assignments": [{"member_id": member, "assignment": b""}]},
        {"throttle_time_ms": 0, "error_code": 0, "assignment": b""},
    )  # fmt: skip
    heartbeat = (
        12,
        3,
        {"group_id": "g", "generation_id": 3, "member_id": member, "group_instance_id": "instance-a"},
        {"throttle_time_ms": 0, "error_code": 27},  # REBALANCE_IN_PROGRESS
    )
    leave = (
        13,
        3,
        {"group_id": "g", "members": [{"member_id": member, "group_instance_id": "instance-a"},
                                      {"member_id": "m2", "group_instance_id": "instance-b"}]},
        {"throttle_time_ms": 0, "error_code": 0, "members": []},
    )  # fmt: skip
    rows = run([join, sync, heartbeat, leave]).tables["groups"]
    assert [
        (r["api_name"], r["group_id"], r["member_id"], r["group_instance_id"], r["generation_id"])
        for r in rows
    ] == [
        ("JoinGroup", "g", member, "instance-a", 3),
        ("SyncGroup", "g", member, "instance-a", 3),
        ("Heartbeat", "g", member, "instance-a", 3),
        ("LeaveGroup", "g", f"{member},m2", None, None),
    ]
    assert [(r["protocol_type"], r["protocol_name"], r["leader_id"], r["members"]) for r in rows] == [
        ("consumer", "range", member, 1),
        (None, None, None, 1),
        (None, None, None, None),
        (None, None, None, 2),
    ]
    assert [(r["error_code"], r["error_name"]) for r in rows] == [
        (0, "NONE"),
        (0, "NONE"),
        (27, "REBALANCE_IN_PROGRESS"),
        (0, "NONE"),
    ]
    assert [r["correlation_id"] for r in rows] == [1, 2, 3, 4]
