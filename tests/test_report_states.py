"""`stopped`'s group states over tables this test builds, each group a story told by its rows, the
expected answer written from docs/report.md ("Group states and the end of the capture"), on DuckDB
and Spark: a static member's leave (KIP-848 member epoch -2), a member that left and came back, a
group silent past the session timeout, and silence counted to where the capture ended
(`captures.ended`), not to its last packet."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kwsniff.sections.catalog import BY_NAME
from kwsniff.sections.engines import DuckEngine, Filters, SparkEngine
from kwsniff.sections.run import answer
from kwsniff.tables.schemas import SCHEMAS

T0 = dt.datetime(2026, 5, 4, 12, 0, 0, tzinfo=dt.UTC)
CAPTURE = "states.pcap"
ENDED = 100.0  # the capture's last packet of any protocol; the last Kafka packet is at 95 s


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def heartbeat(group: str, client: str, t: float, event: str, epoch: int) -> dict[str, Any]:
    """A ConsumerGroupHeartbeat of ``client`` sending member epoch ``epoch`` at ``t`` seconds."""
    return {
        "capture": CAPTURE,
        "conn_id": 1,
        "correlation_id": int(t * 1000),
        "api_key": 68,
        "api_name": "ConsumerGroupHeartbeat",
        "group_id": group,
        "member_id": f"{client}-id",
        "group_instance_id": "static-1" if group == "g-static" else None,
        "ts_request": at(t),
        "ts_response": at(t + 0.002),
        "protocol": "consumer",
        "event": event,
        "member_epoch": epoch,
        "client_id": client,
        "client_ip": "10.0.0.7",
    }


def commit(group: str, client: str, t: float, offset: int) -> dict[str, Any]:
    """An OffsetCommit (8) of ``offset`` on orders-0, answered without error."""
    return {
        "capture": CAPTURE,
        "conn_id": 2,
        "correlation_id": int(t * 1000) + 1,
        "api_key": 8,
        "api_name": "OffsetCommit",
        "group_id": group,
        "topic": "orders",
        "partition": 0,
        "error_code": 0,
        "committed_offset": offset,
        "client_id": client,
        "client_ip": "10.0.0.7",
        "ts_request": at(t),
        "ts_response": at(t + 0.002),
    }


# g-static: commits at 10 s, heartbeats to 20 s, leaves as a static member (epoch -2) at 21 s.
# g-rejoin: commits at 10 s, leaves at 30 s, joins again at 40 s and heartbeats to 95 s.
# g-silent: commits at 10 s, heartbeats to 50 s, then nothing (45 s session timeout, the default).
GROUPS = [
    *(heartbeat("g-static", "c-static", t, "heartbeat", 3) for t in (5, 12, 20)),
    heartbeat("g-static", "c-static", 21, "static_leave", -2),
    heartbeat("g-rejoin", "c-rejoin", 5, "heartbeat", 2),
    heartbeat("g-rejoin", "c-rejoin", 30, "leave", -1),
    heartbeat("g-rejoin", "c-rejoin", 40, "join", 0),
    *(heartbeat("g-rejoin", "c-rejoin", t, "heartbeat", 5) for t in (60, 95)),
    *(heartbeat("g-silent", "c-silent", t, "heartbeat", 1) for t in (5, 30, 50)),
]
PARTITIONS = [
    commit(g, c, 10, 7)
    for g, c in (("g-static", "c-static"), ("g-rejoin", "c-rejoin"), ("g-silent", "c-silent"))
]
REQUESTS = [
    {
        "capture": CAPTURE,
        "conn_id": r["conn_id"],
        "correlation_id": r["correlation_id"],
        "api_key": r["api_key"],
        "api_name": r["api_name"],
        "client_id": r["client_id"],
        "client_ip": r["client_ip"],
        "ts_request": r["ts_request"],
        "ts_response": r["ts_response"],
    }
    for r in GROUPS + PARTITIONS
]
CAPTURES = [{"capture": CAPTURE, "path": "/x/states.pcap", "status": "ok", "warnings": 0, "ended": at(ENDED)}]


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("states")
    for name, rows in (
        ("groups", GROUPS),
        ("partitions", PARTITIONS),
        ("requests", REQUESTS),
        ("captures", CAPTURES),
    ):
        (out / name).mkdir()
        pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS[name]), out / name / "states.parquet")
    return out


def test_states_follow_leaves_rejoins_and_silence_on_both_engines(tables: Path, spark: Any) -> None:
    filters = Filters()
    with DuckEngine(tables, filters) as engine:
        duck = answer(engine, filters, [BY_NAME["stopped"]])["stopped"]
    on_spark = SparkEngine(tables, filters, spark)
    try:
        assert answer(on_spark, filters, [BY_NAME["stopped"]])["stopped"] == duck
    finally:
        on_spark.close()
    got = {
        r["group_id"]: (r["state"], r["silent_seconds"], r["last_leave"], r["committed_offset"]) for r in duck
    }
    assert got == {
        # Its last act is the static member's leave: left, silent since its last heartbeat.
        "g-static": ("left", ENDED - 20, at(21), 7),
        # It came back after leaving: active, 5 s silent at the capture's end (not 0 at its last packet).
        "g-rejoin": ("active", ENDED - 95, at(30), 7),
        # 50 s without a word against a 45 s session timeout, no leave.
        "g-silent": ("stopped", ENDED - 50, None, 7),
    }
    assert [r["group_id"] for r in duck] == ["g-silent", "g-static", "g-rejoin"]  # stopped, left, active
    assert {r["capture_end"] for r in duck} == {at(ENDED)}
