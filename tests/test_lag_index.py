"""Live lag in seconds however far behind (issue 48): kwsniff.view.offset_times' bounded index of
when offsets were acknowledged, the LagTracker over it and the gauges, fed `partitions` rows with
packet times as the clock, against the report's definition (docs/report.md "Lag in seconds")
worked out from the acknowledgements the test made, and against the report's `lag` section on a
capture built with the same pattern."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafkawire import Flow, request, response, write_pcap
from prometheus_client import generate_latest
from test_int64_edges import (
    batch,
    offset_commit_v2_request,
    offset_commit_v2_response,
    produce_v8_request,
    produce_v8_response,
)
from test_metrics_lag import fetch

import kwsniff
from kwsniff.capture.live import CaptureCounters
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink
from kwsniff.view.lag import LagTracker
from kwsniff.view.metrics import Metrics
from kwsniff.view.offset_times import MAX_POINTS, POINT_BYTES, OffsetTimes
from kwsniff.view.stats import LiveStats

S = 1_000_000  # µs per second
T0 = 1_000 * S
BATCH = 10  # records a batch
# The report's resolution: its `lag` rows are per second. On steady production, the live figure of
# an offset whose batch the index no longer holds is interpolated within one batch interval, at
# most a second at the slowest rate here.
TOLERANCE_S = 1.0
MINUTE, HOUR = 60, 3600


def produce(i: int, rate: int, partition: int = 0) -> dict:
    """Batch i of a producer at ``rate`` batches a second: offsets 10i..10i+9, acknowledged at
    T0 + i / rate."""
    return {
        "api_key": 0,
        "topic": "t",
        "partition": partition,
        "first_offset": i * BATCH,
        "last_offset": i * BATCH + BATCH - 1,
        "ts_response": acked(i, rate),
    }


def acked(i: int, rate: int) -> int:
    return T0 + i * S // rate


def commit(offset: int, ts: int, group: str = "g") -> dict:
    return {
        "api_key": 8,
        "topic": "t",
        "partition": 0,
        "group_id": group,
        "committed_offset": offset,
        "ts_request": ts,
        "error_code": 0,
    }


def steady(rate: int, seconds: int, behind: int) -> Iterator[tuple[dict, float | None]]:
    """``seconds`` of a producer at ``rate``; over the last minute, a commit each second of the
    offset 3 into the batch acknowledged ``behind`` seconds before, with the lag the report's
    definition gives it then (else None)."""
    start_commits = (seconds - MINUTE) * rate
    for i in range(seconds * rate):
        yield produce(i, rate), None
        if i >= start_commits and i % rate == 0:
            now = acked(i, rate)
            held = i - behind * rate
            yield commit(held * BATCH + 3, now), (now - acked(held, rate)) / S


@pytest.mark.parametrize(
    ("rate", "behind"),
    [
        (1, 1),
        (1, 10 * MINUTE),
        (1, 3 * HOUR),
        (200, 1),
        (200, 10 * MINUTE),
        (200, 3 * HOUR),
        (2_000, 1),
        (2_000, 10 * MINUTE),
    ],
)
def test_lag_in_seconds_is_the_committed_offsets_age_however_far_behind(rate: int, behind: int) -> None:
    # 3 hours at 2,000 batches a second (21.6 million rows) is left to the measurement in the note.
    lag = LagTracker(max_partitions=10)
    compared = 0
    for row, expected in steady(rate, behind + 2 * MINUTE, behind):
        lag.row(row)
        if expected is not None:
            state = lag.lags[("g", "t", 0)]
            assert state.lag_lower_bound is None
            assert state.lag_seconds is not None and abs(state.lag_seconds - expected) <= TOLERANCE_S, (
                state.lag_seconds,
                expected,
            )
            compared += 1
    assert compared == MINUTE
    assert len(lag.logs[("t", 0)].times) <= MAX_POINTS


def test_a_slow_consumer_s_lag_keeps_rising_past_any_window_of_batches() -> None:
    # The slow consumer: 200 batches a second produced, 50 consumed. The old tracker held
    # the last 1,024 batches (5 s of them) and its gauge stopped rising once the commits fell out.
    rate, consumed = 200, 50
    lag = LagTracker(max_partitions=10)
    seen: list[float] = []
    position = 0
    for i in range(20 * MINUTE * rate):
        lag.row(produce(i, rate))
        if i % rate == 0 and i:
            position += consumed
            now = acked(i, rate)
            lag.row(commit(position * BATCH, now))
            state = lag.lags[("g", "t", 0)]
            assert state.lag_seconds is not None
            assert abs(state.lag_seconds - (now - acked(position, rate)) / S) <= TOLERANCE_S
            seen.append(state.lag_seconds)
    # Each second, 0.75 s more behind: after 20 minutes, 15 minutes.
    assert all(later > earlier for earlier, later in zip(seen, seen[1:], strict=False))
    assert seen[-1] == pytest.approx(0.75 * (20 * MINUTE - 1), abs=TOLERANCE_S)


def scraped(metrics: Metrics) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in generate_latest(metrics.registry).decode().splitlines()
        if line.startswith("kwsniff_consumer_group_lag")
    }


SERIES = '{{group="g",partition="0",topic="t"}}'
SECONDS = "kwsniff_consumer_group_lag_seconds" + SERIES.format()
LOWER = "kwsniff_consumer_group_lag_seconds_lower_bound" + SERIES.format()


def test_a_commit_older_than_anything_seen_is_a_growing_lower_bound_never_a_frozen_value() -> None:
    # Attached mid-stream: the first thing seen is a Fetch at 10 s answering a watermark of 1,000,
    # then batches from offset 1,000 on, one a second from 20 s. A commit of 500 was produced
    # before 10 s: at least (now - 10 s) behind, no lag in seconds.
    stats = LiveStats(collect_pending=True)
    metrics = Metrics()
    stats.row("partitions", fetch(1_000, 10 * S))
    for i in range(10):
        stats.row("partitions", {**produce(100 + i, 1), "ts_response": (20 + i) * S})
    stats.row("partitions", commit(500, 30 * S))
    metrics.update(CaptureCounters(), stats.take_pending(), 0)
    assert scraped(metrics) == {
        "kwsniff_consumer_group_lag_records" + SERIES.format(): 600.0,
        LOWER: 20.0,
    }
    stats.row("partitions", fetch(1_100, 45 * S))
    metrics.update(CaptureCounters(), stats.take_pending(), 0)
    assert scraped(metrics)[LOWER] == 35.0 and SECONDS not in scraped(metrics)
    # A commit the index can date: the lower bound's series goes, the lag in seconds comes.
    stats.row("partitions", commit(1_005, 46 * S))
    metrics.update(CaptureCounters(), stats.take_pending(), 0)
    assert scraped(metrics) == {
        "kwsniff_consumer_group_lag_records" + SERIES.format(): 95.0,
        SECONDS: 26.0,  # offset 1,005 is in the batch acknowledged at 20 s, judged at 46 s
    }


def test_the_index_holds_at_most_its_points_spread_denser_towards_the_newest() -> None:
    # Three hours at 20 batches a second: 216,000 batches into 1,024 points of 24 bytes.
    rate, index = 20, OffsetTimes()
    largest = 0
    for i in range(3 * HOUR * rate):
        index.add(i * BATCH, i * BATCH + BATCH - 1, acked(i, rate))
        largest = max(largest, len(index))
    assert largest == MAX_POINTS and POINT_BYTES == 3 * index.times.itemsize == 24
    times = index.times.tolist()
    # The first and the last batch stay: every offset since the first is dated.
    assert (index.firsts[0], times[0], index.lasts[-1], times[-1]) == (
        0,
        T0,
        3 * HOUR * rate * BATCH - 1,
        acked(3 * HOUR * rate - 1, rate),
    )
    # Each gap between kept points is at most 2 % of its newer end's age (or one batch interval):
    # the error of an interpolated date is that share of the lag, however far behind.
    newest = times[-1]
    widest = max(
        (after - before) - 0.02 * (newest - after) for before, after in zip(times, times[1:], strict=False)
    )
    assert widest <= S // rate
    # Exact where a kept batch holds the offset, interpolated between kept batches elsewhere.
    assert index.date(index.firsts[-1] + 3) == (float(times[-1]), True)
    assert index.date(-1) == (None, False) and index.readable_by(-1) == T0
    assert index.date(3 * HOUR * rate * BATCH) == (None, False)


def test_rows_out_of_order_and_a_batch_seen_twice_keep_the_earliest_acknowledgement() -> None:
    index = OffsetTimes(capacity=4)
    for first, ts in ((20, 3 * S), (0, 1 * S), (10, 2 * S), (10, 5 * S)):
        index.add(first, first + 9, ts)
    assert [index.date(o) for o in (5, 15, 25)] == [(1 * S, True), (2 * S, True), (3 * S, True)]
    index.add(30, 39, 4 * S)
    index.add(40, 49, 6 * S)  # five points in four: the one whose neighbours are closest for their age goes
    assert (index.firsts.tolist(), index.times.tolist()) == ([0, 20, 30, 40], [1 * S, 3 * S, 4 * S, 6 * S])
    # Offset 15 was acknowledged between 1 s (offset 9) and 3 s (offset 20): 6/11 of the way.
    assert index.date(15) == (1 * S + 2 * S * 6 / 11, False)


# -- end to end: a capture with the same pattern, its tables and the report ---------------------------
PRODUCER = (bytes([10, 0, 0, 1]), 40000)
CONSUMER = (bytes([10, 0, 0, 3]), 40001)
BROKER = (bytes([10, 0, 0, 2]), 9092)
E2E_RATE = 20  # batches a second
E2E_SECONDS = 8 * MINUTE
E2E_BEHIND = 5 * MINUTE  # 6,000 batches: far past the old tracker's 1,024


def far_behind_capture(path: Path) -> Path:
    """A producer acknowledged E2E_RATE batches a second for E2E_SECONDS; from the sixth minute a
    consumer commits every 2 s the offset acknowledged E2E_BEHIND before."""
    producer = Flow(PRODUCER, BROKER).handshake()
    consumer = Flow(CONSUMER, BROKER).handshake()
    start = producer.ts + S
    consumer.ts = start
    template = bytearray(batch(0, 5))
    packets = []
    for i in range(E2E_SECONDS * E2E_RATE):
        struct.pack_into(">q", template, 0, i * 5)
        producer.ts = start + i * S // E2E_RATE - 200
        producer.send(0, request(0, 8, i, produce_v8_request("far", [(0, bytes(template))])))
        producer.send(1, response(i, produce_v8_response("far", [(0, i * 5, 0)])))
        if i >= 6 * MINUTE * E2E_RATE and i % (2 * E2E_RATE) == 0:
            consumer.ts = start + i * S // E2E_RATE + 300
            held = (i - E2E_BEHIND * E2E_RATE) * 5 + 2
            consumer.send(0, request(8, 2, i, offset_commit_v2_request("g", "far", 0, held)))
            consumer.send(1, response(i, offset_commit_v2_response("far", 0)))
    packets = sorted(producer.packets + consumer.packets, key=lambda p: p[0])
    return write_pcap(path, packets)


def test_the_live_gauge_agrees_with_the_reports_lag_on_a_capture_far_behind(tmp_path: Path) -> None:
    capture = far_behind_capture(tmp_path / "far.pcap")
    report = kwsniff.report(kwsniff.read(capture), sections=["lag"])["lag"].to_pylist()
    worst = {int(r["second"].timestamp()): r["lag_seconds"] for r in report if r["group_id"] == "g"}
    sink = ListSink()
    run_capture(capture, sink, SessionOptions())
    rows = sorted(
        sink.tables["partitions"],
        key=lambda r: r["ts_request"] if r["api_key"] == 8 else r["ts_response"],
    )
    lag = LagTracker(max_partitions=10)
    latest: dict[int, tuple[float | None, bool]] = {}  # second -> live lag at its last event, committed in it
    for row in rows:
        lag.row(row)
        state = lag.lags.get(("g", "far", 0))
        if state is not None:
            second = state.at // S
            committed = row["api_key"] == 8 or latest.get(second, (None, False))[1]
            latest[second] = (state.lag_seconds, committed)
    # The report keeps each second's worst value, the gauge the latest: they are the same moment
    # in a second without a commit (the lag only rises between commits).
    compared = [(worst[s], live) for s, (live, committed) in latest.items() if not committed]
    assert len(compared) >= 50 and set(worst) == set(latest)
    assert all(live is not None and abs(live - report) <= TOLERANCE_S for report, live in compared), compared
    assert min(report for report, _ in compared) >= E2E_BEHIND


def test_the_offset_indices_stay_in_their_share_of_the_budget_thinning_before_refusing() -> None:
    """The lag's indices are charged to an eighth of the view pool: as partitions come, each index
    is halved (never below MIN_POINTS) before a new partition is refused, and dating by
    interpolation stays exact for a producer at a steady rate."""
    from kwsniff.memory import VIEW, MemoryBudget
    from kwsniff.view.lag import MIN_POINTS, PARTITION_COST

    budget = MemoryBudget(256 * 1024 * 1024)
    share = budget.cap(VIEW) // 8
    assert share == 1024 * 1024
    lag = LagTracker(max_partitions=100_000, budget=budget)
    partitions, batches = 1_000, 40
    for p in range(partitions):
        for i in range(batches):
            lag.row(produce(i, RATE := 10, partition=p))
    fits = share // (MIN_POINTS * POINT_BYTES + PARTITION_COST)  # 819
    assert len(lag.logs) == fits and lag.points == MIN_POINTS
    assert lag.refused == (partitions - fits) * batches  # each row of a partition refused, counted
    assert max(len(log.times) for log in lag.logs.values()) <= MIN_POINTS
    assert (
        budget.cell(VIEW)[0] == lag.held_bytes == fits * (MIN_POINTS * POINT_BYTES + PARTITION_COST) <= share
    )
    # Partition 0's batch 21 (acknowledged at 2.1 s) was thinned away; a commit in it is dated
    # between the batches kept around it, within the 0.1 s between two batches: 1.8 s before the
    # watermark's batch 39 (3.9 s).
    times = lag.logs[("t", 0)].times
    assert 21 * BATCH not in list(times.firsts)
    lag.row(commit(21 * BATCH + 5, acked(39, RATE)))
    figures = lag.lags[("g", "t", 0)]
    assert (figures.offset_lag, figures.lag_seconds) == (185, pytest.approx(1.8, abs=0.1))
