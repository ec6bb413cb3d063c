"""When a partition's offsets became readable: an offset-to-time index in bounded memory.

Each acknowledged Produce batch is a point (first offset, last offset, acknowledgement time). The
index holds at most ``capacity`` points; when full it drops the points whose loss widens the gaps
least relative to their age, so the points it keeps are dense near the newest and spread thinner
towards the oldest, never dropping the oldest or the newest: from the first batch seen to the last,
any offset can be dated, with an error bounded by the gap between the two kept points around it,
which stays a small share of the offset's age (about 2 % with 1,024 points over a month of batches
a millisecond apart). kafka-lag-exporter's LookupTable answers the same question (an offset's time
by interpolating between points) from a sliding window of polled points; this keeps the whole
capture's history instead, thinned.

An offset is dated (:meth:`OffsetTimes.date`):
- inside a kept batch: that batch's acknowledgement (exact, the report's definition);
- between two kept batches: interpolated linearly in offsets between the acknowledgement of the
  batch below and that of the batch above (the offset was acknowledged between the two);
- below every kept batch: not dated, but bounded: it was readable no later than the oldest batch's
  acknowledgement or the earliest watermark above it the capture saw (:meth:`OffsetTimes.readable_by`);
- above the newest batch: unknown.
"""

from __future__ import annotations

import bisect
from array import array

MAX_POINTS = 1024  # points held per partition: 3 int64 each (24 KiB a partition)
POINT_BYTES = 3 * 8
# A full index drops this share of its points at once (a quarter): thinning sorts the points once
# per capacity // THIN_SHARE batches, not at every batch, and holds 3/4 of capacity to all of it.
THIN_SHARE = 4
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class OffsetTimes:
    """One partition's acknowledged batches, thinned to at most ``capacity`` points."""

    __slots__ = ("capacity", "firsts", "lasts", "times", "newest", "watermark", "watermark_ts")

    def __init__(self, capacity: int = MAX_POINTS) -> None:
        self.capacity = max(capacity, 4)
        self.firsts = array("q")  # sorted
        self.lasts = array("q")
        self.times = array("q")  # acknowledgement, µs
        self.newest = 0  # the latest acknowledgement added (the "now" thinning measures age from)
        # The earliest watermark event seen (a Fetch response's high watermark, or a batch's last
        # offset + 1) and its time: offsets below it were readable by then.
        self.watermark: int | None = None
        self.watermark_ts = 0

    def __len__(self) -> int:
        return len(self.firsts)

    def add(self, first: int, last: int, ts: int) -> None:
        """A batch of offsets ``first``..``last`` acknowledged at ``ts`` (µs); rows may come in any
        order. A batch seen twice (a retransmission) keeps its earliest acknowledgement."""
        self.watermarked(last + 1, ts)
        if not INT64_MIN <= first <= last <= INT64_MAX:  # past int64: not a point an array holds
            return
        firsts = self.firsts
        i = bisect.bisect_left(firsts, first)
        if i < len(firsts) and firsts[i] == first:
            self.times[i] = min(self.times[i], ts)
            self.lasts[i] = max(self.lasts[i], last)
            return
        firsts.insert(i, first)
        self.lasts.insert(i, last)
        self.times.insert(i, ts)
        self.newest = max(self.newest, ts)
        if len(firsts) > self.capacity:
            self._thin()

    def shrink(self, capacity: int) -> None:
        """Hold at most ``capacity`` points from now on, thinned to it now (the lag's share of the
        memory budget, shared by more partitions)."""
        self.capacity = max(capacity, 4)
        while len(self.firsts) > self.capacity:
            self._thin()

    def watermarked(self, hwm: int, ts: int) -> None:
        """A high watermark seen at ``ts``: kept if it is the earliest watermark event so far."""
        if self.watermark is None or ts < self.watermark_ts:
            self.watermark, self.watermark_ts = hwm, ts

    def date(self, offset: int) -> tuple[float | None, bool]:
        """When ``offset`` was acknowledged (µs) and whether that is exact (a kept batch holds it);
        ``(None, False)`` when it is below or above every kept batch."""
        firsts, lasts, times = self.firsts, self.lasts, self.times
        i = bisect.bisect_right(firsts, offset) - 1  # the kept batch starting at or below offset
        if i < 0 or i == len(firsts) - 1 and offset > lasts[i]:
            return None, False
        if offset <= lasts[i]:
            return float(times[i]), True
        below, above = lasts[i], firsts[i + 1]
        t0, t1 = times[i], times[i + 1]
        return t0 + (t1 - t0) * (offset - below) / (above - below), False

    def readable_by(self, offset: int) -> int | None:
        """For an offset below every kept batch: a time it was readable by (µs), the oldest batch's
        acknowledgement or the earliest watermark above it, whichever is earlier; else None."""
        known = []
        if self.firsts and offset < self.firsts[0]:
            known.append(self.times[0])
        if self.watermark is not None and offset < self.watermark:
            known.append(self.watermark_ts)
        return min(known) if known else None

    def _thin(self) -> None:
        """Drop a quarter of the points: those whose two neighbours are closest in time relative to
        the older neighbour's age, never two side by side, never the oldest or the newest."""
        firsts, lasts, times = self.firsts, self.lasts, self.times
        t, newest = times.tolist(), self.newest
        n = len(t)
        # The gap left if point i goes, as a share of the age of the gap's older end (rows out of
        # time order make it negative: such a point goes first).
        widened = sorted(
            [
                ((after - before) / (newest - before + 1), i)
                for i, before, after in zip(range(1, n - 1), t, t[2:], strict=False)
            ]
        )
        target = max(1, self.capacity // THIN_SHARE)
        dropped: set[int] = set()
        for _share, i in widened:
            if i - 1 not in dropped and i + 1 not in dropped:
                dropped.add(i)
                if len(dropped) == target:
                    break
        kept = [i for i in range(n) if i not in dropped]
        self.firsts = array("q", [firsts[i] for i in kept])
        self.lasts = array("q", [lasts[i] for i in kept])
        self.times = array("q", [times[i] for i in kept])
