"""`kwsniff spark`: many captures (or one big one split by flow) decoded in Spark executors."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from kwsniff.commands import messages
from kwsniff.commands.options import ByteSize, FlowBuckets, broker_port_option, broker_ports
from kwsniff.pipeline.session import SessionOptions
from kwsniff.tables import DEFAULT_TABLES


@click.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option(
    "--out", "-o", type=click.Path(path_type=Path), required=True, help="Directory of the datasets."
)
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option(
    "--flow-buckets",
    type=FlowBuckets(),
    default="auto",
    show_default=True,
    help="Split each capture into this many tasks by TCP flow (an index job over byte ranges finds "
    "each task's records); auto splits a capture holding more than a core's share of the bytes.",
)
@click.option(
    "--range-size",
    type=ByteSize(),
    default=None,
    help="Bytes of a capture indexed per task when it is split by flow "
    "[default: one range per executor core, 64 MiB to 1 GiB each].",
)
@click.option("--overwrite", is_flag=True, help="Replace the datasets already in --out.")
@click.option("--records", is_flag=True, help="Also write the `records` table.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
@broker_port_option
def spark(
    inputs: tuple[str, ...],
    out: Path,
    master: str,
    flow_buckets: int | None,
    range_size: int | None,
    overwrite: bool,
    records: bool,
    quiet: bool,
    broker_port: tuple[int, ...],
) -> None:
    """Decode INPUTS (files, directories, globs) on Spark into OUT/<table>/date=YYYY-MM-DD/."""
    try:
        from kwsniff.spark.inputs import InputError, expand_inputs
        from kwsniff.spark.pipeline import decode, spark_session, write
    except ImportError as exc:
        messages.error(f"kwsniff spark needs the spark extra (pip install 'kwsniff[spark]'): {exc}")
        sys.exit(1)
    try:
        paths = expand_inputs(inputs)
    except InputError as exc:
        messages.error(str(exc))
        sys.exit(1)
    from kwsniff.sinks import ExistingOutput, Output, OutputError

    held = [t for t in DEFAULT_TABLES if (out / t).is_dir() and any((out / t).iterdir())]
    if held and not overwrite:
        messages.error(f"--out {out}: already holds {', '.join(held)}; use --overwrite to replace them")
        sys.exit(1)
    # Checked (and staged beside) before Spark starts; the old dataset is replaced only at the end,
    # in one step, once every table is written.
    try:
        output = Output(out, ExistingOutput.OVERWRITE if overwrite else ExistingOutput.REFUSE)
    except OutputError as exc:
        messages.error(str(exc))
        sys.exit(1)
    click.get_current_context().call_on_close(output.close)
    tables = (*DEFAULT_TABLES, "records") if records else DEFAULT_TABLES
    options = SessionOptions(broker_ports=broker_ports(broker_port), records=records)
    started = time.perf_counter()
    session = spark_session(master, progress=not quiet and sys.stderr.isatty())
    try:
        decoded = decode(
            session, paths, buckets=flow_buckets, options=options, tables=tables, range_bytes=range_size
        )
        write(decoded.frames, output)
        counts = decoded.rows
    except OutputError as exc:
        messages.error(str(exc))
        sys.exit(1)
    finally:
        session.stop()
    seconds = time.perf_counter() - started
    for message in decoded.errors:
        messages.error(message)
    for capture, note in decoded.notes:
        messages.warnings(capture, [note])
    if not quiet:
        split = "".join(
            f"; {name} split into {n} flow buckets" for name, n in sorted(decoded.split_into.items())
        )
        click.echo(f"{len(paths)} captures on {master} in {seconds:.1f} s{split}")
        click.echo("  tables: " + ", ".join(f"{out / t}/ ({n:,} rows)" for t, n in counts.items()))
    if decoded.errors:
        sys.exit(1)
