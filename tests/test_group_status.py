"""A consumer group's status live (issue 48 goal 2): kwsniff.view.group_status's rule over the
LagTracker, fed `partitions` and `groups` rows whose packet times are the clock, and the gauges."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from types import SimpleNamespace

from prometheus_client import generate_latest
from test_lag_index import BATCH, T0, S, acked, commit, produce

from kwsniff.capture.live import CaptureCounters
from kwsniff.view.group_status import STATUS_WINDOW
from kwsniff.view.lag import LagTracker
from kwsniff.view.metrics import Metrics
from kwsniff.view.stats import LiveStats, add_view_evictions
from kwsniff.view.summary import memory_line

RATE = 10  # batches a second


def run(
    seconds: int, committed: Callable[[int], int | None], tracker: LagTracker | None = None
) -> LagTracker:
    """A producer at RATE batches a second for ``seconds``; every 5 s the group commits
    ``committed(second)`` (batches; None: no commit)."""
    lag = tracker or LagTracker(max_partitions=10)
    for i in range(seconds * RATE):
        lag.row(produce(i, RATE))
        second = i // RATE
        if i % (5 * RATE) == 0 and (batches := committed(second)) is not None:
            lag.row(commit(batches * BATCH, acked(i, RATE)))
    return lag


def status(lag: LagTracker) -> str:
    ((group, topic, state, _last),) = lag.statuses()
    assert (group, topic) == ("g", "t")
    return state


def test_a_group_at_the_watermark_is_ok() -> None:
    assert status(run(120, lambda second: second * RATE)) == "OK"


def test_a_group_whose_lag_rises_at_every_commit_warns() -> None:
    # It consumes 5 batches a second of the 10 produced: 25 more batches behind at each commit.
    assert status(run(120, lambda second: second * RATE // 2)) == "WARN"


def test_a_group_committing_the_same_offset_while_behind_stalls() -> None:
    assert status(run(120, lambda second: 100)) == "STALL"


def test_a_group_that_stops_committing_while_behind_stops_after_the_window() -> None:
    # Keeping up for a minute, then no commit: the last at 60 s (offset of batch 600, the
    # watermark then). Its lag grows from there: the window is judged on packet times.
    lag = run(61, lambda second: second * RATE)
    assert status(lag) == "OK"
    last = acked(600, RATE)
    for i in range(610, 1_300):
        lag.row(produce(i, RATE))
        if acked(i, RATE) - last <= STATUS_WINDOW:
            assert status(lag) == "OK", i  # behind, but its last commit is within the window
        else:
            assert status(lag) == "STOP", i
    ((_group, _topic, _state, last_commit),) = lag.statuses()
    assert last_commit == last


def test_a_group_whose_last_act_was_leaving_has_left_until_it_acts_again() -> None:
    stats = LiveStats(collect_pending=True)
    lag = stats.lag
    assert lag is not None
    run(30, lambda second: 100, lag)
    leave = {"api_key": 13, "group_id": "g", "event": "leave", "ts_request": 31 * S + 1_000 * S}
    stats.row("groups", leave)
    assert status(lag) == "LEFT"
    stats.row("groups", {**leave, "group_id": "other"})  # a group that never committed: not followed
    assert lag.activity.left.keys() == {"g"}
    stats.row("groups", {**leave, "api_key": 12, "event": "heartbeat", "ts_request": leave["ts_request"] + 1})
    assert status(lag) == "STALL"


def test_the_status_gauge_has_one_series_per_state_and_the_last_commit_its_time() -> None:
    stats = LiveStats(collect_pending=True)
    assert stats.lag is not None
    run(120, lambda second: 100, stats.lag)
    metrics = Metrics()
    metrics.update(CaptureCounters(), stats.take_pending(), 0)
    values = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in generate_latest(metrics.registry).decode().splitlines()
        if line.startswith("kwsniff_consumer_group_status")
        or line.startswith("kwsniff_consumer_group_last_commit")
        and not line.startswith("#")
    }
    assert values == {
        **{
            f'kwsniff_consumer_group_status{{group="g",state="{state}",topic="t"}}': float(state == "STALL")
            for state in ("OK", "WARN", "STALL", "STOP", "LEFT", "NEVER_COMMITTED")
        },
        'kwsniff_consumer_group_last_commit_timestamp_seconds{group="g",topic="t"}': acked(115 * RATE, RATE)
        / S,
    }


def test_a_group_whose_clients_fetch_and_never_commit_is_never_committed_until_it_commits() -> None:
    stats = LiveStats(collect_pending=True)
    lag = stats.lag
    assert lag is not None
    client = {"client_id": "audit-1", "client_ip": "10.0.0.7"}
    stats.row("groups", {**client, "api_key": 11, "group_id": "audit", "ts_request": T0})
    fetch = {
        **client,
        "api_key": 1,
        "topic": "t",
        "partition": 0,
        "high_watermark": 10,
        "ts_response": T0 + S,
    }
    stats.row("partitions", fetch)
    stats.row("partitions", {**fetch, "client_id": "someone-else", "topic": "u"})  # no group's client
    assert lag.statuses() == [("audit", "t", "NEVER_COMMITTED", None)]
    metrics = Metrics()
    metrics.update(CaptureCounters(), stats.take_pending(), 0)
    lines = generate_latest(metrics.registry).decode().splitlines()
    status = [
        line for line in lines if line.startswith("kwsniff_consumer_group_status{") and line.endswith(" 1.0")
    ]
    assert status == ['kwsniff_consumer_group_status{group="audit",state="NEVER_COMMITTED",topic="t"} 1.0']
    assert not [
        line for line in lines if line.startswith("kwsniff_consumer_group_last_commit_timestamp_seconds{")
    ]
    # It commits: followed as the others, from then on.
    stats.row("partitions", {**commit(10, T0 + 2 * S, "audit"), **client})
    assert [s[:3] for s in lag.statuses()] == [("audit", "t", "OK")]
    # A group that never committed and left is LEFT.
    stats.row("groups", {**client, "api_key": 11, "group_id": "audit-2", "ts_request": T0 + 3 * S})
    stats.row("partitions", {**fetch, "ts_response": T0 + 4 * S})
    stats.row(
        "groups", {**client, "api_key": 13, "group_id": "audit-2", "event": "leave", "ts_request": T0 + 5 * S}
    )
    assert sorted(s[:3] for s in lag.statuses()) == [("audit", "t", "OK"), ("audit-2", "t", "LEFT")]


def test_statuses_are_judged_at_most_once_per_five_seconds_of_packet_time() -> None:
    stats = LiveStats(collect_pending=True)
    assert stats.lag is not None
    run(30, lambda second: 100, stats.lag)  # the latest packet at 29.9 s
    assert [s[2] for s in stats.take_pending().statuses] == ["STALL"]
    stats.row("partitions", produce(30 * RATE + 48, RATE))  # 4.9 s later: not yet
    assert stats.take_pending().statuses == []
    stats.row("partitions", produce(30 * RATE + 49, RATE))  # 5 s later
    assert [s[2] for s in stats.take_pending().statuses] == ["STALL"]


def test_a_shorter_window_stops_a_group_that_many_seconds_after_its_last_commit() -> None:
    # `capture --group-status-seconds 5`: the same keeping-up group as above, STOP 5 s after its
    # last commit instead of 60 s.
    window = 5 * S
    lag = run(61, lambda second: second * RATE, LagTracker(max_partitions=10, status_window=window))
    last = acked(600, RATE)
    for i in range(610, 700):
        lag.row(produce(i, RATE))
        assert status(lag) == ("OK" if acked(i, RATE) - last <= window else "STOP"), i
    assert status(lag) == "STOP"


def test_requests_of_a_removed_version_are_counted_per_client_api_version_and_release() -> None:
    stats = LiveStats(collect_pending=True)
    old = {"api_name": "Produce", "api_key": 0, "api_version": 2, "removed_in": "4.0", "client_id": "legacy"}
    for row in (old, old, {**old, "client_id": None}, {**old, "api_version": 3, "removed_in": None}):
        stats.row("requests", row)
    metrics = Metrics()
    metrics.update(CaptureCounters(), stats.take_pending(), 0)
    values = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in generate_latest(metrics.registry).decode().splitlines()
        if line.startswith("kwsniff_client_removed_version_requests_total")
    }
    assert values == {
        'kwsniff_client_removed_version_requests_total{api="Produce",api_version="2",client_id="legacy",removed_in="4.0"}': 2.0,
        'kwsniff_client_removed_version_requests_total{api="Produce",api_version="2",client_id="",removed_in="4.0"}': 1.0,
    }


def heartbeat(member: str, t: float, event: str = "heartbeat", error: int = 0) -> dict:
    """A ConsumerGroupHeartbeat (KIP-848) of ``member`` in group g at ``t`` seconds."""
    return {"api_key": 68, "group_id": "g", "member_id": member, "event": event, "error_code": error,
            "ts_request": T0 + int(t * S)}  # fmt: skip


def test_a_kip_848_groups_members_are_its_heartbeating_members_until_they_go() -> None:
    stats = LiveStats(collect_pending=True)
    metrics = Metrics()

    def members(*rows: dict, clock: float | None = None) -> str:
        for row in rows:
            stats.row("groups", row)
        if clock is not None:
            stats.row("partitions", produce(int(clock * RATE), RATE))  # the packet clock moves on
        metrics.update(CaptureCounters(), stats.take_pending(), 0)
        (line,) = [
            x for x in generate_latest(metrics.registry).decode().splitlines()
            if x.startswith("kwsniff_consumer_group_members{")
        ]  # fmt: skip
        return line.rsplit(" ", 1)[1]

    assert members(heartbeat("a", 1, "join"), heartbeat("b", 1.5, "join"), heartbeat("a", 6)) == "2.0"
    # b leaves (epoch -1); a is fenced and joins again; c is unknown to the coordinator.
    assert members(heartbeat("b", 7, "leave"), heartbeat("c", 7, "join")) == "2.0"
    assert members(heartbeat("a", 8, "fenced", 110), heartbeat("c", 8, "error", 25)) == "0.0"
    assert members(heartbeat("a", 9, "join"), heartbeat("a", 14)) == "1.0"
    # A coordinator error says nothing of the member; silence past the session timeout (45 s) does.
    assert members(heartbeat("a", 15, "error", 14), clock=14 + 45) == "1.0"
    assert members(clock=14 + 45.1) == "0.0"


def test_a_group_not_seen_for_the_expiry_is_forgotten_with_its_series_and_a_quiet_partition_with_it() -> None:
    """A month unattended: groups come and go (console consumers, tests, renamed services). One not
    seen acting for `--group-expiry` (packet time) is forgotten: its lags, clients and status, and
    every series of it is removed from the endpoint with its share of the series budget; a partition
    no group follows that had no event for as long goes too. A group still acting stays."""
    hour = 3600 * S
    stats = LiveStats(collect_pending=True, group_expiry=hour)
    lag = stats.lag
    assert lag is not None
    client = {"client_id": "audit-1", "client_ip": "10.0.0.7"}
    stats.row("groups", {**client, "api_key": 11, "group_id": "audit", "ts_request": T0})
    stats.row(
        "partitions",
        {**client, "api_key": 1, "topic": "t", "partition": 0, "high_watermark": 10, "ts_response": T0},
    )
    stats.row("partitions", produce(0, RATE))
    stats.row("partitions", {**produce(0, RATE), "topic": "u"})  # a partition no group follows
    stats.row("partitions", commit(5, T0 + S, "old"))
    stats.row("partitions", commit(5, T0 + S, "g"))
    metrics = Metrics()
    metrics.update(CaptureCounters(), stats.take_pending(), 0)

    def groups_in_series() -> set[str]:
        text = generate_latest(metrics.registry).decode()
        return {
            line.split('group="')[1].split('"')[0]
            for line in text.splitlines()
            if line.startswith("kwsniff_consumer_group") and 'group="' in line
        }

    assert groups_in_series() == {"audit", "old", "g"}
    # Two hours on, only g commits again (and a batch is produced on t).
    later = T0 + 2 * hour
    stats.row("partitions", {**produce(1, RATE), "ts_response": later, "ts_request": later})
    stats.row("partitions", commit(15, later, "g"))
    pending = stats.take_pending()
    assert sorted(pending.forgotten) == ["audit", "old"]
    metrics.update(CaptureCounters(), pending, 0)
    assert groups_in_series() == {"g"}
    assert sorted(lag.lags) == [("g", "t", 0)]
    assert (lag.group_clients, lag.uncommitted, sorted(lag.logs)) == ({}, {}, [("t", 0)])
    assert (lag.expired_groups, lag.expired_partitions) == (2, 1)
    # What the endpoint still holds is charged, and no more.
    assert {key[1][0] for key in metrics._series if key[0] in ("lag", "status", "group")} == {"g"}
    assert metrics.held_bytes == sum(metrics._cost(m, labels) for m, labels in metrics._series)
    # A forgotten group that comes back is followed again from its next commit.
    stats.row("partitions", commit(15, later + S, "old"))
    assert sorted(s[:2] for s in lag.statuses()) == [("g", "t"), ("old", "t")]
    totals: Counter[str] = Counter()
    add_view_evictions(totals, stats)
    assert +totals == {"view_groups_expired": 2}
    assert memory_line(SimpleNamespace(totals=totals, stats=SimpleNamespace())) == (
        "evicted: 2 consumer groups not seen for --group-expiry"
    )
