"""`kwsniff read`: capture files to Parquet tables, with a one-screen summary."""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from kwsniff import codecache
from kwsniff.capture import STDIN, CaptureError, check_capture
from kwsniff.commands import messages
from kwsniff.commands.exits import EXIT_STRICT
from kwsniff.commands.options import (
    BYTE_SIZE,
    Decoding,
    broker_port_option,
    broker_ports,
    decoding_options,
    idle_timeout_option,
    session_options,
)
from kwsniff.commands.summarize import SUMMARIES_MODES, SUMMARIZE_MIN_ROWS, summarize
from kwsniff.defaults import MAX_DECOMPRESSED, MAX_FRAME_SIZE
from kwsniff.memory import ROWS, MemoryBudget
from kwsniff.pipeline.run import (
    CaptureResult,
    ReadGate,
    failed_row,
    failure_reason,
    result_row,
    run_capture,
)
from kwsniff.pipeline.session import SessionOptions
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.view.summary import print_summary, strict_reasons

if TYPE_CHECKING:
    from kwsniff.sinks import Output


@click.command()
@click.argument("captures", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    "-o",
    type=click.Path(path_type=Path),
    # Not `tables`: inside a clone that folder is `kwsniff.tables` to a Python started there (docs/spark.md).
    default=Path("kafka-tables"),
    show_default=True,
    help="Directory of the Parquet datasets (one sub-directory per table).",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace the dataset already in --out (in one step, once this run's tables are written).",
)
@click.option(
    "--append",
    is_flag=True,
    help="Add to the dataset already in --out (an input read before replaces its own files).",
)
@broker_port_option
@decoding_options
@click.option(
    "--no-auto-detect",
    "auto_detect",
    flag_value=False,
    default=True,
    help="Only treat --broker-port ports as Kafka.",
)
@click.option(
    "--max-frame-size",
    type=BYTE_SIZE,
    default=MAX_FRAME_SIZE,
    show_default="100MiB",
    help="Largest plausible Kafka frame (a broker's socket.request.max.bytes); bytes, or e.g. 100MiB.",
)
@click.option(
    "--records",
    is_flag=True,
    help="Also write the `records` table: one row per record of every Produce and Fetch (decompresses).",
)
@click.option(
    "--record-payloads",
    is_flag=True,
    help="Put record keys and values in the `records` table (implies --records).",
)
@click.option(
    "--max-decompressed",
    type=BYTE_SIZE,
    default=MAX_DECOMPRESSED,
    show_default="64MiB",
    help="Most bytes one compressed batch may expand to (bytes, or e.g. 64MiB); a batch past it is "
    "counted as capped.",
)
@idle_timeout_option(
    "Close connections without a packet for this many seconds of capture time (0: never), so a "
    "capture of many connections keeps bounded memory."
)
@click.option(
    "--strict",
    is_flag=True,
    help=f"Exit with status {EXIT_STRICT} if anything was not decoded (reasons on stderr); for CI.",
)
@click.option(
    "--continuous",
    is_flag=True,
    help="CAPTURES are consecutive pieces of one capture (a rotated file set): read in the order of "
    "their first timestamps as one, TCP state carried across; a piece that overlaps the one before "
    "is refused.",
)
@click.option(
    "--summaries",
    type=click.Choice(SUMMARIES_MODES),
    default="auto",
    show_default=True,
    help="Write the report's per-capture summaries beside the tables: auto does for runs of "
    f"{SUMMARIZE_MIN_ROWS:,} rows or more (a report computes the others from their rows); docs/report.md.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
def read(
    captures: tuple[Path, ...],
    out: Path,
    overwrite: bool,
    append: bool,
    broker_port: tuple[int, ...],
    decoding: Decoding,
    auto_detect: bool,
    max_frame_size: int,
    records: bool,
    record_payloads: bool,
    max_decompressed: int,
    idle_timeout: float,
    strict: bool,
    continuous: bool,
    summaries: str,
    quiet: bool,
) -> None:
    """Decode CAPTURES (pcap, pcapng, optionally gzipped; `-` for standard input) into Parquet tables
    under --out."""
    # pyarrow (with numpy) only when a run starts: `kwsniff --help` stays light.
    from kwsniff.sinks import ExistingOutput, Output, OutputError, arrow_without_pandas

    arrow_without_pandas()

    options = session_options(
        decoding,
        **decoding_fields(
            broker_port, auto_detect, max_frame_size, records, record_payloads, max_decompressed, idle_timeout
        ),
    )
    tables = (*DEFAULT_TABLES, "records") if options.records else DEFAULT_TABLES
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
    unreadable: dict[Path, str] = {}
    for path in captures:
        if str(path) != STDIN:
            try:
                check_capture(path)
            except CaptureError as exc:
                if not os.path.exists(path):
                    # A missing input is the command line's mistake, not a bad capture: nothing runs.
                    messages.error(str(exc))
                    sys.exit(1)
                unreadable[path] = str(exc)
    if unreadable and (len(unreadable) == len(captures) or continuous):
        if len(captures) == 1 or continuous:
            messages.error(next(iter(unreadable.values())))
        else:
            for path, line in unreadable.items():
                messages.warnings(path.name, [f"failed: {line.removeprefix(f'{path}: ')}"])
            messages.error(f"none of the {len(captures)} inputs could be read")
        sys.exit(1)
    try:
        output = Output(out, existing)
    except OutputError as exc:
        messages.error(str(exc))
        sys.exit(1)
    # The decoders this run compiles are kept for the next one (kwsniff.codecache).
    codecache.use_directory(codecache.cache_dir(os.environ))
    signals = StopSignals()
    row_buffer_bytes = MemoryBudget(decoding.memory_limit).cap(ROWS)
    try:
        with signals:
            if continuous:
                code = _read_series(captures, output, tables, options, strict, quiet, summaries)
            else:
                code = _read_all(
                    captures, output, tables, options, signals, strict, quiet, row_buffer_bytes, summaries
                )
    finally:
        output.close()
    sys.exit(code)


def decoding_fields(
    broker_port: tuple[int, ...],
    auto_detect: bool,
    max_frame_size: int,
    records: bool,
    record_payloads: bool,
    max_decompressed: int,
    idle_timeout: float,
) -> dict[str, Any]:
    """The SessionOptions keywords of `read`'s own decoding options (also the Python API's, kwsniff.api)."""
    return {
        "idle_timeout_us": int(idle_timeout * 1_000_000),
        "broker_ports": broker_ports(broker_port),
        "auto_detect": auto_detect,
        "max_frame_size": max_frame_size,
        "records": records or record_payloads,
        "record_payloads": record_payloads,
        "max_decompressed": max_decompressed,
    }


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
    output: Output,
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
    too_long = _too_long(names, output.name_max())
    if too_long:
        messages.error(too_long)
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
            reason = failure_reason(exc, str(path))
            failures.append((path, failed_row(path, shown_name, reason, started_us, started)))
            results.append((shown_name, reason))  # said in input order, after the commit
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
    summarize(output.stage, options.memory_limit, summaries, output.appending_to)
    try:
        output.commit()
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
    output: Output,
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
        summarize(output.stage, options.memory_limit, summaries, output.appending_to)
        output.commit()
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


def _too_long(names: dict[Path, str], name_max: int) -> str:
    """One line naming an input whose files' names the filesystem of --out cannot hold, or ""."""
    from kwsniff.sinks import ParquetSink

    for path, name in names.items():
        longest = len(os.fsencode(ParquetSink(".", name).temp_path("requests").name))
        if longest > name_max:
            return (
                f"{path}: file name too long for --out ({longest} bytes with kwsniff's suffixes, the "
                f"filesystem allows {name_max}); rename or link the capture under a shorter name"
            )
    return ""
