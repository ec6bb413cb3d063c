"""kwsniff.report.analytics on the repository's real captures, each answer checked against an independent
computation with pandas over the tables `kwsniff read` wrote (not with Spark)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from kwsniff.cli import main
from kwsniff.report import analytics as a

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "tests/data/captures").glob("*.pcap")) + [ROOT / "sample_pcaps/quickstart.pcap"]


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tables")
    result = CliRunner().invoke(main, ["read", "-q", *map(str, CAPTURES), "--out", str(out), "--overwrite"])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def pdt(out: Path) -> dict[str, pd.DataFrame]:
    """The tables as pandas DataFrames (timestamps as UTC pandas Timestamps)."""
    return {t.name: ds.dataset(t).to_table().to_pandas() for t in out.iterdir() if t.is_dir()}


@pytest.fixture(scope="module")
def sdf(spark: Any, out: Path) -> dict[str, Any]:
    return a.load_tables(spark, out)


def _norm(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, pd.Timestamp):
        return v.tz_convert("UTC").tz_localize(None).to_pydatetime() if v.tzinfo else v.to_pydatetime()
    if hasattr(v, "item"):
        return _norm(v.item())
    return v


def rows_of(df: Any) -> list[tuple]:
    return [tuple(_norm(v) for v in r) for r in df.collect()]


def pandas_rows(df: pd.DataFrame, columns: list[str]) -> list[tuple]:
    return [tuple(_norm(v) for v in r) for r in df[columns].itertuples(index=False)]


def nearest_rank(values: pd.Series, p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


def with_request(rows: pd.DataFrame, requests: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """``rows`` joined to ``columns`` of their exchange's `requests` row (an oracle apart from the
    tables' own copies); where ``rows`` repeats a column, the copy must equal the request's."""
    keys = ["capture", "conn_id", "correlation_id"]
    joined = rows.merge(requests[[*keys, *columns]], on=keys, suffixes=("_repeated", ""))
    for c in columns:
        if f"{c}_repeated" in joined:
            assert joined[f"{c}_repeated"].fillna(-1).tolist() == joined[c].fillna(-1).tolist(), c
            joined = joined.drop(columns=f"{c}_repeated")
    return joined


def test_latency_percentiles(sdf: dict, pdt: dict) -> None:
    req, conn = pdt["requests"], pdt["connections"]
    conn = conn.assign(broker=conn.broker_ip + ":" + conn.broker_port.astype(str))[
        ["capture", "conn_id", "broker"]
    ]
    answered = req[req.latency_ms.notna()].merge(conn, on=["capture", "conn_id"])
    for fetch in (False, True):
        part = answered[(answered.api_key == 1) == fetch]
        keys = ["broker", "api_name", "api_version", "client_id"]
        expected = sorted(
            (*k, len(g), *(nearest_rank(g.latency_ms, p) for p in (0.5, 0.95, 0.99)))
            for k, g in part.groupby(keys, dropna=False)
        )
        got = rows_of(a.latency_percentiles(sdf["requests"], sdf["connections"], fetch=fetch))
        assert got == [tuple(_norm(v) for v in row) for row in expected]
    fetches = rows_of(a.latency_percentiles(sdf["requests"], sdf["connections"], fetch=True))
    assert {r[1] for r in fetches} == {"Fetch"} and len(fetches) >= 2


def test_error_rates(sdf: dict, pdt: dict) -> None:
    req, err = pdt["requests"], pdt["errors"]
    joined = with_request(err, req, "client_id")
    per_client = req.groupby("client_id").size()
    expected = []
    for (name, topic, client), g in joined.groupby(["error_name", "topic", "client_id"], dropna=False):
        n = len(g)
        expected.append(
            (name, topic, client, n, g.partition.nunique(), per_client[client], n / per_client[client])
        )
    expected.sort(key=lambda r: (-r[3], r[0], r[1] or "", r[2]))
    got = rows_of(a.error_rates(sdf["errors"], sdf["requests"]))
    assert got == [tuple(_norm(v) for v in r) for r in expected]
    # Partition-level errors are counted with their topic (legacy_msgset.pcap's Produce).
    assert ("UNKNOWN_PRODUCER_ID", "legacy-t") in {(r[0], r[1]) for r in got}


def test_throttled_clients(spark: Any, sdf: dict, pdt: dict) -> None:
    # No broker of the repository captures throttled anyone, and tshark's view agrees (no capture
    # has a throttle_time_ms > 0 in the tables either).
    assert (pdt["requests"].throttle_time_ms.fillna(0) > 0).sum() == 0
    assert rows_of(a.throttled_clients(sdf["requests"])) == []
    # The same real rows with two responses marked throttled, as a quota-limited broker would answer.
    from pyspark.sql import functions as F

    r = sdf["requests"]
    hit_rows = r.correlation_id.isin(2, 3) & (r.api_name == "Produce")
    marked = r.withColumn("throttle_time_ms", F.when(hit_rows, 250).otherwise(r.throttle_time_ms))
    req = pdt["requests"]
    hit = req[req.correlation_id.isin([2, 3]) & (req.api_name == "Produce")]
    expected = sorted(
        ((c, len(g), 250 * len(g), 250) for c, g in hit.groupby("client_id")), key=lambda r: (-r[2], r[0])
    )
    assert rows_of(a.throttled_clients(marked)) == expected and expected


def test_throughput_per_minute(sdf: dict, pdt: dict) -> None:
    prod = with_request(pdt["partitions"][pdt["partitions"].api_key == 0], pdt["requests"], "ts_request")
    prod = prod.assign(minute=prod.ts_request.dt.floor("min"))
    expected = [
        (topic, minute, int(g.record_count.sum()), int(g.record_bytes.sum()))
        for (topic, minute), g in prod.groupby(["topic", "minute"])
    ]
    got = rows_of(a.throughput_per_minute(sdf["partitions"], sdf["requests"]))
    assert got == [tuple(_norm(v) for v in r) for r in expected]
    qs = {r[0]: r[2] for r in got if r[0] in ("orders", "events")}
    assert qs == {"orders": 140, "events": 60}  # sample_pcaps/README.md: 80 + 60 to orders, 60 to events


def test_consumer_lag(sdf: dict, pdt: dict) -> None:
    parts, req = pdt["partitions"], pdt["requests"]
    com = with_request(parts[parts.api_key.isin([8, 9]) & (parts.committed_offset >= 0)], req, "ts_request")
    com = com.sort_values("ts_request").groupby(["capture", "group_id", "topic", "partition"]).last()
    fet = with_request(parts[(parts.api_key == 1) & parts.high_watermark.notna()], req, "ts_response")
    hwm = fet.sort_values("ts_response").groupby(["capture", "topic", "partition"]).high_watermark.last()
    expected = []
    for (cap, group, topic, p), row in com.iterrows():
        h = hwm.get((cap, topic, p))
        expected.append(
            (cap, group, topic, p, row.committed_offset, h, None if h is None else h - row.committed_offset)
        )
    got = rows_of(a.consumer_lag(sdf["partitions"], sdf["requests"]))
    assert got == [tuple(_norm(v) for v in r) for r in sorted(expected)]
    assert ("quickstart.pcap", "quickstart-group", "orders", 0, 50, 50, 0) in got


def test_produce_to_consume_latency(sdf: dict, pdt: dict) -> None:
    parts = with_request(pdt["partitions"], pdt["requests"], "ts_request", "ts_response")
    parts = parts[parts.first_offset.notna() & parts.last_offset.notna()]
    first: dict[str, dict] = {"produce": {}, "consume": {}}
    for kind, api, ts in (("produce", 0, "ts_request"), ("consume", 1, "ts_response")):
        for r in parts[parts.api_key == api].itertuples():
            for off in range(int(r.first_offset), int(r.last_offset) + 1):
                k = (r.capture, r.topic, r.partition, off)
                first[kind][k] = min(first[kind].get(k, getattr(r, ts)), getattr(r, ts))
    expected = sorted(
        (*k, t, first["consume"][k], (first["consume"][k] - t).value / 1e6)
        for k, t in first["produce"].items()
        if k in first["consume"]
    )
    got = rows_of(a.produce_to_consume_latency(sdf["partitions"], sdf["requests"]))
    assert got == [tuple(_norm(v) for v in r) for r in expected]
    assert sum(1 for r in got if r[0] == "quickstart.pcap") == 200  # every record sent was received


def test_rebalances(sdf: dict, pdt: dict) -> None:
    g = pdt["groups"]
    expected = []
    for (cap, group), rows in g.groupby(["capture", "group_id"]):
        # One generation per group in these captures: its first JoinGroup to its SyncGroup response.
        start = rows[rows.api_name == "JoinGroup"].ts_request.min()
        end = rows[(rows.api_name == "SyncGroup") & (rows.error_code == 0)].ts_response.max()
        expected.append((cap, group, 0, 1, "range", start, end, (end - start).value / 1e6))
    got = rows_of(a.rebalances(sdf["groups"]))
    assert got == [tuple(_norm(v) for v in r) for r in sorted(expected)]
    assert [r[-1] for r in got if r[0] == "quickstart.pcap"] == [3006.078, 5013.503]


def test_connection_churn(sdf: dict, pdt: dict) -> None:
    c = pdt["connections"]
    closing = c.fin_seen | c.rst_seen
    dur = (c.ts_last - c.ts_first).dt.total_seconds()
    opened = c.groupby(c.ts_first.dt.floor("min")).size()
    short = (closing & (dur < 1.0)).groupby(c.ts_first.dt.floor("min")).sum()
    closed = c[closing].groupby(c[closing].ts_last.dt.floor("min")).size()
    minutes = sorted(set(opened.index) | set(closed.index))
    expected = [(m, int(opened.get(m, 0)), int(closed.get(m, 0)), int(short.get(m, 0))) for m in minutes]
    got = rows_of(a.connection_churn(sdf["connections"]))
    assert got == [tuple(_norm(v) for v in r) for r in expected]
    assert sum(r[1] for r in got) == len(c) == 58


def test_client_inventory(sdf: dict, pdt: dict) -> None:
    c = pdt["connections"][pdt["connections"].kafka]
    keys = ["client_software_name", "client_software_version", "client_id"]
    expected = sorted(
        (
            (*k, len(g), g.capture.nunique(), g.ts_first.min(), g.ts_last.max())
            for k, g in c.groupby(keys, dropna=False)
        ),
        key=lambda r: tuple("" if v is None or v != v else v for v in r[:3]),
    )
    got = rows_of(a.client_inventory(sdf["connections"]))
    assert got == [tuple(_norm(None if isinstance(v, float) and v != v else v) for v in r) for r in expected]
    assert ("kafka-python", "3.0.12", "qs-consumer-kafka-python", 3, 1) in [r[:5] for r in got]


def test_analytics_plots_draw_latency_and_throughput(out: Path, tmp_path: Path, spark: Any) -> None:
    from kwsniff.report.plots import latency_distribution, throughput_over_time

    t = a.load_tables(spark, out)
    lat = latency_distribution(t["requests"], tmp_path / "lat.png")
    thr = throughput_over_time(
        a.throughput_per_minute(t["partitions"], t["requests"], unit="millisecond"),
        tmp_path / "thr.png",
        "millisecond",
    )
    assert lat is not None
    for png in (lat, thr):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_no_answered_request_means_no_latency_plot_rather_than_a_matplotlib_error(
    tmp_path: Path, spark: Any
) -> None:
    """acks_modes.pcap's requests as if no response was captured: a box plot of nothing used to raise
    matplotlib's ValueError under `kwsniff report --plots`."""
    from pyspark.sql import functions as F

    from kwsniff.report.plots import latency_distribution

    out = tmp_path / "tables"
    done = CliRunner().invoke(main, ["read", "-q", str(CAPTURES[0]), "--out", str(out)])
    assert done.exit_code == 0, done.output
    requests = a.load_tables(spark, out)["requests"].withColumn("latency_ms", F.lit(None).cast("double"))
    assert latency_distribution(requests, tmp_path / "lat.png") is None
    assert not (tmp_path / "lat.png").exists()


