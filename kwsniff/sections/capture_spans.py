"""When a dataset's captures ran, for the report's plots: the time axes its data is drawn on and the
minutes the captures covered in full.

A capture's span runs from its first packet (or its live capture's first period start) to where it
ended as it knew it (the shared view `capture_end`). Captures lying further apart than the longest of
them (and than GAP) get time axes of their own, so that two days two weeks apart are two axes, not an
empty fortnight; more than MAX_AXES such stretches share one axis again (a trend over many captures,
say one a day for a month). A minute is whole when one stretch of captures covered it from its first
to its last microsecond; the plots never draw a partial minute's count as a drop.
"""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# Per capture: its first moment (first connection packet or request, or its first period's start
# for a live capture) and its end (`capture_end`).
SPANS_SQL = """
SELECT b.capture, b.ts_begin, e.ts_end
FROM (
  SELECT capture, MIN(ts) AS ts_begin FROM (
    SELECT capture, ts_first AS ts FROM connections
    UNION ALL SELECT capture, ts_request AS ts FROM requests
    UNION ALL SELECT capture, period_start AS ts FROM capture_stats) AS t
  WHERE ts IS NOT NULL
  GROUP BY capture) AS b
JOIN capture_end e ON e.capture = b.capture
ORDER BY b.ts_begin, b.capture"""

# Captures of one run rotated into files (or periods) follow each other within a packet's spacing:
# closer than this, they covered the time between them.
JOINED = dt.timedelta(seconds=1)
# Captures further apart than this and than the longest capture are drawn on separate time axes.
GAP = dt.timedelta(minutes=1)
# At most this many separate time axes; more stretches of captures share one.
MAX_AXES = 4
MINUTE = dt.timedelta(minutes=1)

Interval = tuple[dt.datetime, dt.datetime]


def utc(value: dt.datetime) -> dt.datetime:
    """A time from an engine as UTC: MAKE_TIMESTAMP's buckets come back without a zone."""
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def _joined(spans: Sequence[Interval], apart: dt.timedelta) -> list[Interval]:
    """``spans`` (sorted by start) with those less than ``apart`` from the one before joined."""
    out: list[Interval] = []
    for begin, end in spans:
        if out and begin - out[-1][1] <= apart:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((begin, end))
    return out


@dataclass(frozen=True)
class Spans:
    """The captures' spans as the plots use them: ``axes``, the stretches of time that get a time
    axis each (sorted), and ``covered``, the time the captures saw (spans JOINED apart joined)."""

    axes: tuple[Interval, ...] = ()
    covered: tuple[Interval, ...] = ()

    def split(
        self, xs: list[dt.datetime], ys: list[float]
    ) -> dict[int, tuple[list[dt.datetime], list[float]]]:
        """A series' points (times, UTC) by the axis each is drawn on: the stretch holding it, else
        the nearest (a second's or a minute's bucket starts before its capture did); 0 when there
        is one axis or none."""
        if len(self.axes) <= 1:
            return {0: (xs, ys)} if xs else {}
        if any(b < a for a, b in itertools.pairwise(xs)):
            xs, ys = map(list, zip(*sorted(zip(xs, ys, strict=True)), strict=True))
        # Between two stretches the nearest one changes halfway.
        halves = [end + (begin - end) / 2 for (_, end), (begin, _) in itertools.pairwise(self.axes)]
        cuts = [0, *(bisect.bisect_left(xs, half) for half in halves), len(xs)]
        return {i: (xs[a:b], ys[a:b]) for i, (a, b) in enumerate(itertools.pairwise(cuts)) if a < b}

    def whole(self, minute: dt.datetime) -> bool:
        """Whether the captures covered ``minute`` (its start) from its start to its end; every
        minute is, for want of spans (tables without connections or requests)."""
        if not self.covered:
            return True
        start = utc(minute)
        # The last stretch of covered time beginning at or before it is the only one that can hold it.
        at = bisect.bisect_right(self.covered, (start, dt.datetime.max.replace(tzinfo=dt.UTC))) - 1
        return at >= 0 and start + MINUTE <= self.covered[at][1]


def spans(rows: Iterable[dict[str, Any]], since: dt.datetime | None, until: dt.datetime | None) -> Spans:
    """Spans from SPANS_SQL's rows, each cut to --since/--until (``since``, ``until``)."""
    cut = []
    for r in rows:
        if r["ts_begin"] is None or r["ts_end"] is None:
            continue
        begin, end = utc(r["ts_begin"]), utc(r["ts_end"])
        begin = max(begin, utc(since)) if since is not None else begin
        end = min(end, utc(until)) if until is not None else end
        if begin <= end:
            cut.append((begin, end))
    if not cut:
        return Spans()
    cut.sort()
    longest = max(end - begin for begin, end in cut)
    axes = _joined(cut, max(GAP, longest))
    if len(axes) > MAX_AXES:
        axes = [(axes[0][0], max(end for _, end in axes))]
    return Spans(tuple(axes), tuple(_joined(cut, JOINED)))
