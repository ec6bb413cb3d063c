"""`kwsniff read`: capture files to Parquet tables, with a one-screen summary."""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import click

from kwsniff.capture import STDIN, CaptureError
from kwsniff.commands import messages
from kwsniff.commands.exits import EXIT_STRICT
from kwsniff.commands.options import (
    BYTE_SIZE,
    broker_port_option,
    broker_ports,
    idle_timeout_option,
    keylog_option,
    memory_limit_option,
    tunnel_options,
    with_keylog,
)
from kwsniff.defaults import MAX_DECOMPRESSED, MAX_FRAME_SIZE
from kwsniff.memory import DEFAULT_MEMORY_LIMIT, ROWS, MemoryBudget
from kwsniff.pipeline.run import (
    capture_row,
    failure_reason,
    file_size,
    input_path,
    result_row,
    run_capture,
)
from kwsniff.pipeline.session import SessionOptions
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.view.summary import print_summary, strict_reasons


def _options(
    broker_port: tuple[int, ...],
    auto_detect: bool,
    max_frame_size: int,
    records: bool = False,
    record_payloads: bool = False,
    max_decompressed: int = MAX_DECOMPRESSED,
    tunnels: dict | None = None,
    memory_limit: int = DEFAULT_MEMORY_LIMIT,
    idle_timeout: float = 900.0,
) -> SessionOptions:
    return SessionOptions(
        **(tunnels or {}),
        memory_limit=memory_limit,
        idle_timeout_us=int(idle_timeout * 1_000_000),
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
    # Not `tables`: inside a clone that folder is `kwsniff.tables` to a Python started there (docs/spark.md).
    default=Path("kafka-tables"),
    show_default=True,
    help="Directory of the Parquet datasets (one sub-directory per table).",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace the dataset already in --out (its Parquet files are removed first).",
)
@click.option(
    "--append",
    is_flag=True,
    help="Add to the dataset already in --out (an input read before replaces its own files).",
)
@broker_port_option
@keylog_option
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
@memory_limit_option
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
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
@tunnel_options
def read(
    captures: tuple[Path, ...],
    out: Path,
    overwrite: bool,
    append: bool,
    broker_port: tuple[int, ...],
    keylog: tuple[Path, ...],
    auto_detect: bool,
    max_frame_size: int,
    records: bool,
    record_payloads: bool,
    max_decompressed: int,
    memory_limit: int,
    idle_timeout: float,
    strict: bool,
    continuous: bool,
    quiet: bool,
    tunnels: dict,
) -> None:
    """Decode CAPTURES (pcap, pcapng, optionally gzipped; `-` for standard input) into Parquet tables
    under --out."""
    # pyarrow (with numpy) only when a run starts: `kwsniff --help` stays light.
    from kwsniff.sinks import (
        ExistingOutput,
        OutputError,
        ParquetSink,
        output_name,
        prepare_output,
        remove_empty_dirs,
    )

    options = _options(
        broker_port,
        auto_detect,
        max_frame_size,
        records,
        record_payloads,
        max_decompressed,
        tunnels,
        memory_limit,
        idle_timeout,
    )
    options = with_keylog(options, keylog)
    row_buffer_bytes = MemoryBudget(memory_limit).cap(ROWS)
    tables = (*DEFAULT_TABLES, "records") if options.records else DEFAULT_TABLES
    if overwrite and append:
        raise click.UsageError("--overwrite and --append exclude each other")
    existing = (
        ExistingOutput.OVERWRITE if overwrite else ExistingOutput.APPEND if append else ExistingOutput.REFUSE
    )
    try:
        created = prepare_output(out, tables, existing)
    except OutputError as exc:
        messages.error(str(exc))
        sys.exit(1)
    failures: list[tuple[Path, str, dict[str, object]]] = []  # (input, one-line error, captures row)
    if continuous:
        _read_series(captures, out, tables, options, created, strict, quiet)
        return
    undecoded = 0
    # Two inputs with the same file name (a/cap.pcap, b/cap.pcap) get their path as the `capture`
    # value, so (capture, conn_id) stays a unique key across the dataset.
    names = Counter(p.name for p in captures)
    for path in captures:
        name = str(path) if names[path.name] > 1 else "stdin" if str(path) == STDIN else path.name
        # Files are written under temporary names and renamed when complete; a failure or Ctrl-C
        # leaves nothing of this input in the dataset.
        sink = ParquetSink(
            out,
            "stdin" if str(path) == STDIN else output_name(path),
            tables,
            row_buffer_bytes=row_buffer_bytes,
        )
        started_us, started = time.time_ns() // 1000, time.perf_counter()
        try:
            with sink:
                result = run_capture(
                    path,
                    sink,
                    options,
                    progress=not quiet and sys.stderr.isatty(),
                    name=name if names[path.name] > 1 else None,
                )
                sink.add("captures", result_row(result))
        except OSError as exc:
            messages.error(f"{path}: writing {out}: {exc.strerror or exc}")
            sys.exit(1)
        except Exception as exc:  # not a capture, or a decoder bug: this input fails, the others go on
            reason = failure_reason(exc, str(path))
            line = str(exc) if isinstance(exc, CaptureError) else f"{path}: {reason}"
            failures.append(_failed(path, name, reason, line, started_us, started))
            if len(captures) > 1:
                messages.warnings(name, [f"failed: {reason}"])
            continue
        if not quiet:
            print_summary(result, out, sink.counts)
        messages.warnings(result.name, result.warnings)
        reasons = strict_reasons(result) if strict else []
        if reasons:
            undecoded += 1
            click.echo(f"kwsniff: strict: {result.name}: " + "; ".join(reasons), err=True)
    if len(failures) == len(captures):
        # Nothing decoded: an error, and nothing written (one input: its one-line error, as ever).
        if len(captures) == 1:
            messages.error(failures[0][1])
        else:
            messages.error(f"none of the {len(captures)} inputs could be read")
        remove_empty_dirs(created)
        sys.exit(1)
    for path, _, row in failures:
        # A failed input leaves only its `captures` row, which says why.
        with ParquetSink(out, "stdin" if str(path) == STDIN else output_name(path), ("captures",)) as sink:
            sink.add("captures", row)
    if strict and failures:
        click.echo(f"kwsniff: strict: {len(failures)} of {len(captures)} inputs failed", err=True)
    if undecoded or (strict and failures):
        sys.exit(EXIT_STRICT)


