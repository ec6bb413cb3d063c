"""Replication lag per follower and partition as the capture goes, from `partitions` rows as they are
decoded (the metrics' replication gauges).

The definition is the report's `replication` section (kwsniff/sections/sections_brokers.py, docs/report.md
"Brokers and replication"), evaluated at each follower fetch instead of over the whole capture:

- lag in records: the high watermark the fetch's response carried minus its fetch offset F;
- lag in seconds: the fetch's request time minus the moment the leader's log reached F, which is the
  earliest of an acknowledged Produce batch's request holding F and a Fetch response (any fetcher's)
  whose high watermark was above F, that watermark not being the partition's first; else 0 when F is
  at or past the high watermark answered, else unknown.

What differs from the report: rows count as they are decoded, so a Produce acknowledged after the
follower's fetch (acks=all waits for the followers) dates that fetch when it comes (the follower's
latest fetch of the partition is evaluated again); a watermark decoded after the fetch does not. Per
partition a bounded history is held, the oldest dropped first, and an offset below what was dropped
is dated by neither: a partition a follower fetches holds its last ``depth`` Produce batches and
watermark rises (1,024), one no follower has fetched (yet) only its last 64 of each, enough to date a
follower's first fetch as now.

Memory: the logs and the followers' latest fetches are charged to an eighth of the budget's view pool
(docs/memory.md), each log at its depth. When more would pass it, the logs no follower fetches go
first (the oldest made first: they only date a future follower's first fetch); then, for a follower,
every log's depth is halved (down to MIN_DEPTH: fetches further behind are not dated); past that a new
partition or follower is not followed and counted in ``refused``.
"""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass
from typing import Any

from kwsniff.defaults import int64_or_none
from kwsniff.memory import VIEW, VIEW_REPLICATION, MemoryBudget, view_cap
from kwsniff.view.lag import PartitionLogs

PRODUCE, FETCH = 0, 1
MAX_DEPTH = 1024  # acknowledged Produce batches, and rises of the high watermark, held per followed partition
# ... per partition no follower has fetched: the recent history its first follower fetch is dated by
SHALLOW_DEPTH = 64
MIN_DEPTH = 16  # the fewest a followed partition is shrunk to before new ones are refused
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# What one step of depth costs: a batch (first, last, time) and a rise (watermark, time), int64 each,
# and the arrays' growth (a sixteenth). tracemalloc over 200 partitions of 1,100 batches and rises:
# 42.3 KB a partition at 1,024 (a follower's fetch included), 3.5 KB at 64; the tuples held before
# took 305 KB at 1,024. tests/test_replication_budget.py measures the tracker against its charge.
DEPTH_BYTES = 5 * 8 * 17 // 16
# What a log costs beside its depth: the LeaderLog, its five arrays, the key and the dict entries
# (tracemalloc over 10,000 and 50,000 logs holding one rise: 760 to 810 B).
PARTITION_COST = 896
# What a follower's latest fetch costs: the FollowerFetch, its key, its dict entry and its replica id
# in the log's followers (tracemalloc over 10,000 and 50,000: 250 to 360 B, with the dict's growth).
FETCH_COST = 384


