"""`kwsniff read`: capture files to Parquet tables, with a one-screen summary."""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from kwsniff import codecache
from kwsniff.capture import STDIN, CaptureError
from kwsniff.commands import messages
from kwsniff.commands.exits import EXIT_STRICT
from kwsniff.commands.fields import gathered
from kwsniff.core.decode import InputMissing, unreadable_inputs
from kwsniff.core.decoding import read_session_options
from kwsniff.core.options import ReadOptions
from kwsniff.core.output import commit, open_output, too_long
from kwsniff.core.values import BadValue
from kwsniff.memory import ROWS, MemoryBudget
from kwsniff.pipeline.run import (
    CaptureResult,
    ReadGate,
    failed_row,
    result_row,
    run_capture,
)
from kwsniff.pipeline.session import SessionOptions
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.view.summary import print_summary, strict_reasons

if TYPE_CHECKING:
    from kwsniff.sinks import Output
    from kwsniff.sinks.delta_output import DeltaOutput


@click.command()
@click.argument("captures", nargs=-1, required=True, type=click.Path(path_type=Path))
@gathered(ReadOptions, "options")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
def read(captures: tuple[Path, ...], options: ReadOptions, quiet: bool) -> None:
    """Decode CAPTURES (pcap, pcapng, optionally gzipped; `-` for standard input) into Parquet tables
    under --out."""
    # pyarrow (with numpy) only when a run starts: `kwsniff --help` stays light.
    from kwsniff.sinks import ExistingOutput, OutputError, arrow_without_pandas

    arrow_without_pandas()

    from kwsniff.pipeline.keylogs import KeyLogError

    try:
        session = read_session_options(options)
    except BadValue as exc:
        raise click.BadParameter(str(exc), param_hint="--fragment-memory") from None
    except KeyLogError as exc:
        messages.error(str(exc))
        sys.exit(1)
    tables = (*DEFAULT_TABLES, "records") if session.records else DEFAULT_TABLES
    overwrite, append, continuous = options.overwrite, options.append, options.continuous
    if overwrite and append:
        raise click.UsageError("--overwrite and --append exclude each other")
    if sum(str(p) == STDIN for p in captures) > 1:
        raise click.UsageError("standard input (-) can be read only once")
    if continuous and any(str(p) == STDIN for p in captures):
        raise click.UsageError("--continuous reads files, not standard input")
    existing = (
        ExistingOutput.OVERWRITE if overwrite else ExistingOutput.APPEND if append else ExistingOutput.REFUSE
    )
    # Every input is opened (format checked) before --out is touched or anything is decoded. An
    # input that is not a capture fails alone (its `captures` row says why), unless none is left.
    try:
        unreadable = unreadable_inputs(captures)
    except InputMissing as exc:
        messages.error(str(exc))
        sys.exit(1)
    if unreadable and (len(unreadable) == len(captures) or continuous):
        if len(captures) == 1 or continuous:
            messages.error(next(iter(unreadable.values())))
        else:
            for path, line in unreadable.items():
                messages.warnings(path.name, [f"failed: {line.removeprefix(f'{path}: ')}"])
            messages.error(f"none of the {len(captures)} inputs could be read")
        sys.exit(1)
    try:
        output = open_output(options.out, existing, host=options.host, storage_options=options.storage_option)
    except OutputError as exc:
        messages.error(str(exc))
        sys.exit(1)
    # The decoders this run compiles are kept for the next one (kwsniff.codecache).
    codecache.use_directory(codecache.cache_dir(os.environ))
    signals = StopSignals()
    row_buffer_bytes = MemoryBudget(options.memory_limit).cap(ROWS)
    strict, summaries = options.strict, options.summaries
    try:
        with signals:
            if continuous:
                code = _read_series(captures, output, tables, session, strict, quiet, summaries)
            else:
                code = _read_all(
                    captures, output, tables, session, signals, strict, quiet, row_buffer_bytes, summaries
                )
    finally:
        output.close()
    sys.exit(code)


class StopSignals:
    """SIGINT (Ctrl-C) and SIGTERM during a read. Reading standard input, a signal ends the input:
    what was read is decoded and committed (`tcpdump -w - | kwsniff read -`, then Ctrl-C). Reading a
    file, the run is abandoned and the dataset left as it was. Either way the exit status is
    128 + the signal (130, 143). While the run commits, a signal waits for the commit to finish."""

    def __init__(self) -> None:
        self.signum = 0
        self.gate: ReadGate | None = None  # the stdin run's, while it reads
        self.abandon = False  # raise Abandoned at once (a file input is being decoded)

    def __enter__(self) -> StopSignals:
        self._old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = not self.signum
        self.signum = self.signum or signum
        if self.gate is not None:
            self.gate.stop()
        elif self.abandon and first:
            raise Abandoned

    @property
    def exit_code(self) -> int:
        return 128 + self.signum if self.signum else 0


class Abandoned(Exception):
    """A signal ended the run while a file was decoded: nothing of the run is committed."""


