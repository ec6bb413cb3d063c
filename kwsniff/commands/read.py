"""`kwsniff read`: capture files to Parquet tables, with a one-screen summary."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from kwsniff.capture import STDIN, CaptureError, open_capture
from kwsniff.commands import messages
from kwsniff.commands.options import BYTE_SIZE, broker_port_option, broker_ports
from kwsniff.defaults import MAX_DECOMPRESSED, MAX_FRAME_SIZE
from kwsniff.pipeline.run import ReadGate, run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.view.summary import print_summary, strict_reasons

if TYPE_CHECKING:
    from kwsniff.sinks import Output

# `--strict` exit status: everything was read, but not everything was decoded.
EXIT_STRICT = 3


def _options(
    broker_port: tuple[int, ...],
    auto_detect: bool,
    max_frame_size: int,
    records: bool = False,
    record_payloads: bool = False,
    max_decompressed: int = MAX_DECOMPRESSED,
) -> SessionOptions:
    return SessionOptions(
        broker_ports=broker_ports(broker_port),
        auto_detect=auto_detect,
        max_frame_size=max_frame_size,
        records=records or record_payloads,
        record_payloads=record_payloads,
        max_decompressed=max_decompressed,
    )


@click.command()
@click.argument("captures", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    "-o",
    type=click.Path(path_type=Path),
    default=Path("tables"),
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
@click.option(
    "--strict",
    is_flag=True,
    help=f"Exit with status {EXIT_STRICT} if anything was not decoded (reasons on stderr); for CI.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
def read(
    captures: tuple[Path, ...],
    out: Path,
    overwrite: bool,
    append: bool,
    broker_port: tuple[int, ...],
    auto_detect: bool,
    max_frame_size: int,
    records: bool,
    record_payloads: bool,
    max_decompressed: int,
    strict: bool,
    quiet: bool,
) -> None:
    """Decode CAPTURES (pcap, pcapng, optionally gzipped; `-` for standard input) into Parquet tables
    under --out."""
    # pyarrow (with numpy) only when a run starts: `kwsniff --help` stays light.
    from kwsniff.sinks import ExistingOutput, Output, OutputError

    options = _options(broker_port, auto_detect, max_frame_size, records, record_payloads, max_decompressed)
    tables = (*DEFAULT_TABLES, "records") if options.records else DEFAULT_TABLES
    if overwrite and append:
        raise click.UsageError("--overwrite and --append exclude each other")
    if sum(str(p) == STDIN for p in captures) > 1:
        raise click.UsageError("standard input (-) can be read only once")
    existing = (
        ExistingOutput.OVERWRITE if overwrite else ExistingOutput.APPEND if append else ExistingOutput.REFUSE
    )
    # Every input is opened (format checked) before --out is touched or anything is decoded.
    for path in captures:
        if str(path) != STDIN:
            try:
                open_capture(path).close()
            except CaptureError as exc:
                messages.error(str(exc))
                sys.exit(1)
    try:
        output = Output(out, existing)
    except OutputError as exc:
        messages.error(str(exc))
        sys.exit(1)
    signals = StopSignals()
    try:
        with signals:
            code = _read_all(captures, output, tables, options, signals, strict, quiet)
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
    output: Output,
    tables: tuple[str, ...],
    options: SessionOptions,
    signals: StopSignals,
    strict: bool,
    quiet: bool,
) -> int:
    """Decode every input into the staging directory, commit, and return the exit status."""
    from kwsniff.sinks import OutputError, ParquetSink, capture_keys, output_name, stream_name

    files = [p for p in captures if str(p) != STDIN]
    keys = capture_keys(files, output.kept_names("requests"))
    names = {p: stream_name("stdin") if str(p) == STDIN else output_name(p) for p in captures}
    too_long = _too_long(names, output.name_max())
    if too_long:
        messages.error(too_long)
        return 1
    failed = undecoded = 0
    results = []
    stdin_stopped = False  # a signal came while standard input was read: commit what was
    for path in captures:
        if signals.signum:
            break
        stdin = str(path) == STDIN
        sink = ParquetSink(output.stage, names[path], tables)
        gate = ReadGate() if stdin else None
        signals.gate, signals.abandon = gate, not stdin
        try:
            with sink:
                result = run_capture(
                    path,
                    sink,
                    options,
                    progress=not quiet and sys.stderr.isatty(),
                    name=names[path] if stdin else keys[path],
                    gate=gate,
                )
                signals.abandon = False  # decoded: a signal now waits for the files to close
        except CaptureError as exc:
            messages.error(str(exc))
            failed += 1
            continue
        except Abandoned:
            break
        except OSError as exc:
            messages.error(f"{path}: writing {output.shown}: {exc.strerror or exc}")
            return 1
        finally:
            signals.gate, signals.abandon = None, False
        stdin_stopped = gate is not None and gate.stopped
        results.append((result, dict(sink.counts)))
    if signals.signum and not stdin_stopped:
        return signals.exit_code  # a file was cut short: the old dataset stays as it was
    if results:
        try:
            output.commit()
        except OutputError as exc:
            messages.error(str(exc))
            return 1
    for result, counts in results:
        if not quiet:
            print_summary(result, output.shown, counts)
        messages.warnings(result.name, result.warnings)
        reasons = strict_reasons(result) if strict else []
        if reasons:
            undecoded += 1
            click.echo(f"kwsniff: strict: {result.name}: " + "; ".join(reasons), err=True)
    if signals.signum:
        return signals.exit_code
    return 1 if failed else EXIT_STRICT if undecoded else 0


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
