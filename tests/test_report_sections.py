"""`kwsniff report` sections on the repository's real captures plus KIP-848/share `groups` rows built
here with the contract's columns: each section equal on DuckDB and Spark, exact values where the
capture's own facts (sample_pcaps/README.md) or a pandas computation give them."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from test_share_wire import share_capture

from kwsniff.cli import main
from kwsniff.sections import summaries
from kwsniff.sections.catalog import BY_NAME, SECTIONS
from kwsniff.sections.engines import DuckEngine, Filters, SparkEngine
from kwsniff.sections.output import sort_rows
from kwsniff.sections.run import answer, answer_top, keep
from kwsniff.sections.views import FILLED, GROUPS_CONTRACT
from kwsniff.tables.names import SUMMARIES
from kwsniff.tables.schemas import SCHEMAS

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "tests/data/captures").glob("*.pcap")) + [ROOT / "sample_pcaps/quickstart.pcap"]
T0 = dt.datetime(2026, 11, 25, 9, 0, 0, tzinfo=dt.UTC)
ARROW = {"VARCHAR": pa.string(), "INTEGER": pa.int32()}


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def heartbeat(member: str, t: float, event: str, **facts: Any) -> dict[str, Any]:
    """A ConsumerGroupHeartbeat (68) or ShareGroupHeartbeat (76) exchange, request at t, response 5 ms on."""
    protocol = facts.pop("protocol", "consumer")
    return {
        "capture": "kip848-built",
        "conn_id": 1,
        "correlation_id": int(t * 1000),
        "api_key": 76 if protocol == "share" else 68,
        "api_name": "ShareGroupHeartbeat" if protocol == "share" else "ConsumerGroupHeartbeat",
        "api_version": 0,
        "group_id": facts.pop("group_id", "g848"),
        "member_id": member,
        "error_code": 0,
        "error_name": "NONE",
        "ts_request": at(t),
        "ts_response": at(t + 0.005),
        "latency_ms": 5.0,
        "protocol": protocol,
        "event": event,
        **facts,
    }


# Member m1 joins at 0 s, gets orders:0,1 at epoch 2 (response at 1.005 s), first says it owns part of
# it at 1.5 s and all of it at 2.25 s: reconciliation 1245 ms, 1005 ms without an assignment.
# Member m2 is given orders:2 and never reports owning it. Share group s1 rebalances 5 times in a minute.
BUILT_GROUPS = [
    heartbeat("m1", 0.0, "join", member_epoch=0, member_epoch_response=1, subscribed_topics="orders"),
    heartbeat("m1", 1.0, "assignment", member_epoch=1, member_epoch_response=2, assignment="orders:0,1"),
    heartbeat("m1", 1.5, "heartbeat", member_epoch=2, member_epoch_response=2, owned_partitions="orders:0"),
    heartbeat(
        "m1", 2.25, "heartbeat", member_epoch=2, member_epoch_response=2, owned_partitions="orders:0,1"
    ),
    heartbeat("m2", 3.0, "assignment", member_epoch=0, member_epoch_response=3, assignment="orders:2"),
    *(
        heartbeat(
            "s-m",
            10.0 + i,
            "assignment",
            protocol="share",
            group_id="s1",
            member_epoch_response=i + 1,
            assignment=f"orders:{i}",
        )
        for i in range(5)
    ),
]


def built_groups_table() -> pa.Table:
    schema = pa.schema(
        list(SCHEMAS["groups"])
        + [(c, ARROW[t]) for c, t in GROUPS_CONTRACT if c not in SCHEMAS["groups"].names]
    )
    return pa.Table.from_pylist(BUILT_GROUPS, schema=schema)


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tables")
    # Share-group deliveries (KIP-932), kio-encoded: test_share_wire.py tells their story.
    share = share_capture(tmp_path_factory.mktemp("share") / "share.pcap")
    inputs = [*map(str, CAPTURES), str(share)]
    done = CliRunner().invoke(
        main, ["read", "-q", *inputs, "--out", str(out), "--overwrite", "--summaries", "always"]
    )
    assert done.exit_code == 0, done.output
    # Tables written before the contract's columns, and one capture's file with them: both read as
    # one table. Its summaries are written as `read` writes a capture's, after its table file.
    stage = tmp_path_factory.mktemp("built")
    (stage / "groups").mkdir()
    pq.write_table(built_groups_table(), stage / "groups" / "kip848-built.parquet")
    assert summaries.write(stage) == 1
    for made in stage.glob("*/*.parquet"):
        os.replace(made, out / made.parent.name / made.name)
    return out


@pytest.fixture(scope="module")
def rows_only(out: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same tables without their summaries: every section computed from the rows."""
    copy = tmp_path_factory.mktemp("rows") / "tables"
    shutil.copytree(
        out, copy, copy_function=os.link, ignore=lambda d, names: [n for n in names if n in SUMMARIES]
    )
    return copy


