"""Reading capture files through a Session into a sink: the edge that ties files to the core."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import click

from kwsniff.capture import STDIN, CaptureError, open_capture
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
    started_us: int = 0  # wall clock (UTC microseconds) when decoding began


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
    started_us = time.time_ns() // 1000
    started = time.perf_counter()
    with open_capture(path) as reader:
        name = name or reader.name
        session = Session(name, sink, options, keep_messages=keep_messages)
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
            started_us=started_us,
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
    started_us: int = 0,
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
        started_us=started_us,
    )


def input_path(path: str | Path) -> str:
    """An input as the `captures` table's `path` names it: absolute (``-`` and URIs as given)."""
    shown = os.fspath(path)
    return shown if shown == STDIN or "://" in shown else os.path.abspath(shown)


def file_size(path: str | Path) -> int | None:
    """Bytes of a local file, None when there is none to measure (standard input, gone, a URI)."""
    try:
        return None if os.fspath(path) == STDIN else os.path.getsize(path)
    except (OSError, ValueError):
        return None


def failure_reason(exc: BaseException, shown: str) -> str:
    """Why an input failed, in one line without its path: the reader's message for a file that is
    not a capture; the exception's class and first line for anything else (a decoder bug)."""
    text = str(exc).strip()
    if isinstance(exc, CaptureError):
        return text.removeprefix(f"{shown}: ")
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def capture_row(
    name: str,
    path: str,
    *,
    file_bytes: int | None,
    packets: int | None,
    warnings: list[str],
    error: str | None,
    started_us: int,
    seconds: float,
) -> dict[str, object]:
    """The `captures` row of one input, the same for `kwsniff read` and `kwsniff spark`."""
    failed = error is not None
    return {
        "capture": name,
        "path": path,
        "bytes": file_bytes,
        "packets": None if failed else packets,
        "status": "failed" if failed else "damaged" if warnings else "ok",
        "reason": error if failed else "; ".join(warnings) or None,
        "warnings": len(warnings),
        "started": started_us,
        "duration_ms": round(seconds * 1000, 3),
    }


def result_row(result: CaptureResult) -> dict[str, object]:
    """The `captures` row of a capture ``run_capture`` decoded."""
    return capture_row(
        result.name,
        input_path(result.path),
        file_bytes=None if result.path == STDIN else result.file_bytes,
        packets=result.stats.packets,
        warnings=result.warnings,
        error=None,
        started_us=result.started_us,
        seconds=result.seconds,
    )


__all__ = [
    "CaptureError",
    "CaptureResult",
    "capture_result",
    "capture_row",
    "failure_reason",
    "file_size",
    "input_path",
    "result_row",
    "run_capture",
]
