"""`kwsniff read`: capture files to Parquet tables, with a one-screen summary."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import click

from kwsniff.capture import STDIN, CaptureError
from kwsniff.commands import messages
from kwsniff.commands.options import (
    BYTE_SIZE,
    broker_port_option,
    broker_ports,
    idle_timeout_option,
    memory_limit_option,
)
from kwsniff.defaults import MAX_DECOMPRESSED, MAX_FRAME_SIZE
from kwsniff.memory import DEFAULT_MEMORY_LIMIT, ROWS, MemoryBudget
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.view.summary import print_summary, strict_reasons

# `--strict` exit status: everything was read, but not everything was decoded.
EXIT_STRICT = 3


def _options(
    broker_port: tuple[int, ...],
    auto_detect: bool,
    max_frame_size: int,
    records: bool = False,
    record_payloads: bool = False,
    max_decompressed: int = MAX_DECOMPRESSED,
    memory_limit: int = DEFAULT_MEMORY_LIMIT,
    idle_timeout: float = 900.0,
) -> SessionOptions:
    return SessionOptions(
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
    default=Path("tables"),
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
    memory_limit: int,
    idle_timeout: float,
    strict: bool,
    quiet: bool,
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
        memory_limit,
        idle_timeout,
    )
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
    failed = 0
    undecoded = 0
    # Two inputs with the same file name (a/cap.pcap, b/cap.pcap) get their path as the `capture`
    # value, so (capture, conn_id) stays a unique key across the dataset.
    names = Counter(p.name for p in captures)
    for path in captures:
        # Files are written under temporary names and renamed when complete; a failure or Ctrl-C
        # leaves nothing of this input in the dataset.
        sink = ParquetSink(
            out,
            "stdin" if str(path) == STDIN else output_name(path),
            tables,
            row_buffer_bytes=row_buffer_bytes,
        )
        try:
            with sink:
                result = run_capture(
                    path,
                    sink,
                    options,
                    progress=not quiet and sys.stderr.isatty(),
                    name=str(path) if names[path.name] > 1 else None,
                )
        except CaptureError as exc:
            messages.error(str(exc))
            failed += 1
            continue
        except OSError as exc:
            messages.error(f"{path}: writing {out}: {exc.strerror or exc}")
            sys.exit(1)
        if not quiet:
            print_summary(result, out, sink.counts)
        messages.warnings(result.name, result.warnings)
        reasons = strict_reasons(result) if strict else []
        if reasons:
            undecoded += 1
            click.echo(f"kwsniff: strict: {result.name}: " + "; ".join(reasons), err=True)
    if failed:
        if failed == len(captures):
            remove_empty_dirs(created)
        sys.exit(1)
    if undecoded:
        sys.exit(EXIT_STRICT)
