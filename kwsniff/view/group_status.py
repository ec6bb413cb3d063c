"""A consumer group's state on a topic, live (`kwsniff_consumer_group_status`): the rule of
docs/live-capture.md "Group status", judged from what kwsniff.view.lag holds and the group's own
exchanges, with the capture's packet times as the clock.

Per partition, first match wins (a partition whose lag is unknown says nothing):
- STOP: behind (lag > 0) and no commit for the window (STATUS_WINDOW, `capture --group-status-seconds`);
- STALL: behind, and every commit of the last window (two at least) named the same offset;
- WARN: behind, and the lag in records rose at every commit of the last window (three at
  least, of the last KEPT_COMMITS at most): consuming, slower than the producers;
- OK: anything else.
A group on a topic is its worst partition (STOP, STALL, WARN, OK), or LEFT when the last thing the
group did was leave (a LeaveGroup, a KIP-848 heartbeat with epoch -1 or -2: the report's `left`).
"""

from __future__ import annotations

from collections import deque
from typing import Any

STATUS_WINDOW = 60 * 1_000_000  # µs: a consumer commits every 5 s by default (auto.commit.interval.ms)
KEPT_COMMITS = 16  # commits held per group and partition to judge the window
OK, WARN, STALL, STOP, LEFT = "OK", "WARN", "STALL", "STOP", "LEFT"
STATES = (OK, WARN, STALL, STOP, LEFT)
_WORST = {OK: 0, WARN: 1, STALL: 2, STOP: 3}
LEAVES = frozenset({"leave", "static_leave"})


def partition_state(
    commits: deque[tuple[int, int, int | None]],
    offset_lag: int | None,
    now: int,
    window: int = STATUS_WINDOW,
) -> str | None:
    """The state of one group on one partition at ``now`` (µs) from its latest commits (time,
    offset, lag in records then) and its lag now, over the last ``window`` µs; None when the lag is
    unknown."""
    if offset_lag is None or not commits:
        return None
    if offset_lag <= 0:
        return OK
    if now - commits[-1][0] > window:
        return STOP
    recent = [c for c in commits if now - c[0] <= window]
    if len(recent) >= 2 and len({offset for _ts, offset, _lag in recent}) == 1:
        return STALL
    lags = [lag for _ts, _offset, lag in recent]
    if len(lags) >= 3 and all(
        a is not None and b is not None and b > a for a, b in zip(lags, lags[1:], strict=False)
    ):
        return WARN
    return OK


def worst(states: list[str]) -> str:
    return max(states, key=_WORST.__getitem__)


class GroupActivity:
    """When each group was last seen acting (a group exchange other than leaving, a commit) and
    leaving: a group whose latest act is a leave has LEFT. Only groups that committed are followed
    (``acted``), so what it holds is bounded as the lag's groups are."""

    def __init__(self) -> None:
        self.active: dict[str, int] = {}
        self.left: dict[str, int] = {}

    def row(self, row: dict[str, Any]) -> None:
        group, ts = row.get("group_id"), row.get("ts_request")
        if group is None or ts is None or group not in self.active:
            return
        seen = self.left if row.get("event") in LEAVES else self.active
        if ts > seen.get(group, -1):
            seen[group] = ts

    def acted(self, group: str, ts: int) -> None:
        if ts > self.active.get(group, -1):
            self.active[group] = ts

    def has_left(self, group: str) -> bool:
        left = self.left.get(group)
        return left is not None and left >= self.active.get(group, -1)
