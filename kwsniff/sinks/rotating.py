"""Rows of a live capture to Parquet files that are closed every rotation period.

Each period has its own :class:`ParquetSink` named `<capture>-<seq>`, so `DIR/<table>/` gains one
closed file per table per period. Given an :class:`~kwsniff.sinks.dataset.Output`, a period's files
are staged and committed together (every table of the period at once, see docs/datasets.md):
readers see a consistent dataset while capture runs. A row goes to the sink of
the period in which it was emitted, exactly once; requests in flight at a boundary are written when
their response arrives, in the later period.

Rotation is driven by the caller (:meth:`RotatingSink.maybe_rotate` with the time now), from the
one thread that adds rows, so no row can race a file being closed.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kwsniff.memory import give_back
from kwsniff.sinks.dataset import Output

if TYPE_CHECKING:
    from kwsniff.sinks.delta_output import DeltaOutput
from kwsniff.sinks.parquet import ROW_BUFFER_BYTES, ParquetSink


class RotatingSink:
    """``add`` goes to the current period's ParquetSink; ``maybe_rotate(now)`` closes it once
    ``period_s`` has passed since it opened and opens the next. ``on_rotate(start, end)`` is called
    just before a period's files close, so a row describing the period (capture_stats) lands in it."""

    def __init__(
        self,
        out_dir: str | Path | Output | DeltaOutput,
        name: str,
        tables: Iterable[str],
        period_s: float,
        now: float,
        on_rotate: Any = None,
        row_buffer_bytes: int = ROW_BUFFER_BYTES,
    ) -> None:
        # An Output or a DeltaOutput: each period committed whole; a directory: files only.
        self.output = None if isinstance(out_dir, str | Path) else out_dir
        self.out_dir = Path(out_dir) if isinstance(out_dir, str | Path) else None
        self.name = name
        self.tables = tuple(tables)
        self.period_s = period_s
        self.on_rotate = on_rotate
        self.row_buffer_bytes = row_buffer_bytes
        self.seq = 0
        self.counts: dict[str, int] = dict.fromkeys(self.tables, 0)
        self.files: list[Path] = []
        self.started = now
        self.current = self._open()

    def _open(self) -> ParquetSink:
        self.seq += 1
        where = self.out_dir if self.output is None else self.output.stage
        assert where is not None
        return ParquetSink(
            where, f"{self.name}-{self.seq:06d}", self.tables, row_buffer_bytes=self.row_buffer_bytes
        )

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.current.add(table, row)

    def maybe_rotate(self, now: float) -> bool:
        """Close the period if it is over; True if it was."""
        if now - self.started < self.period_s:
            return False
        self.rotate(now)
        return True

    def rotate(self, now: float) -> list[Path]:
        """Close the period now, whatever its length, and open the next (live capture workers
        rotate when the coordinating process says); the closed period's files."""
        done = len(self.files)
        self._close_period(now)
        self.started = now
        self.current = self._open()
        return self.files[done:]

    def _close_period(self, now: float, last: bool = False) -> None:
        if self.on_rotate is not None:
            self.on_rotate(self.started, now)
        sink = self.current
        staged = sink.close()
        if self.output is not None:
            self.output.commit(again=not last)
            if isinstance(self.output, Output):  # a Delta table's files get names of their own
                staged = {t: self.output.out / t / p.name for t, p in staged.items()}
        self.files.extend(staged.values())
        for table, n in sink.counts.items():
            self.counts[table] += n
        give_back()  # a period's writing freed, returned to the system (kwsniff.memory.give_back)

    def close(self, now: float) -> None:
        """The last period, however short: its files close like the others."""
        self._close_period(now, last=True)

    def abort(self) -> None:
        self.current.abort()
        if self.output is not None:
            self.output.close()
