"""What the live view and the metrics show, aggregated from the rows themselves.

:class:`StatsSink` wraps the real sink: every row passes through it on its way to Parquet, so the
screen and the Parquet files can never disagree about what was decoded. The decode thread adds rows;
the view thread takes :meth:`LiveStats.take_window` snapshots under a lock.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kwsniff.memory import TOTAL_COST, VIEW, VIEW_TOTALS, MemoryBudget, view_cap
from kwsniff.protocol import error_expected
from kwsniff.rows import RowSink
from kwsniff.view.group_members import HEARTBEAT_APIS, HeartbeatMembers
from kwsniff.view.group_status import STATUS_WINDOW
from kwsniff.view.lag import GROUP_EXPIRY, LagTracker
from kwsniff.view.replication import ReplicationTracker

# Latencies kept per API per window for the percentiles; past it the window keeps every n-th.
MAX_LATENCIES = 4096


@dataclass
class Window:
    """Rows of one view interval (reset by take_window)."""

    requests: Counter[str] = field(default_factory=Counter)
    latencies_ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


@dataclass
class Totals:
    """Everything since the capture started."""

    requests: Counter[str] = field(default_factory=Counter)
    # error name -> rows of the `errors` table: every non-zero error code anywhere in a response
    # (per topic, partition, group...), not only the top-level one that `requests.error_code` holds.
    errors: Counter[str] = field(default_factory=Counter)
    produced_bytes: Counter[str] = field(default_factory=Counter)  # topic -> record bytes in Produce requests
    fetched_bytes: Counter[str] = field(default_factory=Counter)  # topic -> record bytes in Fetch responses
    throttled: Counter[str] = field(default_factory=Counter)  # client_id -> throttled responses
    connections_closed: int = 0  # rows of the `connections` table
    gaps: int = 0  # of closed connections: holes in their TCP streams (the capture lost the bytes)
    gap_bytes: int = 0
    # The three keyed by the wire (topic, client id) are held within their share of the view pool:
    # what they hold, and the entries forgotten to stay there (the smallest first).
    held_bytes: int = 0
    evicted: int = 0
    evicted_bytes: int = 0


class Pending(NamedTuple):
    """What the metrics have not yet seen (kwsniff.view.metrics.Metrics.update takes it)."""

    # (api, broker or None, latency_s or None, client id or None) per `requests` row
    requests: list[tuple[str, str | None, float | None, str | None]]
    # (error name, api, client id or None, expected: kwsniff.protocol.error_expected) per `errors` row
    errors: list[tuple[str, str, str | None, bool]]
    # (topic, api, records, bytes, client id or None) per Produce request or Fetch response
    # partition with record batches
    topics: list[tuple[str, str, int, int, str | None]]
    # (group, topic, partition) whose lag moved, with its lag in records, in seconds, and the lower
    # bound of its lag in seconds when the committed offset is older than every batch held
    lags: list[tuple[tuple[str, str, int], int | None, float | None, float | None]]
    # (group, members, ts_us) per successful JoinGroup response that named the members (classic
    # protocol: only the group's leader is sent the member list, at each rebalance), and per change
    # of a KIP-848 (share, streams) group's members (kwsniff.view.group_members), its new epoch
    joins: list[tuple[str, int, int]]
    # (replica id, topic, partition) of a follower whose replication lag moved, in records and seconds
    replication: list[tuple[tuple[int, str, int], int | None, float | None]]
    # (group, topic, state, latest commit µs) of every group followed (kwsniff.view.group_status)
    statuses: list[tuple[str, str, str, int | None]]  # group, topic, state, last commit (µs)
    # (client id or "", api, version, first release refusing it) per request of a version some
    # Apache Kafka release refuses (requests.removed_in, docs/upgrade.md)
    removed: list[tuple[str, str, int, str]]
    # groups the lag forgot, not seen acting for `--group-expiry` (their series are removed)
    forgotten: list[str]


def no_pending() -> Pending:
    return Pending([], [], [], [], [], [], [], [], [])


JOIN_GROUP = 11
# The partitions rows the lag follows (docs/live-capture.md "Metrics"): Produce, Fetch, OffsetCommit,
# OffsetFetch.
LAG_APIS = frozenset({0, 1, 8, 9})
# The partitions rows replication lag follows: Produce (when the log reached an offset), Fetch.
REPLICATION_APIS = frozenset({0, 1})
# Group statuses are judged for every group at most once per this much packet time (µs): a sweep
# of 10,000 groups' partitions takes about 0.1 s, and the status window is a minute.
STATUS_EVERY = 5 * 1_000_000
MAX_LAG_PARTITIONS = 100_000  # partitions whose log the lag follows; past it they are refused, counted


class LiveStats:
    """Counters fed from rows (decode thread), read by the view and the metrics (other threads).

    The totals keyed by what the wire says (topics, client ids) are charged to a quarter of the
    budget's view pool (the metrics take the rest): past it the entries with the smallest counts are
    forgotten until they hold 7/8 of it, and counted (docs/memory.md). The view ranks the largest,
    which stay."""

    def __init__(
        self,
        collect_pending: bool = False,
        budget: MemoryBudget | None = None,
        status_window: int = STATUS_WINDOW,
        group_expiry: int | None = GROUP_EXPIRY,
    ) -> None:
        self.lock = threading.Lock()
        self.collect_pending = collect_pending
        self.window = Window()
        self.totals = Totals()
        self.pool = budget.cell(VIEW) if budget is not None else [0]
        self.cap = view_cap(budget, VIEW_TOTALS) if budget is not None else None
        # Per-batch deltas for the metrics.
        self.pending = no_pending()
        # Consumer-group lag as the rows come (the metrics' lag gauges), when metrics are served.
        # The groups' statuses are judged over status_window µs (`capture --group-status-seconds`).
        self.lag = (
            LagTracker(
                MAX_LAG_PARTITIONS, status_window=status_window, budget=budget, group_expiry=group_expiry
            )
            if collect_pending
            else None
        )
        self.judged_at: int | None = None  # the packet time of the last status sweep
        # Followers' replication lag (the metrics' replication gauges), the same bound on partitions.
        self.replication = ReplicationTracker(MAX_LAG_PARTITIONS, budget=budget) if collect_pending else None
        # KIP-848 (share, streams) groups' members, from their heartbeats (the members gauge).
        self.members = HeartbeatMembers() if collect_pending else None

    def row(self, table: str, row: dict[str, Any]) -> None:
        # Rows are read with .get: a table's rows carry only the columns known for that exchange
        # (a response whose request was lost has no request facts), the sink fills in the nulls.
        get = row.get
        if table == "requests":
            api = get("api_name") or f"api_{get('api_key')}"
            latency = get("latency_ms")
            throttle = get("throttle_time_ms")
            with self.lock:
                self.window.requests[api] += 1
                self.totals.requests[api] += 1
                if latency is not None:
                    kept = self.window.latencies_ms[api]
                    if len(kept) < MAX_LATENCIES:
                        kept.append(latency)
                if throttle:
                    self._add(self.totals.throttled, get("client_id") or "?", 1)
                if self.collect_pending:
                    # The metrics' broker label: the row's own broker end (ip:port).
                    ip = get("broker_ip")
                    broker = None if ip is None else f"{ip}:{get('broker_port')}"
                    self.pending.requests.append(
                        (api, broker, None if latency is None else latency / 1000, get("client_id"))
                    )
                    removed_in, version = get("removed_in"), get("api_version")
                    if removed_in is not None and version is not None:
                        client = get("client_id") or ""
                        self.pending.removed.append((client, api, version, removed_in))
        elif table == "errors":
            # Counted like the table counts them, so the view never disagrees with it.
            error = get("error_name") or f"error_{get('error_code')}"
            with self.lock:
                self.totals.errors[error] += 1
                if self.collect_pending:
                    expected = error_expected(get("error_code"), get("api_key"))
                    api = get("api_name") or f"api_{get('api_key')}"
                    self.pending.errors.append((error, api, get("client_id"), expected))
        elif table == "partitions":
            record_bytes = get("record_bytes")
            api = get("api_name")
            if record_bytes and api in ("Produce", "Fetch"):
                topic = get("topic") or get("topic_id") or "?"
                with self.lock:
                    totals = self.totals
                    self._add(
                        totals.produced_bytes if api == "Produce" else totals.fetched_bytes,
                        topic,
                        record_bytes,
                    )
                    if self.collect_pending:
                        self.pending.topics.append(
                            (topic, api, get("record_count") or 0, record_bytes, get("client_id"))
                        )
            if self.lag is not None and get("api_key") in LAG_APIS:
                with self.lock:
                    self.lag.row(row)
            if self.replication is not None and get("api_key") in REPLICATION_APIS:
                with self.lock:
                    self.replication.row(row)
        elif table == "groups":
            if self.lag is not None:
                with self.lock:
                    self.lag.group_row(row)
            if self.members is not None and get("api_key") in HEARTBEAT_APIS:
                with self.lock:
                    self.members.row(row)
            if (
                self.collect_pending
                and get("api_key") == JOIN_GROUP
                and get("error_code") == 0
                and get("members")
            ):
                group, ts = get("group_id"), get("ts_response")
                if group is not None and ts is not None:
                    with self.lock:
                        self.pending.joins.append((group, row["members"], ts))
        elif table == "connections":
            with self.lock:
                self.totals.connections_closed += 1
                self.totals.gaps += get("gaps") or 0
                self.totals.gap_bytes += get("gap_bytes") or 0

    def _add(self, counts: Counter[str], key: str, n: int) -> None:
        """``counts[key] += n``, a new key charged to the pool (under the lock)."""
        if key in counts:
            counts[key] += n
            return
        counts[key] = n
        cost = sys.getsizeof(key) + TOTAL_COST
        totals = self.totals
        totals.held_bytes += cost
        self.pool[0] += cost
        if self.cap is not None and totals.held_bytes > self.cap:
            self._evict(self.cap)

    def _evict(self, cap: int) -> None:
        """The entries with the smallest counts go until the totals hold 7/8 of ``cap``."""
        totals = self.totals
        entries = sorted(
            (n, i, key)
            for i, counts in enumerate((totals.produced_bytes, totals.fetched_bytes, totals.throttled))
            for key, n in counts.items()
        )
        by_index = (totals.produced_bytes, totals.fetched_bytes, totals.throttled)
        target, freed, evicted = cap - cap // 8, 0, 0
        for _n, i, key in entries:
            if totals.held_bytes - freed <= target:
                break
            del by_index[i][key]
            freed += sys.getsizeof(key) + TOTAL_COST
            evicted += 1
        totals.held_bytes -= freed
        self.pool[0] -= freed
        totals.evicted += evicted
        totals.evicted_bytes += freed

    def take_window(self) -> Window:
        with self.lock:
            window, self.window = self.window, Window()
        return window

    def take_pending(self) -> Pending:
        with self.lock:
            pending, self.pending = self.pending, no_pending()
            if self.lag is not None:
                lags = self.lag.lags
                pending.lags.extend(
                    (key, lags[key].offset_lag, lags[key].lag_seconds, lags[key].lag_lower_bound)
                    for key in self.lag.take_changed()
                )
                now = self.lag.now
                if self.judged_at is None or now >= self.judged_at + STATUS_EVERY:
                    pending.forgotten.extend(self.lag.expire())
                    pending.statuses.extend(self.lag.statuses())
                    self.judged_at = now
            if self.members is not None:
                clock = self.lag.now if self.lag is not None else 0
                pending.joins.extend(self.members.take_changed(clock))
            if self.replication is not None:
                fetches = self.replication.fetches
                pending.replication.extend(
                    (key, fetches[key].lag_records, fetches[key].lag_seconds)
                    for key in self.replication.take_changed()
                )
                # Followers gone stale (leadership moved): their figures are unknown now.
                pending.replication.extend((key, None, None) for key in self.replication.expire())
        return pending


def add_view_evictions(totals: Counter[str], stats: LiveStats) -> None:
    """What the live view's totals forgot and its lag trackers refused, into a capture result's totals
    (its summary's memory line)."""
    totals["view_totals_evicted"] += stats.totals.evicted
    totals["view_totals_evicted_bytes"] += stats.totals.evicted_bytes
    # What the lag trackers did not follow or forgot past their shares (only when they did).
    counts = {
        "view_lag_refused": stats.lag.refused if stats.lag is not None else 0,
        "view_replication_refused": stats.replication.refused if stats.replication is not None else 0,
        "view_replication_forgotten": stats.replication.forgotten if stats.replication is not None else 0,
        # Not seen for long: groups (--group-expiry) and followers (five minutes) forgotten.
        "view_groups_expired": stats.lag.expired_groups if stats.lag is not None else 0,
        "view_followers_stale": stats.replication.stale if stats.replication is not None else 0,
    }
    totals.update({key: n for key, n in counts.items() if n})


class StatsSink:
    """A RowSink that passes every row to ``stats`` and then to ``sink``."""

    def __init__(self, sink: RowSink, stats: LiveStats) -> None:
        self.sink = sink
        self.stats = stats

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.stats.row(table, row)
        self.sink.add(table, row)


def percentile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank percentile (q in 0..1) of a sorted, non-empty list."""
    rank = max(1, -(-len(sorted_values) * q // 1))
    return sorted_values[int(rank) - 1]
