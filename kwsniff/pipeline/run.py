"""Reading capture files through a Session into a sink: the edge that ties files to the core."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kwsniff.capture import STDIN, CaptureError, CaptureReader, open_capture
from kwsniff.capture.reader import MAX_RECORD
from kwsniff.memory import record_limit
from kwsniff.pipeline.loop import Packets, fed, to_end
from kwsniff.pipeline.session import Session, SessionOptions, SessionStats
from kwsniff.rows import RowSink

PROGRESS_EVERY = 8192  # packets between progress-bar updates
Opener = Callable[..., CaptureReader]  # a path (or URI) to an open capture reader


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
    started_us: int = 0  # wall clock (UTC microseconds) when decoding began
    ended_us: int | None = None  # the last packet's time (UTC microseconds); None without packets
    # For a series read as one capture (run_series): (file, first ts, last ts) of each piece, in order.
    pieces: list[tuple[str, int, int]] = field(default_factory=list)


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
    started_us = time.time_ns() // 1000
    started = time.perf_counter()
    with open_capture(path) as reader:
        name = name or reader.name
        session = reader_session(reader, name, sink, options, keep_messages=keep_messages)
        packets = reader.packets()
        if gate is not None:
            packets = _gated(packets, gate)
        elif progress and reader.size:
            packets = _with_progress(packets, reader)
        last = to_end(fed(packets, session.packet))
        return reader_result(reader, session, name, str(path), started_us, started, last)


def reader_session(
    reader: CaptureReader, name: str, sink: RowSink, options: SessionOptions, *, keep_messages: bool = False
) -> Session:
    """The Session of one capture file's packets: the reader hands it the TLS secrets of the file's
    own pcapng blocks, and holds no record larger than --memory-limit allows one (memory.record_limit)."""
    session = Session(name, sink, options, keep_messages=keep_messages)
    reader.on_secrets = session.add_secrets
    reader.max_record = record_limit(options.memory_limit)
    return session


def reader_result(
    reader: CaptureReader, session: Session, name: str, path: str, started_us: int, started: float, last: int
) -> CaptureResult:
    """What ``session`` decoded of ``reader``'s packets, the last of them at ``last`` (-1: none);
    ``started`` is the perf_counter when decoding began."""
    stats = session.finish()
    return capture_result(
        session,
        stats,
        name=name,
        path=path,
        # A stream has no size: the bytes actually read.
        file_bytes=reader.size if reader.size is not None else reader.tell(),
        seconds=time.perf_counter() - started,
        truncated=reader.truncated,
        warnings=list(reader.warnings),
        started_us=started_us,
        ended_us=last,
    )


def first_timestamp(path: str | Path, opener: Opener = open_capture) -> int | None:
    """The first packet's time in a capture file (None for a capture without packets)."""
    with opener(path) as reader:
        for ts, _, _ in reader.packets():
            return ts
    return None


class Series:
    """Consecutive pieces of one capture (a rotated file set) as one stream of packets: in the order
    of their first timestamps, each piece opened with ``opener`` (a local file by default; `kwsniff
    spark` passes its opener of paths and URIs). :meth:`packets` raises CaptureError for a piece that
    is not a capture, or that begins before the piece before it ended (pieces of different captures,
    or one given twice); what was read is in ``pieces``, ``size``, ``truncated`` and ``warnings``."""

    def __init__(self, paths: Sequence[str | Path], opener: Opener = open_capture) -> None:
        firsts = [(first_timestamp(p, opener), i) for i, p in enumerate(paths)]
        self.order = [paths[i] for ts, i in sorted(firsts, key=lambda f: (f[0] is None, f[0] or 0, f[1]))]
        self.opener = opener
        self.on_secrets: Callable[[bytes], None] | None = None  # TLS keys met in a piece's pcapng blocks
        self.max_record = MAX_RECORD  # each piece's CaptureReader.max_record (from --memory-limit)
        self.pieces: list[tuple[str, int, int]] = []  # (piece, first ts, last ts), in time order
        self.size = 0
        self.truncated = False
        self.warnings: list[str] = []

    def packets(self) -> Iterator[tuple[int, int, bytes]]:
        pieces = self.pieces
        for path in self.order:
            first = last = -1
            with self.opener(path) as reader:
                if self.on_secrets is not None:
                    reader.on_secrets = self.on_secrets
                reader.max_record = self.max_record
                for ts, linktype, data in reader.packets():
                    if first < 0:
                        first = ts
                        if pieces and ts < pieces[-1][2]:
                            raise CaptureError(
                                f"{path}: begins {(pieces[-1][2] - ts) / 1e6:.6f} s before the end of "
                                f"{pieces[-1][0]}: not consecutive pieces of one capture"
                            )
                    last = ts
                    yield ts, linktype, data
                self.size += reader.size or 0
                self.truncated = self.truncated or reader.truncated
                self.warnings += [f"{reader.name}: {w}" for w in reader.warnings]
            if first >= 0:
                pieces.append((str(path), first, last))


