"""`kwsniff.read` and `kwsniff.iter_read`: captures decoded in the calling process into Arrow
tables, with `kwsniff read`'s decoder, options and row batches (kwsniff.commands.read)."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from kwsniff.api.errors import InputError, StrictError, UsageError

if TYPE_CHECKING:
    import pyarrow as pa

    from kwsniff.api.tables import Tables
    from kwsniff.pipeline.run import CaptureResult
    from kwsniff.pipeline.session import SessionOptions
    from kwsniff.sinks.arrow import ArrowSink

Captures = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]


class Batch(NamedTuple):
    """One record batch of one table, as :func:`iter_read` yields them."""

    table: str
    batch: pa.RecordBatch


@dataclasses.dataclass
class Run:
    """`read`'s options as the API was given them."""

    paths: list[Path]
    options: SessionOptions
    tables: tuple[str, ...]
    row_buffer_bytes: int
    strict: bool
    continuous: bool


def settings(captures: Captures, given: dict[str, Any]) -> Run:
    """The run ``read(captures, **given)`` asks for, checked as `kwsniff read` checks it: each
    keyword by its field of kwsniff.core.options.ReadOptions."""
    from kwsniff import codecache
    from kwsniff.core.decoding import read_session_options
    from kwsniff.core.options import WRITE_OPTIONS, OptionError, ReadOptions, from_keywords
    from kwsniff.core.values import BadValue
    from kwsniff.memory import ROWS, MemoryBudget
    from kwsniff.pipeline.keylogs import KeyLogError
    from kwsniff.tables import DEFAULT_TABLES

    if "broker_ports" in given:  # the plural reads naturally for a list; the command's name is singular
        given = {("broker_port" if k == "broker_ports" else k): v for k, v in given.items()}
    try:
        asked = from_keywords(ReadOptions, given, "read", skip=WRITE_OPTIONS)
    except OptionError as exc:
        raise UsageError(str(exc)) from None
    given_paths = [captures] if isinstance(captures, str | os.PathLike) else captures
    listed = list(given_paths) if isinstance(given_paths, Iterable) else [given_paths]
    if not all(isinstance(c, str | os.PathLike) for c in listed):
        raise UsageError(f"read: {captures!r} is not a path or a list of paths")
    paths = [Path(os.fsdecode(c)) for c in listed]
    if not paths:
        raise UsageError("read: no captures given")
    if any(str(p) == "-" for p in paths):
        raise UsageError("read: standard input (-) is for the command; give a file")
    try:
        options = read_session_options(asked)
    except BadValue as exc:
        raise UsageError(f"read: fragment_memory: Invalid value for --fragment-memory: {exc}") from None
    except KeyLogError as exc:
        raise InputError(str(exc)) from None
    codecache.use_directory(codecache.cache_dir(os.environ))  # as `read` does: decoders kept for the next run
    tables = (*DEFAULT_TABLES, "records") if options.records else DEFAULT_TABLES
    rows = MemoryBudget(asked.memory_limit).cap(ROWS)
    return Run(paths, options, tables, rows, asked.strict, asked.continuous)


class Done(NamedTuple):
    """An input decoded to its end (``result``), or failed (``reason``, and its `captures` row)."""

    file_name: str  # the name of its table files
    name: str  # its `capture` value
    result: CaptureResult | None
    reason: str | None


def decode(run: Run) -> Iterator[tuple[str, pa.RecordBatch] | Done]:
    """Every input of ``run`` in order: its batches as they fill, then its Done. Inputs are opened
    (format checked) first, as `read` does: a missing input, or no readable one, raises InputError."""
    from kwsniff.capture import CaptureError, check_capture, open_capture
    from kwsniff.pipeline.run import Series, failed_row, failure_reason, result_row
    from kwsniff.sinks import capture_keys, output_name
    from kwsniff.sinks.arrow import ArrowSink

    unreadable: dict[Path, str] = {}
    for path in run.paths:
        try:
            check_capture(path)
        except CaptureError as exc:
            if not os.path.exists(path):  # missing, or a name the file system refuses: nothing runs
                raise InputError(str(exc)) from None
            unreadable[path] = str(exc)
    if unreadable and (len(unreadable) == len(run.paths) or run.continuous):
        raise InputError(next(iter(unreadable.values())))
    if run.continuous:
        sink = ArrowSink(output_name(run.paths[0]), run.tables, row_buffer_bytes=run.row_buffer_bytes)
        series = Series(run.paths)
        try:
            name = Path(series.order[0]).name
            result = yield from _session(series, str(series.order[0]), name, sink, run.options)
        except CaptureError as exc:
            raise InputError(str(exc)) from None
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
            reason = failure_reason(exc, str(path))
            failed = ArrowSink(file_name, ("captures",))
            failed.add("captures", failed_row(path, keys[path] or path.name, reason, started_us, started))
            yield from _taken(failed, close=True)
            yield Done(file_name, keys[path] or path.name, None, reason)
            continue
        sink.add("captures", result_row(result))
        yield from _taken(sink, close=True)
        yield Done(file_name, result.name, result, None)