def _read_all(
    captures: tuple[Path, ...],
    output: Output | DeltaOutput,
    tables: tuple[str, ...],
    options: SessionOptions,
    signals: StopSignals,
    strict: bool,
    quiet: bool,
    row_buffer_bytes: int,
    summaries: str,
) -> int:
    """Decode every input into the staging directory, commit, and return the exit status. An input
    that fails (not a capture, or a decoder that raised) fails alone: a warning, a `captures` row
    saying why, and exit status 3 under --strict; the others are written."""
    from kwsniff.sinks import OutputError, ParquetSink, capture_keys, output_name, stream_name

    files = [p for p in captures if str(p) != STDIN]
    keys = capture_keys(files, output.kept_names("requests"))
    names = {p: stream_name("stdin") if str(p) == STDIN else output_name(p) for p in captures}
    refused = too_long(names, output.name_max())
    if refused:
        messages.error(refused)
        return 1
    undecoded = 0
    # In input order: (result, row counts) of each decoded input, (name, reason) of each failed one.
    results: list[tuple[CaptureResult, dict[str, int]] | tuple[str, str]] = []
    failures: list[tuple[Path, dict[str, object]]] = []  # (input, its `captures` row)
    stdin_stopped = False  # a signal came while standard input was read: commit what was
    # What exists before the first packet (modules, click's command tree) lives as long as the run:
    # frozen, the cyclic collector's passes no longer walk it (as the live capture does, run_live).
    gc.freeze()
    for path in captures:
        if signals.signum:
            break
        stdin = str(path) == STDIN
        name = names[path] if stdin else keys[path]
        shown_name = name or path.name  # None: the file's own name, as the reader names it
        started_us, started = time.time_ns() // 1000, time.perf_counter()
        sink = ParquetSink(output.stage, names[path], tables, row_buffer_bytes=row_buffer_bytes)
        gate = ReadGate() if stdin else None
        signals.gate, signals.abandon = gate, not stdin
        try:
            with sink:
                result = run_capture(
                    path,
                    sink,
                    options,
                    progress=not quiet and sys.stderr.isatty(),
                    name=name,
                    gate=gate,
                )
                sink.add("captures", result_row(result))
                signals.abandon = False  # decoded: a signal now waits for the files to close
        except Abandoned:
            break
        except OSError as exc:
            messages.error(f"{path}: writing {output.shown}: {exc.strerror or exc}")
            return 1
        except Exception as exc:  # not a capture, or a decoder bug: this input fails, the others go on
            row = failed_row(path, shown_name, exc, started_us, started)
            failures.append((path, row))
            results.append((shown_name, str(row["reason"])))  # said in input order, after the commit
            continue
        finally:
            signals.gate, signals.abandon = None, False
        stdin_stopped = gate is not None and gate.stopped
        results.append((result, dict(sink.counts)))
    if signals.signum and not stdin_stopped:
        return signals.exit_code  # a file was cut short: the old dataset stays as it was
    if len(failures) == len(results):
        # Nothing decoded: an error, and nothing written.
        if len(captures) == 1 and failures:
            messages.error(f"{failures[0][0]}: {failures[0][1]['reason']}")
        else:
            messages.error(f"none of the {len(captures)} inputs could be read")
        return 1
    for path, row in failures:
        # A failed input leaves only its `captures` row, which says why.
        with ParquetSink(output.stage, names[path], ("captures",)) as failed_sink:
            failed_sink.add("captures", row)
    try:
        commit(output, options.memory_limit, summaries, messages.warnings)
    except OutputError as exc:
        messages.error(str(exc))
        return 1
    for outcome in results:
        if isinstance(outcome[0], str):
            if len(captures) > 1:
                messages.warnings(outcome[0], [f"failed: {outcome[1]}"])
            continue
        result, counts = outcome
        assert isinstance(result, CaptureResult) and isinstance(counts, dict)
        if not quiet:
            print_summary(result, output.shown, counts)
        messages.warnings(result.name, result.warnings)
        reasons = strict_reasons(result) if strict else []
        if reasons:
            undecoded += 1
            click.echo(f"kwsniff: strict: {result.name}: " + "; ".join(reasons), err=True)
    if strict and failures:
        click.echo(f"kwsniff: strict: {len(failures)} of {len(captures)} inputs failed", err=True)
    if signals.signum:
        return signals.exit_code
    return EXIT_STRICT if undecoded or (strict and failures) else 0


def _read_series(
    captures: tuple[Path, ...],
    output: Output | DeltaOutput,
    tables: tuple[str, ...],
    options: SessionOptions,
    strict: bool,
    quiet: bool,
    summaries: str,
) -> int:
    """`read --continuous`: the inputs as one capture, one set of tables, committed in one step."""
    from kwsniff.pipeline.run import run_series
    from kwsniff.sinks import OutputError, ParquetSink, output_name

    sink = ParquetSink(output.stage, output_name(captures[0]), tables)
    try:
        with sink:
            result = run_series(list(captures), sink, options)
            if "captures" in tables:
                sink.add("captures", result_row(result))
        commit(output, options.memory_limit, summaries, messages.warnings)
    except CaptureError as exc:
        messages.error(str(exc))
        return 1
    except OutputError as exc:
        messages.error(str(exc))
        return 1
    except OSError as exc:
        messages.error(f"{captures[0]}: writing {output.shown}: {exc.strerror or exc}")
        return 1
    if not quiet:
        print_summary(result, output.shown, sink.counts)
        pieces = [Path(result.pieces[0][0]).name] + [
            f"{Path(p).name} after {(first - result.pieces[i][2]) / 1e6:.3f} s"
            for i, (p, first, _) in enumerate(result.pieces[1:])
        ]
        click.echo("  pieces in time order: " + "; ".join(pieces))
    messages.warnings(result.name, result.warnings)
    reasons = strict_reasons(result) if strict else []
    if reasons:
        click.echo(f"kwsniff: strict: {result.name}: " + "; ".join(reasons), err=True)
        return EXIT_STRICT
    return 0