@pytest.fixture(scope="module")
def duck(out: Path, rows_only: Path) -> dict[str, list[dict[str, Any]]]:
    with DuckEngine(out, Filters()) as engine:
        assert engine.summarized
        rows = answer(engine, Filters())
    with DuckEngine(rows_only, Filters()) as engine:
        assert not engine.summarized
        assert answer(engine, Filters()) == rows
    return rows


def test_every_section_gives_the_same_rows_on_duckdb_and_spark(
    rows_only: Path, duck: dict, spark: Any
) -> None:
    # From the rows (tables without summaries: a live capture's, an older kwsniff's, or cut by
    # --since/--until), every section and every part on Spark as on DuckDB.
    engine = SparkEngine(rows_only, Filters(), spark)
    assert not engine.summarized
    on_spark = answer(engine, Filters())
    assert list(on_spark) == list(duck) == [s.name for s in SECTIONS]
    for name, rows in duck.items():
        assert on_spark[name] == rows, name
    assert all(duck[n] for n in ("inventory", "lag", "stopped", "rebalances", "reconciliation", "storms"))


def test_every_section_read_from_the_summaries_gives_the_same_rows_on_spark(
    out: Path, duck: dict, spark: Any
) -> None:
    engine = SparkEngine(out, Filters(), spark)
    assert engine.summarized
    parted = [s for s in SECTIONS if "summary_" in s.sql]
    # One section per part (summary_captures apart), and `findings`, which reads several.
    assert len([s for s in parted if s.name != "findings"]) == len(SUMMARIES) - 1
    on_spark = answer(engine, Filters(), parted)
    for section in parted:
        assert on_spark[section.name] == duck[section.name], section.name


@pytest.mark.parametrize(
    ("filters", "sort_by"),
    [
        (Filters(), None),
        (Filters(), "offset_lag"),
        (Filters(topic="orders"), "requests"),
        (Filters(client="qs-consumer-kafka-python", group="quickstart-group"), "lag_seconds"),
    ],
)
def test_a_cut_answer_is_the_first_rows_of_the_whole_answer_and_its_count(
    out: Path, duck: dict, filters: Filters, sort_by: str | None
) -> None:
    # What a text report (or --top N) shows is cut inside DuckDB: the same rows as the whole
    # answer kept, sorted (stably, nulls last) and cut in Python, and the same count.
    with DuckEngine(out, Filters()) as engine:
        cut = answer_top(engine, filters, SECTIONS, 3, sort_by)
    for name, rows in duck.items():
        whole = sort_rows(keep(rows, filters), sort_by)
        assert cut[name] == (whole[:3], len(whole)), name
    assert sum(total for _, total in cut.values()) > 3 * 3


@pytest.mark.parametrize("older", ["every file", "the quick start's files"])
def test_tables_without_the_exchange_columns_on_every_row_give_the_same_answers(
    rows_only: Path, duck: dict, tmp_path: Path, older: str
) -> None:
    # Tables written before partitions, errors and groups rows repeated their exchange's client and
    # times (and requests its client_ip), and before summaries: the report fills them by a join,
    # every answer unchanged.
    old = tmp_path / "old"
    dropped = 0
    for path in rows_only.rglob("*.parquet"):
        data = pq.read_table(path)
        table = path.relative_to(rows_only).parts[0]
        if older == "every file" or path.name.startswith("quickstart"):
            gone = [c for c in FILLED.get(table, ()) if c in data.column_names]
            data = data.drop_columns(gone)
            dropped += len(gone)
        (old / path.relative_to(rows_only)).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(data, old / path.relative_to(rows_only))
    assert dropped >= 1 + 5 + 5 + 2  # requests, partitions, errors, groups
    with DuckEngine(old, Filters()) as engine:
        assert answer(engine, Filters()) == duck


