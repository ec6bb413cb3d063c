"""kwsniff.view.replication's memory: each partition's leader log held as int64 columns, a partition no
follower fetches holding a short recent history, all of it charged to its eighth of the view pool
(docs/memory.md), on hand-made `partitions` rows worked out by hand."""

from __future__ import annotations

import tracemalloc
from collections import Counter
from types import SimpleNamespace
from typing import Any

from prometheus_client import generate_latest

from kwsniff.capture.live import CaptureCounters
from kwsniff.memory import VIEW, VIEW_METRICS, VIEW_REPLICATION, MemoryBudget, view_cap
from kwsniff.view.metrics import Metrics
from kwsniff.view.replication import (
    DEPTH_BYTES,
    FETCH_COST,
    MAX_DEPTH,
    MIN_DEPTH,
    PARTITION_COST,
    SHALLOW_DEPTH,
    ReplicationTracker,
)
from kwsniff.view.stats import LiveStats, add_view_evictions
from kwsniff.view.summary import memory_line

S = 1_000_000  # µs per second
MS = 1_000
BUDGET = 64 << 20
SHARE = 256 * 1024  # an eighth of the view pool's 1/32 of 64 MiB
BATCH = 10  # offsets a batch


def produced(partition: int, batch: int, topic: str = "t") -> dict[str, Any]:
    """Batch number ``batch`` of a partition: offsets batch*10.., requested at batch ms, answered 1 ms on."""
    first, ts = batch * BATCH, S + batch * MS
    return {
        "api_key": 0, "topic": topic, "partition": partition, "first_offset": first,
        "last_offset": first + BATCH - 1, "ts_request": ts, "ts_response": ts + MS,
    }  # fmt: skip


def fetched(partition: int, offset: int, hwm: int, ts: int, replica: int | None = None) -> dict[str, Any]:
    """A consumer's Fetch of a partition, or a follower's (``replica``), answered 100 µs on."""
    return {
        "api_key": 1, "topic": "t", "partition": partition, "fetch_offset": offset, "high_watermark": hwm,
        "ts_request": ts, "ts_response": ts + 100, "replica_id": replica,
        "fetcher": "consumer" if replica is None else "follower",
    }  # fmt: skip


def follower_log_bytes(depth: int) -> int:
    return PARTITION_COST + depth * DEPTH_BYTES + FETCH_COST  # one follower


UNFOLLOWED_BYTES = PARTITION_COST + SHALLOW_DEPTH * DEPTH_BYTES  # 3,584


def test_the_view_pool_is_split_in_one_place() -> None:
    budget = MemoryBudget(BUDGET)
    assert budget.cap(VIEW) == 2 << 20
    assert view_cap(budget, VIEW_REPLICATION) == SHARE
    # The totals a quarter, the lag and the replication an eighth each: the metrics' bytes the rest.
    assert Metrics(budget=budget).byte_cap == view_cap(budget, VIEW_METRICS) == (2 << 20) // 2
    stats = LiveStats(collect_pending=True, budget=budget)
    assert stats.replication is not None and stats.replication.byte_cap == SHARE


def test_partitions_no_follower_fetches_stay_in_the_share_at_their_measured_cost() -> None:
    """10,000 partitions produced to and fetched by a consumer, none by a follower: each holds its last
    64 batches and watermark rises; the oldest are forgotten to stay in the share; what the tracker
    holds, measured by tracemalloc, is within its charge."""
    budget = MemoryBudget(BUDGET)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracker = ReplicationTracker(max_partitions=100_000, budget=budget)
        for p in range(10_000):
            # One batch each, and past the short history for the last hundred (its oldest go).
            for b in range(1 if p < 9_900 else SHALLOW_DEPTH + 2):
                tracker.row(produced(p, b))
                tracker.row(fetched(p, b * BATCH, (b + 1) * BATCH, S + b * MS + 500))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    fits = SHARE // UNFOLLOWED_BYTES  # 73
    assert (len(tracker.logs), tracker.forgotten, tracker.refused) == (fits, 10_000 - fits, 0)
    assert sorted(tracker.logs)[0] == ("t", 10_000 - fits)  # the newest partitions stay
    assert budget.used(VIEW) == tracker.held_bytes == fits * UNFOLLOWED_BYTES == 261_632 <= SHARE
    assert all(len(log.firsts) == len(log.hwms) == SHALLOW_DEPTH for log in tracker.logs.values())
    # Measured: 238,408 B held for 261,632 charged (91 %): 3.3 KB a partition of 64 batches and
    # rises, 42 B a step of depth and about 800 B the log (the tuples held before took 305 KB a
    # partition at 1,024). The charge is an upper bound, within a fifth of what is held.
    assert 0.8 * tracker.held_bytes <= grown <= tracker.held_bytes, grown


