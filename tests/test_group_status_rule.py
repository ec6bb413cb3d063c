"""One rule of a group's status (issue 48, goal 2): the report's `stopped.status` and the live
`kwsniff_consumer_group_status` both evaluate kwsniff.view.group_status.RULE. The rule reads the same
in Python and in SQL over every combination of its figures, and over the same traffic, one group a
story, the report at the end of the capture and the live tracker at its last packet give each group
the same state."""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from report_engines import answer_sections
from test_lag_index import BATCH, S, acked, commit, produce

from kwsniff.tables.schemas import SCHEMAS
from kwsniff.view.group_status import RULE, STATUS_WINDOW, judge, judge_sql
from kwsniff.view.lag import LagTracker

FIGURES = {
    "left": (0, 1),
    "committed": (0, 1),
    "offset_lag": (None, -1, 0, 5),
    "commit_age": (None, STATUS_WINDOW, STATUS_WINDOW + 1),
    "recent_commits": (None, 0, 1, 2, 3),
    "recent_offsets": (0, 1, 2),
    "lag_rising": (0, 1),
}


def test_the_rule_reads_the_same_in_python_and_in_sql() -> None:
    names = list(FIGURES)
    cases = [dict(zip(names, values, strict=True)) for values in itertools.product(*FIGURES.values())]
    con = duckdb.connect()
    con.register("figures", pa.Table.from_pylist(cases, schema=pa.schema([(n, pa.int64()) for n in names])))
    sql = judge_sql({n: f'"{n}"' for n in names})
    in_sql = [row[0] for row in con.execute(f"SELECT {sql} FROM figures").fetchall()]
    assert in_sql == [judge(case) for case in cases]
    # Every state of the rule, and "says nothing", is reached by some case.
    assert set(in_sql) == {state for state, _ in RULE} | {"OK"}


RATE = 10  # batches a second, one producer on t-0
SECONDS = 130
CAPTURE = "status.pcap"
T_START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


T0_US = acked(0, RATE)


def when(us: int) -> dt.datetime:
    return T_START + dt.timedelta(microseconds=us)


# Each group commits every 5 s (the batches it has consumed by then; None: no commit), on t-0.
STORIES = {
    "g-ok": lambda second: second * RATE,  # keeps up: 1 batch behind at each commit
    "g-warn": lambda second: second * RATE // 2,  # consumes half of what is produced
    "g-stall": lambda second: 100,  # commits the same offset
    "g-stop": lambda second: second * RATE if second <= 60 else None,  # gone after a minute
    "g-left": lambda second: second * RATE if second <= 100 else None,  # leaves at 101 s
}


def traffic() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(partitions rows, groups rows) in packet order, times in µs as the live tracker takes them."""
    parts: list[dict[str, Any]] = []
    for i in range(SECONDS * RATE):
        parts.append(produce(i, RATE))
        if i % (5 * RATE):
            continue
        for group, committed in STORIES.items():
            batches = committed(i // RATE)
            if batches is not None:
                parts.append(commit(batches * BATCH, acked(i, RATE), group))
    leave = {"api_key": 13, "group_id": "g-left", "event": "leave", "ts_request": acked(101 * RATE, RATE)}
    # g-audit's client heartbeats, fetches t-0 and never commits: NEVER_COMMITTED.
    audit = {"client_id": "c-audit", "client_ip": "10.0.0.5", "ts_request": T0_US}
    beat = {**audit, "api_key": 12, "group_id": "g-audit"}
    fetch = {**audit, "api_key": 1, "topic": "t", "partition": 0, "fetch_offset": 0, "high_watermark": 10}
    return [{**fetch, "ts_response": T0_US + 1_000}, *parts], [beat, leave]


def live_statuses() -> dict[str, str]:
    parts, groups = traffic()
    lag = LagTracker(max_partitions=10)
    for row in sorted(
        [("partitions", r) for r in parts] + [("groups", r) for r in groups],
        key=lambda x: x[1].get("ts_response") or x[1]["ts_request"],
    ):
        (lag.row if row[0] == "partitions" else lag.group_row)(row[1])
    assert lag.now == acked(SECONDS * RATE - 1, RATE)
    return {group: state for group, topic, state, _last in lag.statuses() if topic == "t"}


def as_table_row(n: int, row: dict[str, Any]) -> dict[str, Any]:
    """A live row as the tables hold it: its capture, exchange, client and datetimes."""
    out = {**row, "capture": CAPTURE, "conn_id": 1, "correlation_id": n, "client_ip": "10.0.0.5"}
    out.setdefault("client_id", f"c-{row.get('group_id') or 'producer'}")
    for ts in ("ts_request", "ts_response"):
        if ts in row:
            out[ts] = when(row[ts])
    out.setdefault("ts_request", out.get("ts_response"))
    return out


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("status")
    parts, groups = traffic()
    rows = {
        "partitions": [as_table_row(n, r) for n, r in enumerate(parts)],
        "groups": [as_table_row(len(parts) + n, r) for n, r in enumerate(groups)],
        "captures": [{"capture": CAPTURE, "status": "ok", "ended": when(acked(SECONDS * RATE - 1, RATE))}],
    }
    for name, table_rows in rows.items():
        (out / name).mkdir()
        pq.write_table(pa.Table.from_pylist(table_rows, schema=SCHEMAS[name]), out / name / "status.parquet")
    return out


@pytest.mark.parametrize("engine_name", ["duckdb", "spark"])
def test_the_report_and_the_live_metric_give_each_group_the_same_status(
    tables: Path, engine_name: str, request: pytest.FixtureRequest
) -> None:
    stopped = answer_sections(tables, ["stopped"], engine_name, request)["stopped"]
    report = {r["group_id"]: r["status"] for r in stopped}
    assert len(stopped) == len(report)  # one partition each
    assert report == {
        "g-ok": "OK",
        "g-warn": "WARN",
        "g-stall": "STALL",
        "g-stop": "STOP",
        "g-left": "LEFT",
        "g-audit": "NEVER_COMMITTED",
    }
    assert live_statuses() == report
    # The figures behind them, by hand: g-stall's last minute of commits (every 5 s, one offset).
    stall = next(r for r in stopped if r["group_id"] == "g-stall")
    assert (stall["committed_offset"], stall["high_watermark"]) == (100 * BATCH, SECONDS * RATE * BATCH)
    assert STATUS_WINDOW == 60 * S
