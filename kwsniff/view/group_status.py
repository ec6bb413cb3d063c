"""A consumer group's status on a partition: the one rule of docs/report.md "Group status", judged
live by `capture --metrics-port` (`kwsniff_consumer_group_status`, from what kwsniff.view.lag holds,
the capture's packet times as the clock) and by the report's `stopped` section (its `status`, at the
end of the capture, in SQL: kwsniff.sections.sections_lag). Both evaluate RULE: the states, their
order and thresholds are written once, here; each side only measures the figures RULE reads.

The figures of one group on one partition at a moment (null where unknown):
- ``left``: 1 when the last thing the group did was leave (a LeaveGroup, a KIP-848 heartbeat with
  member epoch -1 or -2), else 0;
- ``committed``: 1 when the group committed on the partition, 0 when it fetched and never did;
- ``offset_lag``: the high watermark minus its latest committed offset, in records;
- ``commit_age``: µs from its latest commit to the moment;
- ``recent_commits``, ``recent_offsets``: its commits within STATUS_WINDOW of the moment (of its
  last KEPT_COMMITS), and how many distinct offsets they named;
- ``lag_rising``: 1 when every one of those recent commits was further behind (records, at its
  commit) than the one before, else 0.
A group on a topic (the metric) is its worst partition (STATES' order).
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Mapping
from typing import Any

STATUS_WINDOW = 60 * 1_000_000  # µs: a consumer commits every 5 s by default (auto.commit.interval.ms)
KEPT_COMMITS = 16  # commits held per group and partition to judge the window
OK, WARN, STALL, STOP, LEFT, NEVER_COMMITTED = "OK", "WARN", "STALL", "STOP", "LEFT", "NEVER_COMMITTED"
# The states the live metric has a series for, best to worst.
STATES = (OK, WARN, STALL, STOP, LEFT, NEVER_COMMITTED)
_WORST = {state: i for i, state in enumerate(STATES)}
LEAVES = frozenset({"leave", "static_leave"})

WINDOW = "window"  # a RULE value: the status window (STATUS_WINDOW, `capture --group-status-seconds`)
Condition = tuple[str, str, int | str | None]  # (figure, operator, value); IS NULL is ("...", "IS", None)
# First match wins; no match: OK. A None state is "says nothing" (the lag is unknown).
RULE: tuple[tuple[str | None, tuple[Condition, ...]], ...] = (
    (LEFT, (("left", "=", 1),)),
    (NEVER_COMMITTED, (("committed", "=", 0),)),
    (None, (("offset_lag", "IS", None),)),
    (OK, (("offset_lag", "<=", 0),)),
    # Behind and no commit for the window: a crashed or hung consumer.
    (STOP, (("commit_age", ">", WINDOW),)),
    # Behind, and every commit of the window (two at least) named the same offset.
    (STALL, (("recent_commits", ">=", 2), ("recent_offsets", "=", 1))),
    # Behind, and the lag rose at every commit of the window (three at least): slower than producers.
    (WARN, (("recent_commits", ">=", 3), ("lag_rising", "=", 1))),
)
_COMPARE = {"=": operator.eq, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def judge(figures: Mapping[str, int | None], window: int = STATUS_WINDOW) -> str | None:
    """RULE over ``figures`` (a missing or None figure satisfies only IS NULL, as in SQL), its
    window ``window`` µs."""
    for state, conditions in RULE:
        if all(_holds(figures.get(name), op, _value(value, window)) for name, op, value in conditions):
            return state
    return OK


def _value(value: int | str | None, window: int) -> int | None:
    return window if value == WINDOW else value  # type: ignore[return-value]


def _holds(figure: int | None, op: str, value: int | None) -> bool:
    if op == "IS":
        return figure is None
    return figure is not None and value is not None and _COMPARE[op](figure, value)


def judge_sql(figures: Mapping[str, str], window: int = STATUS_WINDOW) -> str:
    """RULE as a SQL CASE expression over ``figures`` ({figure: its SQL expression}), its window
    ``window`` µs."""

    def condition(name: str, op: str, value: int | str | None) -> str:
        if op == "IS":
            return f"({figures[name]}) IS NULL"
        return f"({figures[name]}) {op} {_value(value, window)}"

    whens = " ".join(
        f"WHEN {' AND '.join(condition(*c) for c in conditions)} THEN "
        + ("NULL" if state is None else f"'{state}'")
        for state, conditions in RULE
    )
    return f"CASE {whens} ELSE '{OK}' END"


def partition_state(
    commits: deque[tuple[int, int, int | None]],
    offset_lag: int | None,
    now: int,
    left: bool = False,
    window: int = STATUS_WINDOW,
) -> str | None:
    """The state of one group on one partition at ``now`` (µs) from its latest commits (time,
    offset, lag in records then), its lag now and whether its last act was leaving, over the last
    ``window`` µs (`capture --group-status-seconds`)."""
    recent = [c for c in commits if now - c[0] <= window]
    lags = [lag for _ts, _offset, lag in recent]
    rising = all(a is not None and b is not None and b > a for a, b in zip(lags, lags[1:], strict=False))
    return judge(
        {
            "left": int(left),
            "committed": 1 if commits else 0,
            "offset_lag": offset_lag,
            "commit_age": now - commits[-1][0] if commits else None,
            "recent_commits": len(recent),
            "recent_offsets": len({offset for _ts, offset, _lag in recent}),
            "lag_rising": int(rising and None not in lags),
        },
        window,
    )


def worst(states: list[str]) -> str:
    return max(states, key=_WORST.__getitem__)


class GroupActivity:
    """When each group was last seen acting (a group exchange other than leaving, a commit) and
    leaving: a group whose latest act is a leave has LEFT. Only groups that committed, or fetched
    through a client of theirs, are followed (``acted``), so what it holds is bounded as the lag's
    groups are."""

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