class LeaderLog:
    """When one partition's leader log reached which offsets, as the capture saw."""

    __slots__ = ("firsts", "lasts", "times", "hwms", "hwm_times", "dropped_below", "overlapping", "followers")

    def __init__(self) -> None:
        # Acknowledged Produce batches: offsets first..last (sorted by first), their request times (µs).
        self.firsts, self.lasts, self.times = array("q"), array("q"), array("q")
        # The rises of the high watermark (each the largest seen so far) and their times. The first is
        # the partition's first watermark, which dates nothing.
        self.hwms, self.hwm_times = array("q"), array("q")
        self.dropped_below = -1  # offsets below this were dated by rises no longer held
        # Whether two batches held overlap (a log truncated and written again): an offset may then
        # be in several, the earliest dates it.
        self.overlapping = False
        self.followers: tuple[int, ...] = ()  # replica ids (a handful: a tuple costs less than a set)

    def add_batch(self, first: int, last: int, ts: int) -> None:
        firsts, lasts = self.firsts, self.lasts
        i = bisect.bisect_left(firsts, first)
        if i < len(firsts) and firsts[i] == first and lasts[i] == last:  # seen again: its earliest
            self.times[i] = min(self.times[i], ts)
            return
        if (i > 0 and lasts[i - 1] >= first) or (i < len(firsts) and firsts[i] <= last):
            self.overlapping = True
        firsts.insert(i, first)
        lasts.insert(i, last)
        self.times.insert(i, ts)

    def add_watermark(self, hwm: int, ts: int) -> None:
        hwms = self.hwms
        if not hwms or hwm > hwms[-1]:
            hwms.append(hwm)
            self.hwm_times.append(ts)

    def trim(self, depth: int) -> None:
        """Hold at most ``depth`` batches (the lowest offsets go) and rises (the oldest go)."""
        over = len(self.firsts) - depth
        if over > 0:
            del self.firsts[:over], self.lasts[:over], self.times[:over]
        over = len(self.hwms) - depth
        if over > 0:
            self.dropped_below = self.hwms[over - 1]
            del self.hwms[:over], self.hwm_times[:over]

    def reached(self, offset: int) -> int | None:
        """When the log reached ``offset`` (µs): the earliest of a held batch holding it and the first
        rise of the watermark above it (unless that is the partition's first); else None."""
        firsts, lasts, times = self.firsts, self.lasts, self.times
        below = bisect.bisect_right(firsts, offset)  # the batches starting at or below offset
        if self.overlapping:
            held = [times[i] for i in range(below) if lasts[i] >= offset]
        else:
            held = [times[below - 1]] if below and lasts[below - 1] >= offset else []
        hwms = self.hwms
        above = bisect.bisect_right(hwms, offset)  # the first rise above offset
        first_rise = above == 0 and self.dropped_below < 0
        if above < len(hwms) and offset >= self.dropped_below and not first_rise:
            held.append(self.hwm_times[above])
        return min(held) if held else None


@dataclass(slots=True)
class FollowerFetch:
    """A follower's latest fetch of a partition and its figures."""

    ts_request: int
    fetch_offset: int
    high_watermark: int | None
    lag_records: int | None = None
    lag_seconds: float | None = None


Key = tuple[int, str, int]  # replica id, topic, partition
# A follower that has not fetched a partition for this long (packet time) is dropped: a follower
# fetches every replica.fetch.wait.max.ms (500 ms) even when idle, so five minutes without a fetch
# means leadership moved away from this broker or the follower is gone.
FOLLOWER_STALE = 5 * 60 * 1_000_000
EXPIRE_EVERY = 60 * 1_000_000  # µs of packet time between two sweeps
Partition = tuple[str, int]


