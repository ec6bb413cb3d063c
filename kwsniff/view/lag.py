"""Consumer-group lag as the capture goes, from `partitions` rows as they are decoded.

The definition is the report's `lag` section (kwsniff/sections/sections_lag.py, over the shared views
of kwsniff/sections/views.py), evaluated incrementally instead of over the whole capture:

- a partition's high watermark is the largest one seen so far: Fetch responses' `high_watermark`,
  and each acknowledged Produce batch's `last_offset + 1` (the `watermarks` view);
- a group's commit on a partition is its latest by time (OffsetCommit at its request, OffsetFetch at
  its response; `committed_offset >= 0`, no error), the largest offset among commits of the same
  time (the `commits` and `commits_dated` views);
- at each event (a commit of the group, a new watermark of the partition) the lag is
  `high watermark - committed offset` records, and in seconds 0 when caught up, else the event's
  time minus the acknowledgement time of the Produce batch holding the committed offset (the
  earliest, if several). The report's fallback to a record's own timestamp (`records` table) is
  not followed here: that lag in seconds stays unknown.

What differs from the report: the report keeps each second's worst value, this keeps the value at
the latest event; rows decoded out of time order (several workers) count when they are decoded, a
commit older than the latest watermark being judged at that watermark's time. Offsets are dated by
each partition's :class:`~kwsniff.view.offset_times.OffsetTimes`, which holds at most ``max_points``
batches spread over the whole capture: an offset in a batch it no longer holds is interpolated
between the batches around it; an offset older than every batch it holds has no lag in seconds but
a lower bound (``lag_lower_bound``): the event's time minus when the capture first saw the offset
readable.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kwsniff.defaults import int64_or_none
from kwsniff.memory import VIEW, VIEW_LAG, MemoryBudget, view_cap
from kwsniff.view.group_status import (
    KEPT_COMMITS,
    LEFT,
    NEVER_COMMITTED,
    STATUS_WINDOW,
    GroupActivity,
    partition_state,
    worst,
)
from kwsniff.view.offset_times import MAX_POINTS, POINT_BYTES, OffsetTimes

PRODUCE, FETCH, OFFSET_COMMIT, OFFSET_FETCH = 0, 1, 8, 9


@dataclass
class PartitionLog:
    """What the capture knows of one partition's log."""

    topic: str
    partition: int
    high_watermark: int | None = None
    # When the latest watermark was seen: rows of several workers come out of time order, and a
    # commit decoded after a later watermark is judged at that watermark, the latest event known.
    watermark_ts: int = 0
    # When its offsets were acknowledged (a bounded offset-to-time index).
    times: OffsetTimes = field(default_factory=OffsetTimes)
    groups: set[str] = field(default_factory=set)  # the groups that committed on it


@dataclass
class GroupLag:
    """One group on one partition: its latest commit and the lag at the latest event."""

    commit_ts: int
    committed_offset: int
    produced_at: int | None = None  # ack time of a held batch holding committed_offset, once known
    at: int = 0  # the event the figures below were evaluated at (µs)
    offset_lag: int | None = None
    lag_seconds: float | None = None
    # When the committed offset is older than every batch held: at least this many seconds behind
    # (lag_seconds is then None); else None.
    lag_lower_bound: float | None = None
    # The latest commits (time, offset, lag in records then), for the group's status.
    commits: deque[tuple[int, int, int | None]] = field(default_factory=lambda: deque(maxlen=KEPT_COMMITS))


Key = tuple[str, str, int]  # group, topic, partition
# What a partition's log costs beside its points: the PartitionLog, its OffsetTimes and their dict
# entries (tracemalloc over 10,000 logs with no point: about 850 B).
PARTITION_COST = 896
# A group not seen acting for this long is forgotten (`capture --group-expiry`), as Burrow's
# expire-group does: a month's ephemeral groups (console consumers, tests) do not fill the bounds.
GROUP_EXPIRY = 7 * 86_400 * 1_000_000
EXPIRE_EVERY = 60 * 1_000_000  # µs of packet time between two sweeps for expired groups
MIN_POINTS = 16  # the fewest points a partition's index is shrunk to before new partitions are refused
Client = tuple[str, str]  # client id, client address


L = TypeVar("L")
K = TypeVar("K")