def test_throughput_lines_start_at_each_topic_first_produce() -> None:
    """quickstart.pcap's bursts, as `kwsniff report --plots` draws them (throughput.png)."""
    from datetime import datetime, timedelta

    from kwsniff.report.plots import cumulative_series

    t0 = datetime(2026, 11, 22, 17, 39, 27, 872000)
    ms = timedelta(milliseconds=1)
    rows = [
        {"topic": "orders", "millisecond": t0 + 3 * ms, "records": 21},
        {"topic": "orders", "millisecond": t0, "records": 51},
        {"topic": "events", "millisecond": t0 + 7 * ms, "records": 60},
        {"topic": "orders", "millisecond": t0 + ms, "records": 29},
        {"topic": "orders", "millisecond": t0 + 4 * ms, "records": 39},
        {"topic": None, "millisecond": t0 + 2 * ms, "records": 5},
    ]
    start, lines = cumulative_series(rows, "millisecond")
    assert start == t0
    assert lines == {
        "(unnamed)": ([0.002, 0.002], [0, 5]),
        "events": ([0.007, 0.007], [0, 60]),  # from its own first Produce, not flat from 0 s
        "orders": ([0.0, 0.0, 0.001, 0.003, 0.004], [0, 51, 80, 101, 140]),
    }
    assert cumulative_series([], "minute") == (None, {})


def test_report_refuses_what_is_not_a_tables_directory(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["report", str(tmp_path / "nope")])
    assert (result.exit_code, result.output) == (
        1,
        f"kwsniff: error: {tmp_path / 'nope'}: not a directory of kwsniff tables\n",
    )
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output == (
        f"kwsniff: error: {tmp_path}: no requests, connections, errors, partitions, groups table "
        "(written by kwsniff read or spark)\n"
    )
