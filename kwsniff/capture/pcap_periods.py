"""`capture --workers N --write-pcap FILE`: one pcap per rotation period holding every worker's packets.

Each worker writes its packets into a file of its own per period, split by the packets' own times at
the period boundaries the coordinator announces a period ahead (:class:`PeriodPcapWriter`): a packet
captured before a boundary but decoded after it (it waited in the worker's queue) still goes to the
earlier period, and one captured after a boundary but decoded before the worker heard of the
rotation goes to the later one, so each packet is in the file of its own period and consecutive
periods never overlap in time. The coordinator merges the workers' files of a period
into one in timestamp order (:func:`merge_period`, reading each a chunk at a time) and renames it
into place, named as Wireshark's file sets and dumpcap's ring buffer name theirs
(`PREFIX_NNNNN_YYYYMMDDHHMMSS.EXT`, :func:`period_path`): `kwsniff read --continuous` reads the set as
one capture, `mergecap` makes one file of it for tshark, Wireshark lists it under File > File Set.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import queue
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from operator import itemgetter
from pathlib import Path

from kwsniff.capture.pcap import PcapReader
from kwsniff.capture.pcap_writer import PcapWriter
from kwsniff.capture.reader import CaptureError, CaptureReader
from kwsniff.capture.source import open_capture

MERGE_BATCH = 4096  # packets per write of the merged file


def period_path(target: Path, period: int, start_s: float) -> Path:
    """The file of period ``period`` (1, 2, ...) of `--write-pcap target`, which began at ``start_s``
    (UTC in the name): `live.pcap`'s first period is `live_00001_20260101120000.pcap`."""
    stamp = datetime.fromtimestamp(start_s, UTC).strftime("%Y%m%d%H%M%S")
    return target.with_name(f"{target.stem}_{period:05d}_{stamp}{target.suffix}")


def expire_periods(target: Path, older_than_s: float, now_s: float) -> list[Path]:
    """Delete the period files of `--write-pcap target` whose packets all lie before ``now_s -
    older_than_s`` (`capture --retain`): a file ends where the next period begins, so the latest is
    always kept. The deleted files, oldest first."""
    import re

    named = re.compile(rf"{re.escape(target.stem)}_(\d{{5,}})_(\d{{14}}){re.escape(target.suffix)}")
    periods = []
    for path in target.parent.glob(f"{target.stem}_*{target.suffix}"):
        match = named.fullmatch(path.name)
        if match:
            began = datetime.strptime(match.group(2), "%Y%m%d%H%M%S").replace(tzinfo=UTC).timestamp()
            periods.append((int(match.group(1)), began, path))
    periods.sort()
    cutoff = now_s - older_than_s
    gone = []
    for (_, _, path), (_, next_began, _) in zip(periods, periods[1:], strict=False):
        if next_began <= cutoff:
            path.unlink(missing_ok=True)
            gone.append(path)
    return gone


