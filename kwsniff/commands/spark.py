"""`kwsniff spark`: many captures (or one big one split by flow) decoded in Spark executors."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kwsniff.commands import messages
from kwsniff.commands.exits import EXIT_STRICT
from kwsniff.commands.extras import NeedsExtra
from kwsniff.commands.fields import options_of
from kwsniff.commands.options import (
    Decoding,
    FlowBuckets,
    broker_port_option,
    broker_ports,
    decoding_options,
    session_options,
)
from kwsniff.commands.sizes import ByteSize
from kwsniff.commands.summarize import summarize
from kwsniff.commands.values import Checked
from kwsniff.core.options import ReadOptions
from kwsniff.core.values import out_location
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.view.summary import human_size

if TYPE_CHECKING:
    from kwsniff.tls.keylog import KeyLog


# pandas too: PySpark moves Arrow batches through it.
@click.command(cls=NeedsExtra, extra="spark", modules=("pyspark", "pandas"))
@click.argument("inputs", nargs=-1, required=True)
@click.option(
    "--out",
    "-o",
    type=Checked(out_location, "path|uri"),
    required=True,
    help="Directory of the datasets, or Delta tables at s3://bucket/prefix or file:///path (docs/delta.md).",
)
@options_of(ReadOptions, "host", "storage_option")
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
@click.option(
    "--strict",
    is_flag=True,
    help=f"Exit with status {EXIT_STRICT} if an input failed or is damaged (reasons on stderr); for CI.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar, no summary and no Spark log lines.")
@click.option(
    "--ship-env",
    is_flag=True,
    help="Pack the virtual environment kwsniff runs from (venv-pack, cached by content) and send it "
    "to the executors through spark.archives, for workers that have only Python, Java and Spark.",
)
@click.option(
    "--conf",
    "confs",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Spark setting, as spark-submit's --conf (repeatable), e.g. "
    "spark.kubernetes.container.image=IMAGE.",
)
@click.option(
    "--continuous",
    is_flag=True,
    help="Each directory is one series of consecutive pieces of one capture (a rotated file set; a "
    "directory given, or the directory holding the files given), decoded in one task as `kwsniff read "
    "--continuous` decodes them; a series whose pieces overlap fails, its captures row says why, "
    "and the run exits 1 once the others are written.",
)
@broker_port_option
@decoding_options
def spark(
    inputs: tuple[str, ...],
    out: Path | str,
    host: str | None,
    storage_option: tuple[tuple[str, str], ...],
    master: str,
    flow_buckets: int | None,
    range_size: int | None,
    overwrite: bool,
    records: bool,
    strict: bool,
    quiet: bool,
    ship_env: bool,
    confs: tuple[str, ...],
    continuous: bool,
    broker_port: tuple[int, ...],
    decoding: Decoding,
) -> None:
    """Decode INPUTS (files, directories, globs) on Spark into OUT/<table>/date=YYYY-MM-DD/."""
    from kwsniff.spark import executors
    from kwsniff.spark.inputs import InputError, expand_inputs, expand_series
    from kwsniff.spark.pipeline import (
        decode,
        decode_conf,
        first_line,
        spark_session,
        unreachable_master,
        write,
    )

    conf = spark_conf(confs)
    if continuous and flow_buckets not in (None, 1):
        raise click.UsageError("--continuous decodes each series in one task: no --flow-buckets")
    try:
        series = expand_series(inputs) if continuous else None
        # With --continuous, one input per series (its first piece names it).
        paths = [pieces[0] for pieces in series] if series is not None else expand_inputs(inputs)
    except InputError as exc:
        messages.error(str(exc))
        sys.exit(1)
    from kwsniff.core.output import open_output
    from kwsniff.sinks import ExistingOutput, OutputError
    from kwsniff.sinks.delta_output import DeltaOutput

    if isinstance(out, Path):
        held = [t for t in DEFAULT_TABLES if (out / t).is_dir() and any((out / t).iterdir())]
        if held and not overwrite:
            messages.error(f"--out {out}: already holds {', '.join(held)}; use --overwrite to replace them")
            sys.exit(1)
    # Checked (and staged beside) before Spark starts; the old dataset is replaced only at the end,
    # in one step, once every table is written (Delta tables: one commit per table, captures last).
    try:
        output = open_output(
            out,
            ExistingOutput.OVERWRITE if overwrite else ExistingOutput.REFUSE,
            host=host,
            storage_options=storage_option,
        )
    except OutputError as exc:
        messages.error(str(exc))
        sys.exit(1)
    click.get_current_context().call_on_close(output.close)
    remote = None
    if isinstance(output, DeltaOutput) and not output.location.is_local:
        # Delta tables on S3: each task uploads its files into the tables' storage itself.
        from kwsniff.spark.uploads import TableUploads

        if flow_buckets not in (None, 1):
            raise click.UsageError(f"--out {out}: each capture is decoded in one task: no --flow-buckets")
        remote = TableUploads(output.location, output.host)
    # Where the executors write their tables' files before the driver moves them into the stage:
    # beside OUT, on its filesystem (a shared one for a cluster), removed by a later run if killed.
    try:
        spool = output.spool()
    except OutputError as exc:
        messages.error(str(exc))
        sys.exit(1)
    click.get_current_context().call_on_close(spool.drop)
    archive = shipped_env(master, quiet) if ship_env else None
    tables = (*DEFAULT_TABLES, "records") if records else DEFAULT_TABLES
    # The key log travels to the executors inside the options (pickled with each task), and the
    # budget is per task: each executor core decodes one task at a time.
    options = session_options(decoding, broker_ports=broker_ports(broker_port), records=records)
    evicted = keylog_evictions(options.keylog)
    if evicted:
        messages.warnings("--keylog", [evicted])
    unreachable = unreachable_master(master)
    if unreachable:
        messages.error(unreachable)
        sys.exit(1)
    started = time.perf_counter()
    try:
        session = spark_session(
            master,
            progress=not quiet and sys.stderr.isatty(),
            conf=decode_conf(master, conf),
            archive=archive,
            quiet=quiet,
        )
    except Exception as exc:  # the JVM's reason, on one line: Spark has logged the rest
        messages.error(f"--master {master}: the Spark session did not start: {first_line(exc)}")
        sys.exit(1)
    failed: list = []
    try:
        problem = executors.probe(session)
        if problem is None:
            decoded = decode(
                session,
                paths,
                buckets=flow_buckets,
                options=options,
                tables=tables,
                range_bytes=range_size,
                series=series,
                spool=spool.path,
                remote=remote,
            )
            failed = decoded.failed()
            if len(failed) < len(paths):  # nothing decoded: nothing written, as `kwsniff read`
                write(
                    decoded, output, summarize=lambda stage: summarize(stage, decoding.memory_limit, "always")
                )
    except OutputError as exc:
        messages.error(str(exc))
        sys.exit(1)
    except Exception as exc:
        # A job that failed because of the executors' Python is one line; anything else stays loud.
        problem = executors.failure(exc)
        if problem is None:
            raise
    finally:
        session.stop()
    if problem is not None:
        messages.error(problem)
        sys.exit(1)
    seconds = time.perf_counter() - started
    damaged = [r for r in decoded.captures if r["status"] == "damaged"]
    for row in decoded.captures:
        if row["status"] == "failed" and len(paths) > 1:
            messages.warnings(row["capture"], [f"failed: {row['reason']}"])
        elif row["status"] == "damaged":
            messages.warnings(row["capture"], row["reason"].split("; "))
    for capture, note in decoded.notes:
        messages.warnings(capture, [note])
    if len(failed) == len(paths):
        row = decoded.captures[0]
        messages.error(
            f"{row['path']}: {row['reason']}"
            if len(paths) == 1
            else f"none of the {len(paths)} inputs could be read"
        )
        sys.exit(1)
    if not quiet:
        split = "".join(
            f"; {name} split into {n} flow buckets" for name, n in sorted(decoded.split_into.items())
        )
        accepted = len(paths) - len(failed)
        flawed = f" ({len(damaged)} damaged)" if damaged else ""
        lost = f", {len(failed)} failed" if failed else ""
        click.echo(f"{accepted} captures{flawed} on {master} in {seconds:.1f} s{lost}{split}")
        root = str(out).rstrip("/") if isinstance(out, str) else out
        click.echo("  tables: " + ", ".join(f"{root}/{t}/ ({n:,} rows)" for t, n in decoded.rows.items()))
    if continuous and failed:
        # A series asked to be read as one capture and not read is the run's failure, not a warning.
        messages.error(
            f"{len(failed)} of {len(paths)} series could not be read as one capture: "
            + "; ".join(f"{name}: {reason}" for name, reason in failed)
        )
        sys.exit(1)
    if strict and (failed or damaged):
        click.echo(
            f"kwsniff: strict: {len(failed)} of {len(paths)} inputs failed, {len(damaged)} damaged", err=True
        )
        sys.exit(EXIT_STRICT)


def spark_conf(confs: tuple[str, ...]) -> dict[str, str]:
    """``--conf KEY=VALUE`` settings; exit 2 on one without ``=``."""
    conf = {}
    for item in confs:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            messages.error(f"--conf {item!r}: expected KEY=VALUE")
            sys.exit(2)
        conf[key.strip()] = value
    return conf


def shipped_env(master: str, quiet: bool) -> str:
    """The packed venv for ``--ship-env`` (built, or reused from the cache), after one line saying which."""
    import os

    from kwsniff.spark.shipping import ShipError, cache_dir, packed, running_venv
    from kwsniff.view.summary import human_size

    if master.startswith("local"):
        messages.error("--ship-env is for a cluster master: in local mode the executors run this Python")
        sys.exit(2)
    try:
        pack = packed(running_venv(), cache_dir(os.environ))
    except ShipError as exc:
        messages.error(str(exc))
        sys.exit(2)
    if not quiet:
        how = f"built in {pack.seconds:.1f} s" if pack.built else "reused"
        click.echo(f"--ship-env: {how}: {pack.path} ({human_size(pack.size)})")
    return str(pack.path)


def keylog_evictions(keys: KeyLog | None) -> str | None:
    """What the driver evicted while it loaded the key log, said once: the executors get the
    pickled secrets without these counts (each task counts only its own), so no summary would."""
    secrets, held = keys.take_evicted() if keys is not None else (0, 0)
    if not secrets:
        return None
    return (
        f"{secrets:,} TLS secrets ({human_size(held)} held) evicted to stay within the secrets share of "
        "--memory-limit, the oldest first: connections they would decrypt stay encrypted"
    )