def _failed(
    path: Path, name: str, reason: str, line: str, started_us: int, started: float
) -> tuple[Path, str, dict[str, object]]:
    row = capture_row(
        name,
        input_path(path),
        file_bytes=file_size(path),
        packets=None,
        warnings=[],
        error=reason,
        started_us=started_us,
        seconds=time.perf_counter() - started,
    )
    return path, line, row


def _read_series(
    captures: tuple[Path, ...],
    out: Path,
    tables: tuple[str, ...],
    options: SessionOptions,
    created: list[Path],
    strict: bool,
    quiet: bool,
) -> None:
    """`read --continuous`: the inputs as one capture, one set of tables."""
    from kwsniff.pipeline.run import run_series
    from kwsniff.sinks import ParquetSink, output_name, remove_empty_dirs

    if any(str(p) == STDIN for p in captures):
        raise click.UsageError("--continuous reads files, not standard input")
    sink = ParquetSink(out, output_name(captures[0]), tables)
    try:
        with sink:
            result = run_series(list(captures), sink, options)
            if "captures" in tables:
                sink.add("captures", result_row(result))
    except CaptureError as exc:
        messages.error(str(exc))
        remove_empty_dirs(created)
        sys.exit(1)
    except OSError as exc:
        messages.error(f"{captures[0]}: writing {out}: {exc.strerror or exc}")
        sys.exit(1)
    if not quiet:
        print_summary(result, out, sink.counts)
        pieces = [Path(result.pieces[0][0]).name] + [
            f"{Path(p).name} after {(first - result.pieces[i][2]) / 1e6:.3f} s"
            for i, (p, first, _) in enumerate(result.pieces[1:])
        ]
        click.echo("  pieces in time order: " + "; ".join(pieces))
    messages.warnings(result.name, result.warnings)
    reasons = strict_reasons(result) if strict else []
    if reasons:
        click.echo(f"kwsniff: strict: {result.name}: " + "; ".join(reasons), err=True)
        sys.exit(EXIT_STRICT)