class ReplicationTracker(PartitionLogs[LeaderLog, Key]):
    """Feed it `partitions` rows; :meth:`take_changed` gives the (replica id, topic, partition) whose
    figures moved. ``max_partitions`` bounds the partitions followed and ``budget`` their bytes (new
    ones past either are refused and counted in ``refused``)."""

    def __init__(
        self, max_partitions: int, depth: int = MAX_DEPTH, budget: MemoryBudget | None = None
    ) -> None:
        super().__init__(max_partitions, lambda _topic, _partition: LeaderLog())
        self.depth = depth  # of a followed partition; a partition no follower fetched holds less
        self.fetches: dict[Key, FollowerFetch] = {}
        # The partitions no follower has fetched, the oldest made first: the first forgotten.
        self.unfollowed: dict[Partition, None] = {}
        self.pool = budget.cell(VIEW) if budget is not None else [0]
        self.byte_cap = view_cap(budget, VIEW_REPLICATION) if budget is not None else None
        self.held_bytes = 0
        self.forgotten = 0  # logs no follower fetched, forgotten to make room
        self.now = 0  # the latest follower fetch seen (µs, packet time): the staleness clock
        self.stale = 0  # followers' fetches dropped as stale (:meth:`expire`)
        self._expired_at = 0

    @property
    def shallow(self) -> int:
        """The depth of a partition no follower has fetched."""
        return min(SHALLOW_DEPTH, self.depth)

    def row(self, row: dict[str, Any]) -> None:
        get = row.get
        api, topic, partition = get("api_key"), get("topic"), get("partition")
        if topic is None or partition is None:  # the report's joins never match a null topic
            return
        if api == PRODUCE:
            first, last, ts = get("first_offset"), get("last_offset"), get("ts_request")
            if first is not None and last is not None and ts is not None and get("ts_response") is not None:
                log = self._log(topic, partition)
                if log is not None:
                    self._batch(log, topic, partition, first, last, ts)
        elif api == FETCH:
            offset, ts, replica = get("fetch_offset"), get("ts_request"), get("replica_id")
            follower: Key | None = None
            if get("fetcher") == "follower" and offset is not None and ts is not None and replica is not None:
                follower = (replica, topic, partition)
            if follower is not None and follower not in self.fetches and not self._follow(follower):
                if (topic, partition) not in self.logs:
                    return  # refused, counted
                follower = None
            log = self._log(topic, partition)
            if log is None:
                return
            if follower is not None and offset is not None and ts is not None:
                self._fetch(log, follower, offset, get("high_watermark"), ts)
            hwm, ts_response, error = get("high_watermark"), get("ts_response"), get("error_code")
            if hwm is not None and hwm >= 0 and ts_response is not None and not error:
                log.add_watermark(hwm, ts_response)
                log.trim(self._depth_of((topic, partition)))

    # -- events --------------------------------------------------------------------------------------
    def _batch(self, log: LeaderLog, topic: str, partition: int, first: int, last: int, ts: int) -> None:
        if first > last:  # holds no offset
            return
        # An array holds int64: a batch ending past it still holds every int64 offset from its first.
        log.add_batch(max(first, INT64_MIN), min(last, INT64_MAX), ts)
        log.trim(self._depth_of((topic, partition)))
        for replica in log.followers:  # a follower's latest fetch this batch dates
            fetch = self.fetches[(replica, topic, partition)]
            if first <= fetch.fetch_offset <= last and ts <= fetch.ts_request:
                self._evaluate((replica, topic, partition), log, fetch)

    def _fetch(self, log: LeaderLog, key: Key, offset: int, hwm: int | None, ts: int) -> None:
        fetch = self.fetches.get(key)
        if fetch is not None and ts < fetch.ts_request:  # decoded late: the latest fetch stays
            return
        fetch = self.fetches[key] = FollowerFetch(ts, offset, hwm)
        self.now = max(self.now, ts)
        if key[0] not in log.followers:  # a new follower (_follow made room for it)
            log.followers += (key[0],)
            self._recharge()
        self._evaluate(key, log, fetch)

    def _evaluate(self, key: Key, log: LeaderLog, fetch: FollowerFetch) -> None:
        offset, hwm, at = fetch.fetch_offset, fetch.high_watermark, fetch.ts_request
        reached = log.reached(offset)
        fetch.lag_records = None if hwm is None else int64_or_none(hwm - offset)  # as the table's lag
        if reached is not None and reached <= at:
            fetch.lag_seconds = (at - reached) / 1e6
        elif hwm is not None and offset >= hwm:
            fetch.lag_seconds = 0.0
        else:
            fetch.lag_seconds = None
        self.changed.add(key)

    def expire(self, stale_after: int = FOLLOWER_STALE) -> list[Key]:
        """Drop each follower whose latest fetch of a partition is older than ``stale_after`` µs
        before the latest follower fetch seen (packet time): the leader moved away from this broker,
        or the follower is gone, and its figures would be stale. A partition left with no follower
        holds a short history again. At most once a minute of packet time; returns the keys dropped
        (their figures become unknown: the metrics remove their series)."""
        if self.now < self._expired_at + EXPIRE_EVERY:
            return []
        self._expired_at = self.now
        cutoff = self.now - stale_after
        gone = [key for key, fetch in self.fetches.items() if fetch.ts_request < cutoff]
        for key in gone:
            replica, partition = key[0], key[1:]
            del self.fetches[key]
            self.changed.discard(key)
            log = self.logs.get(partition)
            if log is not None:
                log.followers = tuple(r for r in log.followers if r != replica)
                if not log.followers:
                    self.unfollowed[partition] = None
                    log.trim(self.shallow)
        if gone:
            self.stale += len(gone)
            self._recharge()
        return gone

    # -- memory --------------------------------------------------------------------------------------
    def _depth_of(self, partition: Partition) -> int:
        return self.shallow if partition in self.unfollowed else self.depth

    def _log(self, topic: str, partition: int) -> LeaderLog | None:
        """The partition's log; a new one is made shallow (no follower has fetched it)."""
        log = self.logs.get((topic, partition))
        if log is None:
            if len(self.logs) >= self.max_partitions or not self._make_room(0, 1, 0, None, False):
                self.refused += 1
                self._recharge()
                return None
            log = self.logs[(topic, partition)] = LeaderLog()
            self.unfollowed[(topic, partition)] = None
            self._recharge()
        return log

    def _follow(self, key: Key) -> bool:
        """Room for a new follower of a partition: its latest fetch, and its log at full depth (made
        or deepened); False when refused (counted)."""
        partition = key[1:]
        new = partition not in self.logs
        if new and len(self.logs) >= self.max_partitions:
            self.refused += 1
            return False
        deepened = new or partition in self.unfollowed
        if not self._make_room(int(deepened), -int(deepened and not new), 1, partition, True):
            self.refused += 1
            self._recharge()
            return False
        if new:
            self.logs[partition] = LeaderLog()
        self.unfollowed.pop(partition, None)
        return True  # charged once _fetch holds it

    def _charge(self, followed: int, unfollowed: int, fetches: int, depth: int) -> int:
        """The bytes charged with that many more (or fewer) logs and fetches than now, at ``depth``."""
        followed += len(self.logs) - len(self.unfollowed)
        unfollowed += len(self.unfollowed)
        return (
            followed * (PARTITION_COST + depth * DEPTH_BYTES)
            + unfollowed * (PARTITION_COST + min(SHALLOW_DEPTH, depth) * DEPTH_BYTES)
            + (len(self.fetches) + fetches) * FETCH_COST
        )

    def _make_room(
        self, followed: int, unfollowed: int, fetches: int, keep: Partition | None, deepen: bool
    ) -> bool:
        """Whether that many more logs and fetches fit the share: the unfollowed logs forgotten (the
        oldest first, never ``keep``) while they do not, and then, if ``deepen`` (for a follower),
        every log's depth halved down to MIN_DEPTH."""
        cap = self.byte_cap
        if cap is None:
            return True
        while self._charge(followed, unfollowed, fetches, self.depth) > cap and self._forget(keep):
            pass
        depth = self.depth
        while deepen and depth > MIN_DEPTH and self._charge(followed, unfollowed, fetches, depth) > cap:
            depth //= 2
        if depth != self.depth:
            self.depth = depth
            for partition, log in self.logs.items():
                log.trim(self._depth_of(partition))
        return self._charge(followed, unfollowed, fetches, self.depth) <= cap

    def _forget(self, keep: Partition | None) -> bool:
        """Forget the oldest log no follower fetched (not ``keep``); False when there is none."""
        for partition in self.unfollowed:
            if partition != keep:
                del self.unfollowed[partition], self.logs[partition]
                self.forgotten += 1
                return True
        return False

    def _recharge(self) -> None:
        """The pool charged with what is held now."""
        charged = self._charge(0, 0, 0, self.depth)
        self.pool[0] += charged - self.held_bytes
        self.held_bytes = charged
