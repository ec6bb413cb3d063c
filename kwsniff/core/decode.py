"""Decoding inputs into in-memory sinks, input by input (the Python API's read and iter_read):
inputs checked first, each decoded by the one decode loop (kwsniff.pipeline.loop.fed), its batches
handed on as they fill, a failed input leaving its `captures` row alone (kwsniff.pipeline.run.failed_row)."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import pyarrow as pa

    from kwsniff.pipeline.run import CaptureResult
    from kwsniff.pipeline.session import SessionOptions
    from kwsniff.sinks.arrow import ArrowSink


class InputMissing(Exception):
    """An input that is missing, or none that can be read: nothing is decoded (one line)."""


@dataclasses.dataclass
class Run:
    """`read`'s options as the API was given them."""

    paths: list[Path]
    options: SessionOptions
    tables: tuple[str, ...]
    row_buffer_bytes: int
    strict: bool
    continuous: bool


class Done(NamedTuple):
    """An input decoded to its end (``result``), or failed (``reason``, and its `captures` row)."""

    file_name: str  # the name of its table files
    name: str  # its `capture` value
    result: CaptureResult | None
    reason: str | None


def unreadable_inputs(paths: Iterable[Path]) -> dict[Path, str]:
    """{input: why} of the inputs that are not captures, each opened (format checked) before anything
    is decoded or written (standard input, `-`, is not checked); a missing input (or a name the file
    system refuses) raises InputMissing: the caller's mistake, not a bad capture, and nothing runs."""
    from kwsniff.capture import STDIN, CaptureError, check_capture

    unreadable: dict[Path, str] = {}
    for path in paths:
        if str(path) == STDIN:
            continue
        try:
            check_capture(path)
        except CaptureError as exc:
            if not os.path.exists(path):
                raise InputMissing(str(exc)) from None
            unreadable[path] = str(exc)
    return unreadable


def decode(run: Run) -> Iterator[tuple[str, pa.RecordBatch] | Done]:
    """Every input of ``run`` in order: its batches as they fill, then its Done. Inputs are opened
    (format checked) first, as `read` does: a missing input, or no readable one, raises InputError."""
    from kwsniff.capture import CaptureError, open_capture
    from kwsniff.pipeline.run import Series, failed_row, result_row
    from kwsniff.sinks import capture_keys, output_name
    from kwsniff.sinks.arrow import ArrowSink

    unreadable = unreadable_inputs(run.paths)
    if unreadable and (len(unreadable) == len(run.paths) or run.continuous):
        raise InputMissing(next(iter(unreadable.values())))
    if run.continuous:
        sink = ArrowSink(output_name(run.paths[0]), run.tables, row_buffer_bytes=run.row_buffer_bytes)
        series = Series(run.paths)
        try:
            name = Path(series.order[0]).name
            result = yield from _session(series, str(series.order[0]), name, sink, run.options)
        except CaptureError as exc:
            raise InputMissing(str(exc)) from None
        result.pieces = series.pieces
        sink.add("captures", result_row(result))
        yield from _taken(sink, close=True)
        yield Done(output_name(run.paths[0]), result.name, result, None)
        return
    keys = capture_keys(run.paths, set())
    for path in run.paths:
        file_name = output_name(path)
        started_us, started = time.time_ns() // 1000, time.perf_counter()
        sink = ArrowSink(file_name, run.tables, row_buffer_bytes=run.row_buffer_bytes)
        try:
            with open_capture(path) as reader:
                result = yield from _session(reader, str(path), keys[path] or reader.name, sink, run.options)
        except Exception as exc:  # not a capture, or a decoder bug: this input fails, the others go on
            row = failed_row(path, keys[path] or path.name, exc, started_us, started)
            failed = ArrowSink(file_name, ("captures",))
            failed.add("captures", row)
            yield from _taken(failed, close=True)
            yield Done(file_name, keys[path] or path.name, None, str(row["reason"]))
            continue
        sink.add("captures", result_row(result))
        yield from _taken(sink, close=True)
        yield Done(file_name, result.name, result, None)


def _session(
    reader: Any, path: str, name: str, sink: ArrowSink, options: SessionOptions
) -> Generator[tuple[str, pa.RecordBatch], None, CaptureResult]:
    """The decode loop of every capture (kwsniff.pipeline.loop.fed), handing on the sink's batches as they fill;
    returns the CaptureResult."""
    from kwsniff.pipeline.loop import fed
    from kwsniff.pipeline.run import reader_result, reader_session

    started_us, started = time.time_ns() // 1000, time.perf_counter()
    session = reader_session(reader, name, sink, options)
    loop = fed(reader.packets(), session.packet, sink.ready)
    while True:
        try:
            next(loop)
        except StopIteration as stop:
            last = stop.value
            break
        yield from _taken(sink)
    result = reader_result(reader, session, name, path, started_us, started, last)
    yield from _taken(sink)  # the rows session.finish() wrote
    return result


def _taken(sink: ArrowSink, close: bool = False) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The batches ``sink`` filled (all it holds, ``close``), oldest first, let go as handed on."""
    if close:
        sink.close()
    ready = sink.ready
    while ready:
        yield ready.popleft()
