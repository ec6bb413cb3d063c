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
partition at most ``max_batches`` Produce batches and ``max_steps`` watermark rises are held, the
oldest dropped first; an offset below what was dropped is dated by neither.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from kwsniff.defaults import int64_or_none
from kwsniff.view.lag import PartitionLogs

PRODUCE, FETCH = 0, 1
MAX_BATCHES = 1024  # acknowledged Produce batches held per partition
MAX_STEPS = 1024  # rises of the high watermark held per partition


@dataclass
class LeaderLog:
    """When one partition's leader log reached which offsets, as the capture saw."""

    # (first_offset, last_offset, ts_request_us) of acknowledged Produce batches, sorted.
    batches: list[tuple[int, int, int]] = field(default_factory=list)
    # The rises of the high watermark, (hwm, ts_us) in order: each the largest seen so far. The first
    # is the partition's first watermark, which dates nothing.
    steps: list[tuple[int, int]] = field(default_factory=list)
    dropped_below: int = -1  # offsets below this were dated by steps no longer held
    followers: set[int] = field(default_factory=set)


@dataclass
class FollowerFetch:
    """A follower's latest fetch of a partition and its figures."""

    ts_request: int
    fetch_offset: int
    high_watermark: int | None
    lag_records: int | None = None
    lag_seconds: float | None = None


Key = tuple[int, str, int]  # replica id, topic, partition


class ReplicationTracker(PartitionLogs[LeaderLog, Key]):
    """Feed it `partitions` rows; :meth:`take_changed` gives the (replica id, topic, partition) whose
    figures moved. ``max_partitions`` bounds the partitions followed (new ones past it are refused and
    counted in ``refused``)."""

    def __init__(
        self, max_partitions: int, max_batches: int = MAX_BATCHES, max_steps: int = MAX_STEPS
    ) -> None:
        super().__init__(max_partitions, lambda _topic, _partition: LeaderLog())
        self.max_batches = max_batches
        self.max_steps = max_steps
        self.fetches: dict[Key, FollowerFetch] = {}

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
            log = self._log(topic, partition)
            if log is None:
                return
            offset, ts, replica = get("fetch_offset"), get("ts_request"), get("replica_id")
            if get("fetcher") == "follower" and offset is not None and ts is not None and replica is not None:
                self._fetch(log, (replica, topic, partition), offset, get("high_watermark"), ts)
            hwm, ts_response, error = get("high_watermark"), get("ts_response"), get("error_code")
            if hwm is not None and hwm >= 0 and ts_response is not None and not error:
                self._watermark(log, hwm, ts_response)

    # -- events --------------------------------------------------------------------------------------
    def _batch(self, log: LeaderLog, topic: str, partition: int, first: int, last: int, ts: int) -> None:
        bisect.insort(log.batches, (first, last, ts))
        if len(log.batches) > self.max_batches:
            del log.batches[0]
        for replica in log.followers:  # a follower's latest fetch this batch dates
            fetch = self.fetches[(replica, topic, partition)]
            if first <= fetch.fetch_offset <= last and ts <= fetch.ts_request:
                self._evaluate((replica, topic, partition), log, fetch)

    def _watermark(self, log: LeaderLog, hwm: int, ts: int) -> None:
        steps = log.steps
        if not steps or hwm > steps[-1][0]:
            steps.append((hwm, ts))
            if len(steps) > self.max_steps:
                dropped = steps.pop(0)
                log.dropped_below = dropped[0]

    def _fetch(self, log: LeaderLog, key: Key, offset: int, hwm: int | None, ts: int) -> None:
        fetch = self.fetches.get(key)
        if fetch is not None and ts < fetch.ts_request:  # decoded late: the latest fetch stays
            return
        fetch = self.fetches[key] = FollowerFetch(ts, offset, hwm)
        log.followers.add(key[0])
        self._evaluate(key, log, fetch)

    def _evaluate(self, key: Key, log: LeaderLog, fetch: FollowerFetch) -> None:
        offset, hwm, at = fetch.fetch_offset, fetch.high_watermark, fetch.ts_request
        reached = [ts for first, last, ts in log.batches if first <= offset <= last]
        dated_by = self._watermark_above(log, offset)
        if dated_by is not None:
            reached.append(dated_by)
        fetch.lag_records = None if hwm is None else int64_or_none(hwm - offset)  # as the table's lag
        if reached and min(reached) <= at:
            fetch.lag_seconds = (at - min(reached)) / 1e6
        elif hwm is not None and offset >= hwm:
            fetch.lag_seconds = 0.0
        else:
            fetch.lag_seconds = None
        self.changed.add(key)

    @staticmethod
    def _watermark_above(log: LeaderLog, offset: int) -> int | None:
        """When the first watermark above ``offset`` was seen, unless it was the partition's first."""
        steps = log.steps
        at = bisect.bisect_right(steps, (offset, float("inf")))
        if at >= len(steps) or offset < log.dropped_below or (at == 0 and log.dropped_below < 0):
            return None
        return steps[at][1]
