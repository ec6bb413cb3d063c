"""Reading capture files through a Session into a sink: the edge that ties files to the core."""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import click

from kwsniff.capture import CaptureError, CaptureReader, open_capture
from kwsniff.pipeline.session import Session, SessionOptions, SessionStats
from kwsniff.rows import RowSink

PROGRESS_EVERY = 8192  # packets between progress-bar updates


class InputStopped(Exception):
    """Raised by :meth:`ReadGate.stop` to end reading where the run is waiting for input."""


class ReadGate:
    """Lets a signal end the reading of a capture (`kwsniff read -` and Ctrl-C) between two packets.

    :meth:`stop`, called from a signal handler, raises InputStopped at once when the run is waiting
    for or parsing input (a blocking read of a pipe must be interrupted), and otherwise lets the
    packet being decoded finish, so the session is never left half-way through a packet; what was
    read is then finished and written like a complete capture. Only the first stop raises."""

    def __init__(self) -> None:
        self.reading = False
        self.decoding = False
        self.stopped = False

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        if self.reading and not self.decoding:
            raise InputStopped


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
    gate: ReadGate | None = None,
) -> CaptureResult:
    """Decode one capture file into ``sink``. Raises CaptureError for a file that is not a capture.

    ``name`` is the tables' `capture` value (default: the file's name); ``gate`` lets a signal end
    the reading early (what was read is then decoded to the end)."""
    started = time.perf_counter()
    with open_capture(path) as reader:
        name = name or reader.name
        session = Session(name, sink, options, keep_messages=keep_messages)
        if gate is not None:
            _read_gated(reader, session, gate)
        elif progress and reader.size:
            _read_with_progress(reader, session)
        else:
            feed = session.packet
            for ts, linktype, data in reader.packets():
                feed(ts, linktype, data)
        stats = session.finish()
        return capture_result(
            session,
            stats,
            name=name,
            path=str(path),
            # A stream has no size: the bytes actually read.
            file_bytes=reader.size if reader.size is not None else reader.tell(),
            seconds=time.perf_counter() - started,
            truncated=reader.truncated,
            warnings=list(reader.warnings),
        )


def _read_gated(reader: CaptureReader, session: Session, gate: ReadGate) -> None:
    feed = session.packet
    gate.reading = True
    try:
        for ts, linktype, data in reader.packets():
            gate.decoding = True
            feed(ts, linktype, data)
            gate.decoding = False
            if gate.stopped:
                break
    except InputStopped:
        pass
    gate.reading = False


def _read_with_progress(reader: CaptureReader, session: Session) -> None:
    feed = session.packet
    size = reader.size or 0
    with click.progressbar(length=size, label=reader.name, file=sys.stderr, show_pos=False, width=30) as bar:
        done = 0
        for n, (ts, linktype, data) in enumerate(reader.packets(), 1):
            feed(ts, linktype, data)
            if n % PROGRESS_EVERY == 0:
                pos = reader.tell()
                bar.update(pos - done)
                done = pos
        bar.update(size - done)


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


__all__ = ["CaptureError", "CaptureResult", "InputStopped", "ReadGate", "capture_result", "run_capture"]
