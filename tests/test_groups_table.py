"""The `groups` table: one row per JoinGroup/SyncGroup/Heartbeat/LeaveGroup exchange."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
from click.testing import CliRunner

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
