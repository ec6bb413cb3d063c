"""kwsniff.view.lag and the metrics on hand-made `partitions` rows: the figures the report's `lag`
definition (docs/report.md "Lag in seconds") gives, worked out by hand, and the series cap."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from prometheus_client import generate_latest

from kwsniff.capture.live import CaptureCounters
from kwsniff.memory import TOTAL_COST, VIEW, MemoryBudget
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink
from kwsniff.view.lag import LagTracker
from kwsniff.view.metrics import CUT_TO, MAX_LABEL, Metrics, bounded_label
from kwsniff.view.stats import LiveStats, StatsSink, add_view_evictions

CAPTURES = Path(__file__).parent / "data" / "captures"

S = 1_000_000  # µs per second


def produce(first: int, last: int, ts: int) -> dict:
    return {
        "api_key": 0,
        "topic": "t",
        "partition": 0,
        "first_offset": first,
        "last_offset": last,
        "ts_response": ts,
    }


def commit(offset: int, ts: int, group: str = "g", error: int | None = 0) -> dict:
    return {
        "api_key": 8,
        "topic": "t",
        "partition": 0,
        "group_id": group,
        "committed_offset": offset,
        "ts_request": ts,
        "error_code": error,
    }


def fetch(hwm: int, ts: int) -> dict:
    return {"api_key": 1, "topic": "t", "partition": 0, "high_watermark": hwm, "ts_response": ts}


def test_lag_in_records_and_seconds_follows_commits_and_watermarks() -> None:
    lag = LagTracker(max_partitions=10)
    for row in (produce(0, 9, 10 * S), produce(10, 19, 12 * S), commit(5, 13 * S)):
        lag.row(row)
    state = lag.lags[("g", "t", 0)]
    # hwm 20, committed 5: 15 records; offset 5 was acknowledged at 10 s, evaluated at 13 s.
    assert (state.offset_lag, state.lag_seconds) == (15, 3.0)
    lag.row(fetch(25, 16 * S))  # a new watermark moves the lag; offset 5 still dated at 10 s
    assert (state.offset_lag, state.lag_seconds) == (20, 6.0)
    lag.row(commit(30, 15 * S))  # older than the latest event: the commit counts, figures kept
    lag.row(commit(25, 17 * S))  # caught up
    assert (state.committed_offset, state.offset_lag, state.lag_seconds) == (25, 0, 0.0)
    lag.row(commit(3, 18 * S, error=6))  # a failed commit is no commit
    assert state.committed_offset == 25
    assert lag.take_changed() == {("g", "t", 0)}


def test_partitions_past_the_cap_are_refused_and_counted() -> None:
    lag = LagTracker(max_partitions=1)
    lag.row(produce(0, 0, S))
    lag.row({**produce(0, 0, S), "partition": 1})
    lag.row({**commit(0, S), "partition": 2})
    assert (sorted(lag.logs), lag.refused) == ([("t", 0)], 2)


def scraped(metrics: Metrics) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in generate_latest(metrics.registry).decode().splitlines()
        if line.startswith("kwsniff_")
    }


def test_rows_reach_the_lag_gauges_and_the_topic_counters() -> None:
    stats = LiveStats(collect_pending=True)
    for row in (
        {**produce(0, 9, 10 * S), "api_name": "Produce", "record_count": 10, "record_bytes": 700},
        {**produce(10, 19, 12 * S), "api_name": "Produce", "record_count": 10, "record_bytes": 650},
        {**fetch(20, 12 * S), "api_name": "Fetch", "record_count": 4, "record_bytes": 300},
        {**commit(5, 13 * S), "api_name": "OffsetCommit"},
    ):
        stats.row("partitions", row)
    metrics = Metrics()
    metrics.update(CaptureCounters(), stats.take_pending(), 0)
    values = scraped(metrics)
    # hwm 20, committed 5: 15 records behind; offset 5 was acknowledged at 10 s, the commit seen at 13 s.
    assert values['kwsniff_consumer_group_lag_records{group="g",partition="0",topic="t"}'] == 15.0
    assert values['kwsniff_consumer_group_lag_seconds{group="g",partition="0",topic="t"}'] == 3.0
    assert values['kwsniff_produced_records_total{topic="t"}'] == 20.0
    assert values['kwsniff_produced_bytes_total{topic="t"}'] == 1350.0
    assert values['kwsniff_fetched_records_total{topic="t"}'] == 4.0
    assert values['kwsniff_fetched_bytes_total{topic="t"}'] == 300.0
    assert values["kwsniff_metrics_series_dropped_total"] == 0.0


def test_a_requests_broker_label_is_its_own_broker_end_whenever_its_row_comes() -> None:
    # A row held for its broker's node id may come after its connection closed: the label is read
    # from the row, not from the open connections (a Produce once went unlabelled that way).
    stats = LiveStats(collect_pending=True)
    for ip, port, latency_ms in (("10.0.0.1", 9092, 2.0), ("10.0.0.1", 9092, 4.0), ("::1", 9093, 1.0)):
        stats.row(
            "requests",
            {"api_name": "Produce", "broker_ip": ip, "broker_port": port, "latency_ms": latency_ms},
        )
    stats.row("requests", {"api_name": "Produce", "latency_ms": 3.0})  # no broker end: no broker series
    metrics = Metrics()
    metrics.update(CaptureCounters(), stats.take_pending(), 0)
    values = scraped(metrics)
    count = 'kwsniff_broker_request_latency_seconds_count{{api="Produce",broker="{}"}}'
    assert values[count.format("10.0.0.1:9092")] == 2.0
    assert values[count.format("::1:9093")] == 1.0
    assert values['kwsniff_request_latency_seconds_count{api="Produce"}'] == 4.0


def test_series_past_the_cap_are_not_made_and_their_updates_counted() -> None:
    metrics = Metrics(max_series=4)
    topics = [(f"topic-{i}", "Produce", 1, 10, "c") for i in range(4)]
    metrics.update(CaptureCounters(), ([], [], topics, [], [], [], [], [], []), 0)
    metrics.update(
        CaptureCounters(), ([], [], topics, [(("g", "topic-0", 0), 3, 1.5, None)], [], [], [], [], []), 0
    )
    values = scraped(metrics)
    made = sorted(k for k in values if k.startswith("kwsniff_produced_records_total"))
    assert made == [
        'kwsniff_produced_records_total{topic="topic-0"}',
        'kwsniff_produced_records_total{topic="topic-1"}',
    ]
    assert values['kwsniff_produced_records_total{topic="topic-0"}'] == 2.0
    # Two topics with their series of client c fill the cap: two topics twice, each with its client
    # series, and the group's lag once: 9 updates of series the cap did not let in.
    assert values['kwsniff_client_produced_records_total{client_id="c",topic="topic-1"}'] == 2.0
    assert values["kwsniff_metrics_series_dropped_total"] == 9.0
    assert not any(k.startswith("kwsniff_consumer_group_lag") and "{" in k for k in values)


def test_a_commit_decoded_after_a_later_watermark_is_judged_at_that_watermark() -> None:
    # Two workers: the acknowledgement of offsets 10..19 (at 12 s) reaches the tracker before the
    # commit of offset 10 sent at 11 s. At 11 s the log ended at 10; the latest event known is the
    # acknowledgement, when offset 10 was 0 s old and 10 records were behind: never a negative age.
    lag = LagTracker(max_partitions=10)
    for row in (produce(0, 9, 10 * S), produce(10, 19, 12 * S), commit(10, 11 * S)):
        lag.row(row)
    state = lag.lags[("g", "t", 0)]
    assert (state.at, state.offset_lag, state.lag_seconds) == (12 * S, 10, 0.0)


def test_a_groups_members_and_last_rebalance_come_from_its_leaders_join_group_response() -> None:
    # kafka-python's one-member group of the shared capture: the truth file names one consumer in
    # rig-kp-group, and tshark dates the JoinGroup responses.
    capture = CAPTURES / "kafka_python.pcap"
    truth = json.loads((CAPTURES / "kafka_python.pcap.truth.json").read_text())
    shark = json.loads((CAPTURES / "kafka_python.pcap.tshark.json").read_text())
    joins = {(r["stream"], r["correlation_id"]) for r in shark["requests"] if r["api_key"] == 11}
    answered = [
        r["first_frame_time_epoch"] for r in shark["responses"] if (r["stream"], r["correlation_id"]) in joins
    ]
    stats = LiveStats(collect_pending=True)
    run_capture(capture, StatsSink(ListSink(), stats), SessionOptions())
    metrics = Metrics()
    metrics.update(CaptureCounters(), stats.take_pending(), 0)
    values = scraped(metrics)
    group = truth["consumer_group"]["group"]
    assert truth["consumer_groups"] == [group]
    assert values[f'kwsniff_consumer_group_members{{group="{group}"}}'] == 1.0
    assert values[f'kwsniff_consumer_group_last_rebalance_timestamp_seconds{{group="{group}"}}'] == max(
        answered
    )


def test_a_worker_relays_the_rows_only_the_metrics_count_only_when_metrics_are_served() -> None:
    from kwsniff.pipeline.live_worker import RowRelay

    offset_commit = {**commit(5, 13 * S), "api_name": "OffsetCommit"}
    join = {"api_key": 11, "group_id": "g", "members": 2, "error_code": 0, "ts_response": 14 * S}
    request = {
        "api_name": "Produce",
        "api_key": 0,
        "broker_ip": "10.0.0.1",
        "broker_port": 9092,
        "latency_ms": 1.5,
    }
    relayed = {}
    for metrics in (False, True):
        relay = RowRelay(metrics)
        for table, row in (("partitions", offset_commit), ("groups", join), ("requests", request)):
            relay.row(table, row)
        relayed[metrics] = [
            (table, row.get("broker_ip"), row.get("broker_port")) for table, row in relay.take_rows()
        ]
    # A request keeps its broker end (the metrics' broker label) with or without metrics.
    assert relayed == {
        False: [("requests", "10.0.0.1", 9092)],
        True: [("partitions", None, None), ("groups", None, None), ("requests", "10.0.0.1", 9092)],
    }


def test_api_and_error_labels_the_wire_names_by_number_are_under_the_series_cap() -> None:
    # 3,000 API keys and 3,000 error codes no Kafka defines (the attack) against a cap of 100:
    # known APIs and errors are a fixed set and always counted; the others take an eighth each.
    metrics = Metrics(max_series=100)
    requests = [(f"Unknown({1_000 + i})", "10.0.0.1:9092", 0.001, "c") for i in range(3_000)]
    requests.append(("Produce", "10.0.0.1:9092", 0.001, "c"))
    errors = [(f"UNKNOWN_ERROR_CODE({1_000 + i})", "Produce", "c", False) for i in range(3_000)]
    errors.append(("NOT_LEADER_OR_FOLLOWER", "Produce", "c", False))
    metrics.update(CaptureCounters(), (requests, errors, [], [], [], [], [], [], []), 0)
    values = scraped(metrics)
    apis = {k for k in values if k.startswith('kwsniff_requests_total{api="Unknown(')}
    codes = {k for k in values if k.startswith('kwsniff_errors_total{error="UNKNOWN_ERROR_CODE(')}
    brokers = {k for k in values if k.startswith("kwsniff_broker_request_latency_seconds_count{")}
    clients = {k for k in values if k.startswith("kwsniff_client_")}
    # Each unknown API makes its own series, then its broker's (none per client: only the APIs and
    # errors Kafka defines are counted per client); the APIs and the error codes named by a number
    # take at most an eighth of the cap each (12 of 100), so Produce's broker series, its client's
    # (a counter and a histogram: 18 lines) and the known error's client series are still made.
    assert (len(apis), len(brokers), len(codes), len(clients)) == (12, 12 + 1, 12, 18 + 1)
    assert values['kwsniff_requests_total{api="Produce"}'] == 1.0
    assert values['kwsniff_errors_total{error="NOT_LEADER_OR_FOLLOWER"}'] == 1.0
    # 2,988 APIs and 2,988 error codes past their eighths.
    assert values["kwsniff_metrics_series_dropped_total"] == 2_988 + 2_988


def test_long_label_values_are_cut_marked_and_kept_apart() -> None:
    metrics = Metrics()
    long_a, long_b = "a" * 300 + "1", "a" * 300 + "2"
    topics = [
        (long_a, "Produce", 1, 10, "c"),
        (long_b, "Produce", 2, 20, "c"),
        ("short", "Produce", 3, 30, "c"),
    ]
    metrics.update(CaptureCounters(), ([], [], topics, [], [], [], [], [], []), 0)
    values = scraped(metrics)
    made = {k.split('"')[1]: v for k, v in values.items() if k.startswith("kwsniff_produced_records_total{")}
    assert made == {bounded_label(long_a): 1.0, bounded_label(long_b): 2.0, "short": 3.0}
    assert bounded_label(long_a) != bounded_label(long_b)
    assert all(
        len(k) == MAX_LABEL and k[:CUT_TO] == "a" * CUT_TO and k[CUT_TO] == "…" for k in made if k != "short"
    )
    # Two series per long topic: its own and client c's.
    assert values["kwsniff_metrics_labels_cut_total"] == 4.0


def test_live_totals_past_their_share_forget_the_smallest_and_count_them() -> None:
    # A 16 MiB limit: the view pool is 512 KiB, the totals' quarter 128 KiB. 200 topics of 1 KB,
    # topic i with i + 1 record bytes: the smallest go first, and the view's top topics stay.
    budget = MemoryBudget(16 * 1024 * 1024)
    stats = LiveStats(budget=budget)
    cost = sys.getsizeof("x" * 1_024) + TOTAL_COST
    for i in range(200):
        stats.row(
            "partitions", {"api_name": "Produce", "topic": f"{i:03d}" + "x" * 1_021, "record_bytes": i + 1}
        )
    totals = stats.totals
    cap = budget.cap(VIEW) // 4
    assert totals.held_bytes == budget.used(VIEW) == len(totals.produced_bytes) * cost <= cap
    assert (totals.evicted, totals.evicted_bytes) == (200 - len(totals.produced_bytes), totals.evicted * cost)
    assert sorted(totals.produced_bytes.values()) == list(range(totals.evicted + 1, 201))
    result: Counter[str] = Counter()
    add_view_evictions(result, stats)
    assert result == {
        "view_totals_evicted": totals.evicted,
        "view_totals_evicted_bytes": totals.evicted_bytes,
    }
