"""Reading capture files through a Session into a sink: the edge that ties files to the core."""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import click

from kwsniff.capture import CaptureError, open_capture
from kwsniff.pipeline.session import Session, SessionOptions, SessionStats
from kwsniff.rows import RowSink

PROGRESS_EVERY = 8192  # packets between progress-bar updates


@dataclass
class CaptureResult:
    name: str
    path: str
    file_bytes: int
    seconds: float
    stats: SessionStats
    status: Counter[str]
    totals: Counter[str]
    decode_errors: Counter[str]
    notes: Counter[str]
    record_damage: Counter[str]
    undecodable_frames: int
    truncated: bool
    warnings: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)


def run_capture(
    path: str | Path,
    sink: RowSink,
    options: SessionOptions,
    *,
    progress: bool = False,
    keep_messages: bool = False,
    name: str | None = None,
) -> CaptureResult:
    """Decode one capture file into ``sink``. Raises CaptureError for a file that is not a capture.

    ``name`` is the tables' `capture` value (default: the file's name)."""
    started = time.perf_counter()
    with open_capture(path) as reader:
        name = name or reader.name
        session = Session(name, sink, options, keep_messages=keep_messages)
        reader.on_secrets = session.add_secrets
        feed = session.packet
        if progress and reader.size:
            with click.progressbar(
                length=reader.size, label=reader.name, file=sys.stderr, show_pos=False, width=30
            ) as bar:
                done = 0
                for n, (ts, linktype, data) in enumerate(reader.packets(), 1):
                    feed(ts, linktype, data)
                    if n % PROGRESS_EVERY == 0:
                        pos = reader.tell()
                        bar.update(pos - done)
                        done = pos
                bar.update(reader.size - done)
        else:
            for ts, linktype, data in reader.packets():
                feed(ts, linktype, data)
        stats = session.finish()
        return capture_result(
            session,
            stats,
            name=name,
            path=str(path),
            file_bytes=reader.size or 0,
            seconds=time.perf_counter() - started,
            truncated=reader.truncated,
            warnings=list(reader.warnings),
        )


def capture_result(
    session: Session,
    stats: SessionStats,
    *,
    name: str,
    path: str,
    file_bytes: int,
    seconds: float,
    truncated: bool,
    warnings: list[str] | None = None,
) -> CaptureResult:
    """What one finished session decoded, for the summary and `--strict` (files and live capture)."""
    rows = session.rows
    return CaptureResult(
        name=name,
        path=path,
        file_bytes=file_bytes,
        seconds=seconds,
        stats=stats,
        status=rows.status,
        totals=rows.totals,
        decode_errors=rows.decode_errors,
        notes=rows.notes,
        record_damage=rows.record_damage,
        undecodable_frames=rows.undecodable_frames,
        truncated=truncated,
        warnings=warnings or [],
    )


__all__ = ["CaptureError", "CaptureResult", "capture_result", "run_capture"]