def _session(
    reader: Any, path: str, name: str, sink: ArrowSink, options: SessionOptions
) -> Generator[tuple[str, pa.RecordBatch], None, CaptureResult]:
    """run_capture's loop (kwsniff.pipeline.run), handing on the sink's batches as they fill;
    returns the CaptureResult."""
    from kwsniff.pipeline.run import reader_result, reader_session

    started_us, started = time.time_ns() // 1000, time.perf_counter()
    session = reader_session(reader, name, sink, options)
    feed, ready = session.packet, sink.ready
    last = -1
    for last, linktype, data in reader.packets():
        feed(last, linktype, data)
        if ready:
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


def iter_read(captures: Captures, **options: Any) -> Iterator[Batch]:
    """Decode ``captures`` as :func:`read` does, yielding each table's record batches as they fill
    (``Batch(table, batch)``), under the row buffer of ``memory_limit`` (`--memory-limit`): memory
    stays bounded by the budget whatever the capture's size, as long as the caller lets the batches go.

    An input that fails part-way raises InputError after the batches it gave; with ``strict=True``,
    StrictError is raised after the last batch when something was not decoded."""
    from kwsniff.view.summary import strict_reasons

    run = settings(captures, options)
    reasons = []
    for item in decode(run):
        if isinstance(item, Done):
            if item.reason is not None:
                raise InputError(f"{item.name}: {item.reason}")
            assert item.result is not None
            if run.strict:
                reasons += [f"{item.result.name}: {r}" for r in strict_reasons(item.result)]
            continue
        yield Batch(*item)
    if reasons:
        raise StrictError(reasons)


def read(captures: Captures, **options: Any) -> Tables:
    """Decode ``captures`` (a path or a list of paths: pcap, pcapng, optionally gzipped) into
    kwsniff's tables, in this process, as `kwsniff read` does (docs/python-api.md).

    ``options`` are `kwsniff read`'s options by their long names in snake_case (``broker_port``,
    ``keylog``, ``records``, ``record_payloads``, ``memory_limit``, ``no_auto_detect``, ``strict``,
    ``continuous``, ...), with the same defaults. An input that is not a capture fails alone (its
    `captures` row says why, and ``Tables.warnings``) unless none is left (InputError)."""
    from kwsniff.api.tables import Part, Tables, summary_of
    from kwsniff.view.summary import strict_reasons

    run = settings(captures, options)
    parts: list[Part] = []
    batches: dict[str, list[pa.RecordBatch]] = {}
    summaries, warnings, reasons, failed_inputs = {}, [], [], []
    for item in decode(run):
        if not isinstance(item, Done):
            batches.setdefault(item[0], []).append(item[1])
            continue
        if item.result is None:
            failed_inputs.append(f"{item.name}: {item.reason}")
            warnings.append(f"{item.name}: failed: {item.reason}")
            parts.append(Part(item.file_name, ("captures",), batches))
        else:
            result = item.result
            parts.append(Part(item.file_name, run.tables, batches))
            summaries[result.name] = summary_of(
                result, {t: sum(len(b) for b in batches.get(t, [])) for t in run.tables}
            )
            warnings += [f"{result.name}: {w}" for w in result.warnings]
            if run.strict:
                reasons += [f"{result.name}: {r}" for r in strict_reasons(result)]
        batches = {}
    if not summaries:  # nothing decoded, as `read` says it: an error (a pipe nobody wrote to, ...)
        raise InputError(
            failed_inputs[0] if len(parts) == 1 else f"none of the {len(parts)} inputs could be read"
        )
    tables = Tables(parts, run.tables, summaries, warnings, run.options.memory_limit)
    if run.strict and (reasons or len(summaries) < len(parts)):
        failed = len(parts) - len(summaries)
        raise StrictError(reasons + ([f"{failed} of {len(parts)} inputs failed"] if failed else []), tables)
    return tables