def run_series(
    paths: list[Path], sink: RowSink, options: SessionOptions, *, name: str | None = None
) -> CaptureResult:
    """Decode consecutive pieces of one capture (a rotated file set) as one capture (:class:`Series`):
    one Session throughout, so TCP state, pairing and learned brokers carry across the boundaries.
    Raises CaptureError for a piece that is not a capture or that overlaps the one before."""
    started_us = time.time_ns() // 1000
    started = time.perf_counter()
    series = Series(paths)
    name = name or Path(series.order[0]).name
    session = Session(name, sink, options)
    series.on_secrets = session.add_secrets
    series.max_record = record_limit(options.memory_limit)
    last = to_end(fed(series.packets(), session.packet))
    stats = session.finish()
    result = capture_result(
        session,
        stats,
        name=name,
        path=str(series.order[0]),
        file_bytes=series.size,
        seconds=time.perf_counter() - started,
        truncated=series.truncated,
        warnings=series.warnings,
        started_us=started_us,
        ended_us=last,
    )
    result.pieces = series.pieces
    return result


def _gated(packets: Packets, gate: ReadGate) -> Packets:
    """``packets`` until their end or a stop: the gate knows when a packet is being decoded (while
    this generator waits for the loop to hand it back) and when input is being waited for."""
    gate.reading = True
    try:
        for packet in packets:
            gate.decoding = True
            yield packet
            gate.decoding = False
            if gate.stopped:
                break
    except InputStopped:
        pass
    finally:
        gate.reading = False


def _with_progress(packets: Packets, reader: CaptureReader) -> Packets:
    """``packets``, with a progress bar on stderr of the bytes read."""
    import click

    size = reader.size or 0
    with click.progressbar(length=size, label=reader.name, file=sys.stderr, show_pos=False, width=30) as bar:
        done = 0
        for n, packet in enumerate(packets, 1):
            yield packet
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
    started_us: int = 0,
    ended_us: int = -1,
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
        warnings=[*(warnings or []), *rows.failure_warnings()],
        started_us=started_us,
        ended_us=ended_us if ended_us >= 0 else None,
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
    ended_us: int | None = None,
    broker_conflicts: int | None = None,
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
        "ended": None if failed else ended_us,
        "broker_conflicts": None if failed else broker_conflicts,
    }


def failed_row(
    path: Path, name: str, exc: BaseException, started_us: int, started: float
) -> dict[str, object]:
    """The `captures` row of an input that failed with ``exc`` (its ``reason``: failure_reason),
    ``started`` the perf_counter when its run began: the one place `read`, the Python API and
    `read -` build it."""
    reason = failure_reason(exc, str(path))
    return capture_row(
        name,
        input_path(path),
        file_bytes=file_size(path),
        packets=None,
        warnings=[],
        error=reason,
        started_us=started_us,
        seconds=time.perf_counter() - started,
    )


def result_row(result: CaptureResult) -> dict[str, object]:
    """The `captures` row of a capture ``run_capture`` decoded."""
    return capture_row(
        result.name,
        input_path(result.path),
        file_bytes=result.file_bytes,  # for standard input: the bytes read
        packets=result.stats.packets,
        warnings=result.warnings,
        error=None,
        started_us=result.started_us,
        seconds=result.seconds,
        ended_us=result.ended_us,
        broker_conflicts=result.stats.broker_conflicts,
    )


__all__ = [
    "CaptureError",
    "CaptureResult",
    "capture_result",
    "capture_row",
    "failed_row",
    "fed",
    "failure_reason",
    "file_size",
    "input_path",
    "reader_result",
    "reader_session",
    "result_row",
    "run_capture",
    "run_series",
    "to_end",
    "Series",
    "InputStopped",
    "ReadGate",
]