def test_an_unknown_section_is_one_line_naming_the_sections(out: Path) -> None:
    done = CliRunner().invoke(main, ["report", str(out), "--section", "nope"])
    assert done.exit_code == 2
    assert (
        done.output == f"kwsniff: error: no section nope; sections: {', '.join(s.name for s in SECTIONS)}\n"
    )


def test_memory_limit_caps_duckdb_spills_to_a_private_folder_and_says_one_line_when_too_small(
    out: Path, duck: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where tempfile.mkdtemp makes the spill folder
    engine = DuckEngine(out, Filters(), memory_limit=64 * 1024 * 1024)
    setting = engine.con.sql("SELECT current_setting('memory_limit'), current_setting('temp_directory')")
    ((limit, spill),) = setting.fetchall()
    assert limit == "64.0 MiB"
    assert Path(spill).parent == tmp_path and Path(spill).name.startswith("kwsniff-report-")
    assert answer(engine, Filters()) == duck  # the same answers under a small budget
    engine.close()
    assert list(tmp_path.iterdir()) == []  # the spill folder is gone
    done = CliRunner().invoke(main, ["report", str(out), "--memory-limit", "1KiB"])
    assert done.exit_code == 1
    assert done.output.startswith(f"kwsniff: error: {out}: DuckDB ran out of memory (Out of Memory Error: ")
    assert done.output.endswith("); raise --memory-limit\n") and done.output.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # removed on the error too


def test_a_figure_takes_each_groups_top_series_and_one_line_of_its_others_from_the_engine(
    out: Path, duck: dict, spark: Any
) -> None:
    from collections import defaultdict

    from kwsniff.sections.run import figure_rows

    # From the section's own rows, in Python: per group its series by partition, groups and series
    # ranked by their largest lag (then by name).
    series: dict[str, dict[str, dict[Any, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in duck["lag"]:
        if r["lag_seconds"] is not None:
            points = series[r["group_id"]][f"{r['topic']}[{r['partition']}]"]
            points[r["second"]] = max(points.get(r["second"], -math.inf), r["lag_seconds"])

    def largest(points: dict[Any, float]) -> float:
        return max(points.values())

    groups = sorted(series, key=lambda g: (-max(map(largest, series[g].values())), g))
    assert len(groups) >= 2 and any(len(series[g]) >= 3 for g in groups)  # panels, and others to fold
    expected = []
    for prank, group in enumerate(groups, 1):
        ranked = sorted(series[group], key=lambda k: (-largest(series[group][k]), k))
        others: dict[Any, float] = {}
        for label in ranked[1:]:
            for x, y in series[group][label].items():
                others[x] = max(others.get(x, -math.inf), y)
        common = {"panel": group, "prank": prank, "series": len(ranked), "panels": len(groups)}
        expected += [
            {**common, "label": ranked[0], "rank": 1, "x": x, "y": y}
            for x, y in sorted(series[group][ranked[0]].items())
        ] + [{**common, "label": None, "rank": None, "x": x, "y": y} for x, y in sorted(others.items())]
    lag = [BY_NAME["lag"], BY_NAME["rebalances"]]  # rebalances has no figure
    with DuckEngine(out, Filters()) as engine:
        assert figure_rows(engine, Filters(), lag, 1) == {"lag": expected}
        # --group keeps one group's panel: no other line when its series are 12 or fewer.
        few = min(groups, key=lambda g: len(series[g]))
        assert len(series[few]) <= 12
        mine = figure_rows(engine, Filters(group=few), lag, 12)["lag"]
        assert {r["panel"] for r in mine} == {few} and all(r["rank"] for r in mine)
    assert figure_rows(SparkEngine(out, Filters(), spark), Filters(), lag, 1) == {"lag": expected}


def test_the_figures_time_axes_and_whole_minutes_come_from_the_captures_packets_on_both_engines(
    tmp_path: Path, spark: Any
) -> None:
    import itertools

    import dpkt

    from kwsniff.sections import capture_spans
    from kwsniff.sections.run import figure_spans

    # Each capture's first and last packet, as dpkt reads the files.
    packets = {}
    for path in CAPTURES:
        with path.open("rb") as f:
            times = [round(ts * 1_000_000) for ts, _ in dpkt.pcap.Reader(f)]
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        packets[path.name] = (
            epoch + dt.timedelta(microseconds=min(times)),
            epoch + dt.timedelta(microseconds=max(times)),
        )
    spans = sorted(packets.values())
    # No two within capture_spans.JOINED of each other: each covers its own time.
    assert all(b[0] - a[1] > capture_spans.JOINED for a, b in itertools.pairwise(spans))
    longest = max(end - begin for begin, end in spans)
    # The stretches further apart than a minute and the longest capture: each its own time axis.
    axes = [list(spans[0])]
    for begin, end in spans[1:]:
        if begin - axes[-1][1] > max(capture_spans.GAP, longest):
            axes.append([begin, end])
        else:
            axes[-1][1] = max(axes[-1][1], end)
    assert 2 <= len(axes) <= capture_spans.MAX_AXES
    expected = capture_spans.Spans(tuple(map(tuple, axes)), tuple(spans))
    out = tmp_path / "tables"
    done = CliRunner().invoke(main, ["read", "-q", *map(str, CAPTURES), "--out", str(out)])
    assert done.exit_code == 0, done.output
    with DuckEngine(out, Filters()) as engine:
        assert figure_spans(engine, Filters()) == expected
        # --since and --until cut them: the first capture's second half to the last's first.
        (a0, a1), (z0, z1) = spans[0], spans[-1]
        window = Filters(since=a0 + (a1 - a0) / 2, until=z0 + (z1 - z0) / 2)
        assert figure_spans(engine, window).covered == ((window.since, a1), *spans[1:-1], (z0, window.until))
    assert figure_spans(SparkEngine(out, Filters(), spark), Filters()) == expected


def test_latest_takes_the_value_of_the_latest_time_then_the_highest_tie_on_both_engines(spark: Any) -> None:
    import duckdb

    from kwsniff.sections.engines import to_spark
    from kwsniff.sections.sql import latest

    t0 = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)
    us = dt.timedelta(microseconds=1)
    # (key, time, tie, value): a later time wins whatever its tie; at equal times the higher tie,
    # negative ties included; one microsecond apart still counts.
    rows = [
        ("a", t0, 7, 10),
        ("a", t0 + us, -5, 11),
        ("b", t0, -(2**31), 20),
        ("b", t0, 2**31 - 1, 21),
        ("b", t0, 0, 22),
        ("c", t0 + us, -1, 30),
        ("c", t0 + us, -2, 31),
        ("c", t0, 2**31 - 1, 32),
    ]
    sql = f"SELECT k, {latest('v', 'ts', 'tie')} AS v FROM t GROUP BY k ORDER BY k"
    expected = [("a", 11), ("b", 21), ("c", 30)]
    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")
        con.execute("CREATE TABLE t (k VARCHAR, ts TIMESTAMPTZ, tie INTEGER, v BIGINT)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
        assert con.execute(sql).fetchall() == expected
    spark.createDataFrame(rows, "k string, ts timestamp, tie int, v bigint").createOrReplaceTempView("t")
    assert [tuple(r) for r in spark.sql(to_spark(sql)).collect()] == expected


def test_spill_limit_caps_the_disk_duckdb_fills_and_says_one_line_past_it(
    rows_only: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From the rows (the summaries leave too little work to spill).
    out = rows_only
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with DuckEngine(out, Filters(), memory_limit=64 << 20, spill_limit=3 << 30) as engine:
        ((spill,),) = engine.con.sql("SELECT current_setting('max_temp_directory_size')").fetchall()
    assert spill == "3.0 GiB"
    # Without --spill-limit DuckDB would fill up to 90% of the disk's free space; by default 16 GiB.
    done = CliRunner().invoke(main, ["report", str(out), "--memory-limit", "4MiB", "--spill-limit", "1KiB"])
    assert done.exit_code == 1
    assert done.output == (
        f"kwsniff: error: {out}: DuckDB needed more than --spill-limit (1,024 bytes) of disk past"
        " --memory-limit; raise either, or report less (--section, --since, --until)\n"
    )
    assert list(tmp_path.iterdir()) == []  # the spill folder is removed


def test_kip848_reconciliation_and_time_without_assignment(duck: dict) -> None:
    rows = [r for r in duck["reconciliation"] if r["group_id"] == "g848"]
    assert [
        (
            r["member_id"],
            r["epoch"],
            r["assignment"],
            r["ts_owned"],
            r["reconciliation_ms"],
            r["unassigned_ms"],
        )
        for r in rows
    ] == [
        ("m1", 2, "orders:0,1", at(2.25), 1245.0, 1005.0),
        ("m2", 3, "orders:2", None, None, None),
    ]


def test_a_group_rebalancing_more_than_three_times_a_minute_is_a_storm(duck: dict) -> None:
    assert [(r["group_id"], r["protocol"], r["window_start"], r["rebalances"]) for r in duck["storms"]] == [
        ("s1", "share", at(0).replace(second=0), 5)
    ]
    assert [
        (r["group_id"], r["members"], r["heartbeats"], r["max_epoch"])
        for r in duck["share_groups"]
        if r["group_id"] == "s1"
    ] == [("s1", 1, 5, 5)]


SHARE_GROUP_COLUMNS = (
    "group_id", "members", "share_fetches", "share_acknowledges", "acquired", "redelivered",
    "redelivery_rate", "max_delivery_count", "accepted", "released", "rejected", "release_rate",
    "reject_rate", "ack_p50_ms", "ack_max_ms", "lock_timeouts",
)  # fmt: skip
SHARE_DELIVERY_COLUMNS = (
    "member_id", "topic", "partition", "acquisitions", "acquired", "redelivered", "max_delivery_count",
    "accepted", "released", "rejected", "ack_p50_ms", "ack_max_ms", "lock_timeouts",
    "timed_out_redelivered", "timed_out_unacknowledged",
)  # fmt: skip


def test_share_group_redelivery_release_reject_rates_and_lock_timeouts(duck: dict) -> None:
    """The story of test_share_wire.py: 24 offsets lent (6 a second time), 15 given back (1 released,
    1 rejected), acknowledged 199.9 ms (m1) and 299.9 ms (m2 twice) after their acquisition; m1's
    orders:1 lock ran out and went to m2; m2's orders:0 10-12 lock ran out unacknowledged."""
    groups = [tuple(r[c] for c in SHARE_GROUP_COLUMNS) for r in duck["share_groups"] if r["group_id"] == "sg"]
    assert groups == [("sg", 2, 3, 1, 24, 6, 6 / 24, 2, 13, 1, 1, 1 / 15, 1 / 15, 299.9, 299.9, 2)]
    assert [tuple(r[c] for c in SHARE_DELIVERY_COLUMNS) for r in duck["share_deliveries"]] == [
        ("m1", "orders", 0, 1, 10, 0, 1, 7, 1, 1, 199.9, 199.9, 0, 0, 0),
        ("m1", "orders", 1, 1, 5, 0, 1, 0, 0, 0, None, None, 1, 1, 0),
        ("m2", "orders", 0, 2, 4, 1, 2, 1, 0, 0, 299.9, 299.9, 1, 0, 1),
        ("m2", "orders", 1, 1, 5, 5, 2, 5, 0, 0, 299.9, 299.9, 0, 0, 0),
    ]


def test_inventory_names_each_quickstart_client_with_its_role_topic_and_group(duck: dict) -> None:
    quick = {
        (r["client_id"], r["role"], r["topic"], r["group_id"]): (r["records"], r["software_name"])
        for r in duck["inventory"]
        if r["client_id"].startswith(("qs-", "kwsniff-admin"))
    }
    # sample_pcaps/README.md: 80 + 60 records to orders, 60 to events, consumed by two groups.
    assert {k: v[0] for k, v in quick.items() if k[1] != "admin"} == {
        ("qs-producer-none", "producer", "orders", None): 80,
        ("qs-producer-gzip", "producer", "orders", None): 60,
        ("qs-producer-zstd", "producer", "events", None): 60,
        ("qs-consumer-kafka-python", "consumer", "orders", "quickstart-group"): 140,
        ("qs-consumer-confluent", "consumer", "events", "quickstart-audit"): 60,
    }
    assert quick[("qs-consumer-kafka-python", "consumer", "orders", "quickstart-group")][1] == "kafka-python"


def nearest_rank(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


def test_produce_latency_per_topic_is_the_nearest_rank_of_its_requests(out: Path, duck: dict) -> None:
    keys = ["capture", "conn_id", "correlation_id"]
    parts = ds.dataset(out / "partitions").to_table().to_pandas()
    reqs = ds.dataset(out / "requests").to_table().to_pandas()
    prod = parts[parts.api_key == 0].merge(reqs[[*keys, "latency_ms"]], on=keys, suffixes=("", "_of_request"))
    # Each partitions row repeats its exchange's latency: the report reads it there, joining nothing.
    assert prod.latency_ms.fillna(-1).tolist() == prod.latency_ms_of_request.fillna(-1).tolist()
    # One count and one latency per Produce request and topic, however many partitions it carries.
    prod = prod[prod.latency_ms.notna()].drop_duplicates([*keys, "topic"])
    expected = [
        (topic, len(g), nearest_rank(g.latency_ms, 0.5), nearest_rank(g.latency_ms, 0.99), g.latency_ms.max())
        for topic, g in sorted(prod.groupby("topic"))
    ]
    got = [
        (r["topic"], r["requests"], r["p50_ms"], r["p99_ms"], r["max_ms"]) for r in duck["produce_latency"]
    ]
    assert got == expected


def test_member_id_required_on_a_first_join_is_expected_not_a_failure(duck: dict) -> None:
    kinds = {(r["kind"], r["error_name"], r["api_name"], r["client_id"]) for r in duck["errors"]}
    assert ("expected", "MEMBER_ID_REQUIRED", "JoinGroup", "qs-consumer-kafka-python") in kinds
    assert ("failure", "UNKNOWN_PRODUCER_ID", "Produce", None) in {(k, e, a, None) for k, e, a, _ in kinds}
    assert not {k for k in kinds if k[0] == "failure" and k[1] == "MEMBER_ID_REQUIRED"}


def test_json_is_one_object_of_sections_and_filters_keep_matching_rows(out: Path) -> None:
    done = CliRunner().invoke(main, ["report", str(out), "--format", "json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert list(report) == [s.name for s in SECTIONS]
    assert {"client_id", "client_ip", "role", "topic", "group_id", "records", "bytes"} <= set(
        report["inventory"][0]
    )
    args = ["report", str(out), "--format", "json", "--section", "inventory", "--client", "qs-producer-none"]
    only = json.loads(CliRunner().invoke(main, args).stdout)
    assert [(r["client_id"], r["topic"], r["records"]) for r in only["inventory"]] == [
        ("qs-producer-none", "orders", 80)
    ]
    args = [
        "report",
        str(out),
        "--format",
        "csv",
        "--section",
        "produce_latency",
        "--sort",
        "records",
        "--top",
        "1",
    ]
    lines = CliRunner().invoke(main, args).stdout.splitlines()
    assert lines[0] == "section,topic,requests,records,p50_ms,p99_ms,max_ms"
    most = max(r["records"] for r in json.loads(done.stdout)["produce_latency"])
    assert len(lines) == 2 and lines[1].split(",")[3] == str(most)
    late = ["report", str(out), "--format", "json", "--section", "rebalances", "--since", "2030-01-01"]
    assert json.loads(CliRunner().invoke(main, late).stdout) == {"rebalances": []}


def long_polls(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (r["api_name"], r["client_id"], r["polls"], r["empty"], r["wait_ms"], r["wait_source"])
        for r in rows
        if r["api_name"] == "Fetch" and r["client_id"].startswith("qs-consumer")
    ]


def test_long_polls_judge_each_fetch_against_the_max_wait_ms_it_sent(duck: dict) -> None:
    """The quick start's consumers keep their clients' default wait: kafka-python's fetch_max_wait_ms
    and librdkafka's fetch.wait.max.ms (CONFIGURATION.md), both 500 ms."""
    from kafka import KafkaConsumer

    default = KafkaConsumer.DEFAULT_CONFIG["fetch_max_wait_ms"]
    assert default == 500
    assert long_polls(duck["long_polls"]) == [
        ("Fetch", "qs-consumer-confluent", 3, 1, 500.0, "max_wait_ms"),
        ("Fetch", "qs-consumer-kafka-python", 5, 4, 500.0, "max_wait_ms"),
    ]


def test_long_polls_guess_the_wait_from_empty_polls_in_tables_without_max_wait_ms(
    out: Path, tmp_path: Path
) -> None:
    """Tables written before `requests.max_wait_ms`: the wait is the median latency of the empty
    polls, flagged as a guess."""
    old = tmp_path / "old"
    for table in ("requests", "groups", "connections"):
        (old / table).mkdir(parents=True)
        for path in (out / table).rglob("quickstart*.parquet"):
            data = pq.read_table(path)
            if table == "requests":
                data = data.drop_columns(["max_wait_ms"])
            pq.write_table(data, old / table / path.name)
    with DuckEngine(old, Filters()) as engine:
        rows = answer(engine, Filters(), [BY_NAME["long_polls"]])["long_polls"]
    requests = pq.read_table(old / "requests").to_pylist()
    guesses = []
    for client in ("qs-consumer-confluent", "qs-consumer-kafka-python"):
        empty = sorted(
            r["latency_ms"]
            for r in requests
            if r["api_key"] == 1 and r["record_count"] == 0 and r["client_id"] == client
        )
        guesses.append(empty[math.ceil(len(empty) / 2) - 1])  # nearest rank
    assert long_polls(rows) == [
        ("Fetch", "qs-consumer-confluent", 3, 1, guesses[0], "empty polls (guess)"),
        ("Fetch", "qs-consumer-kafka-python", 5, 4, guesses[1], "empty polls (guess)"),
    ]
    assert 500 < guesses[1] < 510  # the empty polls did wait out the 500 ms


# After the quick start's group committed (17:39:33) and left (17:39:34.6); after its audit group
# (which never commits) fetched (17:39:37.74), before it left (17:39:38.13).
WINDOW = Filters(
    since=dt.datetime(2026, 11, 22, 17, 39, 36), until=dt.datetime(2026, 11, 22, 17, 39, 37, 900000)
)


def test_a_window_keeps_what_the_capture_knew_before_it_on_both_engines(
    rows_only: Path, spark: Any, tmp_path: Path
) -> None:
    """--since/--until limit the rows reported, not what lag, stopped and member_lag know: the quick
    start's group, whose last commit is before the window, is in it with that commit (pandas over
    the OffsetCommit rows) and its state at the window's end. The same on Spark, and from tables
    written before the exchange columns were repeated on every row."""
    with DuckEngine(rows_only, WINDOW) as engine:
        duck = answer(engine, WINDOW)
    spark_engine = SparkEngine(rows_only, WINDOW, spark)
    try:
        assert answer(spark_engine, WINDOW) == duck
    finally:
        spark_engine.close()
    parts = ds.dataset(rows_only / "partitions").to_table().to_pandas()
    commits = parts[
        (parts["api_key"] == 8)
        & (parts["group_id"] == "quickstart-group")
        & (parts["committed_offset"] >= 0)
        & (parts["ts_request"] < pd_utc(WINDOW.since))
    ]
    last = commits.sort_values("ts_request").groupby("partition")["committed_offset"].last().to_dict()
    assert len(last) == 3
    lag = [r for r in duck["lag"] if r["group_id"] == "quickstart-group"]
    start = WINDOW.since.replace(tzinfo=dt.UTC)
    assert {r["partition"]: (r["second"], r["committed_offset"]) for r in lag if r["second"] == start} == {
        p: (start, o) for p, o in last.items()
    }
    assert all(start <= r["second"] <= WINDOW.until.replace(tzinfo=dt.UTC) for r in duck["lag"])
    states = {
        (r["group_id"], r["partition"]): (r["state"], r["committed_offset"])
        for r in duck["stopped"]
        if r["capture"] == "quickstart.pcap"
    }
    assert states == {
        **{("quickstart-group", p): ("left", o) for p, o in last.items()},
        ("quickstart-audit", 0): ("never_committed", None),
        ("quickstart-audit", 1): ("never_committed", None),
    }
    assert {r["capture_end"] for r in duck["stopped"] if r["capture"] == "quickstart.pcap"} == {
        WINDOW.until.replace(tzinfo=dt.UTC)
    }
    assert {r["group_id"] for r in duck["member_lag"] if r["capture"] == "quickstart.pcap"} == {
        "quickstart-group",
        "quickstart-audit",
    }
    # Tables without the exchange columns: the known rows are filled by the same join.
    old = tmp_path / "old"
    for path in rows_only.rglob("*.parquet"):
        data = pq.read_table(path)
        table = path.relative_to(rows_only).parts[0]
        data = data.drop_columns([c for c in FILLED.get(table, ()) if c in data.column_names])
        (old / path.relative_to(rows_only)).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(data, old / path.relative_to(rows_only))
    with DuckEngine(old, WINDOW) as engine:
        assert answer(engine, WINDOW) == duck


def pd_utc(moment: dt.datetime) -> Any:
    import pandas as pd

    return pd.Timestamp(moment, tz="UTC")