class PeriodPcapWriter:
    """A worker's packets, one pcap per period under ``directory`` (`<prefix>-<period>.pcap`), each
    packet in the file of the period its own timestamp falls in.

    The coordinator says where the current period ends before it ends (``end_s``, then each
    :meth:`rotate`'s ``next_end_s``): a packet at or after that end goes to the next period's file
    (opened then) even when it is decoded before the worker hears of the rotation. :meth:`rotate`
    makes the next period the current one; the period before it stays open for the packets older
    than its end still in the queue, until the rotation after closes it. A packet older than every
    open period (its worker fell behind by more than a period) goes to the oldest open file and is
    counted in ``late``. ``closed`` lists (period, path) of the files closed, in period order."""

    def __init__(
        self,
        directory: Path,
        prefix: str,
        linktype: int,
        snaplen: int,
        period: int = 1,
        end_s: float | None = None,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.prefix = prefix
        self.linktype = linktype
        self.snaplen = snaplen
        self.closed: list[tuple[int, Path]] = []
        self.late = 0
        self.period = period
        self._current = self._open(period)
        self._previous: PcapWriter | None = None  # the period before the current one
        self._previous_us = 0  # its start
        self._start_us = 0  # the current period's start (the previous one's end)
        self._end_us = _us(end_s)  # the current period's end, once the coordinator said it
        self._next: PcapWriter | None = None  # the next period's file, once a packet is due there

    def _path(self, period: int) -> Path:
        return self.directory / f"{self.prefix}-{period:06d}.pcap"

    def _open(self, period: int) -> PcapWriter:
        return PcapWriter(self._path(period), self.linktype, self.snaplen)

    def write(self, packets: list[tuple[int, bytes]]) -> None:
        if not packets:
            return
        start, end = self._start_us, self._end_us
        if packets[0][0] >= start and packets[-1][0] < end:  # the common case: all in the current period
            self._current.write(packets)
            return
        older: list[tuple[int, bytes]] = []
        current: list[tuple[int, bytes]] = []
        later: list[tuple[int, bytes]] = []
        for packet in packets:
            ts = packet[0]
            (older if ts < start else later if ts >= end else current).append(packet)
        if older:
            self.late += sum(1 for p in older if p[0] < self._previous_us) if self._previous else len(older)
            if self._previous is None:
                current = sorted(older + current, key=itemgetter(0))
            else:
                self._previous.write(older)
        if current:
            self._current.write(current)
        if later:
            if self._next is None:
                self._next = self._open(self.period + 1)
            self._next.write(later)

    def rotate(self, end_s: float, next_end_s: float | None = None) -> None:
        """The current period ends at ``end_s`` (the end said before, if one was) and the next one,
        which becomes current, at ``next_end_s``; the period before the current one is closed."""
        self._close_previous()
        self._previous, self._previous_us, self._start_us = self._current, self._start_us, _us(end_s)
        self.period += 1
        self._current = self._next if self._next is not None else self._open(self.period)
        self._next = None
        self._end_us = _us(next_end_s)

    def _close_previous(self) -> None:
        if self._previous is not None:
            self._previous.close()
            self.closed.append((self.period - 1, self._path(self.period - 1)))
            self._previous = None

    def close(self) -> None:
        self._close_previous()
        self._current.close()
        self.closed.append((self.period, self._path(self.period)))
        if self._next is not None:
            self._next.close()
            self.closed.append((self.period + 1, self._path(self.period + 1)))
            self._next = None


def _us(seconds: float | None) -> int:
    """A period bound in microseconds (packet time); None: not said yet, so no bound."""
    return (1 << 63) if seconds is None else int(seconds * 1_000_000)


def _packets(reader: CaptureReader) -> Iterator[tuple[int, bytes]]:
    for ts, _, data in reader.packets():
        yield ts, data


def merge_period(inputs: list[Path], target: Path) -> int | None:
    """The workers' files of one period (pcaps of one link type, each in time order) as one file at
    ``target``, in timestamp order; written under a hidden temporary name and renamed into place, so
    a `*.pcap` glob never meets half a file. The inputs are removed. The packets written; None, and
    no file, when every input is empty."""
    # An empty input is a worker's killed before it wrote its file's header: it holds no packet
    # (the coordinator counts what a killed worker lost).
    empty = [path for path in inputs if path.stat().st_size == 0]
    for path in empty:
        path.unlink(missing_ok=True)
    inputs = [path for path in inputs if path not in empty]
    if not inputs:
        return None
    temp = target.with_name(f".{target.name}.tmp")
    with contextlib.ExitStack() as stack:
        readers = [stack.enter_context(open_capture(path)) for path in inputs]
        first = readers[0]
        assert isinstance(first, PcapReader)  # written by PeriodPcapWriter
        written = 0
        try:
            with PcapWriter(temp, first.linktype, first.snaplen) as out:
                merged = heapq.merge(*(_packets(r) for r in readers), key=itemgetter(0))
                batch: list[tuple[int, bytes]] = []
                for packet in merged:
                    batch.append(packet)
                    if len(batch) >= MERGE_BATCH:
                        out.write(batch)
                        written += len(batch)
                        batch = []
                if batch:
                    out.write(batch)
                    written += len(batch)
            os.replace(temp, target)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
    for path in inputs:
        path.unlink(missing_ok=True)
    return written


class PeriodMerger:
    """A thread that merges each complete period (:meth:`add`, in period order) while the capture
    goes on; :meth:`close` waits for what was added. ``errors``: one line per period that failed
    (its workers' files are then left in the spool, dropped with it)."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.errors: list[str] = []
        self.files: list[Path] = []  # written, in period order
        self._queue: queue.Queue[tuple[int, float, list[Path]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="kwsniff-pcap-merge", daemon=True)
        self._thread.start()

    def add(self, period: int, start_s: float, inputs: list[Path]) -> None:
        self._queue.put((period, start_s, inputs))

    def close(self, timeout: float | None = None) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            period, start_s, inputs = item
            path = period_path(self.target, period, start_s)
            try:
                if merge_period(inputs, path) is not None:
                    self.files.append(path)
            except (OSError, CaptureError) as err:
                self.errors.append(f"--write-pcap {path}: {getattr(err, 'strerror', None) or err}")