def test_a_follower_fetch_in_the_newest_of_5000_batches_is_dated_by_its_batch() -> None:
    """A followed partition holds 1,024 batches beside partitions no follower fetches, in a small
    budget: after 5,000 batches a fetch of an offset in a recent one is its exact request time."""
    budget = MemoryBudget(BUDGET)
    tracker = ReplicationTracker(max_partitions=100_000, budget=budget)
    tracker.row(fetched(0, 0, 0, S // 2, replica=2))
    for b in range(5_000):
        tracker.row(produced(0, b))
        tracker.row(fetched(0, b * BATCH, (b + 1) * BATCH, S + b * MS + 500))
        tracker.row(produced(1 + b, 0))  # a new partition no follower fetches, each batch
    log = tracker.logs[("t", 0)]
    assert (len(log.firsts), len(log.hwms), tracker.depth, tracker.refused) == (
        MAX_DEPTH,
        MAX_DEPTH,
        MAX_DEPTH,
        0,
    )
    # Offset 49,905 is in batch 4,990 (requested at 1 s + 4,990 ms); the follower asks at 6.5 s.
    tracker.row(fetched(0, 49_905, 50_000, 6 * S + 500 * MS, replica=2))
    figures = tracker.fetches[(2, "t", 0)]
    assert (figures.lag_records, figures.lag_seconds) == (95, 0.51)
    # Batch 3,000 and the watermark rises above its offsets were dropped: not dated.
    tracker.row(fetched(0, 30_005, 50_000, 7 * S, replica=2))
    figures = tracker.fetches[(2, "t", 0)]
    assert (figures.lag_records, figures.lag_seconds) == (19_995, None)
    unfollowed = (SHARE - follower_log_bytes(MAX_DEPTH)) // UNFOLLOWED_BYTES  # 60
    assert (len(tracker.logs), tracker.forgotten) == (1 + unfollowed, 5_000 - unfollowed)
    assert (
        budget.used(VIEW)
        == tracker.held_bytes
        == follower_log_bytes(MAX_DEPTH) + unfollowed * UNFOLLOWED_BYTES
    )


def test_a_followers_first_fetch_is_dated_by_the_short_history() -> None:
    tracker = ReplicationTracker(max_partitions=10)
    for b in range(100):
        tracker.row(produced(0, b))
        tracker.row(fetched(0, b * BATCH, (b + 1) * BATCH, S + b * MS + 500))
    assert len(tracker.logs[("t", 0)].firsts) == SHALLOW_DEPTH
    tracker.row(fetched(0, 995, 1_000, S + 100 * MS, replica=2))  # batch 99, requested at 1.099 s
    assert tracker.fetches[(2, "t", 0)].lag_seconds == 0.001
    tracker.row(fetched(0, 105, 1_000, S + 101 * MS, replica=3))  # batch 10: before the short history
    assert tracker.fetches[(3, "t", 0)].lag_seconds is None


def test_past_the_share_unfollowed_logs_go_then_depth_halves_then_followers_are_refused() -> None:
    budget = MemoryBudget(BUDGET)
    tracker = ReplicationTracker(max_partitions=100_000, budget=budget)

    def follow(p: int) -> None:
        tracker.row(fetched(p, 0, 0, S, replica=2))

    for p in range(3):
        follow(p)
    full = 3 * follower_log_bytes(MAX_DEPTH)  # 132,864
    unfollowed = (SHARE - full) // UNFOLLOWED_BYTES  # 36
    for p in range(100, 100 + unfollowed + 1):  # one more than fits: the oldest goes
        tracker.row(produced(p, 0))
    assert (len(tracker.unfollowed), tracker.forgotten, next(iter(tracker.unfollowed))) == (36, 1, ("t", 101))
    assert tracker.held_bytes == full + 36 * UNFOLLOWED_BYTES == 261_888
    # Two more followed partitions at full depth: the unfollowed logs make room, the oldest first.
    follow(3)
    follow(4)
    assert (tracker.depth, len(tracker.unfollowed), tracker.forgotten) == (MAX_DEPTH, 11, 26)  # 13, 12 more
    assert tracker.held_bytes == 5 * follower_log_bytes(MAX_DEPTH) + 11 * UNFOLLOWED_BYTES == 260_864
    # A sixth does not fit at 1,024: the last unfollowed logs go, then every depth is halved.
    for b in range(MAX_DEPTH):
        tracker.row(produced(0, b))
    follow(5)
    assert (tracker.depth, len(tracker.unfollowed), tracker.forgotten) == (512, 0, 37)
    assert len(tracker.logs[("t", 0)].firsts) == 512 and tracker.logs[("t", 0)].firsts[0] == 512 * BATCH
    assert tracker.held_bytes == 6 * follower_log_bytes(512) == 136_704
    # Followers until the depth is MIN_DEPTH and the next does not fit: refused, counted.
    fits = SHARE // follower_log_bytes(MIN_DEPTH)  # 134
    for p in range(6, fits):
        follow(p)
    assert (tracker.depth, len(tracker.logs), tracker.refused) == (MIN_DEPTH, fits, 0)
    follow(fits)
    assert (tracker.depth, len(tracker.logs), tracker.refused) == (MIN_DEPTH, fits, 1)
    assert (2, "t", fits) not in tracker.fetches
    # A new partition no follower fetches does not halve anything: refused too.
    tracker.row(produced(1_000, 0))
    assert (tracker.depth, tracker.refused, len(tracker.logs[("t", 0)].firsts)) == (MIN_DEPTH, 2, MIN_DEPTH)
    assert budget.used(VIEW) == tracker.held_bytes == fits * follower_log_bytes(MIN_DEPTH) == 261_568 <= SHARE


def test_a_second_follower_of_a_partition_is_charged_and_refused_past_the_share() -> None:
    budget = MemoryBudget(BUDGET)
    tracker = ReplicationTracker(max_partitions=100_000, depth=MIN_DEPTH, budget=budget)
    fits = SHARE // follower_log_bytes(MIN_DEPTH)  # 134
    for p in range(fits):
        tracker.row(fetched(p, 0, 0, S, replica=2))
    tracker.row(fetched(0, 0, 0, S, replica=3))  # 576 B were left: a fetch's 384 fit
    assert (tracker.refused, tracker.held_bytes) == (0, fits * follower_log_bytes(MIN_DEPTH) + FETCH_COST)
    tracker.row(fetched(0, 0, 0, S, replica=4))  # this one does not
    assert (tracker.refused, (4, "t", 0) in tracker.fetches) == (1, False)
    assert tracker.logs[("t", 0)].followers == (2, 3)


def test_overlapping_batches_date_an_offset_by_the_earliest_holding_it() -> None:
    """A log truncated and written again (a leader change): offset 80 is in the batch 0..99 requested
    at 1 s, not in the later 50..59; the earliest holding it dates it, as the report's MIN does."""
    tracker = ReplicationTracker(max_partitions=10)
    rows = [
        {"api_key": 0, "topic": "t", "partition": 0, "first_offset": first, "last_offset": last,
         "ts_request": ts, "ts_response": ts + MS}
        for first, last, ts in ((0, 99, 1 * S), (50, 59, 2 * S), (60, 79, 3 * S))
    ]  # fmt: skip
    for row in rows:
        tracker.row(row)
    tracker.row(fetched(0, 80, 100, 4 * S, replica=2))
    assert tracker.fetches[(2, "t", 0)].lag_seconds == 3.0


def test_what_the_lag_trackers_refused_and_forgot_is_on_the_summarys_memory_line() -> None:
    """Through LiveStats in a 64 MiB budget: 300 partitions produced to, then 135 fetched by a
    follower. The lag's indices hold 204 at 16 points; the replication forgets every unfollowed log
    and refuses the 135th follower."""
    stats = LiveStats(collect_pending=True, budget=MemoryBudget(BUDGET))
    for p in range(300):
        stats.row("partitions", produced(p, 0))
    for p in range(135):
        stats.row("partitions", fetched(1_000 + p, 0, 0, S, replica=2))
    totals: Counter[str] = Counter()
    add_view_evictions(totals, stats)
    assert +totals == {  # the counts not zero
        "view_lag_refused": 96 + 135,
        "view_replication_forgotten": 300,
        "view_replication_refused": 1,
    }
    assert memory_line(SimpleNamespace(totals=totals, stats=SimpleNamespace())) == (
        "evicted: 231 rows of partitions the live lag did not follow, 300 replication logs of partitions"
        " no follower fetched, the oldest, 1 rows of partitions the live replication lag did not follow"
    )


def test_a_follower_that_stopped_fetching_is_dropped_and_its_series_removed_with_their_share() -> None:
    """Leadership moved: follower 2 stops fetching partition 0 from this broker while follower 3 keeps
    fetching partition 1. Five minutes of packet time on, follower 2's figures are unknown (its
    series removed, the series cap and budget given back) rather than frozen at their last value,
    and partition 0 holds a short history again."""
    budget = MemoryBudget(BUDGET)
    stats = LiveStats(collect_pending=True, budget=budget)
    tracker = stats.replication
    assert tracker is not None
    for batch in range(100):
        stats.row("partitions", produced(0, batch))
        stats.row("partitions", produced(1, batch))
    stats.row("partitions", fetched(0, 500, 1000, 2 * S, replica=2))  # offset 500: batch 50, 1 s behind
    stats.row("partitions", fetched(1, 1000, 1000, 2 * S, replica=3))
    metrics = Metrics(budget=budget)
    metrics.update(CaptureCounters(), stats.take_pending(), 0)

    def series() -> dict[str, float]:
        return {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in generate_latest(metrics.registry).decode().splitlines()
            if line.startswith("kwsniff_replication_lag_")
        }

    assert series() == {
        'kwsniff_replication_lag_records{follower="2",partition="0",topic="t"}': 500.0,
        'kwsniff_replication_lag_seconds{follower="2",partition="0",topic="t"}': 0.95,
        'kwsniff_replication_lag_records{follower="3",partition="1",topic="t"}': 0.0,
        'kwsniff_replication_lag_seconds{follower="3",partition="1",topic="t"}': 0.0,
    }
    held = metrics.held_bytes
    # Follower 3 fetches every 500 ms for five minutes and a second; follower 2 never again.
    for i in range(1, 2 * 301 + 1):
        stats.row("partitions", fetched(1, 1000, 1000, 2 * S + i * S // 2, replica=3))
    metrics.update(CaptureCounters(), stats.take_pending(), 0)
    assert series() == {
        'kwsniff_replication_lag_records{follower="3",partition="1",topic="t"}': 0.0,
        'kwsniff_replication_lag_seconds{follower="3",partition="1",topic="t"}': 0.0,
    }
    assert sorted(tracker.fetches) == [(3, "t", 1)]
    assert (tracker.stale, ("t", 0) in tracker.unfollowed, len(tracker.logs[("t", 0)].firsts)) == (
        1,
        True,
        64,
    )
    assert metrics.held_bytes == held - metrics._cost("replication", ("2", "t", "0"))
    assert tracker.held_bytes == 2 * PARTITION_COST + (DEPTH_BYTES * (MAX_DEPTH + SHALLOW_DEPTH)) + FETCH_COST
    totals: Counter[str] = Counter()
    add_view_evictions(totals, stats)
    assert +totals == {"view_followers_stale": 1}
    assert memory_line(SimpleNamespace(totals=totals, stats=SimpleNamespace())) == (
        "evicted: 1 followers that stopped fetching a partition"
    )