class PartitionLogs(Generic[L, K]):
    """What the live trackers share (LagTracker here, kwsniff.view.replication's ReplicationTracker):
    one log per (topic, partition), made by ``new_log`` and bounded by ``max_partitions`` (new ones
    past it are refused and counted in ``refused``), and the keys whose figures moved."""

    def __init__(self, max_partitions: int, new_log: Callable[[str, int], L]) -> None:
        self.max_partitions = max_partitions
        self.new_log = new_log
        self.logs: dict[tuple[str, int], L] = {}
        self.changed: set[K] = set()
        self.refused = 0  # rows of partitions past max_partitions

    def take_changed(self) -> set[K]:
        changed, self.changed = self.changed, set()
        return changed

    def _room(self) -> bool:
        """Whether one more log may be made (a subclass's budget)."""
        return True

    def _log(self, topic: str, partition: int) -> L | None:
        log = self.logs.get((topic, partition))
        if log is None:
            if len(self.logs) >= self.max_partitions or not self._room():
                self.refused += 1
                return None
            log = self.logs[(topic, partition)] = self.new_log(topic, partition)
        return log


class LagTracker(PartitionLogs[PartitionLog, Key]):
    """Feed it `partitions` rows; :meth:`take_changed` gives the (group, topic, partition) whose
    figures moved. ``max_partitions`` bounds the partitions followed (new ones past it are refused
    and counted in ``refused``); the groups per partition are bounded by the caller's series cap."""

    def __init__(
        self,
        max_partitions: int,
        max_points: int = MAX_POINTS,
        status_window: int = STATUS_WINDOW,
        budget: MemoryBudget | None = None,
        group_expiry: int | None = GROUP_EXPIRY,
    ) -> None:
        super().__init__(
            max_partitions,
            lambda topic, partition: PartitionLog(topic, partition, times=OffsetTimes(self.points)),
        )
        self.max_points = self.points = max_points
        # The offset indices are charged to an eighth of the budget's view pool (docs/memory.md):
        # each partition at its current capacity. When more partitions would pass it, every index
        # is halved (down to MIN_POINTS: dated less finely), then new partitions are refused.
        self.pool = budget.cell(VIEW) if budget is not None else [0]
        self.byte_cap = view_cap(budget, VIEW_LAG) if budget is not None else None
        self.held_bytes = 0
        self.status_window = status_window  # µs (kwsniff.view.group_status)
        self.lags: dict[Key, GroupLag] = {}
        self.activity = GroupActivity()
        self.now = 0  # the latest packet time of a row followed: the status's clock
        # The report's `group_clients` and `never_committed`: each client's group (from its group
        # exchanges), and the topics fetched by a group's clients while it has not committed. Both
        # bounded by ``max_partitions``, as the partitions are.
        self.group_clients: dict[Client, str] = {}
        self.client_seen: dict[Client, int] = {}  # each client's latest group exchange (µs)
        self.committed_groups: set[str] = set()
        self.uncommitted: dict[tuple[str, str], int] = {}  # (group, topic): its latest fetch (µs)
        # A month unattended: a group not seen acting for ``group_expiry`` µs (packet time) is
        # forgotten with its lags, clients and status (:meth:`expire`), as are partitions no group
        # follows with no event for as long; None: never.
        self.group_expiry = group_expiry
        self.expired_groups = 0  # groups forgotten so far
        self.expired_partitions = 0
        self._expired_at = 0  # the packet time of the last sweep

    def _room(self) -> bool:
        """One more partition's index within the lag's share: the indices halved while it does not fit."""
        cap = self.byte_cap
        if cap is None:
            return True
        partitions = len(self.logs) + 1

        def charge(points: int) -> int:
            return partitions * (points * POINT_BYTES + PARTITION_COST)

        points = self.points
        while charge(points) > cap and points > MIN_POINTS:
            points //= 2
        if charge(points) > cap:
            return False
        if points != self.points:
            self.points = points
            for log in self.logs.values():
                log.times.shrink(points)
        self._charge(points, partitions)
        return True

    def _charge(self, points: int, partitions: int | None = None) -> None:
        """Charge the pool for ``partitions`` (default: those held) indices of ``points`` points."""
        if self.byte_cap is None:
            return
        held = len(self.logs) if partitions is None else partitions
        charged = held * (points * POINT_BYTES + PARTITION_COST)
        self.pool[0] += charged - self.held_bytes
        self.held_bytes = charged

    def group_row(self, row: dict[str, Any]) -> None:
        """A `groups` row: a group's exchange, or its leaving (for its status)."""
        group, client, address = row.get("group_id"), row.get("client_id"), row.get("client_ip")
        if group is not None and client is not None and address is not None:
            clients = self.group_clients
            if (client, address) in clients or len(clients) < self.max_partitions:
                clients[(client, address)] = group
                ts_client = row.get("ts_request")
                if ts_client is not None:
                    seen = self.client_seen
                    seen[(client, address)] = max(ts_client, seen.get((client, address), ts_client))
            else:
                self.refused += 1
        self.activity.row(row)
        ts = row.get("ts_request")
        if ts is not None and group in self.activity.active:
            self.now = max(self.now, ts)

    def statuses(self) -> list[tuple[str, str, str, int | None]]:
        """(group, topic, state, latest commit µs) of every group followed, at the latest time seen
        (kwsniff.view.group_status); a group that fetched and never committed has no latest commit."""
        judged: dict[tuple[str, str], tuple[list[str], int]] = {}
        for (group, topic, _partition), lag in self.lags.items():
            states, last = judged.setdefault((group, topic), ([], lag.commit_ts))
            left = self.activity.has_left(group)
            state = partition_state(lag.commits, lag.offset_lag, self.now, left, self.status_window)
            if state is not None:
                states.append(state)
            judged[(group, topic)] = (states, max(last, lag.commit_ts))
        followed = [
            (group, topic, worst(states), last) for (group, topic), (states, last) in judged.items() if states
        ]
        # A group fetching that never committed: no lag, no last commit; LEFT once it left.
        return followed + [
            (group, topic, LEFT if self.activity.has_left(group) else NEVER_COMMITTED, None)
            for group, topic in self.uncommitted
        ]

    def row(self, row: dict[str, Any]) -> None:
        get = row.get
        api, topic, partition = get("api_key"), get("topic"), get("partition")
        if topic is None or partition is None:  # the report's joins never match a null topic
            return
        if api == PRODUCE:
            first, last, ts = get("first_offset"), get("last_offset"), get("ts_response")
            if first is not None and last is not None and ts is not None:
                log = self._log(topic, partition)
                if log is not None:
                    self._batch(log, first, last, ts)
                    self._watermark(log, topic, partition, last + 1, ts)
        elif api == FETCH:
            hwm, ts = get("high_watermark"), get("ts_response")
            if hwm is not None and ts is not None:
                log = self._log(topic, partition)
                if log is not None:
                    self._watermark(log, topic, partition, hwm, ts)
            if ts is not None and self.group_clients:
                self._fetched(topic, get("client_id"), get("client_ip"), ts)
        elif api in (OFFSET_COMMIT, OFFSET_FETCH):
            offset, group, error = get("committed_offset"), get("group_id"), get("error_code")
            ts = get("ts_request") if api == OFFSET_COMMIT else get("ts_response")
            if offset is not None and offset >= 0 and group is not None and not error and ts is not None:
                log = self._log(topic, partition)
                if log is not None:
                    self._commit(log, (group, topic, partition), offset, ts)

    def expire(self) -> list[str]:
        """Forget the groups not seen acting (a commit, a fetch by their clients, a group exchange)
        for ``group_expiry`` µs of packet time: their lags, clients, statuses and activity, and the
        partitions no group follows that had no event for as long (their indices' bytes released).
        At most once a minute of packet time; returns the groups forgotten (the metrics remove their
        series)."""
        if self.group_expiry is None or self.now < self._expired_at + EXPIRE_EVERY:
            return []
        self._expired_at = self.now
        cutoff = self.now - self.group_expiry
        activity = self.activity
        seen = {g: ts for g, ts in activity.active.items()}
        for g, ts in activity.left.items():
            seen[g] = max(ts, seen.get(g, ts))
        for client, group in self.group_clients.items():
            ts = self.client_seen.get(client, 0)
            seen[group] = max(ts, seen.get(group, ts))
        gone = {g for g, ts in seen.items() if ts < cutoff}
        if gone:
            for key in [k for k in self.lags if k[0] in gone]:
                self.forget(key)
                self.changed.discard(key)
            self.group_clients = {c: g for c, g in self.group_clients.items() if g not in gone}
            self.client_seen = {c: ts for c, ts in self.client_seen.items() if c in self.group_clients}
            self.uncommitted = {k: ts for k, ts in self.uncommitted.items() if k[0] not in gone}
            self.committed_groups -= gone
            for g in gone:
                activity.active.pop(g, None)
                activity.left.pop(g, None)
            self.expired_groups += len(gone)
        stale = [k for k, log in self.logs.items() if not log.groups and log.watermark_ts < cutoff]
        if stale:
            for k in stale:
                del self.logs[k]
            self.expired_partitions += len(stale)
            self._charge(self.points)
        return sorted(gone)

    def forget(self, key: Key) -> None:
        """Stop following a group on a partition (its series was refused by the cap)."""
        self.lags.pop(key, None)
        log = self.logs.get(key[1:])
        if log is not None:
            log.groups.discard(key[0])

    # -- events --------------------------------------------------------------------------------------
    def _fetched(self, topic: str, client: str | None, address: str | None, ts: int) -> None:
        """A Fetch of ``topic`` by a client of a group that has not committed (yet)."""
        group = (
            self.group_clients.get((client, address)) if client is not None and address is not None else None
        )
        if group is None or group in self.committed_groups:
            return
        key = (group, topic)
        if key not in self.uncommitted and len(self.uncommitted) >= self.max_partitions:
            self.refused += 1
            return
        self.uncommitted[key] = max(ts, self.uncommitted.get(key, ts))
        self.activity.acted(group, ts)

    def _batch(self, log: PartitionLog, first: int, last: int, ts: int) -> None:
        log.times.add(first, last, ts)
        # A group whose committed offset this batch holds can now be dated.
        for group in log.groups:
            lag = self.lags.get((group, log.topic, log.partition))
            dates = lag is not None and first <= lag.committed_offset <= last
            if lag is not None and dates and (lag.produced_at is None or ts < lag.produced_at):
                lag.produced_at = ts

    def _watermark(self, log: PartitionLog, topic: str, partition: int, hwm: int, ts: int) -> None:
        self.now = max(self.now, ts)
        if log.high_watermark is None or hwm > log.high_watermark:
            log.high_watermark = hwm
        log.times.watermarked(hwm, ts)
        log.watermark_ts = max(log.watermark_ts, ts)
        for group in log.groups:
            self._evaluate((group, topic, partition), log, ts)

    def _commit(self, log: PartitionLog, key: Key, offset: int, ts: int) -> None:
        lag = self.lags.get(key)
        if lag is None:
            lag = self.lags[key] = GroupLag(ts, offset)
            log.groups.add(key[0])
            if key[0] not in self.committed_groups:
                self.committed_groups.add(key[0])
                for fetched in [k for k in self.uncommitted if k[0] == key[0]]:
                    del self.uncommitted[fetched]
        elif (ts, offset) > (lag.commit_ts, lag.committed_offset):
            lag.commit_ts, lag.committed_offset, lag.produced_at = ts, offset, None
        else:
            return
        self.now = max(self.now, ts)
        self.activity.acted(key[0], ts)
        self._evaluate(key, log, ts)
        lag.commits.append((ts, offset, lag.offset_lag))

    def _evaluate(self, key: Key, log: PartitionLog, ts: int) -> None:
        lag = self.lags[key]
        # The high watermark held is the latest seen: judged at an earlier time it would count
        # records not yet produced then (and lag in seconds would come out negative).
        ts = max(ts, log.watermark_ts)
        if ts < lag.at:  # a row decoded late: the figures stay those of the latest event
            return
        lag.at = ts
        hwm, committed = log.high_watermark, lag.committed_offset
        # A lag past int64 (a watermark near 2^63 over a commit near -2^63) is unknown, as the
        # partitions table's lag is (docs/tables.md "Values past int64").
        lag.lag_lower_bound = None
        if hwm is None:
            lag.offset_lag = lag.lag_seconds = None
        elif committed >= hwm:
            lag.offset_lag, lag.lag_seconds = int64_or_none(hwm - committed), 0.0
        else:
            lag.offset_lag = int64_or_none(hwm - committed)
            produced: float | None = lag.produced_at
            if produced is None:
                produced, exact = log.times.date(committed)
                if exact and produced is not None:
                    lag.produced_at = int(produced)  # held: a later thinning cannot move it
            if produced is not None:
                lag.lag_seconds = (ts - produced) / 1e6
            else:
                lag.lag_seconds = None
                readable = log.times.readable_by(committed)
                lag.lag_lower_bound = None if readable is None else (ts - readable) / 1e6
        self.changed.add(key)
